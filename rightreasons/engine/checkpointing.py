"""Atomic, resumable training checkpoints on top of ``accelerator.save_state``.

Layout under ``<output_dir>/checkpoints``::

    step-000120/            a complete checkpoint (model.safetensors, optimizer.bin, scheduler.bin,
        trainer_state.json  random_states_<rank>.pkl from accelerate, plus our JSON trainer state)
    .tmp-step-000150/       a checkpoint being written: never read, removed at the next start

Every process writes its part into the temporary directory (accelerate saves one RNG file per process); once all have
finished, the main process writes ``trainer_state.json`` last and renames the directory into place. A rename is atomic,
so a directory with a final name is always complete and a crash mid-write leaves only a ``.tmp-`` directory behind.

Retention keeps the last ``keep_last`` checkpoints plus any the caller protects (the Pareto front, the best-F1 one).
Our own state is JSON (no pickles); accelerate reads its files with ``weights_only=True``.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from pathlib import Path
from typing import Any, Iterable

from accelerate import Accelerator

from ..errors import CheckpointError
from ..fileio import fsync_path, write_json_atomic

__all__ = ["CheckpointManager", "STATE_FILE"]

STATE_FILE = "trainer_state.json"
_NAME = re.compile(r"^step-(\d+)$")


class CheckpointManager:
    """Writes, lists, prunes and restores the checkpoints of one training run."""

    def __init__(self, root: str | Path, accelerator: Accelerator, keep_last: int = 2) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        self.root = Path(root)
        self.accelerator = accelerator
        self.keep_last = keep_last
        if accelerator.is_main_process:
            self.root.mkdir(parents=True, exist_ok=True)
            for stale in self.root.glob(".tmp-*"):
                shutil.rmtree(stale, ignore_errors=True)
        accelerator.wait_for_everyone()

    @staticmethod
    def name_for(step: int) -> str:
        return f"step-{step:06d}"

    def complete(self) -> list[Path]:
        """Complete checkpoints, oldest first (by step)."""
        found = [(int(m.group(1)), p) for p in self.root.iterdir() if p.is_dir() and (m := _NAME.match(p.name))
                 and (p / STATE_FILE).is_file()] if self.root.is_dir() else []
        return [p for _, p in sorted(found)]

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or ``None``."""
        done = self.complete()
        return done[-1] if done else None

    def save(self, step: int, state: dict[str, Any], protect: Iterable[str] = ()) -> Path:
        """Save accelerator state plus the JSON ``state`` as checkpoint ``step``; then prune. Call on all processes."""
        name = self.name_for(step)
        final, tmp = self.root / name, self.root / f".tmp-{name}"
        if self.accelerator.is_main_process and tmp.exists():
            shutil.rmtree(tmp)
        self.accelerator.wait_for_everyone()
        self.accelerator.save_state(str(tmp))
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            write_json_atomic(tmp / STATE_FILE, state)
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            fsync_path(self.root)
            self.prune(set(protect) | {name})
        self.accelerator.wait_for_everyone()
        return final

    def prune(self, protect: set[str]) -> None:
        """Delete complete checkpoints that are neither among the last ``keep_last`` nor protected."""
        done = self.complete()
        keep = {p.name for p in done[-self.keep_last:]} | protect
        for p in done:
            if p.name not in keep:
                shutil.rmtree(p, ignore_errors=True)

    def read_state(self, path: str | Path) -> dict[str, Any]:
        """The JSON trainer state of checkpoint ``path`` (without restoring anything)."""
        state_file = Path(path) / STATE_FILE
        if not state_file.is_file():
            raise CheckpointError(f"{path} is not a complete checkpoint (no {STATE_FILE}); "
                                  f"complete ones: {[p.name for p in self.complete()]}")
        try:
            state = json.loads(state_file.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{state_file}: unreadable trainer state ({type(e).__name__}: {e})") from e
        if not isinstance(state, dict):
            raise CheckpointError(f"{state_file}: expected a JSON object")
        return state

    def load(self, path: str | Path) -> dict[str, Any]:
        """Restore model/optimizer/scheduler/RNG state from ``path`` and return its JSON trainer state."""
        state = self.read_state(path)
        try:
            self.accelerator.load_state(str(path))
        except (pickle.UnpicklingError, RuntimeError, OSError) as e:
            raise CheckpointError(f"{path}: cannot restore the training state (corrupt, truncated or not written by "
                                  f"rightreasons; files load with weights_only=True): {e}") from e
        return state
