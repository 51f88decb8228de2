"""The experiment trackers a run logs to (``log_with``): accelerate's, chosen by name and checked before any work.

Every tracker gets the scalars of :meth:`~rightreasons.engine.Trainer.log` (training losses and learning rate,
validation and final metrics, by ``split/name``); those that take images (TensorBoard, Weights & Biases) also get the
images of :meth:`~rightreasons.engine.Trainer.log_images` (a task's explanations of validation images). TensorBoard
writes into ``<output_dir>/tensorboard``; the others log to the project ``rightreasons``, the run named after its
output directory, and are configured by their own environment (``WANDB_MODE``, ``MLFLOW_TRACKING_URI``, ...).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import numpy as np
from accelerate import Accelerator
from accelerate.tracking import TensorBoardTracker, get_available_trackers
from accelerate.utils import LoggerType

from ..errors import ConfigError

__all__ = ["PROJECT", "TRACKERS", "TrackerName", "accelerate_trackers", "log_images", "run_trackers", "start_trackers"]

TRACKERS: tuple[str, ...] = tuple(t.value for t in LoggerType if t is not LoggerType.ALL)
"""accelerate's trackers by name (not ``all``: a run names the trackers it logs to)."""
TrackerName = Literal[TRACKERS]  # type: ignore[valid-type]
PROJECT = "rightreasons"
"""The project (W&B) or experiment (MLflow) of the trackers that have one."""
TENSORBOARD_FOLDER = "tensorboard"


def run_trackers(log_with: list[str] | None) -> list[str]:
    """The trackers of a run: ``log_with``, or TensorBoard where it is installed for ``None``. A tracker whose
    library is not installed is a :class:`~rightreasons.errors.ConfigError` naming the package to install."""
    available = {str(t) for t in get_available_trackers()}
    if log_with is None:
        return ["tensorboard"] if "tensorboard" in available else []
    for name in log_with:
        if name not in available:
            raise ConfigError(f"log_with: the tracker {name} needs the package {name}, which is not installed; "
                              f"pip install {name}, or remove {name} from log_with")
    return list(log_with)


def accelerate_trackers(names: list[str], output_dir: Path) -> list[Any]:
    """What ``Accelerator(log_with=...)`` takes for ``names``: TensorBoard as a tracker that writes into
    ``<output_dir>/tensorboard`` (accelerate's would name the folder after the project), the others by name."""
    return [TensorBoardTracker(TENSORBOARD_FOLDER, str(output_dir)) if name == "tensorboard" else name
            for name in names]


def start_trackers(accelerator: Accelerator, output_dir: Path) -> None:
    """Start the accelerator's trackers: the project :data:`PROJECT`, the run named after ``output_dir``."""
    run = str(output_dir)
    accelerator.init_trackers(PROJECT, init_kwargs={"wandb": {"name": run}, "mlflow": {"run_name": run}})


def log_images(accelerator: Accelerator, images: dict[str, np.ndarray], step: int) -> None:
    """Log ``images`` (name → ``[H, W, 3]`` uint8 array) at ``step`` to the trackers that take images: TensorBoard and
    Weights & Biases."""
    for tracker in accelerator.trackers:
        if tracker.name == "tensorboard":
            tracker.log_images({k: v[None] for k, v in images.items()}, step=step, dataformats="NHWC")
        elif tracker.name == "wandb":
            tracker.log_images({k: [v] for k, v in images.items()}, step=step)
