"""Starting a run safely: the device a launch runs on, and one writer per output directory.

* :func:`use_cpu` — accelerate starts every process of a multi-process launch (``torchrun``, ``accelerate
  launch``) as a run of its own when the machine has no CUDA device and the config does not ask for the CPU: two full
  runs writing one output directory. Here such a launch runs on the CPU, its processes forming one gloo process group.
* the run's output directory is locked by the main process before anything is written and held until the run ends
  (:class:`rightreasons.fileio.DirectoryLock`, the one lock of every directory a command writes).
* :func:`any_process` — a flag that one process raised (a pre-emption signal) known to all, decided on the host over
  a gloo group (:func:`host_group`), so that asking every step never waits for the device.
* :func:`start_checks` — checks (writable output directory, the lock) that run on the main process only; every process
  of the launch (a training or the ``cache`` command) learns whether they passed and raises the same refusal, instead
  of waiting for a process that left.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
import torch.distributed as dist
from accelerate import Accelerator, PartialState
from accelerate.utils import reduce

from ..errors import RightReasonsError, TrainingError

__all__ = ["any_process", "host_group", "launched_processes", "start_checks", "use_cpu"]


def launched_processes() -> int:
    """How many processes the launcher started (``WORLD_SIZE`` of ``torchrun`` / ``accelerate launch``; 1 without)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def use_cpu(requested: bool) -> bool:
    """Whether a run uses the CPU: when the config asks for it (``cpu: true``), and in every process of a
    multi-process launch on a machine without a device that accelerate runs multi-process (CUDA and the like; not
    Apple's MPS)."""
    device = torch.accelerator.current_accelerator(check_available=True)
    return requested or (launched_processes() > 1 and (device is None or device.type == "mps"))


def start_checks(state: Accelerator | PartialState, check: Callable[[], None]) -> None:
    """Run ``check`` on the main process; when it raises a :class:`~rightreasons.errors.RightReasonsError`, raise it
    there and a :class:`TrainingError` pointing to it on every other process (all processes take part in one
    reduction). ``state``: the run's accelerator, or the launch's ``PartialState``."""
    refusal = None
    if state.is_main_process:
        try:
            check()
        except RightReasonsError as e:
            refusal = e
    if state.num_processes > 1:
        flag = torch.tensor(float(refusal is not None), device=state.device)
        refused = bool(reduce(flag, "max").item())
    else:
        refused = refusal is not None
    if refusal is not None:
        raise refusal
    if refused:
        raise TrainingError("the main process refused to start the run (its error says why)")


def host_group(state: Accelerator | PartialState) -> dist.ProcessGroup | None:
    """The process group for host-side flags of a multi-process launch: the default group where it is gloo (the CPU),
    a gloo group of all processes otherwise (NCCL reduces device tensors only); ``None`` on one process. Every
    process must call it, at the same point."""
    if state.num_processes == 1:
        return None
    return None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")


def any_process(flag: bool, group: dist.ProcessGroup | None) -> bool:
    """Whether ``flag`` is set on any process of the launch (every process calls it; one process: ``flag``). A
    reduction of a host tensor over ``group`` (:func:`host_group`): it waits for the other processes, never for a
    device."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return flag
    value = torch.tensor([float(flag)])
    dist.all_reduce(value, dist.ReduceOp.MAX, group=group)
    return bool(value[0])
