"""Starting a run safely: the device a launch runs on, and one writer per output directory.

* :func:`use_cpu` — accelerate starts every process of a multi-process launch (``torchrun``, ``accelerate
  launch``) as a run of its own when the machine has no CUDA device and the config does not ask for the CPU: two full
  runs writing one output directory. Here such a launch runs on the CPU, its processes forming one gloo process group.
* the run's output directory is locked by the main process before anything is written and held until the run ends
  (:class:`rightreasons.fileio.DirectoryLock`, the one lock of every directory a command writes).
* :func:`any_process` — a flag that one process raised (a pre-emption signal) known to all, decided on the host over
  a gloo group (:func:`host_group`), so that asking every step never waits for the device.
* :func:`start_checks` — checks (writable output directory, the lock) that run on the main process only, or on every
  process (a checkpoint's random states); every process of the launch (a training or the ``cache`` command) learns
  whether they passed and raises the same refusal, instead of waiting for a process that left.
* :func:`same_everywhere` — the processes of a launch agree on what they train (the config, each split's identity)
  before they train, or every one of them refuses, naming what differs (a process given another data seed would
  otherwise train on a mix of two datasets and succeed).
* :func:`process_timeout` — no wait for another process is unbounded: the process group (and so every collective and
  barrier) gives up after ``RIGHTREASONS_PROCESS_TIMEOUT`` seconds (:data:`DEFAULT_TIMEOUT_S` unless set, instead of
  torch's 30 minutes), and :func:`unanswered` turns the failed collective into one error naming the processes that did
  not answer (stopped, killed, or stuck elsewhere).
"""

from __future__ import annotations

import datetime
import math
import os
import re
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from accelerate import Accelerator, PartialState
from accelerate.utils import InitProcessGroupKwargs, reduce

from ..config import diff_configs
from ..errors import RightReasonsError, TrainingError, UsageError

__all__ = ["DEFAULT_TIMEOUT_S", "TIMEOUT_VARIABLE", "any_process", "end_launch", "host_gather", "host_group",
           "launched_processes", "process_group_kwargs", "process_timeout", "same_everywhere", "start_checks",
           "unanswered", "use_cpu"]

TIMEOUT_VARIABLE = "RIGHTREASONS_PROCESS_TIMEOUT"
DEFAULT_TIMEOUT_S = 300
"""Seconds a process waits for the others in any collective or barrier (``RIGHTREASONS_PROCESS_TIMEOUT`` overrides
it): far above what a step, a validation or a checkpoint keeps the processes apart, far below torch's 30 minutes."""
#: seconds (at most; never more than the process timeout) the processes that are left take to find out which ones do
#: not answer, once a collective failed
_ROLL_CALL_S = 30


def launched_processes() -> int:
    """How many processes the launcher started (``WORLD_SIZE`` of ``torchrun`` / ``accelerate launch``; 1 without)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def process_timeout() -> datetime.timedelta:
    """How long a process waits for the others: ``RIGHTREASONS_PROCESS_TIMEOUT`` seconds (a positive number), else
    :data:`DEFAULT_TIMEOUT_S`; a :class:`~rightreasons.errors.UsageError` naming the variable for any other value."""
    text = os.environ.get(TIMEOUT_VARIABLE)
    if text is None:
        return datetime.timedelta(seconds=DEFAULT_TIMEOUT_S)
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and 0 < seconds <= 7 * 24 * 3600):
        raise UsageError(f"{TIMEOUT_VARIABLE}={text!r}: expected the seconds a process waits for the others, a "
                         f"number in (0, 604800] (default {DEFAULT_TIMEOUT_S})")
    return datetime.timedelta(seconds=seconds)


def process_group_kwargs() -> InitProcessGroupKwargs:
    """The process group's settings for accelerate (``Accelerator(kwargs_handlers=...)``, ``PartialState(**
    .to_kwargs())``): its timeout (:func:`process_timeout`). Only the first of them in a process forms the group."""
    return InitProcessGroupKwargs(timeout=process_timeout())


def use_cpu(requested: bool) -> bool:
    """Whether a run uses the CPU: when the config asks for it (``cpu: true``), and in every process of a
    multi-process launch on a machine without a device that accelerate runs multi-process (CUDA and the like; not
    Apple's MPS)."""
    device = torch.accelerator.current_accelerator(check_available=True)
    return requested or (launched_processes() > 1 and (device is None or device.type == "mps"))


def start_checks(state: Accelerator | PartialState, check: Callable[[], None], everywhere: bool = False) -> None:
    """Run ``check`` on the main process (``everywhere``: on every process); where it raises a
    :class:`~rightreasons.errors.RightReasonsError`, raise it there, and on every other process a
    :class:`TrainingError` naming the processes that refused (all processes take part in one reduction, so none waits
    for a process that left). ``state``: the run's accelerator, or the launch's ``PartialState``."""
    refusal = None
    if everywhere or state.is_main_process:
        try:
            check()
        except RightReasonsError as e:
            refusal = e
    if state.num_processes > 1:
        flags = torch.zeros(state.num_processes, device=state.device)
        flags[state.process_index] = float(refusal is not None)
        refused = [rank for rank, flag in enumerate(reduce(flags, "sum").tolist()) if flag]
    else:
        refused = [0] * (refusal is not None)
    if refusal is not None:
        raise refusal
    if refused:
        who = "the main process" if refused == [0] else \
            f"process{'es' * (len(refused) > 1)} {', '.join(map(str, refused))} of {state.num_processes}"
        raise TrainingError(f"{who} refused to start the run (its error says why)")


def host_group(state: Accelerator | PartialState) -> dist.ProcessGroup | None:
    """The process group for host-side flags of a multi-process launch: a gloo group of all processes (NCCL reduces
    device tensors only; a group of its own also answers :func:`unanswered` when the default group has failed);
    ``None`` on one process. Every process must call it, at the same point."""
    if state.num_processes == 1:
        return None
    return dist.new_group(backend="gloo", timeout=process_timeout())


def end_launch(accelerator: Accelerator, group: dist.ProcessGroup | None) -> None:
    """End a launch on every process together: wait at a barrier of ``group`` (:func:`host_group`) — no process
    reports success before the main process has written the run's files, and none exits while another still talks
    to it — then finish the trackers and destroy every process group while the interpreter is fully alive (a gloo
    group still alive at interpreter exit can abort it: its worker threads release tensors that need the GIL). A
    failure of another process before the barrier surfaces here as the collective's error (:func:`unanswered`).
    Every process calls it, at the same point."""
    if group is not None:
        dist.barrier(group=group)
    accelerator.end_training()


def host_gather(group: dist.ProcessGroup) -> Callable[[Any], list[Any]]:
    """``gather(value)``: every process's ``value`` (a small picklable host object), in rank order, over ``group``
    (:func:`host_group`); a collective, so every process calls it at the same point."""
    def gather(value: Any) -> list[Any]:
        gathered: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(gathered, value, group=group)
        return gathered
    return gather


def same_everywhere(values: dict[str, Any], group: dist.ProcessGroup | None) -> None:
    """Refuse, on every process, a launch whose processes differ in ``values`` (name → a JSON-like value: the config
    as a dict, a split's identity), naming each process, each differing key and both values; nothing on one process
    (``group`` is ``None``: :func:`host_group`). Every process calls it, at the same point."""
    if group is None:
        return
    gathered = host_gather(group)(values)
    first, differences = gathered[0], []
    for rank, other in enumerate(gathered[1:], 1):
        for name, value in first.items():
            if other.get(name) != value:
                keys = diff_configs(value, other.get(name)) if isinstance(value, dict) and \
                    isinstance(other.get(name), dict) else [f"{value!r} != {other.get(name)!r}"]
                differences.append(f"process {rank}'s {name} differs from process 0's ({'; '.join(keys)})")
    if differences:
        raise TrainingError("the processes of this launch would not train the same run: " + "; ".join(differences)
                            + ". Start every process with the same command line, config and data (on several nodes: "
                            "the same files at the same paths)")


def _collective(error: RuntimeError) -> bool:
    """Whether ``error`` comes from a collective: its message names gloo, or it was raised inside
    ``torch.distributed`` or DDP (whose buffer broadcasts report a peer that stopped answering as "Application timeout
    caused pair closure", without naming gloo)."""
    if "gloo" in str(error).lower():
        return True
    frames = traceback.extract_tb(error.__traceback__)
    return any(f"torch{os.sep}distributed{os.sep}" in frame.filename or
               frame.filename.endswith(os.path.join("nn", "parallel", "distributed.py")) for frame in frames[-3:])


def unanswered(error: Exception, group: dist.ProcessGroup | None) -> TrainingError | None:
    """When ``error`` is a collective that failed — another process did not answer within :func:`process_timeout`
    (stopped, stuck) or left (failed, killed) —: the one error saying so, naming the processes that do not answer a
    roll call over ``group`` (:func:`host_group`; the main process asks every other, every other asks the main
    process; ``None``: not known); else ``None`` (``error`` is not about the other processes, or there are none)."""
    chain = [error]  # the collective's own error, or a failed write's that it caused (a barrier of the checkpoint)
    while chain[-1].__cause__ is not None and len(chain) < 8:
        chain.append(chain[-1].__cause__)
    failed = [e for e in chain if isinstance(e, dist.DistError) or (isinstance(e, RuntimeError) and _collective(e))]
    if not failed or not (dist.is_initialized() and dist.get_world_size() > 1):
        return None
    error, text = failed[-1], str(failed[-1])
    rank, size = dist.get_rank(), dist.get_world_size()
    silent = "unknown (it failed before the processes formed their group of checks)"
    if group is not None:
        try:
            roll_call = min(datetime.timedelta(seconds=_ROLL_CALL_S), process_timeout())
            dist.monitored_barrier(group=group, timeout=roll_call, wait_all_ranks=True)
            silent = "none (all answered a roll call afterwards)"
        except RuntimeError as e:
            listed = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", str(e))
            silent = listed.group(1).strip() if listed and rank == 0 else "0" if rank else "unknown"
    waited = re.search(r"time(d)? ?out", text, re.IGNORECASE)
    cause = f"waited for the others beyond {process_timeout().total_seconds():g} s ({TIMEOUT_VARIABLE}) and stopped" \
        if waited else "lost another process of the run and stopped"
    return TrainingError(
        f"process {rank} of {size} {cause}; process(es) that did not answer: {silent}. A process that failed printed "
        f"its own error (above); one that was stopped, killed or stuck did not. The newest checkpoint is kept: run the "
        f"same command with --resume (raise {TIMEOUT_VARIABLE} when a process may legitimately wait longer). "
        f"[{type(error).__name__}: {text.splitlines()[0][:200] if text else ''}]")


def any_process(flag: bool, group: dist.ProcessGroup | None) -> bool:
    """Whether ``flag`` is set on any process of the launch (every process calls it; one process: ``flag``). A
    reduction of a host tensor over ``group`` (:func:`host_group`): it waits for the other processes, never for a
    device."""
    if not (dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1):
        return flag
    value = torch.tensor([float(flag)])
    dist.all_reduce(value, dist.ReduceOp.MAX, group=group)
    return bool(value[0])
