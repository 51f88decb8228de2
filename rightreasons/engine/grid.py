"""The one runner of many trainings: a grid of named runs (:class:`GridRun`), each the config of a registered task with
its own output directory, trained one after another by :func:`run_grid`.

A run whose directory holds a ``summary.json`` is finished and kept — when it was trained with the same config; a
finished run of another config is an error naming the differing keys, never silently reused or overwritten. A run
with checkpoints but no summary resumes from its newest intact checkpoint; any other run starts. The sweep (each run
launched as a command, e.g. under ``accelerate launch``), the guidance study and the demo (each run in this process)
are configurations of it; progress goes to this module's logger.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ..errors import TrainingError
from ..fileio import read_json_object
from .config import TrainConfig
from .trainer import SUMMARY, finished_summary, run

__all__ = ["GridRun", "Outcome", "in_process", "read_summary", "run_grid"]

logger = logging.getLogger(__name__)

Status = Literal["done", "partial", "new"]


def read_summary(output_dir: str | Path) -> dict[str, Any]:
    """The ``summary.json`` a finished run wrote into ``output_dir`` (a :class:`~rightreasons.errors.TrainingError`
    when there is none or it is not a summary)."""
    return read_json_object(Path(output_dir) / SUMMARY, "training summary", TrainingError)


@dataclass(frozen=True)
class GridRun:
    """One training of a grid: a ``name`` (unique in the grid) and the ``config`` it trains (its ``output_dir`` is
    the run's directory); ``params`` label it in reports (the grid's axes)."""

    name: str
    config: TrainConfig
    params: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def output_dir(self) -> Path:
        return Path(self.config.output_dir)

    def status(self) -> Status:
        """``done`` (``summary.json`` written), ``partial`` (checkpoints, no summary) or ``new``."""
        if (self.output_dir / SUMMARY).is_file():
            return "done"
        checkpoints = self.output_dir / "checkpoints"
        if checkpoints.is_dir() and any(p.name.startswith("step-") for p in checkpoints.iterdir()):
            return "partial"
        return "new"

    def check_finished(self) -> None:
        """Refuse a finished run in the run's directory that was trained with another config (a
        :class:`~rightreasons.errors.TrainingError` naming the differing keys, :func:`finished_summary`)."""
        finished_summary(self.output_dir, self.config)


@dataclass(frozen=True)
class Outcome:
    """What happened to a run of a grid: ``skipped`` (finished before), ``trained`` or ``failed``, and the seconds it
    took."""

    status: Literal["skipped", "trained", "failed"]
    seconds: float


def in_process(grid_run: GridRun, resume: bool) -> bool:
    """Train ``grid_run`` in this process (:func:`~rightreasons.engine.run`); an error propagates."""
    run(grid_run.config, resume)
    return True


def run_grid(runs: Sequence[GridRun], execute: Callable[[GridRun, bool], bool] = in_process) -> dict[str, Outcome]:
    """Train ``runs`` in order: finished ones are kept (:meth:`GridRun.check_finished`), interrupted ones resume,
    the others start; ``execute(run, resume)`` trains one and says whether it succeeded (default: in this process).
    Returns every run's :class:`Outcome` by name."""
    outcomes: dict[str, Outcome] = {}
    for k, grid_run in enumerate(runs, 1):
        where = f"[{k}/{len(runs)}] {grid_run.name}"
        status = grid_run.status()
        if status == "done":
            grid_run.check_finished()
            logger.info("%s: done, skipped", where)
            outcomes[grid_run.name] = Outcome("skipped", 0.0)
            continue
        logger.info("%s: %s", where, "resuming" if status == "partial" else "training")
        start = time.time()
        succeeded = execute(grid_run, status == "partial")
        seconds = time.time() - start
        logger.info("%s: %s after %.0f s", where, "finished" if succeeded else "failed", seconds)
        outcomes[grid_run.name] = Outcome("trained" if succeeded else "failed", seconds)
    return outcomes
