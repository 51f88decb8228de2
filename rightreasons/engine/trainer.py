"""The training engine on Hugging Face accelerate: :class:`Trainer` runs any :class:`~rightreasons.engine.task.Task`.

The trainer knows accelerate, the loop, checkpoints, logging and when to evaluate; a task (classification in
:mod:`rightreasons.classification`, box guidance in :mod:`rightreasons.guidance`, distillation in
:mod:`rightreasons.distill`) owns its data, model, objective — the loss terms and their weights — its evaluators and
its hooks. The trainer calls the task at fixed points, in this order, and at no other time:

1. ``task.build_datasets()`` → training and validation set (no transforms yet);
2. ``task.build_model(train_set)`` → the model, ``task.distribute(model, processes)`` on several processes; the
   model's ``task.input_encoding(model)`` selects the transforms ``task.train_transform(encoding)`` /
   ``task.eval_transform(encoding)``; ``task.default_agc(model)`` stands for ``optim.agc: auto``;
3. the trainer builds loader, optimiser and schedule, ``accelerator.prepare``\\ s them, then calls ``task.setup(self)``
   and takes ``task.hooks(self)``;
4. every step: ``task.losses(model, batch, step)`` → named unweighted terms (logged) and the weighted total
   (back-propagated once, so the same code runs on one CPU, one GPU or many processes); hooks' ``at_step``;
5. every ``eval.every_epochs`` epochs: the one evaluation loop (:func:`rightreasons.metrics.evaluation.evaluate`) with
   ``task.evaluators(dataset)``, then hooks' ``after_validation``; at the end also on ``task.final_evaluations()``,
   and ``task.save_model`` exports the model.

The trackers of ``log_with`` (:mod:`rightreasons.engine.trackers`; TensorBoard by default) start when training starts
(:meth:`Trainer.fit`), after every check of the run passed, so a refused start leaves no event file behind. While a
run trains, a terminal shows a progress bar with the loss, learning rate, images/s and ETA; elsewhere each logged step
(:meth:`Trainer._logs_step`: the first, every ``log_every`` steps and the last of every epoch; the steps whose
losses ``metrics.jsonl`` records) is one line (:mod:`rightreasons.engine.progress`). Each validation is one line with
every metric by name (``logging``, this module's logger). Epochs count from 1 in every record, line and
``summary.json``: a step's epoch is the one it belongs to, a validation's the epoch it ends (or, for a run cut short by
``max_steps``, the epoch of its last step).

Batches are split across processes (``split_batches``): ``data.batch_size`` is the global batch (a task's ``distribute``
may synchronise BatchNorm statistics across processes, so that N processes train as one). Before anything is written,
the main process locks the output directory and a multi-process launch without CUDA runs on the CPU
(:mod:`rightreasons.engine.launch`). Reproducible and
resumable: the epoch's sample order depends on ``(seed, epoch)``, augmentation on ``(seed, epoch, sample id)`` and
each step's randomness on ``(seed, step)``; checkpoints (:mod:`rightreasons.engine.checkpointing`: verified against
their manifest) record the position inside the epoch, the validation history, the Pareto front and how much of
``metrics.jsonl`` had been written, so a run resumed at any point ends with the same weights, the same
``summary.json`` (but its wall-clock ``seconds`` and ``provenance``) and the same ``metrics.jsonl`` as an
uninterrupted one.

Every step is checkpointed at most once: a step that ends an epoch, or the run, is saved after its validation, never
before it.

What a run never does (docs/guide/reliability.md; each rule kept in one place):

* **write or keep non-finite weights** — a step whose loss or gradients are not finite on any process is skipped
  on every process and counted (the count is part of the checkpoint, so it survives ``--resume``); the weights are
  checked after every optimiser step, so no checkpoint ever holds non-finite weights and none is pruned for a diverged
  step. Divergence — ``MAX_BAD_STEPS`` skipped steps in a row, non-finite weights or non-finite validation metrics —
  stops the run with one :class:`~rightreasons.errors.DivergenceError` naming the step and what was non-finite;
  with ``mixed_precision: fp16`` a step whose gradients overflow is the loss scaler's: it skips the step and halves
  the scale, and such a step counts only below :data:`MIN_LOSS_SCALE`. All of it is decided on the device and read on
  the host only at logged steps and before checkpoints (:mod:`rightreasons.engine.step_guard`): a step that does not
  log waits for nothing. A skipped step is still a step of the schedule (as with torch's ``GradScaler``);
* **overwrite a finished run** — an output directory holding ``summary.json`` or ``model.safetensors`` is refused
  unless ``overwrite`` (``--overwrite``) asks for it; ``--resume`` of a finished run of the same config does nothing
  (:func:`train`); ``--resume`` with a longer schedule extends it (below), and its ``model.safetensors`` and
  ``summary.json`` are replaced only once the new ones are written (:meth:`Trainer.finish`);
* **resume on other data** — the checkpoint records the number and a digest of the ids of both splits, and a resume
  on data that changed is refused, naming what changed (:meth:`Trainer.resume`);
* **end a write failure in anything but one message** — whatever the exception (``OSError``, safetensors'
  ``SafetensorError``, torch's ``RuntimeError``), a failed write of a checkpoint, the metrics, TensorBoard events or
  the exported model ends in one :class:`~rightreasons.errors.TrainingError` naming the newest complete checkpoint and
  how to resume (:meth:`Trainer._writing`);
* **reserve disk space for checkpoints that cannot exist** — the space check counts what the run can keep at once,
  less the checkpoints already on disk (:func:`require_checkpoint_space`).

A resume may change the length of the schedule (:data:`SCHEDULE_KEYS`: ``optim.epochs``, ``max_steps``) as long as
it does not end before the checkpoint it resumes from — a finished run is *extended*. The learning-rate schedule is then rebuilt
for the new length and fast-forwarded to the checkpoint's step (:meth:`Trainer._continue_schedule`): every later step
has the learning rate that a run trained on the new schedule from the start has at that step. The steps before were
taken on the old schedule, so with a ``cosine`` schedule (whose every value depends on its length) the weights differ
from those of that run; with ``constant`` the extended run *is* that run, bit for bit.

``SIGTERM`` or ``SIGUSR1`` (what schedulers send before they kill a job) make the run finish its current
step, write a checkpoint and stop with :class:`Preempted`; the command line exits with :data:`EXIT_PREEMPTED`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import signal
import time
import warnings
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import TorchDynamoPlugin, send_to_device, set_seed
from torch import Tensor, nn
from torch.utils.data import DataLoader

from ..config import diff_configs, from_dict, to_dict
from ..console import cannot_start, count
from ..data import collate
from ..data.verify import check_training_splits
from ..errors import ConfigError, DivergenceError, NonFiniteError, RightReasonsError, TrainingError, UsageError
from ..faults import boundary
from ..fileio import (LOCK_FILE, DirectoryLock, atomic_write_all, json_text, open_no_follow, read_json_object,
                      refuse_links, remove_tree, require_free_space, shared_directory, writable_directory)
from ..metrics import ParetoTracker
from ..metrics.evaluation import evaluate, format_results, result_names
from .checkpointing import STATE_FILE, CheckpointManager, checked_integer, state_error
from .config import OptimConfig, TrainConfig
from .data import SeededTransform, mix_seed
from .launch import (any_process, end_launch, host_gather, host_group, process_group_kwargs, same_everywhere,
                     start_checks, unanswered, use_cpu)
from .optim import build_optimizer, build_scheduler, clip_gradients
from .progress import Progress
from .step_guard import MAX_BAD_STEPS, MIN_LOSS_SCALE, StepGuard, StepOutcome
from .provenance import provenance
from .task import Step, Task, task_for_config
from .trackers import TENSORBOARD_FOLDER, accelerate_trackers, log_images, run_trackers, start_trackers

__all__ = ["EXIT_PREEMPTED", "Preempted", "RESUMABLE_KEYS", "SCHEDULE_KEYS", "Trainer", "config_differences",
           "finished_summary", "require_checkpoint_space", "run", "train"]

logger = logging.getLogger(__name__)

SUMMARY, MODEL_FILE = "summary.json", "model.safetensors"
METRICS_FILE = "metrics.jsonl"
SHARED_TOKEN = ".processes"
"""The file by which the processes of a multi-process run find out that they see one run directory."""
RESUMABLE_KEYS = ("output_dir", "checkpoint.keep_last", "checkpoint.keep_front", "log_with")
"""Config keys a resume may change: where the run is, how many checkpoints it keeps and which trackers it logs to
(none changes a result)."""
SCHEDULE_KEYS = ("optim.epochs", "max_steps")
"""Config keys a resume may also change: the length of the schedule, which is then rebuilt and fast-forwarded
(:meth:`Trainer._continue_schedule`); a finished run resumed with a longer one is extended."""
EXIT_PREEMPTED = 75
"""Exit code of a run stopped by ``SIGTERM``/``SIGUSR1`` after writing its checkpoint (``EX_TEMPFAIL``: try again;
a requeued job continues with ``--resume``)."""
PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class Preempted(Exception):
    """The run received a pre-emption signal, finished its step and wrote checkpoint :attr:`checkpoint`."""

    def __init__(self, checkpoint: Path, signal_name: str) -> None:
        super().__init__(f"stopped by {signal_name}: checkpoint {checkpoint} written; run the same command with "
                         "--resume to continue")
        self.checkpoint = checkpoint

#: float state tensors per trainable parameter that each optimiser keeps (Adam: two moments; SGD: momentum)
OPTIMIZER_SLOTS = {"adam": 2, "adamw": 2, "sgd": 1}


@dataclass
class _Position:
    """Where the run is: epochs completed (the index of the epoch in progress), next batch inside it and optimiser
    steps taken."""

    epoch: int = 0
    batch: int = 0
    step: int = 0

    @property
    def epoch_number(self) -> int:
        """The epoch of the newest step, counted from 1 (the number records and messages show): the epoch in
        progress, or the one just completed; 0 before the first step."""
        return self.epoch + (self.batch > 0)


def _preflight(output_dir: Path) -> None:
    """Fail before training when the output directory cannot be created or written (read-only, no permission) or a
    file or folder the run writes there is a symbolic link (it would be written through)."""
    try:
        writable_directory(output_dir)
        refuse_links(output_dir, (LOCK_FILE, METRICS_FILE, SUMMARY, MODEL_FILE, TENSORBOARD_FOLDER))
    except UsageError as e:
        raise TrainingError(str(e)) from e


def checkpoint_bytes(model: nn.Module, optim: OptimConfig) -> int:
    """Estimated size of one checkpoint: the model's state dict plus the optimiser's state
    (:data:`OPTIMIZER_SLOTS` tensors the size of every trainable parameter; none for SGD without momentum)."""
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    slots = 0 if optim.name == "sgd" and optim.momentum == 0 else OPTIMIZER_SLOTS[optim.name]
    return weights + slots * trainable


def checkpoints_kept_at_most(config: TrainConfig, epochs: float) -> tuple[int, str]:
    """How many checkpoints a run of ``epochs`` epochs can hold at once, and why: the last ``keep_last``, the best
    one, the Pareto front's (at most one per validation, and at most ``keep_front``) and the one being written."""
    checkpoint = config.checkpoint
    validations = math.ceil(epochs / config.eval.every_epochs) + 1
    front = validations if checkpoint.keep_front is None else min(validations, checkpoint.keep_front)
    return (checkpoint.keep_last + 1 + front + 1,
            f"checkpoint.keep_last = {checkpoint.keep_last}, the best one, up to {front} on the Pareto front and the "
            "one being written")


def require_checkpoint_space(output_dir: Path, config: TrainConfig, model: nn.Module, epochs: float) -> None:
    """Refuse to start (:class:`~rightreasons.errors.TrainingError`) when the disk of ``output_dir`` cannot hold the
    checkpoints the run can keep at once (:func:`checkpoints_kept_at_most`) beyond those already in ``checkpoints/``
    (a resumed run replaces them, it does not add to them)."""
    per_checkpoint, (copies, why) = checkpoint_bytes(model, config.optim), checkpoints_kept_at_most(config, epochs)
    folder = output_dir / "checkpoints"
    existing = sum(1 for p in folder.glob("step-*")) if folder.is_dir() else 0
    new = max(copies - existing, 1)
    on_disk = f"; {existing} of them already exist, so {new} more" if existing else ""
    require_free_space(output_dir, per_checkpoint * new,
                       f"a checkpoint takes about {per_checkpoint:,} bytes (weights and optimiser state) and up to "
                       f"{copies} of them may exist at once ({why}){on_disk}",
                       "free some space, lower checkpoint.keep_last or checkpoint.keep_front (a --resume may change "
                       "them), or choose another output_dir", TrainingError)


def _under(keys: tuple[str, ...]) -> tuple[str, ...]:
    """Prefixes of the :func:`~rightreasons.config.diff_configs` lines of ``keys``."""
    return tuple(f"{k}:" for k in keys)


def config_differences(saved: dict[str, Any], config: TrainConfig, may_change: tuple[str, ...] = ()) -> list[str]:
    """The keys (``key: saved != now``) in which ``config`` differs from the ``saved`` config dict of a checkpoint or
    finished run, but for :data:`RESUMABLE_KEYS`, the keys ``may_change`` and the options added since ``saved`` was
    written that ``config`` leaves at their defaults (:func:`_added_at_default`)."""
    return [d for d in diff_configs(saved, to_dict(config))
            if not d.startswith(_under(RESUMABLE_KEYS + may_change)) and not _added_at_default(saved, config, d)]


def _added_at_default(saved: dict[str, Any], config: TrainConfig, difference: str) -> bool:
    """Whether the key of a :func:`~rightreasons.config.diff_configs` line is an option that ``saved`` does not record
    (its section does) and that ``config`` holds at its field's default: an option added to the config after the run
    was written (e.g. ``data.rotation``), whose default is the behaviour from before it existed — the rule every new
    option follows — so the run was trained as ``config`` says. An option set to anything else is a difference."""
    *sections, leaf = difference.split(":", 1)[0].split(".")
    recorded: Any = saved
    owner: Any = config
    for name in sections:
        recorded, owner = (recorded.get(name) if isinstance(recorded, dict) else None), getattr(owner, name, None)
    if not isinstance(recorded, dict) or leaf in recorded or not dataclasses.is_dataclass(owner):
        return False
    field = next((f for f in dataclasses.fields(owner) if f.name == leaf), None)
    if field is None or (field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING):
        return False
    default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
    return getattr(owner, leaf) == default


def finished_summary(output_dir: str | Path, config: TrainConfig, extend: bool = False) -> dict[str, Any] | None:
    """The ``summary.json`` of the finished run in ``output_dir`` when it was trained with ``config``; ``None`` when
    there is none — or, with ``extend``, when ``config`` differs from the run's only in the length of the schedule
    (:data:`SCHEDULE_KEYS`: the run is to be extended). A finished run of another config is a
    :class:`~rightreasons.errors.TrainingError` naming the differing keys (summaries that record no config are not
    judged)."""
    path = Path(output_dir) / SUMMARY
    if not path.is_file():
        return None
    summary = read_json_object(path, "training summary", TrainingError)
    recorded = summary.get("config")
    if not isinstance(recorded, dict):
        return summary
    differing = config_differences(recorded, config, SCHEDULE_KEYS if extend else ())
    if differing:
        extension = " (--resume may lengthen its schedule: optim.epochs, max_steps; nothing else)" if extend else ""
        raise TrainingError(f"{output_dir} holds a finished run of another config ({'; '.join(differing)}); pass "
                            f"--overwrite to replace it, or choose another output_dir{extension}")
    return None if extend and config_differences(recorded, config) else summary


def _loss_scale(scaler: torch.amp.GradScaler) -> float | Tensor:
    """The scaler's scale without a host sync: its tensor on the device, or its initial value before its first step
    (it creates the tensor then)."""
    scale = scaler._get_scale_async()
    return scaler.get_scale() if scale is None else scale


def _check_device_options(config: TrainConfig, accelerator: Accelerator) -> None:
    """Refuse what the device would not do as the config says: ``mixed_precision: fp16`` where accelerate set up no
    loss scaler (on the CPU it silently trains in float32: no float16 autocast, no ``GradScaler``), and
    ``channels_last`` on the CPU, where oneDNN's channels-last backward of a strided 1x1 convolution with fewer input
    channels than its vector block computes wrong weight gradients, or hangs (uxlfoundation/oneDNN#6035: the
    downsampling convolutions of narrow ResNets; measured 70 % off with torch 2.14)."""
    device = accelerator.device.type
    if config.mixed_precision == "fp16" and accelerator.scaler is None:
        raise ConfigError(f"mixed_precision: fp16 needs a CUDA GPU (float16 autocast with dynamic loss scaling); on "
                          f"{device!r} accelerate would train in float32. Use mixed_precision: bf16 (the CPU and GPUs "
                          "since Ampere) or no")
    if config.channels_last and device == "cpu":
        raise ConfigError("channels_last: true is for GPUs: on the CPU, oneDNN computes wrong weight gradients for "
                          "channels-last strided 1x1 convolutions of few channels (uxlfoundation/oneDNN#6035), and the "
                          "default format is the faster one there. Set channels_last: false")


def split_identity(dataset: Any) -> dict[str, Any]:
    """What identifies a split's data: its number of images and the SHA-256 of its sample ids in order."""
    ids = [str(i) for i in getattr(dataset, "ids", range(len(dataset)))]
    return {"images": len(ids), "ids_sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest()}


def _data_changes(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """What changed between two ``{split: split_identity}`` records, e.g. ``2 images added to train``."""
    changes = []
    for split, identity in now.items():
        before = saved.get(split)
        if before is None or before == identity:
            continue
        difference = identity["images"] - before["images"]
        changes.append(f"{difference} images added to {split}" if difference > 0 else
                       f"{-difference} images removed from {split}" if difference < 0 else
                       f"the ids of the {identity['images']} images of {split} changed")
    return changes


class Trainer:
    """Builds data, model and optimiser for a :class:`Task` and runs training and validation."""

    def __init__(self, task: Task, accelerator: Accelerator | None = None) -> None:
        self.task = task
        self.config = config = task.config
        self.output_dir = Path(config.output_dir)
        self.trackers = run_trackers(config.log_with)  # a tracker not installed: refused before anything is written
        if accelerator is None:  # accelerate's process-wide state keeps the first run's settings: this run's own
            AcceleratorState._reset_state()  # precision, compile and accumulation (a sweep trains many in a process);
            GradientState._reset_state()  # the processes' state (PartialState) stays
        self.accelerator = accelerator or Accelerator(
            cpu=use_cpu(config.cpu), mixed_precision=config.mixed_precision,
            gradient_accumulation_steps=config.optim.grad_accumulation,
            dataloader_config=DataLoaderConfiguration(split_batches=True),
            log_with=accelerate_trackers(self.trackers, self.output_dir) or None, project_dir=str(self.output_dir),
            dynamo_plugin=TorchDynamoPlugin(backend=config.compile), kwargs_handlers=[process_group_kwargs()])
        _check_device_options(config, self.accelerator)
        self.lock = DirectoryLock(self.output_dir, error=TrainingError)  # held by the main process until the run ends
        start_checks(self.accelerator, lambda: (_preflight(self.output_dir), self.lock.acquire()))
        weakref.finalize(self, self.lock.release)
        self.host_group: torch.distributed.ProcessGroup | None = None  # made in _build, once the data is known
        try:
            with self.bounded_waits():
                self._build()
        except BaseException:
            self.lock.release()  # a refused start leaves no lock held in this process either
            raise

    def _build(self) -> None:
        """Data, model, loader, optimiser, schedule and checkpoints of the run (after its directory was locked)."""
        task, config = self.task, self.config
        set_seed(config.seed)
        torch.use_deterministic_algorithms(True, warn_only=True)

        self.train_set, self.val_set = task.build_datasets()
        check_training_splits(self.train_set, self.val_set)
        model = task.build_model(self.train_set)
        if self.accelerator.num_processes > 1:
            model = task.distribute(model, self.accelerator.num_processes)
        if config.channels_last:
            model = model.to(memory_format=torch.channels_last)
        self.encoding = task.input_encoding(model)
        self.train_transform = SeededTransform(task.train_transform(self.encoding), config.seed)
        self.train_set.transform = self.train_transform
        self.val_set.transform = task.eval_transform(self.encoding)
        self.data_identity = {"train": split_identity(self.train_set), "val": split_identity(self.val_set)}
        self.host_group = host_group(self.accelerator)
        agreed = {key: value for key, value in to_dict(config).items() if key != "output_dir"}  # mounts may differ
        same_everywhere({"config": agreed, "training data": self.data_identity["train"],
                         "validation data": self.data_identity["val"]}, self.host_group)
        if self.host_group is not None:  # checkpoints need every process's files in one directory
            shared_directory(self.output_dir, SHARED_TOKEN, self.accelerator.is_main_process,
                             host_gather(self.host_group), TrainingError,
                             "A run on several nodes writes its checkpoints (every process's part) into one "
                             "directory: put output_dir on a file system they share (NFS, Lustre, ...)")

        data, optim = config.data, config.optim
        self.sampler = task.train_sampler(self.train_set)
        loader = DataLoader(self.train_set, batch_size=data.batch_size, sampler=self.sampler, collate_fn=collate,
                            num_workers=data.num_workers, drop_last=True,
                            pin_memory=self.accelerator.device.type == "cuda")
        if len(loader) == 0:
            raise TrainingError(f"data.batch_size={data.batch_size} is larger than the training set "
                                f"({count(len(self.train_set), 'image')})")
        self.steps_per_epoch = math.ceil(len(loader) / optim.grad_accumulation)
        self.total_steps = self._total_steps(optim.epochs, config.max_steps)
        optimizer = build_optimizer(model.parameters(), optim.name, optim.lr, optim.weight_decay, optim.momentum)
        scheduler = self._schedule(optimizer)
        if self.accelerator.is_main_process:
            require_checkpoint_space(self.output_dir, config, model, self.total_steps / self.steps_per_epoch)
        self.agc = task.default_agc(model) if optim.agc == "auto" else optim.agc
        placement = self.accelerator.device_placement  # the batches move in train_step, keeping the host's
        self.model, self.optimizer, self.loader, self.scheduler = self.accelerator.prepare(
            model, optimizer, loader, scheduler, device_placement=[placement, placement, False, placement])
        self.checkpoints = CheckpointManager(self.output_dir / "checkpoints", self.accelerator,
                                             config.checkpoint.keep_last)
        task.setup(self)
        self.hooks = task.hooks(self)
        self._check_select()
        self.pareto = ParetoTracker(objectives=task.objectives)
        self.best: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self.position = _Position()
        self.guard = self._guard(0)

    def _check_select(self) -> None:
        """Refuse, before training, an ``eval.select`` that none of the task's evaluators of the validation set can
        report (a misspelt metric was refused only after the first epoch); evaluators that do not list their metrics
        leave it to the check after each validation."""
        reported = result_names(self.task.evaluators(self.val_set))
        select = self.config.eval.select
        if reported is not None and select not in reported:
            raise TrainingError(f"eval.select={select!r} is not a validation metric of this run; it reports "
                                f"{sorted(reported)} at most (refused before training)")

    def _guard(self, bad_steps: int) -> StepGuard:
        """The skip and divergence state of the run (:mod:`~rightreasons.engine.step_guard`)."""
        return StepGuard(self.accelerator.device, self._min_across_processes, bad_steps, self.accelerator.scaler)

    @property
    def bad_steps(self) -> int:
        """Skipped steps in a row at the last read of the steps (:meth:`read_steps`)."""
        return self.guard.bad_steps

    def _total_steps(self, epochs: int, max_steps: int | None) -> int:
        """Optimiser steps of a run of ``epochs`` epochs cut at ``max_steps`` (null: not cut) on this data."""
        total = epochs * self.steps_per_epoch
        return min(total, max_steps) if max_steps else total

    def _schedule(self, optimizer: torch.optim.Optimizer) -> torch.optim.lr_scheduler.LRScheduler:
        """The learning-rate schedule of the config over all ``optim.epochs`` (``max_steps`` only cuts it short)."""
        optim = self.config.optim
        return build_scheduler(optimizer, optim.schedule, optim.epochs * self.steps_per_epoch,
                               round(optim.warmup_epochs * self.steps_per_epoch))

    # ------------------------------------------------------------------ writing
    @contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """The one handler of a failed write (a full disk, a read-only or vanished directory, a file too large):
        whatever the writer raised becomes one :class:`TrainingError` saying that nothing was lost and how to go
        on."""
        try:
            yield
        except RightReasonsError:
            raise
        except Exception as e:
            newest = self.checkpoints.latest()
            kept = f"Nothing was lost: the newest complete checkpoint is {newest.name if newest else 'none yet'}"
            exhausted = cannot_start(e)
            if exhausted:  # not the disk: the user must not be sent to free space
                raise TrainingError(f"could not write {what}: {exhausted}. {kept}; run the same command with "
                                    "--resume") from e
            raise TrainingError(
                f"could not write {what} ({type(e).__name__}: {e}). {kept}. Free some disk space (or make "
                f"{self.output_dir} writable again) and run the same command with --resume") from e

    # ------------------------------------------------------------------ logging and state
    def log(self, record: dict[str, Any]) -> None:
        """Append a record (``split``, ``step``, ``epoch`` and numbers) to ``metrics.jsonl`` and its scalars to the
        trackers (``log_with``)."""
        scalars = {f"{record['split']}/{k}": v for k, v in record.items()
                   if isinstance(v, (int, float)) and k not in ("step", "epoch")}
        with self._writing(f"the metrics ({self.metrics_file} and the trackers' logs)"):
            self.accelerator.log(scalars, step=record["step"])
            if self.accelerator.is_main_process:
                with open_no_follow(self.metrics_file, "a", TrainingError) as f:
                    f.write(json.dumps(record) + "\n")

    def log_images(self, images: dict[str, np.ndarray], step: int) -> None:
        """Log ``images`` (name → ``[H, W, 3]`` uint8 array) at ``step`` to the trackers that take images."""
        with self._writing("images to the trackers' logs"):
            log_images(self.accelerator, images, step)

    @property
    def metrics_file(self) -> Path:
        return self.output_dir / METRICS_FILE

    def _state(self) -> dict[str, Any]:
        logged = self.metrics_file.stat().st_size if self.metrics_file.exists() else 0
        return {"epoch": self.position.epoch, "batch": self.position.batch, "step": self.position.step,
                "pareto": self.pareto.state_dict(), "best": self.best, "history": self.history,
                "metrics_bytes": logged, "bad_steps": self.guard.bad_steps, "data": self.data_identity,
                "config": to_dict(self.config), "provenance": provenance()}

    # ------------------------------------------------------------------ resume
    def resume(self, checkpoint: str | Path | None = None) -> bool:
        """Restore the newest intact checkpoint (or ``checkpoint``); refuse one written with another config.

        Returns False — and leaves the run at its start — when no checkpoint exists yet and none was named, so that
        one command line serves a job's first start and every requeue. Records logged to ``metrics.jsonl`` after the
        checkpoint was written are dropped (the resumed run logs them again). A checkpoint written on other data (the
        number or the ids of the images of a split differ) is refused, naming what changed.
        """
        if checkpoint is None:
            path = self.checkpoints.newest_verified()
            if path is None:
                self.truncate_log(0)
                return False
        else:
            path = Path(checkpoint)
        saved = self.checkpoints.read_state(path)
        written = self._written_config(saved, path)
        differing = config_differences(saved["config"], self.config, SCHEDULE_KEYS)
        if differing:
            raise TrainingError(f"cannot resume from {path}: it was written with another config; differing keys: "
                                + "; ".join(differing))
        changes = _data_changes(saved.get("data", {}), self.data_identity)
        if changes:
            raise TrainingError(f"cannot resume from {path}: the data changed since it was written ({'; '.join(changes)}"
                                f", {self.config.data.name}); a run resumes only on the same data: restore the data, "
                                "or start a new run in another output_dir")
        self._check_state(saved, written, path)
        new_schedule = self._schedule_change(saved)
        state = self.checkpoints.load(path)
        self.position = _Position(state["epoch"], state["batch"], state["step"])
        self.guard = self._guard(state["bad_steps"])
        self.pareto.load_state_dict(state["pareto"])
        self.best, self.history = state["best"], state["history"]
        self.truncate_log(state.get("metrics_bytes", 0))
        if new_schedule:
            self._continue_schedule()
            if self.accelerator.is_main_process:
                logger.info(new_schedule)
        return True

    def _written_config(self, saved: dict[str, Any], path: Path) -> TrainConfig:
        """The config that trainer state ``saved`` of checkpoint ``path`` records, checked as a config file is."""
        try:
            return from_dict(type(self.config), saved.get("config"))
        except ConfigError as e:
            raise state_error(path, STATE_FILE, "config", saved.get("config"), f"a config of this task ({e})") \
                from None

    def _check_state(self, saved: dict[str, Any], written: TrainConfig, path: Path) -> None:
        """Refuse a trainer state that this run cannot have written (:func:`~.checkpointing.state_error`, naming the
        field, its value and what was expected): a position outside the epoch or the schedule, a step count that is
        not the position's, a validation record or best score after the step, a count of skipped steps that would
        have stopped the run. (A batch past the end of the epoch made the resumed loader yield nothing, forever.)
        The bounds of the schedule are those of the longer of the checkpoint's and this config's, so that a resume
        which shortens the run is refused by :meth:`_schedule_change`, naming the keys."""
        epochs = max(written.optim.epochs, self.config.optim.epochs)
        batches, accumulation = len(self.loader), self.config.optim.grad_accumulation
        epoch = checked_integer(path, "epoch", saved.get("epoch"), 0, epochs)
        batch = checked_integer(path, "batch", saved.get("batch"), 0, 0 if epoch == epochs else batches - 1)
        step = checked_integer(path, "step", saved.get("step"), 0,
                               max(self._total_steps(written.optim.epochs, written.max_steps), self.total_steps))
        expected = epoch * self.steps_per_epoch + batch // accumulation
        if step != expected:
            raise state_error(path, STATE_FILE, "step", step, f"{expected} (epoch {epoch}, batch {batch}: "
                              f"{self.steps_per_epoch} steps of {accumulation} batch(es) per epoch)")
        checked_integer(path, "bad_steps", saved.get("bad_steps"), 0, MAX_BAD_STEPS - 1)
        checked_integer(path, "metrics_bytes", saved.get("metrics_bytes"), 0)
        history = saved.get("history")
        if not isinstance(history, list) or not all(isinstance(r, dict) for r in history):
            raise state_error(path, STATE_FILE, "history", history, "a list of validation records")
        for i, record in enumerate(history):
            checked_integer(path, f"history[{i}].step", record.get("step"), 1, step)
        best = saved.get("best")
        if not isinstance(best, dict):
            raise state_error(path, STATE_FILE, "best", best, "a mapping (empty before the first validation)")
        if best:
            checked_integer(path, "best.step", best.get("step"), 1, step)
            if not isinstance(best.get("score"), (int, float)) or not math.isfinite(best["score"]):
                raise state_error(path, STATE_FILE, "best.score", best.get("score"), "a finite number")
        try:
            ParetoTracker(objectives=self.task.objectives).load_state_dict(saved.get("pareto"))
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise state_error(path, STATE_FILE, "pareto", saved.get("pareto"), f"the Pareto front's state ({e})") \
                from None

    @contextmanager
    def bounded_waits(self) -> Iterator[None]:
        """A collective that another process did not join within the process group's timeout, or left, ends in one
        :class:`TrainingError` naming the processes that did not answer (:func:`~.launch.unanswered`)."""
        try:
            yield
        except RuntimeError as e:
            failure = unanswered(e, self.host_group)
            if failure is None:
                raise
            raise failure from e

    def _schedule_change(self, saved: dict[str, Any]) -> str | None:
        """How this config changes the length of the schedule of checkpoint state ``saved`` — e.g. ``extending the
        finished run in runs/x from 1 to 2 epochs (step 8 of 16)`` — or ``None`` when it does not; a
        :class:`TrainingError` when the new schedule would end before the checkpoint's step."""
        before, now = saved["config"], self.config
        old_epochs, old_max = before["optim"]["epochs"], before.get("max_steps")
        if (old_epochs, old_max) == (now.optim.epochs, now.max_steps):
            return None
        step, total = saved["step"], self.total_steps
        finished = "finished run" if (self.output_dir / SUMMARY).is_file() else "run"
        changed = [f"optim.epochs={now.optim.epochs}"] * (old_epochs != now.optim.epochs) \
            + [f"max_steps={now.max_steps}"] * (old_max != now.max_steps)
        if total < step:
            raise TrainingError(
                f"{' and '.join(changed)} would shorten the {finished} in {self.output_dir}: it is at step {step} "
                f"(epoch {saved['epoch']}) and this schedule ends at step {total}; a resume may lengthen the schedule "
                "(a larger optim.epochs, a larger max_steps or max_steps=null)")
        what = [f"from {old_epochs} to {now.optim.epochs} epochs"] * (old_epochs != now.optim.epochs) \
            + [f"max_steps from {old_max} to {now.max_steps}"] * (old_max != now.max_steps)
        before_total = self._total_steps(old_epochs, old_max)
        verb = "extending" if total > before_total else "shortening" if total < before_total else \
            "changing the schedule of"
        return f"{verb} the {finished} in {self.output_dir} {' and '.join(what)} (step {step} of {total})"

    def _continue_schedule(self) -> None:
        """Rebuild the learning-rate schedule for this config's length and fast-forward it by the steps the restored
        one took, so that every later step has the learning rate of a run trained on this schedule from the start
        (torch's schedules compute each value from the previous one: replayed from the start, they match bit for
        bit). Fast-forwarded on a stand-in optimiser with the same learning rates, then loaded into the run's."""
        steps = self.scheduler.scheduler.last_epoch
        groups = self.optimizer.param_groups
        stand_in = torch.optim.SGD([{"params": [torch.zeros(1, requires_grad=True)], "lr": g["initial_lr"]}
                                    for g in groups])
        schedule = self._schedule(stand_in)
        with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": no optimiser steps here
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(steps):
                schedule.step()
        self.scheduler.load_state_dict(schedule.state_dict())
        for group, replayed in zip(groups, stand_in.param_groups):
            group["lr"] = replayed["lr"]

    def truncate_log(self, size: int) -> None:
        """Drop what ``metrics.jsonl`` holds beyond ``size`` bytes: records of a run that died after its last
        checkpoint (or before its first), which the continuing run logs again."""
        if self.accelerator.is_main_process and self.metrics_file.exists() and self.metrics_file.stat().st_size > size:
            with open_no_follow(self.metrics_file, "r+b", TrainingError) as f:
                f.truncate(size)
        self.accelerator.wait_for_everyone()

    # ------------------------------------------------------------------ training
    @property
    def bare_model(self) -> nn.Module:
        """The trained model without the wrappers of distributed training and ``torch.compile``."""
        return self.accelerator.unwrap_model(self.model, keep_torch_compile=False)

    def _at_step(self, step: int) -> None:
        """Tell the hooks that the weights are those after ``step`` optimiser steps."""
        for hook in self.hooks:
            hook.at_step(self.bare_model, step)

    def _step(self) -> Step:
        rank = self.accelerator.process_index
        seed = mix_seed(self.config.seed, self.position.step, self.position.batch, rank)
        scaler = self.accelerator.scaler
        return Step(generator=torch.Generator().manual_seed(seed), world_size=self.accelerator.num_processes,
                    sum_across_processes=lambda t: self.accelerator.reduce(t, "sum"), index=self.position.step,
                    loss_scale=1.0 if scaler is None else _loss_scale(scaler))

    def _min_across_processes(self, t: Tensor) -> Tensor:
        """The elementwise minimum of ``t`` over all processes (a collective on the device: no host sync)."""
        if self.accelerator.num_processes == 1:
            return t
        t = t.clone()
        torch.distributed.all_reduce(t, torch.distributed.ReduceOp.MIN)
        return t

    def _diverged(self, what: str, step: int | None = None, epoch: int | None = None) -> DivergenceError:
        """The one error of a diverged run: the step and its epoch (default: the newest), what was non-finite, the
        checkpoint that is kept and what to do (a resume would diverge the same way)."""
        newest = self.checkpoints.latest()
        kept = f"the newest checkpoint, {newest.name}, holds finite weights and is kept" if newest else \
            "no checkpoint was written yet"
        step = self.position.step if step is None else step
        epoch = self.position.epoch_number if epoch is None else epoch
        return DivergenceError(
            f"training diverged at step {step} (epoch {epoch}): {what}. Nothing non-finite was saved: "
            f"{kept}. A resume would diverge the same way: lower optim.lr or the loss weights (or check the data for "
            "corrupt images) and start again with --overwrite or in another output_dir")

    def _to_device(self, batch: dict[str, Any]) -> dict[str, Any]:
        """A loader batch on the device (asynchronously: the loader pins its memory on CUDA), with the loader's own
        batch under ``"host"`` for decisions the task makes on the host without reading the device."""
        moved = send_to_device(batch, self.accelerator.device, non_blocking=True)
        if self.config.channels_last:
            moved["image"] = moved["image"].contiguous(memory_format=torch.channels_last)
        return {**moved, "host": batch}

    def _optimizer_step(self, skip: Tensor) -> None:
        """The optimiser's update, skipped on the device where ``skip`` (0-d, 1.0 = skip) says so: fused optimisers
        take it as ``found_inf`` (fp16: the scaler passes its own, which a stopped run has poisoned); any other
        optimiser needs its value on the host."""
        inner = self.optimizer.optimizer
        if self.accelerator.scaler is not None:
            self.optimizer.step()
        elif inner.defaults.get("fused"):
            inner.found_inf = skip
            try:
                self.optimizer.step()
            finally:
                del inner.found_inf
        elif not skip.item():
            self.optimizer.step()

    def train_step(self, batch: dict[str, Any]) -> dict[str, Tensor]:
        """One optimisation step on ``batch`` (as the loader gives it; moved to the device here): losses, backward,
        clipping, optimiser and schedule. Returns the loss terms (``loss``: the total) as tensors on the device, to be
        read when the step logs (:meth:`read_steps`), so that a step waits for nothing. A non-finite loss or gradient
        skips the update on every process; the skip and divergence rules are decided on the device
        (:mod:`~rightreasons.engine.step_guard`) and enforced when :meth:`read_steps` reads them."""
        position = self.position
        device_batch = self._to_device(batch)
        with self.accelerator.accumulate(self.model):
            with self.accelerator.autocast():
                terms, loss = self.task.losses(self.model, device_batch, self._step())
            self.guard.add_loss(loss)
            self.accelerator.backward(loss)  # a non-finite loss too: its step is skipped on the device
            if self.accelerator.sync_gradients:
                grads = [p.grad for p in self.model.parameters() if p.grad is not None]
                self.guard.hold_if_stopped(grads)
                self.accelerator.unscale_gradients()  # fp16: clipping and the checks see the true gradients
                skip = self.guard.decide(grads)
                clip_gradients(self.model.parameters(), self.agc, self.config.optim.max_grad_norm)
                scaler = self.accelerator.scaler
                scale = None if scaler is None else scaler._get_scale_async().clone()
                self._optimizer_step(skip)
            else:
                self.optimizer.step()  # within an accumulated step: nothing (accelerate)
            self.scheduler.step()
            self.optimizer.zero_grad()
        stats = {"loss": loss.detach(), **{k: v.detach() for k, v in terms.items()}}
        if self.accelerator.sync_gradients:
            self.guard.settle(list(self._weights().values()), position.step + 1, position.epoch + 1,
                              position.batch + 1, batch["id"], stats, scale)
            if self.guard.pending >= StepGuard.MAX_PENDING:
                self.read_steps()
        return stats

    def _weights(self) -> dict[str, Tensor]:
        """The parameters and floating-point buffers of the model by name: what must stay finite."""
        model = self.bare_model
        return {**dict(model.named_parameters()),
                **{name: b for name, b in model.named_buffers() if b.is_floating_point()}}

    def read_steps(self) -> dict[str, float]:
        """Read the steps taken since the last read from the device (one transfer) and enforce the rules on them:
        warn about each skipped step, stop a diverged run (:meth:`_diverged`, naming the step where it diverged).
        Returns the loss terms of the newest step (empty when there was none)."""
        outcomes = self.guard.read()
        for outcome in outcomes:
            self._enforce(outcome)
        return outcomes[-1].terms if outcomes else {}

    def _enforce(self, outcome: StepOutcome) -> None:
        """Warn about a skipped step and raise the divergence it ends in."""
        what = "loss" if not outcome.loss_finite else "gradient"
        if outcome.skipped and not outcome.counted:
            scaler = self.accelerator.scaler
            logger.info("fp16: non-finite %s at loss scale %g: step skipped, scale lowered to %g", what,
                        outcome.loss_scale, outcome.loss_scale * scaler.get_backoff_factor())
        elif outcome.skipped:
            warnings.warn(f"non-finite {what} at epoch {outcome.epoch}, batch {outcome.batch} (ids "
                          f"{outcome.ids[:8]}): step skipped")
            if outcome.bad_steps >= MAX_BAD_STEPS:
                values = ", ".join(f"{k}={v:.4g}" for k, v in outcome.terms.items() if k != "loss")
                raise self._diverged(f"{MAX_BAD_STEPS} steps in a row had a non-finite {what} (last loss terms: "
                                     f"{values})", outcome.step, outcome.epoch)
        if not outcome.weights_finite:
            names = list(self._weights())
            bad = [names[i] for i in outcome.non_finite]
            raise self._diverged(f"the optimiser step made {len(bad)} weight tensors non-finite "
                                 f"({', '.join(bad[:4])}{', ...' if len(bad) > 4 else ''})", outcome.step,
                                 outcome.epoch)

    def _save(self) -> Path:
        self.read_steps()  # a diverged run stops before it could checkpoint
        front = sorted(self.pareto.front, key=lambda p: -p["score"])[:self.config.checkpoint.keep_front]
        keep = {self.checkpoints.name_for(int(p["id"])) for p in front}
        if self.best:
            keep.add(self.checkpoints.name_for(self.best["step"]))
        with self._writing(f"checkpoint {self.checkpoints.name_for(self.position.step)}"):
            return self.checkpoints.save(self.position.step, self._state(), keep)

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, dataset: Any = None) -> dict[str, Any]:
        """The task's metrics of the current model on ``dataset`` (default: the validation set), on all processes."""
        dataset = self.val_set if dataset is None else dataset
        model = self.bare_model
        results = evaluate(model, dataset, self.task.evaluators(dataset), batch_size=self.config.data.eval_batch_size,
                           device=self.accelerator.device, rank=self.accelerator.process_index,
                           world_size=self.accelerator.num_processes)
        model.train()
        return results

    def _after_epoch(self) -> None:
        boundary("train: validation")
        try:
            results = self.evaluate()
        except NonFiniteError as e:  # the model's outputs: the run has diverged
            raise self._diverged(f"validation: {e}", self.position.step) from None
        non_finite = {k: v for k, v in results.items() if isinstance(v, float) and not math.isfinite(v)}
        if non_finite:
            raise self._diverged("validation gave non-finite " + ", ".join(f"{k}={v}" for k, v in non_finite.items()),
                                 self.position.step)
        record = {"step": self.position.step, "epoch": self.position.epoch_number, **results}
        self.history.append(record)
        self.log({"split": "val", **record})
        self.pareto.update({"id": self.position.step, **{k: results[k] for k in self.pareto.objectives}})
        select = self.config.eval.select
        if not isinstance(results.get(select), (int, float)):
            metrics = sorted(k for k, v in results.items() if isinstance(v, (int, float)))
            raise TrainingError(f"eval.select={select!r} is not a validation metric of this run; it reports "
                                f"{metrics}")
        if not self.best or results[select] > self.best["score"]:
            self.best = {"step": self.position.step, "score": results[select],
                         "metric": results.get("score_metric", "score") if select == "score" else select}
        if self.accelerator.is_main_process:
            logger.info("validation at step %d (epoch %d): %s", self.position.step, self.position.epoch_number,
                        format_results(results))
        for hook in self.hooks:
            hook.after_validation(self, self.position.step, results)

    # ------------------------------------------------------------------ the loop
    def _finished(self) -> bool:
        return self.position.epoch >= self.config.optim.epochs or self.position.step >= self.total_steps \
            or self._stopped_early()

    def _stopped_early(self) -> bool:
        """Whether the last ``eval.patience`` validations brought no new best (decided from the validation history,
        which checkpoints keep, so a resumed run stops where the uninterrupted one does)."""
        patience = self.config.eval.patience
        if patience is None or not self.best:
            return False
        return sum(record["step"] > self.best["step"] for record in self.history) >= patience

    def _preemption_requested(self, received: list[str]) -> bool:
        """Whether any process received a pre-emption signal (all processes agree, so all stop together); decided
        on the host (:func:`~rightreasons.engine.launch.any_process`), so it never waits for the device."""
        return any_process(bool(received), self.host_group)

    def fit(self) -> dict[str, Any]:
        """Train to the end (or ``max_steps``), validating every ``eval.every_epochs`` epochs and at the end; returns
        the summary. Raises :class:`Preempted` after checkpointing when ``SIGTERM``/``SIGUSR1`` arrives."""
        if self.trackers:  # only now, after every check passed: a refused start leaves no tracker's run behind
            with self._writing(f"the trackers' logs ({', '.join(self.trackers)})"):
                start_trackers(self.accelerator, self.output_dir)
        received: list[str] = []
        previous = {s: signal.signal(s, lambda number, _frame: received.append(signal.Signals(number).name))
                    for s in PREEMPTION_SIGNALS}
        try:
            with self.bounded_waits():
                start = time.time()
                with Progress(self.position.step, self.total_steps,
                              math.ceil(self.total_steps / self.steps_per_epoch),
                              self.config.data.batch_size * self.config.optim.grad_accumulation,
                              bar=self.accelerator.is_local_main_process,
                              lines=self.accelerator.is_main_process) as progress:
                    self._loop(received, progress)
                return self.finish(time.time() - start)
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)

    def _loop(self, received: list[str], progress: Progress) -> None:
        config = self.config
        self.model.train()
        every = config.checkpoint.every_steps
        self._at_step(self.position.step)
        while not self._finished():
            epoch = self.position.epoch
            self.train_transform.set_epoch(epoch)
            loader = self.accelerator.skip_first_batches(self.loader, self.position.batch) \
                if self.position.batch else self.loader
            loader.set_epoch(epoch)  # the loader's own epoch counter (accelerate's synchronised generators)
            # the order, set on the sampler itself: a resumed loader on several processes wraps it as skip → shard →
            # batch sampler, deeper than accelerate's set_epoch looks, which left it at the first epoch's order
            self.sampler.set_epoch(epoch)
            for batch in self._batches(loader):
                stats = self.train_step(batch)
                self.position.batch += 1
                if self.accelerator.sync_gradients:
                    self.position.step += 1
                    self._at_step(self.position.step)
                    lr = self.scheduler.get_last_lr()[0]
                    progress.step(self.position.step, lr)
                    if self._logs_step():
                        terms = self.read_steps()  # the step's one host sync
                        record = {"split": "train", "step": self.position.step,
                                  "epoch": self.position.epoch_number, "lr": lr, **terms}
                        self.log(record)
                        progress.logged(record)
                if self.position.step >= self.total_steps or self.position.batch == len(self.loader):
                    break  # the step ending the epoch or the run is checkpointed after its validation, below
                stop = self._preemption_requested(received)
                if stop or (every and self.accelerator.sync_gradients and self.position.step % every == 0):
                    path = self._save()
                    if stop:
                        raise Preempted(path, received[0] if received else "a signal to another process")
            if self.position.batch == len(self.loader):
                self.position = _Position(epoch + 1, 0, self.position.step)
            if self.position.epoch % config.eval.every_epochs == 0 and self.position.batch == 0 or self._finished():
                self._after_epoch()
            path = self._save()
            if self._preemption_requested(received):
                raise Preempted(path, received[0] if received else "a signal to another process")

    def _logs_step(self) -> bool:
        """Whether the step just taken is logged: the first step, every ``log_every`` steps and the last step of every
        epoch and of the run (so a run shorter than ``log_every`` steps logs its losses too)."""
        step = self.position.step
        return (step == 1 or step % self.config.log_every == 0 or self.position.batch == len(self.loader)
                or step == self.total_steps)

    def _batches(self, loader: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """The loader's batches; a data-loading worker that died (killed for lack of memory, most often) ends the run
        with a :class:`TrainingError` saying how to go on, instead of the loader's traceback."""
        batches = iter(loader)
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except RuntimeError as e:
                if not str(e).startswith("DataLoader worker"):
                    raise
                newest = self.checkpoints.latest()
                raise TrainingError(
                    f"a data-loading worker died ({e}); the system most likely ran out of memory: lower "
                    f"data.num_workers (now {self.config.data.num_workers}) or data.batch_size, then run the same "
                    f"command with --resume (the newest checkpoint is {newest.name if newest else 'none yet'})") \
                    from e
            yield batch

    def finish(self, seconds: float) -> dict[str, Any]:
        """Evaluate the task's final datasets, export the final model (safetensors with its registry arguments) and
        write ``summary.json``."""
        summary = {"task": self.task.name, "steps": self.position.step, "epochs": self.position.epoch_number,
                   "seconds": round(seconds, 2),
                   "best": self.best, "pareto_front": self.pareto.front, "history": self.history,
                   "stopped_early": self._stopped_early() and self.position.step < self.total_steps,
                   "config": to_dict(self.config), "provenance": provenance()}
        if self.config.checkpoint.export == "best" and self.best and self.best["step"] != self.position.step:
            best = self.checkpoints.root / self.checkpoints.name_for(self.best["step"])
            self.checkpoints.load(best)  # the exported weights, which the final evaluations score too
            summary["exported_step"] = self.best["step"]
        else:
            summary["exported_step"] = self.position.step
        self._at_step(summary["exported_step"])
        for key, dataset in self.task.final_evaluations().items():
            split = getattr(dataset, "split", key)
            boundary(f"train: final evaluation of {key}")
            results = self.evaluate(dataset)
            self.log({"split": split, "step": self.position.step, "epoch": self.position.epoch_number, **results})
            summary[key] = {"split": split, **results}
        if self.accelerator.is_main_process:
            boundary("train: exporting the model")
            with self._writing(f"the exported model ({MODEL_FILE}) and {SUMMARY}"):
                # both written before either is replaced (an extended run's are, only then), the summary last
                atomic_write_all([
                    (self.output_dir / MODEL_FILE, lambda tmp: self.task.save_model(
                        self.bare_model, tmp, {"config": json.dumps(to_dict(self.config))})),
                    (self.output_dir / SUMMARY, lambda tmp: tmp.write_text(
                        json_text(summary, str(self.output_dir / SUMMARY), sort_keys=True) + "\n", encoding="utf-8"))])
            if self.best:
                logger.info("finished after %d steps: best validation %s %.4f at step %d; wrote %s and %s",
                            self.position.step, self.best.get("metric", "score"), self.best["score"],
                            self.best["step"], self.output_dir / MODEL_FILE, self.output_dir / SUMMARY)
        end_launch(self.accelerator, self.host_group)
        self.host_group = None
        self.lock.release()
        return summary


def _previous_run(trainer: Trainer, resume: bool | str) -> dict[str, Any] | None:
    """Never overwrite a finished run: the summary of the finished run of this config in the output directory when
    resuming (there is nothing left to do); a :class:`TrainingError` naming the file when a run would overwrite
    ``summary.json`` or ``model.safetensors``; ``None`` when the run may go on — resumed with a longer schedule, a
    finished run is extended from its newest checkpoint."""
    out = trainer.output_dir
    if (out / SUMMARY).is_file():
        if resume:
            finished = finished_summary(out, trainer.config, extend=True)
            if finished is None and trainer.checkpoints.latest() is None:
                raise TrainingError(f"cannot extend the finished run in {out}: {trainer.checkpoints.root} holds no "
                                    "checkpoint to continue from; pass --overwrite to train it again with this "
                                    "schedule, or choose another output_dir")
            return finished
        raise TrainingError(f"{out / SUMMARY} exists: {out} holds a finished run, which this run would overwrite; "
                            "pass --overwrite to replace it, --resume to keep it, or choose another output_dir")
    if (out / MODEL_FILE).is_file() and not (resume and trainer.checkpoints.latest() is not None):
        raise TrainingError(f"{out / MODEL_FILE} exists: {out} holds the model of another run, which this run would "
                            "overwrite; pass --overwrite to replace it, or choose another output_dir")
    return None


def _clear(trainer: Trainer) -> None:
    """``--overwrite``: remove the previous run's summary, model and checkpoints (never through a symlink)."""
    out = trainer.output_dir
    if trainer.accelerator.is_main_process:
        for name in (SUMMARY, MODEL_FILE):
            (out / name).unlink(missing_ok=True)
        for entry in list(trainer.checkpoints.root.iterdir()):
            remove_tree(entry, trainer.checkpoints.root)
        logger.info("--overwrite: removed the previous run's %s, %s and checkpoints from %s", SUMMARY, MODEL_FILE, out)
    trainer.accelerator.wait_for_everyone()


def train(task: Task, resume: bool | str = False, overwrite: bool = False) -> dict[str, Any]:
    """Run ``task`` to the end.

    ``resume=True`` continues from the newest intact checkpoint, or starts fresh when there is none yet (so one
    command line serves a job's first start and every requeue); ``resume=PATH`` continues from that checkpoint. A
    fresh run (``resume=False``) refuses an output directory that holds checkpoints. A finished run in the output
    directory is never overwritten unless ``overwrite`` asks for it (which removes it first and starts fresh); resumed,
    a finished run of the same config is returned as it is."""
    trainer = Trainer(task)
    try:
        with trainer.bounded_waits():
            if overwrite:
                _clear(trainer)
                resume = False
            finished = _previous_run(trainer, resume)
            if finished is not None:
                logger.info("%s holds the finished run of this config: nothing to do", trainer.output_dir)
                return finished
            if resume:
                if not trainer.resume(None if resume is True else resume) and trainer.accelerator.is_main_process:
                    warnings.warn(f"no checkpoint in {trainer.checkpoints.root} yet: starting the run from the "
                                  "beginning", stacklevel=2)
            elif trainer.checkpoints.latest() is not None:
                raise TrainingError(f"{trainer.output_dir} already holds checkpoints; pass --resume to continue that "
                                    "run, --overwrite to start it again, or choose another output_dir")
            else:
                trainer.truncate_log(0)
        return trainer.fit()
    finally:
        trainer.lock.release()  # also when the run fails or is pre-empted (the process may go on)


def run(config: TrainConfig, resume: bool | str = False, overwrite: bool = False) -> dict[str, Any]:
    """Train the registered task whose config ``config`` is (:func:`~rightreasons.engine.task.task_for_config`);
    ``resume`` and ``overwrite`` as for :func:`train`. Returns the run's summary."""
    return train(task_for_config(config)(config), resume, overwrite)
