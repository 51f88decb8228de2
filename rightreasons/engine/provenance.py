"""What produced a checkpoint or report: package and library versions, the git commit of the code, the command line."""

from __future__ import annotations

import platform
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch

from ..version import __version__

__all__ = ["git_commit", "provenance"]


@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The commit of the rightreasons source tree (with ``-dirty`` for local changes), or None outside git."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("-dirty" if dirty else "")


def provenance() -> dict[str, Any]:
    """Versions, git commit and command line, written beside every checkpoint and report."""
    return {"rightreasons": __version__, "git_commit": git_commit(), "torch": torch.__version__,
            "python": platform.python_version(), "argv": list(sys.argv)}
