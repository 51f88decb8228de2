"""A baseline training or a box-guided fine-tuning in one call: :class:`TrainingRun` (a typed recipe, loadable
from YAML) and :func:`run_training`.

The recipe is the B-cos recipe on one dataset (Adam, cosine schedule, AGC, random resized crops and flips) with the
knobs the studies vary; it expands to a full :class:`~rightreasons.engine.TrainConfig` (:meth:`TrainingRun.config`),
and ``overrides`` reach any key of it. A guided fine-tuning starts from ``checkpoint`` (e.g. the baseline's
``model.safetensors``), as the thesis fine-tunes pretrained models. Validation during training only tracks accuracy by
default (``eval.localization`` off); score the test split afterwards with :func:`rightreasons.evaluation.evaluate`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..config import from_dict, merge_nested
from ..engine import TrainConfig
from ..engine.schema import GuidanceConfig
from ..tasks import run

__all__ = ["TrainingRun", "run_training"]


@dataclass
class TrainingRun:
    """One training of a registered model, optionally box-guided.

    Attributes:
        output_dir: the run's directory (``model.safetensors``, ``summary.json``, ``metrics.jsonl``, checkpoints).
        seed: data order, augmentation, initialisation and which images keep boxes.
        model, model_kwargs: registry name and constructor arguments (``num_classes`` comes from the data).
        checkpoint: weights to start from (a model file or any layout :func:`rightreasons.load_weights` reads).
        data, data_root, data_options: the dataset (``load_dataset`` name, root and options).
        image_size, batch_size, crop_scale, epochs, lr: the schedule.
        guidance: the localisation term (``enabled`` is implied), or ``None`` for plain training.
        annotated_fraction: share of training images that keep their boxes.
        overrides: further config keys as a nested mapping merged over the built config.
    """

    output_dir: str
    seed: int = 0
    model: str = "bcos_resnet18"
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    checkpoint: str | None = None
    data: str = "synthetic-birds"
    data_root: str | None = None
    data_options: dict[str, Any] = field(default_factory=dict)
    image_size: int = 64
    batch_size: int = 64
    crop_scale: list[float] = field(default_factory=lambda: [0.5, 1.0])
    epochs: int = 10
    lr: float = 1e-3
    guidance: GuidanceConfig | None = None
    annotated_fraction: float = 1.0
    overrides: dict[str, Any] = field(default_factory=dict)

    def config(self) -> TrainConfig:
        """The full training config this recipe stands for."""
        raw: dict[str, Any] = {
            "output_dir": str(self.output_dir), "seed": self.seed, "log_every": 10,
            "model": {"name": self.model, "kwargs": dict(self.model_kwargs), "checkpoint": self.checkpoint},
            "data": {"name": self.data, "root": self.data_root, "image_size": self.image_size,
                     "batch_size": self.batch_size, "augment": True, "crop_scale": list(self.crop_scale),
                     "annotated_fraction": self.annotated_fraction, "options": dict(self.data_options)},
            "optim": {"name": "adam", "lr": self.lr, "epochs": self.epochs, "schedule": "cosine"},
            "eval": {"every_epochs": self.epochs, "num_images": 0, "localization": False},
            "checkpoint": {"keep_last": 1},
        }
        if self.guidance is not None:
            raw["guidance"] = {**asdict(self.guidance), "enabled": True}
        return from_dict(TrainConfig, merge_nested(raw, self.overrides))


def run_training(run_: TrainingRun, resume: bool = False) -> dict[str, Any]:
    """Train as ``run_`` says; returns the run's summary with ``model_file`` added. ``resume=True`` continues an
    interrupted run in ``output_dir`` from its newest complete checkpoint (and starts afresh when it has none)."""
    summary = run(run_.config(), resume)
    return {**summary, "model_file": str(Path(run_.output_dir) / "model.safetensors")}
