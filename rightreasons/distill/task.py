"""Distillation as a task of the engine: KD, e²KD (live or with frozen explanations) and attention transfer
(``rightreasons distill``).

:class:`DistillationTask` trains the student ``config.model`` against a frozen teacher (eval mode, no parameter
gradients, :mod:`rightreasons.distill.teacher`) from the registry or a checkpoint, of any family — teacher and
student may read different input encodings (the batch is re-encoded for the teacher). The objective is
:class:`~rightreasons.distill.objective.DistillObjective` on the teacher's outputs, computed live (no graph) or read
from an :class:`~rightreasons.distill.cache.ExplanationCache` (``distill.frozen``): the sample transform then brings
each image to the cache's base view, attaches its cached explanation and applies the same random crop and flip to
both, and the cached logits are looked up by sample id. Limited data (``distill.shots``), a validation set from
another dataset (``distill.eval_data``) and a test split evaluated after training (``distill.test_split``) are
supported; validation adds agreement with the teacher and explanation similarity
(:class:`~rightreasons.distill.fidelity.FidelityEvaluator`) to the classifier's metrics.

The student is trained as any classifier (:class:`~rightreasons.classification.ClassificationTask`: model, encoding,
AGC, hooks, export). Checkpoints, resumption, logging and multi-process training are the engine's; the teacher holds
no trainable state and the cache lives on disk, so a checkpoint needs nothing extra.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn
from torchvision.transforms import v2

from ..classification import ClassificationTask
from ..data import AttachExplanations, SanitizeBoxes, base_view, load_dataset, train_transform
from ..encoding import encode, reencode
from ..engine import Step, Trainer, register_task
from ..errors import TrainingError
from ..explain import layer_for
from ..metrics.evaluation import Evaluator, is_multilabel
from ..models import capabilities
from .cache import ExplanationCache
from .config import DistillConfig
from .explanations import TeacherOutputs, resolve_explanation, teacher_outputs
from .fidelity import FidelityEvaluator
from .objective import DistillObjective
from .teacher import cache_setting, load_teacher, teacher_classes, training_subset

__all__ = ["DistillationTask"]


class DistillationTask(ClassificationTask):
    """Distil ``config.teacher`` into the student ``config.model``."""

    config_class = DistillConfig
    config: DistillConfig

    def __init__(self, config: DistillConfig) -> None:
        super().__init__(config)
        self.teacher = load_teacher(config.teacher)
        self.teacher_caps = capabilities(self.teacher)
        self.cache: ExplanationCache | None = None
        self.method = "none"
        self.objective: DistillObjective | None = None

    # ------------------------------------------------------------------ data and model
    def eval_dataset(self, split: str, encoding: str | None = None) -> Any:
        """Split ``split`` of the validation dataset (``distill.eval_data`` or ``data``); with ``encoding``, with
        the evaluation transform for it (else without a transform)."""
        eval_data, data = self.config.distill.eval_data, self.config.data
        source, options = (eval_data, eval_data.options) if eval_data else (data, data.options_for(split))
        transform = None if encoding is None else self.eval_transform(encoding)
        return load_dataset(source.name, source.root, split, transform=transform, **options)

    def build_datasets(self) -> tuple[Any, Any]:
        """The training set cut to ``distill.shots`` per class, the validation set (from ``distill.eval_data`` when
        set); a cache must hold every training image."""
        config, data = self.config, self.config.data
        train_set = training_subset(load_dataset(data.name, data.root, data.train_split,
                                                 **data.options_for(data.train_split)), config)
        eval_data = config.distill.eval_data
        val_set = self.eval_dataset(eval_data.split if eval_data else data.val_split)
        self.val_set = val_set
        self.objectives = self.validation_objectives(val_set)
        return train_set, val_set

    def output_classes(self, train_set: Any) -> int:
        """The student predicts the teacher's classes."""
        return teacher_classes(self.teacher)

    def build_model(self, train_set: Any) -> nn.Module:
        """The student (:meth:`ClassificationTask.build_model`); resolves which explanation the pair compares."""
        student = super().build_model(train_set)
        settings = self.config.distill
        self.method = resolve_explanation(settings.explanation, self.teacher_caps.bcos, capabilities(student).bcos)
        if settings.frozen is not None:
            self.cache = ExplanationCache(settings.frozen, verify=settings.verify_cache,
                                          explanation_format=settings.cache_format)
            self.cache.check_setting(cache_setting(self.config, self.teacher, self.method))
            self.cache.check_ids(train_set.ids)
        if settings.gt_weight > 0 and train_set.num_classes != teacher_classes(self.teacher):
            raise TrainingError(f"distill.gt_weight > 0 needs training labels in the teacher's classes, but "
                                f"{self.config.data.name} has {train_set.num_classes} classes and the teacher "
                                f"{teacher_classes(self.teacher)}")
        return student

    def train_transform(self, encoding: str) -> Any:
        """The engine's augmentation; with a cache, the base view + cached explanation, then crop/flip of both."""
        if self.cache is None:
            return super().train_transform(encoding)
        data, crop_fraction = self.config.data, self.config.distill.crop_fraction
        if data.augment:
            return train_transform(data.image_size, encoding=encoding, scale=tuple(data.crop_scale),
                                   explanations=self.cache, crop_fraction=crop_fraction, rotation=data.rotation)
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
        self.objective = DistillObjective(
            method=self.method, layer=layer_for(self.method, settings.explanation_layer),
            logit_loss=logit_loss, temperature=settings.temperature, logit_weight=settings.logit_weight,
            explanation_weight=settings.explanation_weight, gt_weight=settings.gt_weight,
            at_weight=settings.at_weight, at_layers=tuple(settings.at_layers),
            classification=self.classification_loss, compile=self.config.compile)

    # ------------------------------------------------------------------ training
    def explains_at(self, step: Step) -> bool:
        """Whether the e²KD term is part of this step: its weight is > 0 and the step is a multiple of
        ``distill.explanation_every``."""
        return self.objective.needs_teacher_explanations and step.index % self.config.distill.explanation_every == 0

    def teacher_outputs_for(self, batch: dict[str, Any], explain: bool = True,
                            grad_scale: float | Tensor = 1.0) -> TeacherOutputs:
        """The teacher's logits (and explanations when ``explain`` and the e²KD term is on, attention features) for
        a batch: cached or computed now (``grad_scale``: a float16 step's loss scale, :func:`teacher_outputs`)."""
        objective = self.objective
        explain = explain and objective.needs_teacher_explanations
        if self.cache is not None:
            logits = self.cache.logits(batch["id"]).to(batch["image"].device, non_blocking=True)
            return TeacherOutputs(logits, batch["explanation"] if explain else None)
        method = self.method if explain else "none"
        images = reencode(batch["image"], self.encoding, self.teacher_caps.encoding)
        return teacher_outputs(self.teacher, images, method, objective.layer, objective.teacher_at_layers,
                               grad_scale)

    def losses(self, model: nn.Module, batch: dict[str, Any], step: Step) -> tuple[dict[str, Tensor], Tensor]:
        """KD (+ e²KD on the steps of :meth:`explains_at`, ground truth, AT) terms and their weighted total for one
        batch."""
        explain = self.explains_at(step)
        teacher = self.teacher_outputs_for(batch, explain, step.loss_scale)
        out = self.objective(model, batch["image"], teacher, batch["labels"], explain=explain,
                             grad_scale=step.loss_scale)
        return out.terms, out.total

    # ------------------------------------------------------------------ evaluation
    def evaluators(self, dataset: Any) -> list[Evaluator]:
        """Classification and localisation metrics plus agreement with the teacher and explanation similarity."""
        layer = layer_for(self.method, self.config.distill.explanation_layer)
        fidelity = FidelityEvaluator(self.teacher, method=self.method, layer=layer, group_names=dataset.group_names,
                                     multilabel=is_multilabel(dataset))
        return [*super().evaluators(dataset), fidelity]

    def final_evaluations(self) -> dict[str, Any]:
        """``{"test": split}`` of the validation dataset when ``distill.test_split`` is set."""
        split = self.config.distill.test_split
        return {"test": self.eval_dataset(split, self.encoding)} if split else {}


register_task("distill", DistillationTask)
