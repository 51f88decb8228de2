"""Distillation as a task of the engine: KD, e²KD (live or with frozen explanations) and attention transfer
(``rightreasons distill`` / ``cache``).

:class:`DistillationTask` trains the student ``config.model`` against a frozen teacher (eval mode, no parameter
gradients) from the registry or a checkpoint, of any family — teacher and student may read different input encodings
(the batch is re-encoded for the teacher). The objective is :class:`~rightreasons.distill.DistillObjective` on the
teacher's outputs, computed live (no graph) or read from an :class:`~rightreasons.distill.cache.ExplanationCache`
(``distill.frozen``): the sample transform then brings each image to the cache's base view, attaches its cached
explanation and applies the same random crop and flip to both, and the cached logits are looked up by sample id.
Limited data (``distill.shots``), a validation set from another dataset (``distill.eval_data``) and a test split
evaluated after training (``distill.test_split``) are supported; validation adds agreement with the teacher and
explanation similarity (:class:`~rightreasons.distill.evaluation.FidelityEvaluator`) to the classification and
localisation metrics.

Checkpoints, resumption, logging and multi-process training are the engine's; the teacher holds no trainable state and
the cache lives on disk, so a checkpoint needs nothing extra. :func:`write_teacher_cache` writes the cache a config's
frozen run reads.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from torch import Tensor, nn
from torchvision.transforms import v2

from ..data import AttachExplanations, SanitizeBoxes, base_view, eval_transform, load_dataset, train_transform
from ..distill import (DistillObjective, ExplanationCache, FidelityEvaluator, ShotSubset, TeacherOutputs,
                       few_shot_indices, freeze, resolve_explanation, teacher_outputs, weights_fingerprint,
                       write_cache)
from ..encoding import encode, reencode
from ..engine import Step, Task, Trainer, train
from ..engine.launch import use_cpu
from ..errors import ConfigError, TrainingError, UsageError
from ..evaluation import Evaluator, is_multilabel
from ..explain import attribute, layer_for
from ..hub import capabilities, create_model, load_model
from ..classification import classification_loss, resolve_classification_loss
from .classification import build_model, run_model_file, supervised_evaluators, validation_objectives
from .distill_schema import DistillConfig, TeacherConfig

__all__ = ["DistillationTask", "cache_setting", "distill", "load_teacher", "write_teacher_cache"]


def load_teacher(config: TeacherConfig) -> nn.Module:
    """The frozen teacher: a model file written by rightreasons (``checkpoint`` only) or a registry model.

    Parameters not loaded from weights (a teacher without weights, for smoke runs) are initialised from seed 0, so
    that every process and every run — the cache writer included — builds the same teacher."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        checkpoint = run_model_file(config.checkpoint, "teacher.checkpoint")
        if config.name is None:
            model = load_model(checkpoint)
        else:
            model = create_model(config.name, pretrained=config.pretrained, checkpoint=checkpoint, **config.kwargs)
    return freeze(model)


def _teacher_classes(teacher: nn.Module) -> int:
    count = capabilities(teacher).num_classes
    if count is None:
        raise TrainingError(f"cannot tell the number of classes of the teacher {capabilities(teacher).name}")
    return count


def cache_setting(config: DistillConfig, teacher: nn.Module, method: str) -> dict[str, Any]:
    """The setting a cache of ``teacher``'s explanations on ``config``'s training data is written for and checked
    against: teacher (name, arguments, weights hash), data (name, resolved root, split, options), transform (size,
    base-view crop fraction, the teacher's encoding) and explanation (method, layer)."""
    data, args = config.data, teacher.model_args
    return {
        "teacher": {"name": args["name"], "kwargs": args["kwargs"], "weights_sha256": weights_fingerprint(teacher)},
        "data": {"name": data.name, "root": None if data.root is None else str(Path(data.root).resolve()),
                 "split": data.train_split, "options": data.options},
        "transform": {"image_size": data.image_size, "crop_fraction": config.distill.crop_fraction,
                      "encoding": capabilities(teacher).encoding},
        "explanation": {"method": method, "layer": layer_for(method, config.distill.explanation_layer)},
    }


def _training_subset(dataset: Any, config: DistillConfig) -> Any:
    """The ``distill.shots`` subset of the training set (the whole set without shots)."""
    shots = config.distill.shots
    if shots is None:
        return dataset
    return ShotSubset(dataset, few_shot_indices(dataset.positive_labels, shots, config.distill.shots_seed))


class DistillationTask(Task):
    """Distil ``config.teacher`` into the student ``config.model``."""

    config: DistillConfig

    def __init__(self, config: DistillConfig) -> None:
        super().__init__(config)
        if config.guidance.enabled:
            raise ConfigError("distillation has no box guidance term; set guidance.enabled=false")
        self.teacher = load_teacher(config.teacher)
        self.teacher_caps = capabilities(self.teacher)
        self.cache: ExplanationCache | None = None
        self.student: nn.Module | None = None
        self.method = "none"
        self.objective: DistillObjective | None = None

    # ------------------------------------------------------------------ data and model
    def eval_dataset(self, split: str, encoding: str | None = None) -> Any:
        """Split ``split`` of the validation dataset (``distill.eval_data`` or ``data``); with ``encoding``, with
        the evaluation transform for it (else without a transform)."""
        source = self.config.distill.eval_data or self.config.data
        transform = None if encoding is None else self.eval_transform(encoding)
        return load_dataset(source.name, source.root, split, transform=transform, **source.options)

    def build_datasets(self) -> tuple[Any, Any]:
        """The training set cut to ``distill.shots`` per class, the validation set (from ``distill.eval_data`` when
        set); a cache must hold every training image."""
        config, data = self.config, self.config.data
        train_set = _training_subset(load_dataset(data.name, data.root, data.train_split, **data.options), config)
        eval_data = config.distill.eval_data
        val_set = self.eval_dataset(eval_data.split if eval_data else data.val_split)
        self.objectives = validation_objectives(config, val_set)
        return train_set, val_set

    def build_model(self, train_set: Any) -> nn.Module:
        """The student, with the teacher's classes; resolves which explanation the pair compares."""
        self.student = build_model(self.config, _teacher_classes(self.teacher))
        settings = self.config.distill
        self.method = resolve_explanation(settings.explanation, self.teacher_caps.bcos,
                                          capabilities(self.student).bcos)
        if settings.frozen is not None:
            self.cache = ExplanationCache(settings.frozen, verify=settings.verify_cache)
            self.cache.check_setting(cache_setting(self.config, self.teacher, self.method))
            self.cache.check_ids(train_set.ids)
        if settings.gt_weight > 0 and train_set.num_classes != _teacher_classes(self.teacher):
            raise TrainingError(f"distill.gt_weight > 0 needs training labels in the teacher's classes, but "
                                f"{self.config.data.name} has {train_set.num_classes} classes and the teacher "
                                f"{_teacher_classes(self.teacher)}")
        return self.student

    def train_transform(self, encoding: str) -> Any:
        """The engine's augmentation; with a cache, the base view + cached explanation, then crop/flip of both."""
        if self.cache is None:
            return super().train_transform(encoding)
        data, crop_fraction = self.config.data, self.config.distill.crop_fraction
        if data.augment:
            return train_transform(data.image_size, encoding=encoding, scale=tuple(data.crop_scale),
                                   explanations=self.cache, crop_fraction=crop_fraction)
        return v2.Compose([base_view(data.image_size, crop_fraction), AttachExplanations(self.cache),
                           SanitizeBoxes(), encode(encoding)])

    def setup(self, trainer: Trainer) -> None:
        """Move the teacher to the device and build the objective (its logit loss follows the validation data: the
        teacher's task)."""
        self.teacher.to(trainer.accelerator.device)
        self.encoding = trainer.encoding
        settings = self.config.distill
        logit_loss = settings.logit_loss if settings.logit_loss != "auto" else \
            ("multilabel" if is_multilabel(trainer.val_set) else "kd")
        loss_kind = resolve_classification_loss(self.config.loss.classification, capabilities(self.student).bcos,
                                                is_multilabel(trainer.train_set))
        self.objective = DistillObjective(
            method=self.method, layer=layer_for(self.method, settings.explanation_layer),
            logit_loss=logit_loss, temperature=settings.temperature, logit_weight=settings.logit_weight,
            explanation_weight=settings.explanation_weight, gt_weight=settings.gt_weight,
            at_weight=settings.at_weight, at_layers=tuple(settings.at_layers),
            classification=partial(classification_loss, kind=loss_kind,
                                   uniform_off_labels=self.config.loss.uniform_off_labels))

    # ------------------------------------------------------------------ training
    def teacher_outputs_for(self, batch: dict[str, Any]) -> TeacherOutputs:
        """The teacher's logits (and explanations, attention features) for a batch: cached or computed now."""
        objective = self.objective
        if self.cache is not None:
            logits = self.cache.logits(batch["id"]).to(batch["image"].device)
            return TeacherOutputs(logits, batch["explanation"] if objective.needs_teacher_explanations else None)
        method = self.method if objective.needs_teacher_explanations else "none"
        images = reencode(batch["image"], self.encoding, self.teacher_caps.encoding)
        return teacher_outputs(self.teacher, images, method, objective.layer, objective.teacher_at_layers)

    def losses(self, model: nn.Module, batch: dict[str, Any], step: Step) -> tuple[dict[str, Tensor], Tensor]:
        """KD (+ e²KD, ground truth, AT) terms and their weighted total for one batch."""
        out = self.objective(model, batch["image"], self.teacher_outputs_for(batch), batch["labels"])
        return out.terms, out.total

    # ------------------------------------------------------------------ evaluation
    def evaluators(self, dataset: Any) -> list[Evaluator]:
        """Classification and localisation metrics plus agreement with the teacher and explanation similarity."""
        layer = layer_for(self.method, self.config.distill.explanation_layer)
        fidelity = FidelityEvaluator(self.teacher, method=self.method, layer=layer, group_names=dataset.group_names,
                                     multilabel=is_multilabel(dataset))
        return [*supervised_evaluators(self.config, self.student, dataset), fidelity]

    def final_evaluations(self) -> dict[str, Any]:
        """``{"test": split}`` of the validation dataset when ``distill.test_split`` is set."""
        split = self.config.distill.test_split
        return {"test": self.eval_dataset(split, self.encoding)} if split else {}


def distill(config: DistillConfig, resume: bool | str = False) -> dict[str, Any]:
    """Run a distillation; ``resume=True`` continues from the newest complete checkpoint (or a given path)."""
    return train(DistillationTask(config), resume)


def write_teacher_cache(config: DistillConfig, out: str | Path, *, batch_size: int | None = None,
                        shard_size: int | None = None, progress: bool = False) -> Path:
    """Compute ``config.teacher``'s logits and explanations once per training image of ``config.data`` (the
    ``distill.shots`` subset when set) on the base view, and write them to ``out`` (resumable; see
    :mod:`rightreasons.distill.cache`). Uses every process of an ``accelerate``/``torchrun`` launch."""
    state = PartialState(cpu=use_cpu(config.cpu))
    teacher = load_teacher(config.teacher).to(state.device)
    method = resolve_explanation(config.distill.explanation, capabilities(teacher).bcos)
    if method == "none":
        raise UsageError("distill.explanation='none': there are no explanations to cache")
    setting = cache_setting(config, teacher, method)
    data = config.data
    transform = eval_transform(data.image_size, encoding=setting["transform"]["encoding"],
                               crop_fraction=config.distill.crop_fraction)
    dataset = _training_subset(load_dataset(data.name, data.root, data.train_split, transform=transform,
                                            **data.options), config)
    layer = setting["explanation"]["layer"]

    def explainer(images: Tensor) -> tuple[Tensor, Tensor]:
        result = attribute(teacher, images, None, method, layer)
        return result.logits, result.explanation

    report = None
    if progress and state.is_main_process:
        def report(done: int, total: int) -> None:
            print(f"cache: {done}/{total} shards written by process 0", flush=True)

    batch_size = data.eval_batch_size if batch_size is None else batch_size
    return write_cache(explainer, dataset, out, setting, batch_size=batch_size, shard_size=shard_size,
                       device=state.device, rank=state.process_index, world_size=state.num_processes,
                       barrier=state.wait_for_everyone, gather=lambda value: gather_object([value]), progress=report,
                       provenance={"teacher_checkpoint": config.teacher.checkpoint, "shots": config.distill.shots,
                                   "shots_seed": config.distill.shots_seed})
