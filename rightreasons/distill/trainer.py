"""Distillation on the training engine: KD, e²KD (live or with frozen explanations) and attention transfer.

:class:`DistillTrainer` is the engine's :class:`~rightreasons.engine.Trainer` with the student as ``model`` and

* a frozen teacher (eval mode, no parameter gradients) from the registry or a checkpoint, of any family — teacher and
  student may even read different input encodings (the batch is re-encoded for the teacher);
* the step objective of :class:`~rightreasons.distill.objective.DistillObjective` on the teacher's outputs, computed
  live (no graph) or read from an :class:`~rightreasons.distill.cache.ExplanationCache` (``distill.frozen``): the
  sample transform then brings each image to the cache's base view, attaches its cached explanation and applies the
  same random crop and flip to both, and the cached logits are looked up by sample id;
* limited data (``distill.shots``), a validation set from another dataset (``distill.eval_data``) and a test split
  evaluated after training (``distill.test_split``);
* validation that adds agreement with the teacher, explanation similarity and the in-/out-of-distribution split to
  the engine's accuracy, EPG and IoU.

Checkpoints, resumption, logging and multi-process training are the engine's; the teacher holds no trainable state
and the cache lives on disk, so a checkpoint needs nothing extra. :func:`write_teacher_cache` writes the cache a
config's frozen run reads (``rightreasons cache``).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator, PartialState
from torch import Tensor, nn
from torchvision.transforms import v2

from ..checkpoints import load_model
from ..data import (AttachExplanations, SanitizeBoxes, base_view, encode, eval_transform, load_dataset,
                    train_transform)
from ..engine import Trainer, TrainingError, train
from ..engine.checkpointing import write_json_atomic
from ..engine.evaluation import is_multilabel
from ..engine.losses import classification_loss
from ..registry import create_model, get_model_spec
from .cache import ExplanationCache, weights_fingerprint, write_cache
from .evaluation import evaluate_fidelity
from .explanations import (TeacherOutputs, freeze, is_bcos, model_explanation, reencode, resolve_kind,
                           teacher_outputs, unwrap)
from .objective import DistillObjective
from .schema import DistillConfig, TeacherConfig
from .subsets import ShotSubset, few_shot_indices

__all__ = ["DistillTrainer", "cache_setting", "distill", "load_teacher", "write_teacher_cache"]


def load_teacher(config: TeacherConfig) -> nn.Module:
    """The frozen teacher: a model file written by rightreasons (``checkpoint`` only) or a registry model.

    Parameters not loaded from weights (a teacher without weights, for smoke runs) are initialised from seed 0, so
    that every process and every run — the cache writer included — builds the same teacher."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if config.name is None:
            model = load_model(config.checkpoint)
        else:
            model = create_model(config.name, pretrained=config.pretrained, checkpoint=config.checkpoint,
                                 **config.kwargs)
    return freeze(model)


def _num_classes(model: nn.Module) -> int:
    count = getattr(unwrap(model), "num_classes", None)
    if not isinstance(count, int):
        raise TrainingError(f"cannot tell the number of classes of the teacher {type(unwrap(model)).__name__} "
                            "(no integer num_classes attribute)")
    return count


def _encoding(bcos: bool) -> str:
    return "bcos" if bcos else "normalize"


def cache_setting(config: DistillConfig, teacher: nn.Module, kind: str) -> dict[str, Any]:
    """The setting a cache of ``teacher``'s explanations on ``config``'s training data is written for and checked
    against: teacher (name, arguments, weights hash), data (name, resolved root, split, options), transform (size,
    base-view crop fraction, the teacher's encoding) and explanation (kind, layer)."""
    data, args = config.data, unwrap(teacher).model_args
    return {
        "teacher": {"name": args["name"], "kwargs": args["kwargs"], "weights_sha256": weights_fingerprint(teacher)},
        "data": {"name": data.name, "root": None if data.root is None else str(Path(data.root).resolve()),
                 "split": data.train_split, "options": data.options},
        "transform": {"image_size": data.image_size, "crop_fraction": config.distill.crop_fraction,
                      "encoding": _encoding(is_bcos(teacher))},
        "explanation": {"kind": kind, "layer": config.distill.explanation_layer if kind == "gradcam" else None},
    }


def _training_subset(dataset: Any, config: DistillConfig) -> Any:
    """The ``distill.shots`` subset of the training set (the whole set without shots)."""
    shots = config.distill.shots
    if shots is None:
        return dataset
    return ShotSubset(dataset, few_shot_indices(dataset.positive_labels, shots, config.distill.shots_seed))


class DistillTrainer(Trainer):
    """The engine's trainer distilling ``config.teacher`` into the student ``config.model``."""

    config: DistillConfig

    def __init__(self, config: DistillConfig, accelerator: Accelerator | None = None) -> None:
        if config.guidance.enabled:
            raise TrainingError("distillation has no box guidance term; set guidance.enabled=false")
        settings = config.distill
        self.teacher = load_teacher(config.teacher)
        self.teacher_encoding = _encoding(is_bcos(self.teacher))
        student_bcos = get_model_spec(config.model.name).bcos
        self.kind = resolve_kind(settings.explanation, is_bcos(self.teacher), student_bcos)
        self.cache: ExplanationCache | None = None
        if settings.frozen is not None:
            self.cache = ExplanationCache(settings.frozen, verify=settings.verify_cache)
            self.cache.check_setting(cache_setting(config, self.teacher, self.kind))
        super().__init__(config, accelerator)
        self.teacher.to(self.accelerator.device)
        teacher_classes = _num_classes(self.teacher)
        if settings.gt_weight > 0 and self.train_set.num_classes != teacher_classes:
            raise TrainingError(f"distill.gt_weight > 0 needs training labels in the teacher's classes, but "
                                f"{config.data.name} has {self.train_set.num_classes} classes and the teacher "
                                f"{teacher_classes}")
        # the teacher's task decides (the validation set is in its classes, also when distilling on other data)
        logit_loss = settings.logit_loss if settings.logit_loss != "auto" else \
            ("multilabel" if is_multilabel(self.val_set) else "kd")
        self.distill_objective = DistillObjective(
            kind=self.kind, layer=settings.explanation_layer, logit_loss=logit_loss,
            temperature=settings.temperature, logit_weight=settings.logit_weight,
            explanation_weight=settings.explanation_weight, gt_weight=settings.gt_weight,
            at_weight=settings.at_weight, at_layers=tuple(settings.at_layers),
            classification=partial(classification_loss, kind=self.loss_kind,
                                   uniform_off_labels=config.loss.uniform_off_labels))

    # ------------------------------------------------------------------ engine hooks
    def build_train_transform(self) -> Any:
        """The engine's augmentation; with a cache, the base view + cached explanation, then crop/flip of both."""
        if self.cache is None:
            return super().build_train_transform()
        data, crop_fraction = self.config.data, self.config.distill.crop_fraction
        if data.augment:
            return train_transform(data.image_size, encoding=self.encoding, scale=tuple(data.crop_scale),
                                   explanations=self.cache, crop_fraction=crop_fraction)
        return v2.Compose([base_view(data.image_size, crop_fraction), AttachExplanations(self.cache),
                           SanitizeBoxes(), encode(self.encoding)])

    def build_datasets(self) -> tuple[Any, Any]:
        """The engine's sets, the training set cut to ``distill.shots`` per class, validation from
        ``distill.eval_data`` when set; a cache must hold every training image."""
        train_set, val_set = super().build_datasets()
        train_set = _training_subset(train_set, self.config)
        if self.config.distill.eval_data is not None:
            val_set = self.eval_dataset(self.config.distill.eval_data.split)
        if self.cache is not None:
            self.cache.check_ids(train_set.ids)
        return train_set, val_set

    def build_model(self) -> nn.Module:
        """The student, with the teacher's classes."""
        m = self.config.model
        if "num_classes" in m.kwargs:
            raise TrainingError("model.kwargs.num_classes cannot be set for a student: it takes the teacher's classes")
        return create_model(m.name, pretrained=m.pretrained, checkpoint=m.checkpoint,
                            num_classes=_num_classes(self.teacher), **m.kwargs)

    def teacher_outputs_for(self, batch: dict[str, Any]) -> TeacherOutputs:
        """The teacher's logits (and explanations, attention features) for a batch: cached or computed now."""
        objective = self.distill_objective
        if self.cache is not None:
            logits = self.cache.logits(batch["id"]).to(batch["image"].device)
            return TeacherOutputs(logits, batch["explanation"] if objective.needs_teacher_explanations else None)
        kind = self.kind if objective.needs_teacher_explanations else "none"
        images = reencode(batch["image"], self.encoding, self.teacher_encoding)
        return teacher_outputs(self.teacher, images, kind, objective.layer, objective.teacher_at_layers)

    def compute_losses(self, batch: dict[str, Any]) -> tuple[dict[str, Tensor], Tensor]:
        """KD (+ e²KD, ground truth, AT) terms and their weighted total for one batch."""
        out = self.distill_objective(self.model, batch["image"], self.teacher_outputs_for(batch), batch["labels"])
        return out.terms, out.total

    def evaluate(self, dataset: Any = None) -> dict[str, Any]:
        """The engine's metrics on ``dataset`` (default: the validation set) plus agreement with the teacher,
        explanation similarity and (Waterbirds-style data) in-/out-of-distribution accuracy and agreement."""
        dataset = self.val_set if dataset is None else dataset
        results = super().evaluate(dataset)
        model = self.accelerator.unwrap_model(self.model)
        results.update(evaluate_fidelity(
            model, self.teacher, dataset, kind=self.kind, layer=self.config.distill.explanation_layer,
            student_encoding=self.encoding, teacher_encoding=self.teacher_encoding,
            batch_size=self.config.data.eval_batch_size, device=self.accelerator.device,
            rank=self.accelerator.process_index, world_size=self.accelerator.num_processes,
            group_names=dataset.group_names,
            multilabel=is_multilabel(dataset)))
        model.train()
        return results

    # ------------------------------------------------------------------ evaluation sets
    def eval_dataset(self, split: str) -> Any:
        """Split ``split`` of the validation dataset (``distill.eval_data`` or ``data``) with the eval transform."""
        source = self.config.distill.eval_data or self.config.data
        name, root = source.name, source.root
        options = source.options
        size = self.config.data.image_size
        return load_dataset(name, root, split, transform=eval_transform(size, encoding=self.encoding,
                                                                        crop_fraction=1.0), **options)

    def evaluate_split(self, split: str) -> dict[str, Any]:
        """All validation metrics on another split of the validation dataset (e.g. ``test``)."""
        return self.evaluate(self.eval_dataset(split))

    def finish(self, seconds: float) -> dict[str, Any]:
        """The engine's export and summary, plus the ``distill.test_split`` metrics under ``summary["test"]``."""
        split = self.config.distill.test_split
        test = self.evaluate_split(split) if split else None
        if test is not None:
            self._log({"split": split, "step": self.position.step, "epoch": self.position.epoch, **test})
        summary = super().finish(seconds)
        if test is not None:
            summary["test"] = {"split": split, **test}
            if self.accelerator.is_main_process:
                write_json_atomic(self.output_dir / "summary.json", summary)
        return summary


def distill(config: DistillConfig, resume: bool | str = False) -> dict[str, Any]:
    """Run a distillation; ``resume=True`` continues from the newest complete checkpoint (or a given path)."""
    return train(config, resume, DistillTrainer)


def write_teacher_cache(config: DistillConfig, out: str | Path, *, batch_size: int | None = None,
                        shard_size: int | None = None, progress: bool = False) -> Path:
    """Compute ``config.teacher``'s logits and explanations once per training image of ``config.data`` (the
    ``distill.shots`` subset when set) on the base view, and write them to ``out`` (resumable; see
    :mod:`rightreasons.distill.cache`). Uses every process of an ``accelerate``/``torchrun`` launch."""
    state = PartialState(cpu=config.cpu)
    teacher = load_teacher(config.teacher).to(state.device)
    kind = resolve_kind(config.distill.explanation, is_bcos(teacher))
    if kind == "none":
        raise ValueError("distill.explanation='none': there are no explanations to cache")
    setting = cache_setting(config, teacher, kind)
    data = config.data
    transform = eval_transform(data.image_size, encoding=setting["transform"]["encoding"],
                               crop_fraction=config.distill.crop_fraction)
    dataset = _training_subset(load_dataset(data.name, data.root, data.train_split, transform=transform,
                                            **data.options), config)
    layer = config.distill.explanation_layer

    def explainer(images: Tensor) -> tuple[Tensor, Tensor]:
        return model_explanation(teacher, images, None, kind, layer)

    report = None
    if progress and state.is_main_process:
        def report(done: int, total: int) -> None:
            print(f"cache: {done}/{total} shards written by process 0", flush=True)

    return write_cache(explainer, dataset, out, setting, batch_size=batch_size or data.eval_batch_size,
                       shard_size=shard_size, device=state.device, rank=state.process_index,
                       world_size=state.num_processes, barrier=state.wait_for_everyone, progress=report,
                       provenance={"teacher_checkpoint": config.teacher.checkpoint, "shots": config.distill.shots,
                                   "shots_seed": config.distill.shots_seed})
