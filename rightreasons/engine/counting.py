"""What a training step of the engine dispatches: its host syncs and aten operations (``make bench``: sections
``host-syncs`` and ``launches``; the tests assert them).

:func:`count_step` runs :meth:`Trainer.train_step` under :class:`~rightreasons.measure.StepCounter` — and, for a
step that logs, the read of its losses (:meth:`Trainer.read_steps`), the one host sync such a step is allowed. The
device tensors are those a GPU would hold: the model's (and a teacher's) parameters and buffers, the optimiser's
state, the run's skip flags, the loss scale and the batch after it moved. On a machine without a GPU the moved batch
would be the loader's own tensors; here it is a copy, so that a read of the loader's batch (a host decision, e.g.
which images a guidance step explains) is told from a read of the device's.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from ..measure import Counts, StepCounter
from .trainer import Trainer

__all__ = ["count_step", "device_tensors"]


def _copy(value: Any) -> Any:
    if isinstance(value, Tensor):
        return value.clone()
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def device_tensors(trainer: Trainer) -> list[Tensor]:
    """The tensors of a run that live on its device between steps (module docstring)."""
    modules = [trainer.model] + [m for m in vars(trainer.task).values() if isinstance(m, nn.Module)]
    tensors = [t for m in modules for t in (*m.parameters(), *m.buffers())]
    tensors += [t for state in trainer.optimizer.optimizer.state.values() for t in state.values()
                if isinstance(t, Tensor)]
    tensors += [t for t in vars(trainer.guard).values() if isinstance(t, Tensor)]
    scaler = trainer.accelerator.scaler
    if scaler is not None and scaler._get_scale_async() is not None:
        tensors.append(scaler._get_scale_async())
    return tensors


def count_step(trainer: Trainer, batch: dict[str, Any], log: bool = False) -> Counts:
    """The aten operations and host syncs of one ``trainer.train_step(batch)`` (``batch``: a loader batch) and,
    with ``log``, of reading its losses as a logged step does. Take a step before counting: an optimiser creates
    its state in its first step."""
    counter = StepCounter(device_tensors(trainer))
    to_device = trainer._to_device

    def copied(host: dict[str, Any]) -> dict[str, Any]:
        moved = {k: v if k == "host" else _copy(v) for k, v in to_device(host).items()}
        counter.on_device(*(v for k, v in moved.items() if k != "host"))
        return moved

    trainer._to_device = copied
    try:
        with counter:
            trainer.train_step(batch)
            if log:
                trainer.read_steps()
    finally:
        del trainer._to_device
    return counter.counts
