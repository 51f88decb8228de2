"""The base config of every training run: data, optimiser, validation, checkpoints and the run itself.

A task extends :class:`TrainConfig` with its own sections (the model it trains, its loss, guidance, a teacher) and
may extend a section with its own keys (a subclass of the section, e.g. localisation metrics in ``eval``).
:func:`rightreasons.config.load_config` refuses unknown keys, wrong types and values out of range (each section's
``__post_init__`` says which), before any work starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..config import MAX_SEED, expect
from .optim import OptimizerName, ScheduleName
from .trackers import TrackerName

__all__ = ["CROP_SCALE", "CheckpointConfig", "DataConfig", "EvalConfig", "KEEP_FRONT", "MAX_LR", "OptimConfig",
           "RESERVED_DATA_OPTIONS", "TrainConfig"]

RESERVED_DATA_OPTIONS: dict[str, str] = {"transform": "data.image_size, data.augment, data.crop_scale and "
                                                       "data.rotation",
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
    """Dataset, splits, resolution and loading."""

    name: str = "synthetic-birds"
    """The dataset (`rightreasons.data.DATASETS`: `voc2007`, `coco2014`, `waterbirds100`, `imagenet`,
    `synthetic-birds`, `coco-json` and `folder` for data of one's own, ...), or a builder of one's own as
    `package.module:builder` (docs/own-data.md)."""
    root: str | None = None
    """The dataset's directory (`rightreasons prepare` checks it); null only for the synthetic datasets, which are
    generated."""
    train_split: str = "train"
    """The split trained on."""
    val_split: str = "val"
    """The split validated on every `eval.every_epochs` epochs (it chooses the best model; never the test split)."""
    image_size: int = 64
    """Side in pixels of the square images the model sees, in training (random resized crop) and evaluation."""
    batch_size: int = 32
    """The global training batch: split across the processes of a multi-process launch, so a config trains the same on
    any number of processes."""
    eval_batch_size: int = 64
    """The batch of validation and evaluation."""
    num_workers: int = 0
    """DataLoader worker processes per training process; 0 loads in the training process."""
    annotated_fraction: float = 1.0
    """Share of the training images that keep their boxes (drawn with `seed`): guidance from few boxes; the others
    train on labels only."""
    augment: bool = True
    """Augment training images (random resized crop with `crop_scale`, horizontal flip, `rotation` if set); false: the
    evaluation transform."""
    crop_scale: list[float] = field(default_factory=lambda: list(CROP_SCALE))
    """Smallest and largest area fraction of the random resized crop of training images."""
    rotation: float = 0.0
    """With `augment`: also rotate training images by an angle drawn uniformly from [-rotation, rotation] degrees,
    with their masks (at pixel centres), points and cached explanations by the same angle; a box becomes the tight
    box of its four rotated corners, larger than the object (guide on masks or points for exact regions). 0: no
    rotation."""
    options: dict[str, Any] = field(default_factory=dict)
    """Options of the dataset's loader (`rightreasons.data.load_dataset`, e.g. `use_difficult` for VOC, `box_file` for
    Waterbirds), except `transform`, `annotated_fraction` and `annotation_seed`, which training sets from other
    keys."""
    split_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    """A split's own loader options, merged over `options` for that split (e.g. `{test: {n: 200}}`: the test split a
    recipe scored, which `evaluate` and `view` then score too)."""

    def __post_init__(self) -> None:
        expect(bool(self.name.strip()), "name", self.name, "a dataset name")
        _expect_loader_options("options", self.options)
        expect(isinstance(self.split_options, dict) and all(
            isinstance(split, str) and isinstance(options, dict) for split, options in self.split_options.items()),
            "split_options", self.split_options, "a mapping of split names to mappings of options")
        for split, options in self.split_options.items():
            _expect_loader_options(f"split_options.{split}", options)
        expect(self.root is None or bool(self.root.strip()), "root", self.root, "a directory or null")
        expect(0.0 <= self.annotated_fraction <= 1.0, "annotated_fraction", self.annotated_fraction,
               "a fraction in [0, 1]")
        expect(self.image_size >= 8, "image_size", self.image_size, "an integer >= 8")
        expect(self.batch_size >= 1, "batch_size", self.batch_size, "an integer >= 1")
        expect(self.eval_batch_size >= 1, "eval_batch_size", self.eval_batch_size, "an integer >= 1")
        expect(self.num_workers >= 0, "num_workers", self.num_workers, "an integer >= 0")
        expect(len(self.crop_scale) == 2 and 0 < self.crop_scale[0] <= self.crop_scale[1] <= 1, "crop_scale",
               self.crop_scale, "[smallest, largest] area fractions with 0 < smallest <= largest <= 1")
        expect(0 <= self.rotation <= 180, "rotation", self.rotation, "an angle in [0, 180] degrees (0 = no rotation)")

    def options_for(self, split: str) -> dict[str, Any]:
        """The loader options of ``split``: ``options`` with ``split_options[split]`` over them."""
        return {**self.options, **self.split_options.get(split, {})}


def _expect_loader_options(key: str, options: dict[str, Any]) -> None:
    """Refuse the options training sets itself (:data:`RESERVED_DATA_OPTIONS`) under ``key``."""
    clash = [name for name in RESERVED_DATA_OPTIONS if name in options]
    expect(not clash, key, options, "dataset options other than " + ", ".join(
        f"{name} (set by {RESERVED_DATA_OPTIONS[name]})" for name in clash))


@dataclass
class OptimConfig:
    """Optimiser, schedule and clipping."""

    name: OptimizerName = "adam"
    """The optimiser."""
    lr: float = 1e-4
    """Learning rate (the peak of the schedule)."""
    weight_decay: float = 0.0
    """Weight decay (L2 penalty; decoupled for `adamw`)."""
    momentum: float = 0.9
    """Momentum of `sgd` (the other optimisers ignore it)."""
    schedule: ScheduleName = "constant"
    """Learning rate per step after the warm-up: `constant`, or `cosine` decay to 0 at the last step."""
    warmup_epochs: float = 0.0
    """Linear warm-up from 1 % of `lr` over this many epochs of optimiser steps (fractions allowed); 0: none."""
    epochs: int = 10
    """Length of the training in epochs (`max_steps` may cut it short)."""
    grad_accumulation: int = 1
    """Batches whose gradients are summed into one optimiser step (an epoch has `1/grad_accumulation` as many steps)."""
    agc: float | Literal["auto"] | None = "auto"
    """Adaptive gradient clipping with this clip factor; `auto`: the task's choice (0.01 for B-cos models, as the B-cos
    recipe; off otherwise); null: off."""
    max_grad_norm: float | None = None
    """Clip the global gradient norm to this value (after `agc`); null: no clipping."""

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
    """Validation: how often, and which metric chooses the best model."""

    every_epochs: int = 1
    """Validate every this many epochs (and always after the last step)."""
    select: str = "score"
    """The validation metric (maximised) that chooses the run's best model: `score` (the task's accuracy or F1) or any
    metric validation reports, e.g. `worst_group_accuracy` (the usual choice on Waterbirds-like data, whose
    validation split is group-balanced) or `epg`."""

    patience: int | None = None
    """Early stopping: end the run after this many validations in a row without a new best `select` (`optim.epochs`
    and `max_steps` are then a maximum; with `checkpoint.export: best` the best checkpoint is exported); null: train
    the whole schedule."""

    def __post_init__(self) -> None:
        expect(bool(self.select.strip()), "select", self.select, "a validation metric name (e.g. score)")
        expect(self.every_epochs >= 1, "every_epochs", self.every_epochs, "an integer >= 1")
        expect(self.patience is None or self.patience >= 1, "patience", self.patience, "an integer >= 1 or null")


@dataclass
class CheckpointConfig:
    """Checkpoint frequency and retention (the best checkpoint is always kept), and which weights are exported."""

    keep_last: int = 2
    """How many of the most recent checkpoints to keep (the best one is kept besides)."""
    keep_front: int | None = KEEP_FRONT
    """How many checkpoints of the validation Pareto front (score, EPG and IoU) to keep, those with the highest
    scores (a sweep report scores its representative from them); null: all of them; 0: none. The default bounds the
    disk a run reserves."""
    every_steps: int | None = None
    """Also checkpoint every this many optimiser steps within an epoch (the end of every epoch is always checkpointed);
    null: at epoch ends only."""
    export: Literal["last", "best"] = "last"
    """Which weights become `model.safetensors` (and are scored by the task's final evaluations): the `last` ones, or
    the `best` by `eval.select` on validation."""

    def __post_init__(self) -> None:
        expect(self.keep_last >= 1, "keep_last", self.keep_last, "an integer >= 1")
        expect(self.keep_front is None or self.keep_front >= 0, "keep_front", self.keep_front, "an integer >= 0 or null")
        expect(self.every_steps is None or self.every_steps >= 1, "every_steps", self.every_steps,
               "an integer >= 1 or null")


@dataclass
class TrainConfig:
    """What every training run has; a task's config adds its sections (:mod:`rightreasons.classification.config`)."""

    output_dir: str = "runs/train"
    """The run's directory: checkpoints, `metrics.jsonl`, `summary.json`, `model.safetensors`. A finished run of the
    same config there is kept; of another config, an error."""
    seed: int = 0
    """Seed of everything random in the run: initialisation, sample order, augmentation, the annotated subset."""
    cpu: bool = False
    """Train on the CPU even where a GPU is available."""
    mixed_precision: Literal["no", "bf16", "fp16"] = "no"
    """`no`: float32 throughout; `bf16`: forward passes under bfloat16 autocast (accelerate's mixed precision; the CPU
    and GPUs since Ampere), weights and optimiser state in float32; `fp16`: float16 autocast with dynamic loss scaling
    (accelerate's `GradScaler`), for GPUs without bfloat16: on CUDA only (a run elsewhere is refused, since accelerate
    would train it in float32). A guided or e²KD step seeds its explanation's gradient with the loss scale too, so its
    second-order gradients do not underflow; a step whose gradients overflow is skipped and the scale lowered."""
    compile: Literal["no", "inductor", "aot_eager"] = "no"
    """`torch.compile` the model with this backend (through accelerate): `inductor` generates fused kernels (the
    speed-up), `aot_eager` only traces (a quick check that a model compiles). A B-cos network compiles without a graph
    break. Explanations (guided and e²KD steps, `explain`) run the compiled model eagerly, since AOTAutograd's graphs
    have no second backward, so only plain forward and backward passes get faster. The first step pays the compile
    time (minutes for a ResNet-50 on the CPU)."""
    channels_last: bool = False
    """Train the model and its training batches in the `torch.channels_last` memory format (NHWC), which GPU
    convolutions in reduced precision prefer (tensor cores); the values are those of the default format. GPUs only:
    refused on the CPU, where oneDNN computes wrong weight gradients for some channels-last convolutions."""
    max_steps: int | None = None
    """Stop after this many optimiser steps (a smoke test or a time budget); the schedule still spans `optim.epochs`.
    null: train all epochs."""
    log_every: int = 10
    """Log the training losses and learning rate every this many optimiser steps, at the first step and at the last
    step of every epoch (to `metrics.jsonl` and the trackers of `log_with`; outside a terminal also as a console line
    with images/s and the ETA, which a terminal's progress bar shows at every step)."""
    log_with: list[TrackerName] | None = None
    """The experiment trackers (accelerate's) that get the logged numbers, and explanation images where they take
    images (`tensorboard`, `wandb`): e.g. `[tensorboard, wandb]`; each needs its package installed (`pip install
    wandb`). null: TensorBoard where it is installed; `[]`: none."""
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def __post_init__(self) -> None:
        expect(bool(self.output_dir.strip()), "output_dir", self.output_dir, "a directory path")
        expect(0 <= self.seed <= MAX_SEED, "seed", self.seed,
               "an integer >= 0 and <= 4294967295 (2**32 - 1: numpy's seeds)")
        expect(self.max_steps is None or self.max_steps >= 1, "max_steps", self.max_steps, "an integer >= 1 or null")
        expect(self.log_every >= 1, "log_every", self.log_every, "an integer >= 1")
        expect(self.log_with is None or len(set(self.log_with)) == len(self.log_with), "log_with", self.log_with,
               "a list of distinct tracker names or null")
