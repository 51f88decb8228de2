"""Named boundaries of the code that writes state to disk, where the crash tests kill the process.

Every place where a crash could leave state half-written — before and after each file written for a checkpoint, each
rename, each deletion, the prune, the final validation and the export — calls :func:`boundary` with a stable name.
Normally that does nothing. Two environment variables turn the boundaries into a test harness (used by
``tests/reliability/test_kill_points.py``, which kills a real training at every boundary and checks that
``--resume`` ends with the same weights, ``summary.json`` and ``metrics.jsonl`` as an uninterrupted run):

* ``RIGHTREASONS_FAULT_TRACE=FILE`` appends the name of every boundary reached to ``FILE`` (one per line), so a test
  can list the boundaries of a run;
* ``RIGHTREASONS_FAULT_KILL=NAME:K`` kills the process with ``SIGKILL`` when it reaches boundary ``NAME`` for the
  ``K``-th time (1-based): no handler, no cleanup, like a pre-empted job or a power cut.

This module imports nothing of rightreasons.
"""

from __future__ import annotations

import os
import signal
from collections import Counter

__all__ = ["KILL_VARIABLE", "TRACE_VARIABLE", "boundary"]

TRACE_VARIABLE = "RIGHTREASONS_FAULT_TRACE"
KILL_VARIABLE = "RIGHTREASONS_FAULT_KILL"

_reached: Counter[str] = Counter()


def boundary(name: str) -> None:
    """Mark that the process reached the named boundary (see the module docstring)."""
    trace, kill = os.environ.get(TRACE_VARIABLE), os.environ.get(KILL_VARIABLE)
    if trace is None and kill is None:
        return
    _reached[name] += 1
    if trace:
        with open(trace, "a", encoding="utf-8") as f:
            f.write(name + "\n")
    if kill and kill == f"{name}:{_reached[name]}":
        os.kill(os.getpid(), signal.SIGKILL)
