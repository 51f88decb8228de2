"""The device-clean tier: what runs on an accelerator — every step type of the engine, every attribution method and
layer, every localisation loss, the evaluators, the frozen-cache batches — runs there without a tensor left on the
CPU and without reading the device on the host.

On a machine without a GPU it runs on the ``meta`` device, which holds shapes and no data: a host read (``.item()``,
``bool(t)``, ``.tolist()``, ``nonzero()``, ``.cpu()``) of a meta tensor raises, and so does an operation that meets a
CPU tensor (a tensor made without ``device=``), so both faults show on any machine. ``make gpu-check`` runs the same
tests on ``cuda`` as well (``RIGHTREASONS_TEST_DEVICES=meta,cuda``), under ``torch.cuda.set_sync_debug_mode("error")``
where no read is allowed. ``test_fake_cuda.py`` runs forwards on a fake ``cuda`` device (``FakeTensorMode``), which
follows CUDA's dispatch (autocast, device checks) without one; a backward needs a real CUDA device there.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
import torch
from accelerate.utils import send_to_device
from torch import nn

from rightreasons.engine import Trainer
from rightreasons.engine.step_guard import StepGuard

DEVICES = [d for d in os.environ.get("RIGHTREASONS_TEST_DEVICES", "meta").split(",") if d]


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """Each device of the tier: ``meta`` here, ``cuda`` too under ``make gpu-check``."""
    if request.param == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    return torch.device(request.param)


@contextlib.contextmanager
def no_host_reads(device: torch.device) -> Iterator[None]:
    """Inside, a host read of a device tensor is an error: by itself on ``meta``, by torch's sync debug mode on
    CUDA."""
    if device.type != "cuda":
        yield
        return
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


def move_run(trainer: Trainer, device: torch.device) -> Trainer:
    """The run's model, a task's own modules (a teacher) and tensors (group weights), its skip flags and its batches
    on ``device`` instead of the accelerator's (nothing to do where they are the same)."""
    if trainer.accelerator.device == device:
        return trainer
    for module in [trainer.model, *(m for m in vars(trainer.task).values() if isinstance(m, nn.Module))]:
        module.to(device)
    for name, value in vars(trainer.task).items():
        if isinstance(value, torch.Tensor):
            setattr(trainer.task, name, value.to(device))
    trainer.guard = StepGuard(device, trainer._min_across_processes)
    trainer._to_device = lambda batch: {**send_to_device(batch, device), "host": batch}
    return trainer

