"""Running tests on several processes (CPU, gloo), the one way every test does it; ``tests/conftest.py`` exposes these
functions as the fixtures ``free_port``, ``gloo_processes`` and ``launch``.

* :func:`gloo_processes` — a function of the test on N processes that form one process group (rank 0 in the test
  process, so that only N − 1 extra interpreters import torch; the others spawned): for code that calls
  ``torch.distributed`` itself (metrics, norms, the evaluation loop, the cache writer).
* :func:`launch` — ``python -m rightreasons ...`` under ``torchrun``: N processes on one node, or N nodes of one
  process each meeting at a c10d rendezvous on 127.0.0.1 (a multi-node launch on loopback, as on a cluster).

This is a module rather than part of ``conftest.py`` because spawned processes import the process entry point by its
module name, and pytest imports every ``conftest.py`` as ``conftest``.
"""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from guards import GUARD_S

def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _process(target: Callable[..., Any], rank: int, world_size: int, port: int, out: str, args: tuple) -> None:
    """One process of :func:`gloo_processes`: join the group, run ``target(rank, *args)``, save what it returns."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=GUARD_S))
    try:
        result = target(rank, *args)
    finally:
        dist.destroy_process_group()
    torch.save(result, Path(out) / f"rank{rank}.pt")


def gloo_processes(target: Callable[..., Any], *args: Any, world_size: int = 2) -> list[Any]:
    """``target(rank, *args)`` on ``world_size`` CPU processes forming one gloo process group (the default group
    while ``target`` runs); returns what each returned, in rank order. ``target`` and ``args`` must be picklable
    (a module-level function of the test module). Raises ``AssertionError`` when a spawned process fails."""
    with tempfile.TemporaryDirectory() as out:
        port, context = free_port(), mp.get_context("spawn")
        others = [context.Process(target=_process, args=(target, rank, world_size, port, out, args))
                  for rank in range(1, world_size)]
        for other in others:
            other.start()
        try:
            _process(target, 0, world_size, port, out, args)
        finally:
            for other in others:
                other.join(timeout=GUARD_S)
                if other.is_alive():  # rank 0 failed and left it waiting in a collective
                    other.terminate()
                    other.join()
        failed = {rank: other.exitcode for rank, other in enumerate(others, 1) if other.exitcode != 0}
        assert not failed, f"spawned processes failed (rank: exit code): {failed}"
        return [torch.load(Path(out) / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]


def launch(args: Sequence[str], *, processes: int = 1, nodes: int = 1, node_args: Sequence[Sequence[str]] = (),
           cwd: str | os.PathLike | None = None, timeout: float = GUARD_S,
           check: bool = True) -> list[subprocess.CompletedProcess]:
    """Run ``python -m rightreasons ARGS`` as one distributed job on this machine (CPU, gloo): ``processes``
    processes under ``torchrun --standalone``, or ``nodes`` node launchers of one process each that meet at a c10d
    rendezvous on 127.0.0.1. ``node_args[i]`` are appended to node ``i``'s command (e.g. a directory of its own).
    Returns each launcher's result; with ``check``, raises ``AssertionError`` with the output of a launcher that
    failed."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    torchrun, command = [sys.executable, "-m", "torch.distributed.run"], ["-m", "rightreasons", *args]
    if nodes == 1:
        launchers = [[*torchrun, "--standalone", "--nproc_per_node", str(processes), *command]]
    else:
        port = free_port()
        launchers = [[*torchrun, "--nnodes", str(nodes), "--nproc_per_node", "1", "--rdzv-backend", "c10d",
                      "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"test-{port}", "--local-addr", "127.0.0.1",
                      *command] for _ in range(nodes)]
    launchers = [[*launcher, *(node_args[i] if i < len(node_args) else ())] for i, launcher in enumerate(launchers)]
    running = [subprocess.Popen(c, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for c in launchers]
    results = []
    try:
        for launcher, process in zip(launchers, running):
            stdout, stderr = process.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(launcher, process.returncode, stdout, stderr))
    finally:
        for process in running:
            if process.poll() is None:
                process.kill()
                process.wait()
    for result in results:
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(result.args)} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                                 f"{result.stderr[-3000:]}")
    return results
