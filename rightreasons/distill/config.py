"""The config of ``rightreasons distill`` (``configs/distill/*.yaml``): a classifier's training config
(:class:`~rightreasons.classification.ClassificationConfig`: the student in ``model``, the distillation data in
``data``, optimiser, loss, evaluation, checkpoints) plus the ``teacher`` and ``distill`` sections. A minimal e²KD
config::

    output_dir: runs/e2kd
    model: {name: bcos_resnet18}
    teacher: {checkpoint: runs/teacher/model.safetensors}
    data: {name: waterbirds100, root: data/waterbirds, image_size: 224, batch_size: 64}
    optim: {name: adam, lr: 1.0e-3, schedule: cosine, warmup_epochs: 5, epochs: 700}
    distill: {temperature: 1.0, explanation_weight: 5.0, test_split: test}

Plain KD is ``explanation_weight: 0``; the attention-transfer baseline ``logit_weight: 0, gt_weight: 1,
at_weight: 1000, explanation_weight: 0``; frozen explanations ``frozen: DIR`` (a cache written by
``rightreasons cache``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..classification.config import ClassificationConfig
from ..config import FieldError, expect
from ..models import checked_arguments
from .explanations import EXPLANATION_CHOICES
from .formats import DEFAULT_FORMAT, FORMATS
from .objective import LogitLossName

ExplanationChoice = Literal[EXPLANATION_CHOICES]  # type: ignore[valid-type]
CacheFormat = Literal[tuple(FORMATS)]  # type: ignore[valid-type]

__all__ = ["DistillConfig", "DistillSection", "EvalDataConfig", "TeacherConfig"]


@dataclass
class TeacherConfig:
    """The teacher: a registry ``name`` (with ``checkpoint`` weights or ``pretrained``), or only ``checkpoint`` for a
    model file written by rightreasons training (``model.safetensors``, which names its architecture)."""

    name: str | None = None
    checkpoint: str | None = None
    pretrained: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.name is None and self.checkpoint is None:
            raise FieldError("name", "set teacher.name (a registered model) or teacher.checkpoint (a model file "
                                     "written by rightreasons training)")
        if self.name is None and (self.pretrained or self.kwargs):
            raise FieldError("name", "teacher.pretrained and teacher.kwargs need teacher.name; a model file written "
                                     "by rightreasons names its own architecture and arguments, so with "
                                     "teacher.name=null also set teacher.kwargs={} and teacher.pretrained=false")
        if self.name is not None:
            self.kwargs = checked_arguments(self.name, self.kwargs)


@dataclass
class EvalDataConfig:
    """A validation set from another dataset than the distillation data ("data-free" KD: distil on images of one
    dataset, evaluate on the teacher's)."""

    name: str
    root: str | None = None
    split: str = "val"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class DistillSection:
    """The distillation objective and its data settings.

    * ``temperature`` τ; ``logit_loss``: ``kd`` (softmax) or ``multilabel`` (per-class binary), ``auto`` = by data.
    * Weights: ``logit_weight`` (KD), ``explanation_weight`` (λ of e²KD; 0 = plain KD), ``gt_weight`` (the
      classification loss of the engine on the ground truth; 0 in the paper's e²KD), ``at_weight`` (attention transfer
      on ``at_layers``; 1000 = the original β).
    * ``explanation``: the explanation method compared (:mod:`rightreasons.explain.methods`, at
      ``explanation_layer`` unless the method is input-only), ``auto`` (B-cos ``W(x)``, ``bcos_weights``, for two
      B-cos models; GradCAM for two standard ones) or ``none``; also what the evaluation's explanation similarity
      compares.
    * ``explanation_every`` K: the e²KD term on every K-th optimiser step only (steps 0, K, 2K, ...; the logit and
      other terms every step) — the cheap alternative to a cache: the other steps need neither explanation.
    * ``frozen``: a cache directory of teacher logits and explanations (``rightreasons cache``); training then never
      runs the teacher (it is still loaded for evaluation); ``verify_cache`` checks the shards' SHA-256 at start.
      ``cache_format``: how ``rightreasons cache`` stores the explanations (``float16`` or ``compact``,
      :mod:`rightreasons.distill.formats`); a cache of another format is refused.
      ``crop_fraction``: the base view the cache is computed on (:func:`rightreasons.data.base_view`).
    * ``shots``: limited data, this many training images per class, drawn with ``shots_seed``.
    * ``eval_data``: validate on another dataset (data-free); ``test_split``: also evaluate this split of the
      validation dataset after training (e.g. ``test`` on Waterbirds: all four groups).
    """

    temperature: float = 1.0
    logit_loss: LogitLossName = "auto"
    logit_weight: float = 1.0
    explanation_weight: float = 1.0
    gt_weight: float = 0.0
    at_weight: float = 0.0
    at_layers: list[str] = field(default_factory=lambda: ["mid1", "mid2", "mid3", "final"])
    explanation: ExplanationChoice = "auto"
    explanation_layer: str = "final"
    explanation_every: int = 1
    frozen: str | None = None
    verify_cache: bool = True
    cache_format: CacheFormat = DEFAULT_FORMAT
    crop_fraction: float = 1.0
    shots: int | None = None
    shots_seed: int = 0
    eval_data: EvalDataConfig | None = None
    test_split: str | None = None

    def __post_init__(self) -> None:
        expect(self.temperature > 0, "temperature", self.temperature, "a temperature > 0")
        for name in ("logit_weight", "explanation_weight", "gt_weight", "at_weight"):
            expect(getattr(self, name) >= 0, name, getattr(self, name), "a loss weight >= 0")
        expect(self.logit_weight + self.explanation_weight + self.gt_weight + self.at_weight > 0, "explanation_weight",
               self.explanation_weight, "a loss weight > 0 somewhere (every loss weight is 0: nothing to train on)")
        expect(bool(self.explanation_layer.strip()), "explanation_layer", self.explanation_layer, "a layer name")
        expect(self.explanation_every >= 1, "explanation_every", self.explanation_every,
               "an integer >= 1 (1 = the e²KD term on every step)")
        expect(self.frozen is None or bool(self.frozen.strip()), "frozen", self.frozen, "a cache directory or null")
        expect(0 < self.crop_fraction <= 1, "crop_fraction", self.crop_fraction, "a fraction in (0, 1]")
        expect(self.shots is None or self.shots >= 1, "shots", self.shots, "an integer >= 1 or null")
        expect(self.shots_seed >= 0, "shots_seed", self.shots_seed, "an integer >= 0")
        expect(self.frozen is None or self.at_weight == 0, "at_weight", self.at_weight,
               "0 with distill.frozen (a cache holds logits and explanations only; attention transfer needs the live "
               "teacher)")


@dataclass
class DistillConfig(ClassificationConfig):
    """A distillation run (``rightreasons distill``): the student is ``model``; ``teacher`` is required."""

    output_dir: str = "runs/distill"
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    distill: DistillSection = field(default_factory=DistillSection)
