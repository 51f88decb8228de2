"""What the engine trains: the tasks behind ``rightreasons train``/``guide``/``evaluate`` and ``distill``/``cache``.

* :class:`ClassificationTask` — fine-tuning with the classification loss and, optionally, box guidance;
* :class:`DistillationTask` — KD, e²KD (live or from a cache) and attention transfer.

:func:`run` picks the task a config describes (a :class:`DistillConfig` distils, a plain
:class:`~rightreasons.engine.TrainConfig` trains or guides) and runs it on the engine.
"""

from __future__ import annotations

from typing import Any

from ..engine import TrainConfig, train
from .classification import ClassificationTask, evaluate_checkpoint
from .distill_schema import DistillConfig, DistillSection, EvalDataConfig, TeacherConfig
from .distillation import DistillationTask, cache_setting, distill, load_teacher, write_teacher_cache

__all__ = ["ClassificationTask", "DistillConfig", "DistillSection", "DistillationTask", "EvalDataConfig",
           "TeacherConfig", "cache_setting", "distill", "evaluate_checkpoint", "load_teacher", "run",
           "write_teacher_cache"]


def run(config: TrainConfig, resume: bool | str = False) -> dict[str, Any]:
    """Train the task ``config`` describes; ``resume=True`` continues from the newest complete checkpoint (or a
    given path). Returns the run's summary."""
    task = DistillationTask(config) if isinstance(config, DistillConfig) else ClassificationTask(config)
    return train(task, resume)
