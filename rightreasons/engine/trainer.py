"""The training loop: plain fine-tuning and box-guided fine-tuning on Hugging Face accelerate.

One step: a single forward pass serves the classification loss and — with guidance — the attribution, which is taken
with ``torch.autograd.grad(..., create_graph=True)`` inside the step; the total loss ``L_class + λ · L_loc`` gets one
``accelerator.backward``, so the same code runs on one CPU, one GPU or many processes (DDP). Batches are split across
processes (``split_batches``): ``data.batch_size`` is the global batch, and a 2-process run follows the 1-process run.

Reproducible and resumable: the epoch's sample order depends on ``(seed, epoch)``, augmentation on ``(seed, epoch,
sample id)`` and class sampling on ``(seed, step)``; checkpoints (``accelerator.save_state`` + JSON trainer state,
written atomically) record the position inside the epoch, so ``resume=True`` continues mid-epoch and ends with the
same weights as an uninterrupted run.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.utils import set_seed
from torch import Tensor
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from ..checkpoints import save_model
from ..data import collate, eval_transform, load_dataset, train_transform
from ..explain import explain, save_explanation
from ..guidance import GuidanceObjective
from ..metrics import ParetoTracker
from ..registry import create_model, get_model_spec
from .checkpointing import CheckpointManager, write_json_atomic
from .config import diff_configs, to_dict
from .data import EpochSampler, SeededTransform, mix_seed
from .evaluation import evaluate_classifier, is_multilabel, localization_setting
from .losses import classification_loss, resolve_classification_loss
from .optim import build_optimizer, build_scheduler, clip_gradients
from .provenance import provenance
from .schema import OptimConfig, TrainConfig

__all__ = ["TrainingError", "Trainer", "train"]

MAX_BAD_STEPS = 3


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. repeated non-finite losses); the message says why and what to check."""


@dataclass
class _Position:
    """Where the run is: epoch, next batch inside it and optimiser steps taken."""

    epoch: int = 0
    batch: int = 0
    step: int = 0


#: float state tensors per trainable parameter that each optimiser keeps (Adam: two moments; SGD: momentum)
OPTIMIZER_SLOTS = {"adam": 2, "adamw": 2, "sgd": 1}


def _preflight(output_dir: Path) -> None:
    """Fail before training when the output directory cannot be created or written (read-only, no permission)."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
        if not os.access(output_dir, os.W_OK | os.X_OK):
            raise PermissionError(f"no write permission for user id {os.getuid()}")
        probe = output_dir / ".write-test"
        probe.write_text("ok")
        probe.unlink()
    except OSError as e:
        raise TrainingError(f"output directory {output_dir} is not writable: {e}") from e


def checkpoint_bytes(model: torch.nn.Module, optim: OptimConfig) -> int:
    """Estimated size of one checkpoint: the model's state dict plus the optimiser's state
    (:data:`OPTIMIZER_SLOTS` tensors the size of every trainable parameter; none for SGD without momentum)."""
    weights = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    trainable = sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)
    slots = 0 if optim.name == "sgd" and optim.momentum == 0 else OPTIMIZER_SLOTS[optim.name]
    return weights + slots * trainable


def _check_free_space(output_dir: Path, per_checkpoint: int, copies: int) -> None:
    """Fail before training when ``copies`` checkpoints of ``per_checkpoint`` bytes do not fit on the disk."""
    needed, free = per_checkpoint * copies, shutil.disk_usage(output_dir).free
    if needed > free:
        raise TrainingError(
            f"not enough free disk space in {output_dir}: a checkpoint takes about {per_checkpoint:,} bytes (weights "
            f"and optimiser state) and up to checkpoint.keep_last + 2 = {copies} of them may exist at once, "
            f"{needed:,} bytes in all, but only {free:,} bytes are free; free some space, lower "
            "checkpoint.keep_last or choose another output_dir")


class Trainer:
    """Builds data, model and optimiser from a :class:`TrainConfig` and runs training and validation."""

    def __init__(self, config: TrainConfig, accelerator: Accelerator | None = None) -> None:
        self.config = config
        self.output_dir = Path(config.output_dir)
        tensorboard = importlib.util.find_spec("tensorboard") is not None
        self.accelerator = accelerator or Accelerator(
            cpu=config.cpu, mixed_precision=config.mixed_precision,
            gradient_accumulation_steps=config.optim.grad_accumulation,
            dataloader_config=DataLoaderConfiguration(split_batches=True),
            log_with="tensorboard" if tensorboard else None, project_dir=str(self.output_dir))
        if self.accelerator.is_main_process:
            _preflight(self.output_dir)
        if tensorboard:
            self.accelerator.init_trackers("tensorboard")
        set_seed(config.seed)
        torch.use_deterministic_algorithms(True, warn_only=True)

        self.bcos = get_model_spec(config.model.name).bcos
        self.encoding = "bcos" if self.bcos else "normalize"
        self.train_set, self.val_set = self.build_datasets()
        if config.guidance.enabled and not self.train_set.annotated.any():
            raise TrainingError(f"guidance needs annotated images, but none of the {len(self.train_set)} training "
                                f"images of {config.data.name} has boxes "
                                f"(data.annotated_fraction={config.data.annotated_fraction})")
        self.multilabel = is_multilabel(self.train_set)
        self.loss_kind = resolve_classification_loss(config.loss.classification, self.bcos, self.multilabel)
        model = self.build_model()
        if self.accelerator.is_main_process:
            _check_free_space(self.output_dir, checkpoint_bytes(model, config.optim), config.checkpoint.keep_last + 2)
        data = config.data
        self.sampler = EpochSampler(len(self.train_set), config.seed)
        loader = DataLoader(self.train_set, batch_size=data.batch_size, sampler=self.sampler, collate_fn=collate,
                            num_workers=data.num_workers, drop_last=True)
        if len(loader) == 0:
            raise TrainingError(f"data.batch_size={data.batch_size} is larger than the training set "
                                f"({len(self.train_set)} images)")
        self.steps_per_epoch = math.ceil(len(loader) / config.optim.grad_accumulation)
        total = config.optim.epochs * self.steps_per_epoch
        self.total_steps = min(total, config.max_steps) if config.max_steps else total
        optim = config.optim
        optimizer = build_optimizer(model.parameters(), optim.name, optim.lr, optim.weight_decay, optim.momentum)
        scheduler = build_scheduler(optimizer, optim.schedule, total,
                                    round(optim.warmup_epochs * self.steps_per_epoch))
        self.agc = (0.01 if self.bcos else None) if optim.agc == "auto" else optim.agc
        self.model, self.optimizer, self.loader, self.scheduler = self.accelerator.prepare(
            model, optimizer, loader, scheduler)
        guidance = config.guidance
        self.objective = GuidanceObjective(guidance.method, guidance.layer, guidance.loss, guidance.dilation,
                                           "sum", guidance.intgrad_steps) if guidance.enabled else None
        self.checkpoints = CheckpointManager(self.output_dir / "checkpoints", self.accelerator,
                                             config.checkpoint.keep_last)
        self.eval_method, self.eval_layer = localization_setting(config, self.bcos)
        self.pareto = ParetoTracker(objectives=("score", "epg", "iou") if self.eval_method else ("score",))
        self.best: dict[str, Any] = {}
        self.history: list[dict[str, Any]] = []
        self.position = _Position()
        self.bad_steps = 0

    # ------------------------------------------------------------------ hooks for subclasses (e.g. distillation)
    def build_train_transform(self) -> Any:
        """The augmentation of training samples (before seeding); subclasses may attach extra targets."""
        data = self.config.data
        if data.augment:
            return train_transform(data.image_size, encoding=self.encoding, scale=tuple(data.crop_scale))
        return eval_transform(data.image_size, encoding=self.encoding, crop_fraction=1.0)

    def build_datasets(self) -> tuple[Any, Any]:
        """Training set (seeded augmentation, limited annotations) and validation set (eval transform)."""
        config, data = self.config, self.config.data
        self.train_transform = SeededTransform(self.build_train_transform(), config.seed)
        train_set = load_dataset(data.name, data.root, data.train_split, transform=self.train_transform,
                                 annotated_fraction=data.annotated_fraction, annotation_seed=config.seed,
                                 **data.options)
        val_set = load_dataset(data.name, data.root, data.val_split,
                               transform=eval_transform(data.image_size, encoding=self.encoding, crop_fraction=1.0),
                               **data.options)
        return train_set, val_set

    def build_model(self) -> torch.nn.Module:
        """The model being trained, with as many classes as the training set."""
        m = self.config.model
        return create_model(m.name, pretrained=m.pretrained, checkpoint=m.checkpoint,
                            num_classes=self.train_set.num_classes, **m.kwargs)

    def _log(self, record: dict[str, Any]) -> None:
        """Append a record to ``metrics.jsonl`` and its scalars to the trackers (TensorBoard)."""
        scalars = {f"{record['split']}/{k}": v for k, v in record.items()
                   if isinstance(v, (int, float)) and k not in ("step", "epoch")}
        self.accelerator.log(scalars, step=record["step"])
        if self.accelerator.is_main_process:
            with open(self.output_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")

    def _state(self) -> dict[str, Any]:
        return {"epoch": self.position.epoch, "batch": self.position.batch, "step": self.position.step,
                "pareto": self.pareto.state_dict(), "best": self.best, "history": self.history,
                "config": to_dict(self.config), "provenance": provenance()}

    # ------------------------------------------------------------------ resume
    def resume(self, checkpoint: str | Path | None = None) -> None:
        """Restore the newest complete checkpoint (or ``checkpoint``); refuse one written with another config."""
        path = Path(checkpoint) if checkpoint else self.checkpoints.latest()
        if path is None:
            raise FileNotFoundError(f"no complete checkpoint to resume from in {self.checkpoints.root}")
        saved = json.loads((path / "trainer_state.json").read_text())
        differing = [d for d in diff_configs(saved["config"], to_dict(self.config)) if not d.startswith("output_dir:")]
        if differing:
            raise TrainingError(f"cannot resume from {path}: it was written with another config; differing keys: "
                                + "; ".join(differing))
        state = self.checkpoints.load(path)
        self.position = _Position(state["epoch"], state["batch"], state["step"])
        self.pareto.load_state_dict(state["pareto"])
        self.best, self.history = state["best"], state["history"]

    # ------------------------------------------------------------------ training
    def _step_generator(self) -> torch.Generator:
        rank = self.accelerator.process_index
        return torch.Generator().manual_seed(mix_seed(self.config.seed, self.position.step, self.position.batch, rank))

    def compute_losses(self, batch: dict[str, Any]) -> tuple[dict[str, Tensor], Tensor]:
        """Named loss terms (for logging) and the total to back-propagate, from one forward pass.

        Here: classification and localisation (0 without guidance); subclasses (distillation) override this."""
        images, labels = batch["image"], batch["labels"]
        if self.objective is None:
            logits = self.model(images)
            localization = logits.new_zeros(())
        else:
            out = self.objective(self.model, images, labels, batch["boxes"], batch["box_labels"],
                                 batch["has_boxes"], self._step_generator())
            logits = out.logits
            # DDP averages gradients over processes: scale the local sum so that the result is the global sum
            # (reduction "sum") or the mean over the annotated images of the global batch ("mean_annotated").
            localization = out.loss * self.accelerator.num_processes
            if self.config.guidance.reduction == "mean_annotated":
                localization = localization / self.accelerator.reduce(out.annotated.sum().float(), "sum").clamp(min=1)
        classification = classification_loss(logits.float(), labels, self.loss_kind,
                                             self.config.loss.uniform_off_labels)
        total = classification + self.config.guidance.weight * localization
        return {"classification": classification, "localization": localization}, total

    def _finite_everywhere(self, loss: Tensor) -> bool:
        flag = torch.tensor(float(torch.isfinite(loss).item()), device=loss.device)
        return bool(self.accelerator.reduce(flag, "min").item())

    def train_step(self, batch: dict[str, Any]) -> dict[str, float] | None:
        """One optimisation step on ``batch`` (losses, backward, clipping, optimiser and schedule); returns the
        loss terms, or None when a non-finite loss made it skip the step."""
        with self.accelerator.accumulate(self.model):
            with self.accelerator.autocast():
                terms, loss = self.compute_losses(batch)
            if not self._finite_everywhere(loss):
                self.bad_steps += 1
                warnings.warn(f"non-finite loss at epoch {self.position.epoch}, batch {self.position.batch} "
                              f"(ids {batch['id'][:8]}): step skipped")
                self.optimizer.zero_grad()
                if self.bad_steps >= MAX_BAD_STEPS:
                    values = ", ".join(f"{k}={v.item()}" for k, v in terms.items())
                    raise TrainingError(
                        f"{MAX_BAD_STEPS} non-finite losses in a row (last: {values}); lower optim.lr or the loss "
                        "weights, or check the data for corrupt images")
                return None
            self.bad_steps = 0
            self.accelerator.backward(loss)
            if self.accelerator.sync_gradients:
                clip_gradients(self.model.parameters(), self.agc, self.config.optim.max_grad_norm)
            self.optimizer.step()
            self.scheduler.step()
            self.optimizer.zero_grad()
        return {"loss": loss.item(), **{k: v.item() for k, v in terms.items()}}

    def _save(self, protect: set[str] = frozenset()) -> None:
        keep = set(protect) | {self.checkpoints.name_for(int(i)) for i in self.pareto.front_ids}
        if self.best:
            keep.add(self.checkpoints.name_for(self.best["step"]))
        self.checkpoints.save(self.position.step, self._state(), keep)

    def evaluate(self, dataset: Any = None) -> dict[str, Any]:
        """Validate the current model on ``dataset`` (default: the validation split) on all processes."""
        dataset = self.val_set if dataset is None else dataset
        model = self.accelerator.unwrap_model(self.model)
        results = evaluate_classifier(
            model, dataset, batch_size=self.config.data.eval_batch_size, device=self.accelerator.device,
            rank=self.accelerator.process_index, world_size=self.accelerator.num_processes,
            method=self.eval_method, layer=self.eval_layer,
            iou_threshold=self.config.eval.iou_threshold,
            group_names=dataset.group_names)
        model.train()
        return results

    def _after_epoch(self) -> None:
        results = self.evaluate()
        record = {"step": self.position.step, "epoch": self.position.epoch, **results}
        self.history.append(record)
        self._log({"split": "val", **record})
        point = {"id": self.position.step, **{k: results[k] for k in self.pareto.objectives}}
        self.pareto.update(point)
        if not self.best or results["score"] > self.best["score"]:
            self.best = {"step": self.position.step, "score": results["score"]}
        self._write_explanations()

    def _write_explanations(self) -> None:
        """Colour explanations of a fixed set of validation images (B-cos models only)."""
        count = min(self.config.eval.num_images, len(self.val_set))
        if not (self.bcos and count and self.accelerator.is_main_process):
            return
        model = self.accelerator.unwrap_model(self.model).eval()
        batch = collate([self.val_set[i] for i in range(count)])
        images = batch["image"].to(self.accelerator.device)
        e = explain(model, images, target=batch["labels"].argmax(1).to(images.device))
        folder = self.output_dir / "explanations" / f"step-{self.position.step:06d}"
        for i in range(count):
            save_explanation(folder / f"{i:02d}-{batch['id'][i]}.png", images[i].cpu(), e.weights[i].cpu(),
                             title=f"class {int(e.target[i])}")
        model.train()

    def fit(self) -> dict[str, Any]:
        """Train to the end (or ``max_steps``), validating every ``eval.every_epochs`` epochs; returns the summary."""
        config = self.config
        self.model.train()
        every = config.checkpoint.every_steps
        bar = tqdm(total=self.total_steps, initial=self.position.step, desc="train",
                   disable=not self.accelerator.is_local_main_process)
        start = time.time()
        while self.position.epoch < config.optim.epochs and self.position.step < self.total_steps:
            epoch = self.position.epoch
            self.train_transform.set_epoch(epoch)
            loader = self.accelerator.skip_first_batches(self.loader, self.position.batch) \
                if self.position.batch else self.loader
            loader.set_epoch(epoch)  # accelerate re-seeds the sampler from the loader's own epoch counter
            for batch in loader:
                stats = self.train_step(batch)
                self.position.batch += 1
                if self.accelerator.sync_gradients and stats is not None:
                    self.position.step += 1
                    bar.update(1)
                    if self.position.step % config.log_every == 0:
                        self._log({"split": "train", "step": self.position.step, "epoch": epoch,
                                   "lr": self.scheduler.get_last_lr()[0], **stats})
                    if every and self.position.step % every == 0:
                        self._save()
                if self.position.step >= self.total_steps:
                    break
            if self.position.step >= self.total_steps and self.position.batch < len(self.loader):
                break
            self.position = _Position(epoch + 1, 0, self.position.step)
            if (epoch + 1) % config.eval.every_epochs == 0 or self.position.epoch == config.optim.epochs:
                self._after_epoch()
            self._save()
        bar.close()
        return self.finish(time.time() - start)

    def finish(self, seconds: float) -> dict[str, Any]:
        """Export the final model (safetensors with its registry arguments) and write ``summary.json``."""
        model = self.accelerator.unwrap_model(self.model)
        summary = {"steps": self.position.step, "epochs": self.position.epoch, "seconds": round(seconds, 2),
                   "best": self.best, "pareto_front": self.pareto.front, "history": self.history,
                   "config": to_dict(self.config), "provenance": provenance()}
        if self.accelerator.is_main_process:
            save_model(model, self.output_dir / "model.safetensors",
                       metadata={"config": json.dumps(to_dict(self.config))})
            write_json_atomic(self.output_dir / "summary.json", summary)
        self.accelerator.end_training()
        return summary


def train(config: TrainConfig, resume: bool | str = False, trainer_cls: type[Trainer] = Trainer) -> dict[str, Any]:
    """Train with ``config`` (a ``trainer_cls``, e.g. the distillation trainer); ``resume=True`` continues from the
    newest complete checkpoint (or a given path), and a fresh run refuses an output directory holding checkpoints."""
    trainer = trainer_cls(config)
    if resume:
        trainer.resume(None if resume is True else resume)
    elif trainer.checkpoints.latest() is not None:
        raise TrainingError(f"{trainer.output_dir} already holds checkpoints; pass --resume to continue that run "
                            "or choose another output_dir")
    return trainer.fit()

