"""The schema of training, guidance and evaluation configs (YAML files under ``configs/``).

Every key is documented here; :func:`rightreasons.config.load_config` refuses unknown keys and wrong types.
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
from ..explain.methods import MapMethodName
from ..guidance.losses import GuidanceReduction, LossName
from .optim import OptimizerName, ScheduleName

__all__ = ["CheckpointConfig", "DataConfig", "EvalConfig", "GuidanceConfig", "LossConfig", "ModelConfig",
           "OptimConfig", "TrainConfig"]


@dataclass
class ModelConfig:
    """Which model to train: a registry name plus weights to start from."""

    name: str = "bcos_resnet18"
    pretrained: bool = False
    checkpoint: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class DataConfig:
    """Dataset, splits, resolution and loading. ``options`` go to ``rightreasons.data.load_dataset``."""

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
        if not 0.0 <= self.annotated_fraction <= 1.0:
            raise ValueError(f"data.annotated_fraction must be in [0, 1], got {self.annotated_fraction}")
        if self.batch_size < 1 or self.eval_batch_size < 1 or self.image_size < 8:
            raise ValueError("data.batch_size and data.eval_batch_size must be >= 1 and data.image_size >= 8")


@dataclass
class OptimConfig:
    """Optimiser, schedule and clipping. ``agc: auto`` = 0.01 for B-cos models (the B-cos recipe), off otherwise."""

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

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.grad_accumulation < 1:
            raise ValueError("optim.epochs and optim.grad_accumulation must be >= 1")


@dataclass
class LossConfig:
    """Classification loss: ``auto`` = BCE for B-cos models and multi-label data, CE otherwise."""

    classification: ClassificationLossName = "auto"
    uniform_off_labels: bool = False


@dataclass
class GuidanceConfig:
    """The localisation term ``weight · L_loc`` (off unless ``enabled``; ``rightreasons guide`` turns it on)."""

    enabled: bool = False
    method: MapMethodName = "bcos"
    layer: str = "input"
    loss: LossName = "energy"
    weight: float = 1e-3
    dilation: float = 0.0
    reduction: GuidanceReduction = "mean_annotated"
    intgrad_steps: int = 20


@dataclass
class EvalConfig:
    """Validation: which attribution scores EPG/IoU, how often, and how many explanation images to draw."""

    every_epochs: int = 1
    method: MapMethodName | None = None
    layer: str | None = None
    iou_threshold: float = 0.5
    num_images: int = 4
    localization: bool = True


@dataclass
class CheckpointConfig:
    """Checkpoint frequency and retention (the last ``keep_last`` plus the Pareto front and the best-F1 one)."""

    keep_last: int = 2
    every_steps: int | None = None


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
