"""A classifier's training in one call: :class:`TrainingRun` (a typed recipe, loadable from YAML) and
:func:`run_training`.

The recipe is the B-cos recipe on one dataset (Adam, cosine schedule, AGC, random resized crops and flips) with the
knobs the studies vary; :meth:`TrainingRun.config` builds the :class:`~rightreasons.classification.ClassificationConfig`
it stands for, section by section. Validation only tracks accuracy at the end by default (``eval``); score the test
split afterwards with :func:`rightreasons.metrics.evaluation.score_model`. A guided fine-tuning is
:class:`rightreasons.guidance.GuidedRun`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..config import construct
from ..engine.grid import GridRun, read_summary, run_grid
from ..engine.config import CheckpointConfig, DataConfig
from ..engine.optim import OptimizerName
from ..models.weights import RUN_MODEL_FILE
from .config import ClassificationConfig, EvalConfig, LossConfig, ModelConfig, OptimConfig

__all__ = ["RECIPE_CROP_SCALE", "TrainingRun", "run_training"]

RECIPE_CROP_SCALE = (0.5, 1.0)
"""The random resized crop of the recipe: at 64 px a crop below half the image often loses the object."""


@dataclass
class TrainingRun:
    """One training of a registered model.

    Attributes:
        output_dir: the run's directory (``model.safetensors``, ``summary.json``, ``metrics.jsonl``, checkpoints).
        seed: data order, augmentation, initialisation and which images keep boxes.
        model, model_kwargs: registry name and constructor arguments (``num_classes`` comes from the data).
        checkpoint: weights to start from (a model file, a finished run's directory or any layout
            :func:`rightreasons.load_weights` reads), e.g. the baseline a guided fine-tuning starts from.
        data, data_root, data_options: the dataset (``load_dataset`` name, root and options).
        data_split_options: a split's own options over ``data_options`` (``data.split_options``), e.g. the test
            split a recipe scores, so that ``evaluate`` scores the same images.
        image_size, batch_size, crop_scale, epochs, lr, optimizer: the schedule.
        uniform_off_labels: BCE with off-labels at ``1/C`` (:class:`~rightreasons.classification.LossConfig`).
        annotated_fraction: share of training images that keep their boxes.
        eval: the validation section; ``None`` = accuracy only, once at the end, no explanation images.
        export: which weights become the model file: the ``last`` or the ``best`` by ``eval.select``.
        cpu: train on the CPU even when a GPU is there.
    """

    output_dir: str
    seed: int = 0
    model: str = "bcos_resnet18"
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    data: str = "synthetic-birds"
    data_root: str | None = None
    data_options: dict[str, Any] = field(default_factory=dict)
    data_split_options: dict[str, dict[str, Any]] = field(default_factory=dict)
    image_size: int = 64
    batch_size: int = 64
    crop_scale: list[float] = field(default_factory=lambda: list(RECIPE_CROP_SCALE))
    epochs: int = 10
    lr: float = 1e-3
    optimizer: OptimizerName = "adam"
    uniform_off_labels: bool = False
    annotated_fraction: float = 1.0
    eval: EvalConfig | None = None
    export: Literal["last", "best"] = "last"
    cpu: bool = False

    def sections(self) -> dict[str, Any]:
        """The sections of a classifier's training config this recipe stands for (keyword arguments of
        :class:`~rightreasons.classification.ClassificationConfig` and the configs derived from it)."""
        return {
            "output_dir": str(self.output_dir), "seed": self.seed, "cpu": self.cpu,
            "model": construct(ModelConfig, self.model, checkpoint=self.checkpoint, kwargs=dict(self.model_kwargs),
                               key="model"),
            "data": construct(DataConfig, self.data, self.data_root, image_size=self.image_size,
                              batch_size=self.batch_size, annotated_fraction=self.annotated_fraction,
                              crop_scale=list(self.crop_scale), options=dict(self.data_options),
                              split_options={k: dict(v) for k, v in self.data_split_options.items()}, key="data"),
            "optim": construct(OptimConfig, self.optimizer, lr=self.lr, schedule="cosine", epochs=self.epochs,
                               key="optim"),
            "loss": LossConfig(uniform_off_labels=self.uniform_off_labels),
            "eval": self.eval or EvalConfig(every_epochs=self.epochs, num_images=0, localization=False),
            "checkpoint": CheckpointConfig(keep_last=1, export=self.export),
        }

    def config(self) -> ClassificationConfig:
        """The full training config this recipe stands for."""
        return construct(lambda: ClassificationConfig(**self.sections()))

    @property
    def model_file(self) -> Path:
        """Where the trained model is written."""
        return Path(self.output_dir) / RUN_MODEL_FILE


def run_training(recipe: TrainingRun) -> dict[str, Any]:
    """Train as ``recipe`` says (a :class:`TrainingRun` or a recipe derived from it, e.g. a guided fine-tuning) on the
    grid runner (:func:`~rightreasons.engine.grid.run_grid`): a finished run of the same config in ``output_dir`` is
    kept, an interrupted one resumes. Returns the run's summary with ``model_file`` added."""
    config = recipe.config()
    run_grid([GridRun(str(recipe.output_dir), config)])
    return {**read_summary(config.output_dir), "model_file": str(recipe.model_file)}
