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
from ..config import MAX_SEED, FieldError, expect
from ..models import checked_arguments
from .explanations import EXPLANATION_CHOICES
from .formats import DEFAULT_FORMAT, FORMATS
from .objective import LogitLossName

ExplanationChoice = Literal[EXPLANATION_CHOICES]  # type: ignore[valid-type]
CacheFormat = Literal[tuple(FORMATS)]  # type: ignore[valid-type]

__all__ = ["DistillConfig", "DistillSection", "EvalDataConfig", "TeacherConfig"]


@dataclass
class TeacherConfig:
    """The teacher: a registry ``name`` (with ``checkpoint`` weights or ``pretrained``), or only ``checkpoint`` for
    what rightreasons training wrote, which names its architecture."""

    name: str | None = None
    """The teacher's registered architecture; null: the one its `checkpoint` records (a model file or run of
    ours)."""
    checkpoint: str | None = None
    """The teacher's weights: a weights file, a finished run's directory (its `model.safetensors`) or, for `rightreasons
    distill` and `cache`, one of a run's checkpoint directories (with the architecture its run trained); with `name`
    too, the file's architecture must be the one named."""
    pretrained: bool = False
    """The published ImageNet weights of `name` as the teacher (needs `name`)."""
    kwargs: dict[str, Any] = field(default_factory=dict)
    """Constructor arguments of `name` (checked against the constructor when the config is read)."""

    def __post_init__(self) -> None:
        if self.name is None and self.checkpoint is None:
            raise FieldError("name", "set teacher.name (a registered model) or teacher.checkpoint (a model file "
                                     "written by rightreasons training)")
        if self.name is None and self.pretrained:
            raise FieldError("pretrained", "teacher.pretrained needs teacher.name (the released weights of which "
                                           "architecture?)")
        if self.name is not None:
            self.kwargs = checked_arguments(self.name, self.kwargs)


@dataclass
class EvalDataConfig:
    """A validation set from another dataset than the distillation data ("data-free" KD: distil on images of one
    dataset, evaluate on the teacher's)."""

    name: str
    """The validation dataset (a name of `data.name`)."""
    root: str | None = None
    """Its directory (null only for the synthetic datasets)."""
    split: str = "val"
    """Its split validated on."""
    options: dict[str, Any] = field(default_factory=dict)
    """Its loader's options, as `data.options`."""


@dataclass
class DistillSection:
    """The distillation objective ``w_logit · L_KD + λ · (1 − cos(E_S, E_T)) + w_gt · L_class + w_AT · L_AT`` and
    its data settings (:mod:`rightreasons.distill.objective`)."""

    temperature: float = 1.0
    """τ, the temperature of the logit term (teacher and student logits divided by it)."""
    logit_loss: LogitLossName = "auto"
    """The logit term: `kd` (softmax KD), `multilabel` (per-class binary KD) or `auto`: `multilabel` for multi-label
    data, `kd` otherwise."""
    logit_weight: float = 1.0
    """`w_logit`, the weight of the logit (KD) term."""
    explanation_weight: float = 1.0
    """λ of e²KD, the weight of `1 − cos(E_S, E_T)` between the explanations of the teacher's top-1 class; 0 is
    plain KD."""
    gt_weight: float = 0.0
    """`w_gt`, the weight of the classification loss (`loss.classification`) on the ground truth; 0 in the paper's
    e²KD."""
    at_weight: float = 0.0
    """`w_AT`, the weight of attention transfer on `at_layers` (1000 = the original β); needs the live teacher."""
    at_layers: list[str] = field(default_factory=lambda: ["mid1", "mid2", "mid3", "final"])
    """The layers of student and teacher whose attention maps attention transfer matches, pairwise."""
    explanation: ExplanationChoice = "auto"
    """The explanation compared (`rightreasons.explain.methods`): `auto` (B-cos `W(x)`, `bcos_weights`, for two
    B-cos models; GradCAM for two standard ones), a method name, or `none` (then `explanation_weight` must be 0);
    also what the evaluation's explanation similarity compares."""
    explanation_layer: str = "final"
    """The layer `explanation` is taken at, unless the method explains the input only."""
    explanation_every: int = 1
    """K: the e²KD term on every K-th optimiser step only (steps 0, K, 2K, ...; the logit and other terms every step):
    the cheap alternative to a cache, since the other steps need neither explanation (1: every step)."""
    frozen: str | None = None
    """A cache directory of teacher logits and explanations (`rightreasons cache`, or `distill --frozen DIR`):
    training then never runs the teacher (it is still loaded for evaluation); null: the live teacher."""
    verify_cache: bool = True
    """Check the SHA-256 of every shard of the `frozen` cache at start."""
    cache_format: CacheFormat = DEFAULT_FORMAT
    """How `rightreasons cache` stores the explanations: `float16` (lossless to float16 rounding) or `compact` (8-bit
    levels per 32×32 tile, deflated; about 30× smaller, `rightreasons.distill.formats`); a cache of another format than
    asked for is refused."""
    crop_fraction: float = 1.0
    """The base view the `frozen` cache is computed on: the shorter side resized to `data.image_size /
    crop_fraction`, then the centre `data.image_size` square (`rightreasons.data.base_view`); training crops and flips
    it together with the explanations."""
    shots: int | None = None
    """Limited data: this many training images per class, drawn with `shots_seed`; null: the whole training
    split."""
    shots_seed: int = 0
    """Seed of the draw of the `shots` images."""
    eval_data: EvalDataConfig | None = None
    """Validate on another dataset than `data` ("data-free" KD: distil on images of one dataset, evaluate on the
    teacher's); null: `data.val_split`."""
    test_split: str | None = None
    """Also evaluate this split of the validation dataset after training (e.g. `test` on Waterbirds: all four
    groups); null: none."""

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
        expect(0 <= self.shots_seed <= MAX_SEED, "shots_seed", self.shots_seed,
               "an integer >= 0 and <= 4294967295 (2**32 - 1: numpy's seeds)")
        expect(self.frozen is None or self.at_weight == 0, "at_weight", self.at_weight,
               "0 with distill.frozen (a cache holds logits and explanations only; attention transfer needs the live "
               "teacher)")


@dataclass
class DistillConfig(ClassificationConfig):
    """A distillation run (``rightreasons distill``): the student is ``model``; ``teacher`` is required."""

    output_dir: str = "runs/distill"
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    distill: DistillSection = field(default_factory=DistillSection)
