"""What a refused command line must show: exit code 2, no traceback, and exactly one ``error:`` line.

A module rather than a ``conftest.py`` fixture because pytest imports every ``conftest.py`` as ``conftest``.
"""

from __future__ import annotations

import re
import subprocess


def error_line(done: subprocess.CompletedProcess) -> str:
    """The one ``error:`` line of a command that was refused (exit code 2, no traceback)."""
    assert done.returncode == 2, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if "error:" in line]
    return line


def clear_error(done: subprocess.CompletedProcess, pattern: str) -> str:
    """:func:`error_line`, which must match the regular expression ``pattern``."""
    line = error_line(done)
    assert re.search(pattern, line), line
    return line
