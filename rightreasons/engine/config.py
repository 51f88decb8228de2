"""The base config of every training run: data, optimiser, validation, checkpoints and the run itself.

A task extends :class:`TrainConfig` with its own sections (the model it trains, its loss, guidance, a teacher) and
may extend a section with its own keys (a subclass of the section, e.g. localisation metrics in ``eval``).
:func:`rightreasons.config.load_config` refuses unknown keys, wrong types and values out of range (each section's
``__post_init__`` says which), before any work starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..config import expect
from .optim import OptimizerName, ScheduleName

__all__ = ["CROP_SCALE", "CheckpointConfig", "DataConfig", "EvalConfig", "KEEP_FRONT", "MAX_LR", "OptimConfig",
           "RESERVED_DATA_OPTIONS", "TrainConfig"]

RESERVED_DATA_OPTIONS: dict[str, str] = {"transform": "data.image_size, data.augment and data.crop_scale",
                                         "annotated_fraction": "data.annotated_fraction", "annotation_seed": "seed"}
"""``load_dataset`` options that training sets itself from other keys, so ``data.options`` may not hold them."""
MAX_LR = 100.0
"""The largest learning rate a config may ask for: far above any schedule in use (SGD's linear scaling rule gives
about 25 at batch 64k), while much larger rates overflow float32 weights within a few steps."""
KEEP_FRONT = 5
"""How many checkpoints of the validation Pareto front a run keeps unless ``checkpoint.keep_front`` says otherwise
(those with the highest scores): a bounded default, so that the disk a run needs does not grow with its epochs."""
CROP_SCALE = (0.25, 1.0)
"""The area fractions of the random resized crop of training images, unless a config or recipe says otherwise."""


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
    crop_scale: list[float] = field(default_factory=lambda: list(CROP_SCALE))
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
    """Optimiser, schedule and clipping. ``agc``: adaptive gradient clipping with this clip factor; ``auto`` = the
    task's choice (:meth:`rightreasons.engine.Task.default_agc`: 0.01 for B-cos models, the B-cos recipe; off
    otherwise)."""

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
        expect(0 < self.lr <= MAX_LR, "lr", self.lr, f"a learning rate in (0, {MAX_LR:g}]")
        expect(self.weight_decay >= 0, "weight_decay", self.weight_decay, "a number >= 0")
        expect(0 <= self.momentum < 1, "momentum", self.momentum, "a number in [0, 1)")
        expect(self.warmup_epochs >= 0, "warmup_epochs", self.warmup_epochs, "a number of epochs >= 0")
        expect(self.epochs >= 1, "epochs", self.epochs, "an integer >= 1")
        expect(self.grad_accumulation >= 1, "grad_accumulation", self.grad_accumulation, "an integer >= 1")
        expect(self.agc in ("auto", None) or self.agc > 0, "agc", self.agc, "a clip factor > 0, 'auto' or null")
        expect(self.max_grad_norm is None or self.max_grad_norm > 0, "max_grad_norm", self.max_grad_norm,
               "a norm > 0 or null")


@dataclass
class EvalConfig:
    """Validation: how often, and which metric chooses the best model.

    ``select`` names the validation metric (maximised) that chooses the run's best model: ``score`` (the task's
    accuracy or F1), or any metric validation reports, e.g. ``worst_group_accuracy`` (the usual choice on
    Waterbirds-like data, whose validation split is group-balanced) or ``epg``. ``checkpoint.export: best`` exports that
    model instead of the last one.
    """

    every_epochs: int = 1
    select: str = "score"

    def __post_init__(self) -> None:
        expect(bool(self.select.strip()), "select", self.select, "a validation metric name (e.g. score)")
        expect(self.every_epochs >= 1, "every_epochs", self.every_epochs, "an integer >= 1")


@dataclass
class CheckpointConfig:
    """Checkpoint frequency and retention: the last ``keep_last``, the best one and the Pareto front's (the
    ``keep_front`` with the highest scores, :data:`KEEP_FRONT` unless set; ``null`` keeps all of them). ``every_steps``:
    also checkpoint every that many steps within an epoch (the end of every epoch is always checkpointed).
    ``export``: which weights become ``model.safetensors`` (and are scored by the task's final evaluations): the
    ``last`` ones, or the ``best`` by ``eval.select`` on validation."""

    keep_last: int = 2
    keep_front: int | None = KEEP_FRONT
    every_steps: int | None = None
    export: Literal["last", "best"] = "last"

    def __post_init__(self) -> None:
        expect(self.keep_last >= 1, "keep_last", self.keep_last, "an integer >= 1")
        expect(self.keep_front is None or self.keep_front >= 0, "keep_front", self.keep_front, "an integer >= 0 or null")
        expect(self.every_steps is None or self.every_steps >= 1, "every_steps", self.every_steps,
               "an integer >= 1 or null")


@dataclass
class TrainConfig:
    """What every training run has; a task's config adds its sections (:mod:`rightreasons.classification.config`)."""

    output_dir: str = "runs/train"
    seed: int = 0
    cpu: bool = False
    mixed_precision: Literal["no", "bf16"] = "no"
    max_steps: int | None = None
    log_every: int = 10
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def __post_init__(self) -> None:
        expect(bool(self.output_dir.strip()), "output_dir", self.output_dir, "a directory path")
        expect(self.seed >= 0, "seed", self.seed, "an integer >= 0")
        expect(self.max_steps is None or self.max_steps >= 1, "max_steps", self.max_steps, "an integer >= 1 or null")
        expect(self.log_every >= 1, "log_every", self.log_every, "an integer >= 1")
