"""Side-by-side step timings of training tasks (``make bench``): :func:`compare_step_times`.

Ratios between configurations are only meaningful when they are measured under the same conditions, so the trainers
take turns step by step and drifts of a shared machine hit all alike.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping

import torch

from . import Task, Trainer

__all__ = ["compare_step_times"]


def compare_step_times(tasks: Mapping[str, Task], steps: int = 10, warmup: int = 2) -> dict[str, dict[str, float]]:
    """Mean wall-clock seconds of a training step (forward, teacher or cache, backward, optimiser) and of loading its
    batch, for each of ``tasks`` (e.g. ``{"live": ..., "frozen": ...}``), over ``steps`` steps after ``warmup``
    untimed ones.

    Returns per name ``{"step_seconds", "loader_seconds", "loader_fraction"}`` (loading / (loading + step))."""
    trainers = {name: Trainer(task) for name, task in tasks.items()}
    batches = {name: _endless(trainer.loader) for name, trainer in trainers.items()}
    loading = dict.fromkeys(trainers, 0.0)
    stepping = dict.fromkeys(trainers, 0.0)
    for i in range(warmup + steps):
        for name, trainer in trainers.items():
            trainer.model.train()
            _synchronize(trainer.accelerator.device)
            start = time.perf_counter()
            batch = next(batches[name])
            loaded = time.perf_counter()
            trainer.train_step(batch)
            trainer.position.step += 1  # as the training loop counts: step-dependent terms follow their schedule
            _synchronize(trainer.accelerator.device)
            if i >= warmup:
                loading[name] += loaded - start
                stepping[name] += time.perf_counter() - loaded
    return {name: {"step_seconds": stepping[name] / steps, "loader_seconds": loading[name] / steps,
                   "loader_fraction": loading[name] / (loading[name] + stepping[name])} for name in trainers}


def _endless(loader: Iterable[object]) -> Iterator[object]:
    while True:
        yield from loader


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
