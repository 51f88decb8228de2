"""The schema of training, guidance and evaluation configs (YAML files under ``configs/``).

Every key is documented here; :func:`rightreasons.config.load_config` refuses unknown keys, wrong types and values
out of range (each section's ``__post_init__`` says which), before any work starts.
A minimal guidance config::

    output_dir: runs/voc-energy
    model: {name: bcos_resnet50, checkpoint: weights/resnet_50-f46c1a4159.pth}
    data: {name: voc2007, root: data/VOCdevkit/VOC2007, image_size: 224, batch_size: 64}
    optim: {name: adam, lr: 1.0e-4, epochs: 50}
    guidance: {enabled: true, method: bcos, layer: input, loss: energy, weight: 1.0e-3}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..classification import ClassificationLossName
from ..config import FieldError, convert_arguments, expect
from ..errors import ConfigError, UnknownNameError, UsageError
from ..explain.methods import MapMethodName
from ..guidance.losses import GuidanceReduction, LossName
from ..guidance.objective import ExplainChoice
from ..hub import get_model_spec
from .optim import OptimizerName, ScheduleName

__all__ = ["CheckpointConfig", "DataConfig", "EvalConfig", "GuidanceConfig", "LossConfig", "ModelConfig",
           "OptimConfig", "RESERVED_DATA_OPTIONS", "TrainConfig", "check_architecture"]

RESERVED_DATA_OPTIONS: dict[str, str] = {"transform": "data.image_size, data.augment and data.crop_scale",
                                         "annotated_fraction": "data.annotated_fraction", "annotation_seed": "seed"}
"""``load_dataset`` options that training sets itself from other keys, so ``data.options`` may not hold them."""


def check_architecture(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The ``kwargs`` of a model section, checked when the config is read rather than when the model is built: a
    :class:`~rightreasons.config.FieldError` on ``name`` when it is not registered (it may carry a weights tag,
    ``arch.tag``), on ``kwargs`` when the architecture does not take one of them
    (:meth:`~rightreasons.hub.ModelSpec.check_arguments`) or a value does not fit its annotation. Returns them
    converted as every config value is (:func:`~rightreasons.config.convert_arguments`)."""
    try:
        spec = get_model_spec(name.partition(".")[0])
    except UnknownNameError as e:
        raise FieldError("name", str(e)) from None
    try:
        spec.check_arguments(kwargs)
    except UsageError as e:
        raise FieldError("kwargs", str(e)) from None
    try:
        return convert_arguments(spec.builder, kwargs)
    except ConfigError as e:
        raise FieldError("kwargs", f"{spec.name}: {e}") from None


@dataclass
class ModelConfig:
    """Which model to train: a registry name plus weights to start from.

    * ``pretrained: true`` — the published ImageNet weights of ``name`` (:mod:`rightreasons.hub.pretrained`; the
      classifier is replaced to fit the data's classes): how the shipped baselines start.
    * ``checkpoint`` — a weights file (any layout :func:`rightreasons.hub.weights.load_weights` reads, e.g. our
      ``model.safetensors``) or the directory of a finished run, which stands for its ``model.safetensors``
      (``checkpoint: runs/voc2007/baseline``): how the shipped guided runs start from their baseline.
    * ``kwargs`` — constructor arguments of the architecture, e.g. ``{inplanes: 16}`` for a ResNet of width 16;
      never ``num_classes``, which comes from the data (for a student, from its teacher).
    * ``sync_bn`` — on several processes, take the BatchNorm statistics of a training step over the global batch
      (synchronised BatchNorm, :func:`rightreasons.convert_sync_batchnorm`), so that N processes train exactly as one
      process with the same global batch; one all-reduce per norm layer, forward and backward. On by default;
      ``false`` normalises each process's part of the batch with its own statistics (what torchvision's reference
      scripts do without ``--sync-bn``): cheaper, but with small per-process batches a different training. No effect
      on one process, on norms with per-sample statistics (LayerNorm, GroupNorm, PositionNorm) or in evaluation.
    """

    name: str = "bcos_resnet18"
    pretrained: bool = False
    checkpoint: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    sync_bn: bool = True

    def __post_init__(self) -> None:
        expect(bool(self.name.strip()), "name", self.name, "a registered model name")
        expect(self.checkpoint is None or bool(self.checkpoint.strip()), "checkpoint", self.checkpoint,
               "a file path, a run directory or null")
        expect("num_classes" not in self.kwargs, "kwargs", self.kwargs,
               "constructor arguments without num_classes (the number of classes comes from the data, or for a "
               "student from its teacher)")
        self.kwargs = check_architecture(self.name, self.kwargs)
        expect(isinstance(self.sync_bn, bool), "sync_bn", self.sync_bn, "true or false")


@dataclass
class DataConfig:
    """Dataset, splits, resolution and loading. ``options`` go to ``rightreasons.data.load_dataset`` (all but
    :data:`RESERVED_DATA_OPTIONS`, which training sets from other keys)."""

    name: str = "synthetic-birds"
    root: str | None = None
    train_split: str = "train"
    val_split: str = "val"
    image_size: int = 64
    batch_size: int = 32
    eval_batch_size: int = 64
    num_workers: int = 0
    annotated_fraction: float = 1.0
    augment: bool = True
    crop_scale: list[float] = field(default_factory=lambda: [0.25, 1.0])
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        expect(bool(self.name.strip()), "name", self.name, "a dataset name")
        clash = [key for key in RESERVED_DATA_OPTIONS if key in self.options]
        expect(not clash, "options", self.options, "dataset options other than " + ", ".join(
            f"{key} (set by {RESERVED_DATA_OPTIONS[key]})" for key in clash))
        expect(self.root is None or bool(self.root.strip()), "root", self.root, "a directory or null")
        expect(0.0 <= self.annotated_fraction <= 1.0, "annotated_fraction", self.annotated_fraction,
               "a fraction in [0, 1]")
        expect(self.image_size >= 8, "image_size", self.image_size, "an integer >= 8")
        expect(self.batch_size >= 1, "batch_size", self.batch_size, "an integer >= 1")
        expect(self.eval_batch_size >= 1, "eval_batch_size", self.eval_batch_size, "an integer >= 1")
        expect(self.num_workers >= 0, "num_workers", self.num_workers, "an integer >= 0")
        expect(len(self.crop_scale) == 2 and 0 < self.crop_scale[0] <= self.crop_scale[1] <= 1, "crop_scale",
               self.crop_scale, "[smallest, largest] area fractions with 0 < smallest <= largest <= 1")


@dataclass
class OptimConfig:
    """Optimiser, schedule and clipping. ``agc: auto`` = 0.01 for B-cos models (the B-cos recipe), off otherwise.

    ``b_ramp_epochs`` (B-cosified models only, :mod:`rightreasons.models.bcosified`): raise the exponent B of every
    B-cos unit linearly from 1 to the B the model was built with (``model.kwargs.b``, default 2) over this many epochs
    of optimiser steps, then keep it (the B-cosification release's ``linear_b`` ablation); 0 = that B from the start,
    the recipe. Training and every validation use the B of the current step; the exported model records it.
    """

    name: OptimizerName = "adam"
    lr: float = 1e-4
    weight_decay: float = 0.0
    momentum: float = 0.9
    schedule: ScheduleName = "constant"
    warmup_epochs: float = 0.0
    epochs: int = 10
    grad_accumulation: int = 1
    agc: float | Literal["auto"] | None = "auto"
    max_grad_norm: float | None = None
    b_ramp_epochs: float = 0.0

    def __post_init__(self) -> None:
        expect(self.lr > 0, "lr", self.lr, "a learning rate > 0")
        expect(self.weight_decay >= 0, "weight_decay", self.weight_decay, "a number >= 0")
        expect(0 <= self.momentum < 1, "momentum", self.momentum, "a number in [0, 1)")
        expect(self.warmup_epochs >= 0, "warmup_epochs", self.warmup_epochs, "a number of epochs >= 0")
        expect(self.epochs >= 1, "epochs", self.epochs, "an integer >= 1")
        expect(self.grad_accumulation >= 1, "grad_accumulation", self.grad_accumulation, "an integer >= 1")
        expect(self.agc in ("auto", None) or self.agc > 0, "agc", self.agc, "a clip factor > 0, 'auto' or null")
        expect(self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm", self.max_grad_norm,
               "a norm > 0 or null")
        expect(self.b_ramp_epochs >= 0, "b_ramp_epochs", self.b_ramp_epochs,
               "a number of epochs >= 0 (0 = B fixed from the start)")


@dataclass
class LossConfig:
    """Classification loss: ``auto`` = BCE for B-cos models and multi-label data, CE otherwise."""

    classification: ClassificationLossName = "auto"
    uniform_off_labels: bool = False


@dataclass
class GuidanceConfig:
    """The localisation term ``weight · L_loc`` (off unless ``enabled``; ``rightreasons guide`` turns it on).

    ``explain``: ``annotated`` (default) explains only the annotated images of a batch whenever that equals explaining
    the whole batch (always for the B-cos method with our norms; otherwise the whole batch is explained, see
    :mod:`rightreasons.guidance.objective`); ``batch`` always explains the whole batch. ``annotated_per_batch``: put
    exactly this many annotated images into every training batch (cycling through the annotated set; an epoch stays
    ``n // batch_size`` batches, see :class:`~rightreasons.engine.data.EpochSampler`), so that guidance from few boxes
    (1 %) acts at every step; 0 draws batches without regard to boxes.
    """

    enabled: bool = False
    method: MapMethodName = "bcos"
    layer: str = "input"
    loss: LossName = "energy"
    weight: float = 1e-3
    dilation: float = 0.0
    reduction: GuidanceReduction = "mean_annotated"
    intgrad_steps: int = 20
    explain: ExplainChoice = "annotated"
    annotated_per_batch: int = 0

    def __post_init__(self) -> None:
        expect(self.annotated_per_batch >= 0, "annotated_per_batch", self.annotated_per_batch,
               "an integer >= 0 (0 = batches drawn without regard to boxes)")
        expect(bool(self.layer.strip()), "layer", self.layer, "a layer name (input, mid1-mid3, final or a module path)")
        expect(self.weight >= 0, "weight", self.weight, "a loss weight >= 0")
        expect(self.dilation >= 0, "dilation", self.dilation, "a fraction >= 0 (0.1 = 10 %)")
        expect(self.intgrad_steps >= 1, "intgrad_steps", self.intgrad_steps, "an integer >= 1")


@dataclass
class EvalConfig:
    """Validation: which attribution scores EPG/IoU, how often, and how many explanation images to draw.

    ``select`` names the validation metric (maximised) that chooses the run's best model: ``score`` (the task's
    accuracy or F1), or any metric validation reports, e.g. ``worst_group_accuracy`` (the usual choice on
    Waterbirds-like data, whose validation split is group-balanced) or ``epg``. ``checkpoint.export: best`` exports that
    model instead of the last one.
    """

    every_epochs: int = 1
    method: MapMethodName | None = None
    layer: str | None = None
    iou_threshold: float = 0.5
    num_images: int = 4
    localization: bool = True
    select: str = "score"

    def __post_init__(self) -> None:
        expect(bool(self.select.strip()), "select", self.select, "a validation metric name (e.g. score)")
        expect(self.every_epochs >= 1, "every_epochs", self.every_epochs, "an integer >= 1")
        expect(self.layer is None or bool(self.layer.strip()), "layer", self.layer, "a layer name or null")
        expect(0 <= self.iou_threshold <= 1, "iou_threshold", self.iou_threshold, "a threshold in [0, 1]")
        expect(self.num_images >= 0, "num_images", self.num_images, "an integer >= 0")


@dataclass
class CheckpointConfig:
    """Checkpoint frequency and retention: the last ``keep_last``, the best one and the Pareto front's (all of them,
    or the ``keep_front`` with the highest scores). ``every_steps``: also checkpoint every that many steps within an
    epoch (the end of every epoch is always checkpointed). ``export``: which weights become ``model.safetensors`` (and
    are scored by the task's final evaluations): the ``last`` ones, or the ``best`` by ``eval.select`` on validation."""

    keep_last: int = 2
    keep_front: int | None = None
    every_steps: int | None = None
    export: Literal["last", "best"] = "last"

    def __post_init__(self) -> None:
        expect(self.keep_last >= 1, "keep_last", self.keep_last, "an integer >= 1")
        expect(self.keep_front is None or self.keep_front >= 0, "keep_front", self.keep_front, "an integer >= 0 or null")
        expect(self.every_steps is None or self.every_steps >= 1, "every_steps", self.every_steps,
               "an integer >= 1 or null")


@dataclass
class TrainConfig:
    """A complete training run (``rightreasons train`` / ``guide``)."""

    output_dir: str = "runs/train"
    seed: int = 0
    cpu: bool = False
    mixed_precision: Literal["no", "bf16"] = "no"
    max_steps: int | None = None
    log_every: int = 10
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    guidance: GuidanceConfig = field(default_factory=GuidanceConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def __post_init__(self) -> None:
        expect(bool(self.output_dir.strip()), "output_dir", self.output_dir, "a directory path")
        expect(self.seed >= 0, "seed", self.seed, "an integer >= 0")
        expect(self.max_steps is None or self.max_steps >= 1, "max_steps", self.max_steps, "an integer >= 1 or null")
        expect(self.log_every >= 1, "log_every", self.log_every, "an integer >= 1")
