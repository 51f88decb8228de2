"""Starting a run safely: the device a launch runs on, and one writer per output directory.

* :func:`use_cpu` — accelerate starts every process of a multi-process launch (``torchrun``, ``accelerate
  launch``) as a run of its own when the machine has no CUDA device and the config does not ask for the CPU: two full
  runs writing one output directory. Here such a launch runs on the CPU, its processes forming one gloo process group.
* :class:`OutputLock` — an exclusive ``flock`` on ``OUTPUT_DIR/.lock``, taken by the main process before anything
  is written and held until the run ends. A second run into the same directory (another launch, another node on a
  shared filesystem) is refused with a :class:`~rightreasons.errors.TrainingError` naming the holder (process id,
  host, start time, command line). The kernel releases the lock when its process ends, however it ends, so a
  ``--resume`` after ``SIGKILL`` is never blocked by a stale lock; the file itself stays and only describes the last
  holder.
* :func:`start_checks` — checks (writable output directory, the lock) that run on the main process only; every process
  of the launch learns whether they passed and raises the same refusal, instead of waiting for a process that left.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate import Accelerator

from ..errors import TrainingError

__all__ = ["LOCK_FILE", "OutputLock", "launched_processes", "start_checks", "use_cpu"]

LOCK_FILE = ".lock"

#: locks this process holds: resolved directory -> (file descriptor, number of holders in this process)
_HELD: dict[Path, list[int]] = {}


def launched_processes() -> int:
    """How many processes the launcher started (``WORLD_SIZE`` of ``torchrun`` / ``accelerate launch``; 1 without)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def use_cpu(requested: bool) -> bool:
    """Whether a run uses the CPU: when the config asks for it (``cpu: true``), and in every process of a
    multi-process launch on a machine without a device that accelerate runs multi-process (CUDA and the like; not
    Apple's MPS)."""
    device = torch.accelerator.current_accelerator(check_available=True)
    return requested or (launched_processes() > 1 and (device is None or device.type == "mps"))


class OutputLock:
    """The exclusive lock on a run's output directory (module docstring). Re-entrant within one process (a run
    restarted in the same process after an error takes it again); other processes are refused."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self.held = False

    def acquire(self) -> None:
        """Take the lock, or raise :class:`TrainingError` naming the run that holds it."""
        key = self.directory.resolve()
        if self.held:
            return
        if key in _HELD:
            _HELD[key][1] += 1
            self.held = True
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace")
            os.close(fd)
            raise TrainingError(f"output directory {self.directory} is in use by another run ({_describe(holder)}); "
                                "two runs writing one directory would corrupt its checkpoints: wait for that run to "
                                "end, or choose another output_dir") from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "argv": sys.argv}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        _HELD[key] = [fd, 1]
        self.held = True

    def release(self) -> None:
        """Give the lock back (once this process's last holder releases it, other processes may take it)."""
        if not self.held:
            return
        self.held = False
        key = self.directory.resolve()
        entry = _HELD[key]
        entry[1] -= 1
        if entry[1] == 0:
            del _HELD[key]
            os.close(entry[0])  # closing the descriptor releases the flock


def _describe(holder: str) -> str:
    try:
        info = json.loads(holder)
        return (f"process {info['pid']} on host {info['host']}, started {info['started']}: "
                f"{' '.join(map(str, info['argv']))}")
    except (ValueError, KeyError, TypeError):
        return "a process that has not yet written its name"


def start_checks(accelerator: Accelerator, check: Callable[[], None]) -> None:
    """Run ``check`` on the main process; when it raises :class:`TrainingError`, raise it there and a
    :class:`TrainingError` pointing to it on every other process (all processes take part in one reduction)."""
    refusal = None
    if accelerator.is_main_process:
        try:
            check()
        except TrainingError as e:
            refusal = e
    if accelerator.num_processes > 1:
        flag = torch.tensor(float(refusal is not None), device=accelerator.device)
        refused = bool(accelerator.reduce(flag, "max").item())
    else:
        refused = refusal is not None
    if refusal is not None:
        raise refusal
    if refused:
        raise TrainingError("the main process refused to start the run (its error says why)")
