"""Training checkpoints that survive a kill at any moment and are verified before they are used.

Layout under ``<output_dir>/checkpoints``::

    step-000120/            a checkpoint: accelerate's files (model.safetensors, optimizer.bin, scheduler.bin,
        trainer_state.json  random_states_<rank>.pkl), our JSON trainer state, and last of all
        manifest.json       the SHA-256 and size of every other file: the completeness marker
    .tmp-step-000150/       a checkpoint being written
    .trash-step-000090-*/   a checkpoint being deleted

The protocol:

* **Writing.** Every process writes its part into ``.tmp-step-N``; then the main process writes the trainer state
  and, last, the manifest (atomically, fsync'ed), and renames the directory into place (atomic). Only then is anything
  older deleted (prune). Should ``step-N`` already exist, it is first renamed to ``.trash-…`` — there is no moment at
  which neither a complete ``step-N`` nor a complete ``.tmp-step-N`` exists.
* **Deleting.** The manifest is removed first, so a half-deleted directory never looks complete. Nothing is deleted
  through a symlink (:func:`rightreasons.fileio.remove_tree`): a ``step-N`` or ``.tmp-`` entry that is a link is
  removed itself, its target untouched, and a ``checkpoints`` directory that is a link out of the output directory is
  refused before the run starts.
* **Starting.** A ``.tmp-`` directory whose manifest verifies (the writer died between finishing it and renaming it)
  is promoted, never deleted; any other ``.tmp-`` or ``.trash-`` directory is removed.
* **Resuming.** :meth:`CheckpointManager.newest_verified` checks the newest checkpoint's files against its manifest
  and falls back to the newest one that verifies, with a warning naming what was wrong with the newer ones; when none
  verifies, :class:`~rightreasons.errors.CheckpointError` lists every candidate and its defect. A flipped bit, a
  truncated or swapped file, an edited trainer state or a missing file is detected before anything is loaded. A state
  that verifies is still checked field by field before it is used (:func:`state_error` names the field, its value and
  what was expected): the trainer checks its JSON state, :meth:`CheckpointManager.load` each process's random states
  (accelerate skips a random state it cannot set with an info line, and the run would go on unseeded).

Every step of the protocol is a named crash-test boundary (:func:`rightreasons.faults.boundary`). Our own state is
JSON (no pickles); accelerate reads its files with ``weights_only=True``.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import load as load_accelerate_file

from ..errors import CheckpointError, TrainingError
from ..faults import boundary
from ..fileio import file_defect, file_record, fsync_path, read_json_object, remove_tree, write_json_atomic
from .launch import start_checks

__all__ = ["CheckpointManager", "MANIFEST", "STATE_FILE", "checkpoint_defect", "checked_integer", "state_error"]

STATE_FILE = "trainer_state.json"
MANIFEST = "manifest.json"
FORMAT = "rightreasons-checkpoint"
_NAME = re.compile(r"^step-(\d+)$")
#: the random states accelerate saves per process (``random_states_<rank>.pkl``) that exist here: how to read and set
#: each
RANDOM_STATES: dict[str, tuple[Callable[[], Any], Callable[[Any], None]]] = {
    "random_state": (random.getstate, random.setstate),
    "numpy_random_seed": (np.random.get_state, np.random.set_state),
    "torch_manual_seed": (torch.get_rng_state, torch.set_rng_state),
    **({"torch_cuda_manual_seed": (torch.cuda.get_rng_state_all, torch.cuda.set_rng_state_all)}
       if torch.cuda.is_available() else {}),
}


def described(value: Any, depth: int = 1) -> str:
    """``value`` as an error message shows it: tensors and arrays by shape and type, sequences by their items (one
    level deep, then by length), anything else by its ``repr`` (at most 80 characters)."""
    if isinstance(value, (torch.Tensor, np.ndarray)):
        kind = "a tensor" if isinstance(value, torch.Tensor) else "an array"
        return f"{kind} of shape {list(value.shape)} ({value.dtype})"
    if isinstance(value, (tuple, list)):
        if depth == 0 or len(value) > 8:
            return f"a {type(value).__name__} of {len(value)} items"
        return f"a {type(value).__name__} ({', '.join(described(v, depth - 1) for v in value)})"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def state_error(path: Path, file: str, field: str, value: Any, expected: str) -> CheckpointError:
    """The refusal of a resumed state: checkpoint ``path``, the ``file`` and ``field`` that is wrong, its value and
    what was expected."""
    return CheckpointError(f"cannot resume from {path}: {file}: field {field!r} is {described(value)}; expected "
                           f"{expected}. The checkpoint was not written by this run as it is (edited or damaged): "
                           "resume from another checkpoint (--resume PATH) or start again with --overwrite")


def checked_integer(path: Path, field: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` of ``field`` of the trainer state of checkpoint ``path`` when it is an integer in ``[low, high]``
    (``high=None``: no upper bound); else :func:`state_error`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        expected = f"an integer >= {low}" if high is None else f"an integer in [{low}, {high}]"
        raise state_error(path, STATE_FILE, field, value, expected)
    return value


def check_random_states(path: Path, process_index: int, processes: int) -> None:
    """Refuse the random states of process ``process_index`` in checkpoint ``path`` that could not be set: a missing
    file (the checkpoint was written by fewer processes) or a state :data:`RANDOM_STATES` cannot take (each is set
    and this process's own put back)."""
    name = f"random_states_{process_index}.pkl"
    if not (path / name).is_file():
        written = len(list(path.glob("random_states_*.pkl")))
        raise CheckpointError(f"cannot resume from {path}: it holds no {name}: it was written by {written} "
                              f"process(es) and this launch has {processes}; resume with as many processes as wrote "
                              "it (every process's random state is part of the run)")
    try:
        states = load_accelerate_file(path / name)
    except (pickle.UnpicklingError, RuntimeError, OSError, EOFError) as e:
        raise CheckpointError(f"cannot resume from {path}: {name} cannot be read ({type(e).__name__}: {e})") from e
    if not isinstance(states, dict):
        raise state_error(path, name, "(the file)", states, "a mapping of random states")
    for field, (get, put) in RANDOM_STATES.items():
        own = get()
        try:
            put(states.get(field))
        except Exception as e:  # whatever the setter raises: the state is not one it takes
            raise state_error(path, name, field, states.get(field), f"{described(own)}, as this process's "
                                                                     f"({type(e).__name__}: {e})") from None
        finally:
            put(own)

def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)


def checkpoint_defect(directory: Path) -> str | None:
    """Why ``directory`` is not a complete, intact checkpoint, or ``None`` when its files match its manifest."""
    path = directory / MANIFEST
    if not path.is_file():
        return f"no {MANIFEST} (incomplete: written or deleted only in part)"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        listed = manifest["files"]
        if manifest.get("format") != FORMAT or not isinstance(listed, dict):
            raise ValueError(f"not a {FORMAT} manifest")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as e:
        return f"unreadable {MANIFEST} ({type(e).__name__}: {e})"
    if STATE_FILE not in listed:
        return f"{MANIFEST} lists no {STATE_FILE}"
    for name, record in listed.items():
        problem = file_defect(directory / name, record)
        if problem is not None:
            return f"{name} {problem}"
    return None


def _remove(directory: Path) -> None:
    """Delete a checkpoint directory so that it never looks complete on the way: the manifest goes first. A symlink
    is removed itself (:func:`~rightreasons.fileio.remove_tree`), never what it points to."""
    marker = directory / MANIFEST
    if not directory.is_symlink() and marker.exists():
        marker.unlink()
        fsync_path(directory)
        boundary("checkpoint: manifest removed, directory not yet")
    remove_tree(directory, directory.parent)
    boundary("checkpoint: directory removed")


class CheckpointManager:
    """Writes, verifies, prunes and restores the checkpoints of one training run.

    Args:
        root: the checkpoint directory (``<output_dir>/checkpoints``).
        accelerator: the run's accelerator (every process calls :meth:`save` and :meth:`load`).
        keep_last: how many of the newest checkpoints to keep, besides the protected ones.
    """

    def __init__(self, root: str | Path, accelerator: Accelerator, keep_last: int = 2) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        self.root = Path(root)
        self.accelerator = accelerator
        self.keep_last = keep_last
        output_dir = self.root.parent.resolve()
        if self.root.is_symlink() and output_dir not in self.root.resolve().parents:
            raise TrainingError(f"{self.root} is a symlink to {self.root.resolve()}, outside the output directory: "
                                "a run deletes old checkpoints as it goes, and deleting there could destroy files of "
                                "another run; remove the link, or make output_dir itself the directory on that disk")
        if accelerator.is_main_process:
            self.root.mkdir(parents=True, exist_ok=True)
            self._recover()
        accelerator.wait_for_everyone()

    def _recover(self) -> None:
        """Promote complete ``.tmp-`` checkpoints whose final name is free; remove other leftovers of a crash."""
        for leftover in sorted(self.root.glob(".tmp-*")):
            final = self.root / leftover.name.removeprefix(".tmp-")
            if _NAME.match(final.name) and not leftover.is_symlink() and not final.exists() \
                    and checkpoint_defect(leftover) is None:
                os.replace(leftover, final)
                fsync_path(self.root)
            else:
                remove_tree(leftover, self.root)
        for leftover in self.root.glob(".trash-*"):
            remove_tree(leftover, self.root)

    @staticmethod
    def name_for(step: int) -> str:
        return f"step-{step:06d}"

    def complete(self) -> list[Path]:
        """Checkpoints holding a manifest (not yet verified), oldest first (by step)."""
        if not self.root.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.root.iterdir() if p.is_dir() and (m := _NAME.match(p.name))
                 and (p / MANIFEST).is_file()]
        return [p for _, p in sorted(found)]

    def latest(self) -> Path | None:
        """The newest checkpoint holding a manifest, or ``None``."""
        done = self.complete()
        return done[-1] if done else None

    def newest_verified(self) -> Path | None:
        """The newest checkpoint whose files match its manifest; ``None`` when there is no checkpoint at all.

        Newer checkpoints that fail verification are skipped with a warning naming their defect; when every one
        fails, :class:`~rightreasons.errors.CheckpointError` lists each with its defect.
        """
        candidates = sorted((p for p in self.root.iterdir() if p.is_dir() and _NAME.match(p.name)),
                            key=lambda p: int(_NAME.match(p.name).group(1)), reverse=True) \
            if self.root.is_dir() else []
        defects = []
        for path in candidates:
            defect = checkpoint_defect(path)
            if defect is None:
                if defects:
                    warnings.warn(f"resuming from {path.name}, the newest intact checkpoint; skipped "
                                  + "; ".join(defects), stacklevel=2)
                return path
            defects.append(f"{path.name}: {defect}")
        if defects:
            raise CheckpointError(f"no intact checkpoint in {self.root}: " + "; ".join(defects))
        return None

    def save(self, step: int, state: dict[str, Any], protect: Iterable[str] = ()) -> Path:
        """Save accelerator state plus the JSON ``state`` as checkpoint ``step``; then prune. Call on all processes.

        When writing fails (whatever the exception), the partial ``.tmp-`` directory is removed and the exception
        propagates; every older checkpoint is untouched (the trainer turns it into its one write-failure error).
        """
        name = self.name_for(step)
        final, tmp = self.root / name, self.root / f".tmp-{name}"
        try:
            self._write(tmp, state)
        except BaseException:
            if self.accelerator.is_main_process and (tmp.exists() or tmp.is_symlink()):
                remove_tree(tmp, self.root)
            raise
        if self.accelerator.is_main_process:
            self._promote(tmp, final)
            self.prune(set(protect) | {name})
        self.accelerator.wait_for_everyone()
        return final

    def _write(self, tmp: Path, state: dict[str, Any]) -> None:
        if self.accelerator.is_main_process and (tmp.exists() or tmp.is_symlink()):
            remove_tree(tmp, self.root)
        self.accelerator.wait_for_everyone()
        self.accelerator.save_state(str(tmp))
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            boundary("checkpoint: accelerator state written")
            write_json_atomic(tmp / STATE_FILE, state)
            files = {str(p.relative_to(tmp)): file_record(p)
                     for p in _files(tmp)}
            write_json_atomic(tmp / MANIFEST, {"format": FORMAT, "version": 1, "step": state.get("step"),
                                               "files": files})

    def _promote(self, tmp: Path, final: Path) -> None:
        trash = None
        if final.exists():
            trash = self.root / f".trash-{final.name}-{uuid.uuid4().hex[:8]}"
            os.replace(final, trash)
            boundary("checkpoint: old copy moved aside")
        os.replace(tmp, final)
        fsync_path(self.root)
        boundary("checkpoint: renamed into place")
        if trash is not None:
            _remove(trash)

    def prune(self, protect: set[str]) -> None:
        """Delete checkpoints that are neither among the last ``keep_last`` nor protected (newest first kept)."""
        done = self.complete()
        keep = {p.name for p in done[-self.keep_last:]} | protect
        for p in done:
            if p.name not in keep:
                _remove(p)
        boundary("checkpoint: pruned")

    def read_state(self, path: str | Path) -> dict[str, Any]:
        """The JSON trainer state of checkpoint ``path`` (without restoring anything)."""
        state_file = Path(path) / STATE_FILE
        if not state_file.is_file():
            raise CheckpointError(f"{path} is not a complete checkpoint (no {STATE_FILE}); "
                                  f"complete ones: {[p.name for p in self.complete()]}")
        return read_json_object(state_file, "trainer state", CheckpointError)

    def load(self, path: str | Path) -> dict[str, Any]:
        """Verify checkpoint ``path`` against its manifest, restore model/optimizer/scheduler/RNG state from it and
        return its JSON trainer state."""
        path = Path(path)
        defect = checkpoint_defect(path)
        if defect is not None:
            raise CheckpointError(f"{path}: {defect}")
        state = self.read_state(path)
        accelerator = self.accelerator
        start_checks(accelerator, lambda: check_random_states(path, accelerator.process_index,
                                                              accelerator.num_processes), everywhere=True)
        try:
            self.accelerator.load_state(str(path))
        except (pickle.UnpicklingError, RuntimeError, OSError) as e:
            raise CheckpointError(f"{path}: cannot restore the training state (corrupt, truncated or not written by "
                                  f"rightreasons; files load with weights_only=True): {e}") from e
        return state
