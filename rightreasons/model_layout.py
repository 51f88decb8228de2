"""Where a model directory keeps its files: an export of :func:`~rightreasons.models.hub.save_pretrained`, or the
Hugging Face Hub cache's layout of a downloaded repository.

An export holds :data:`CONFIG_FILE`, the model file ``model.safetensors`` and the model card :data:`CARD_FILE`. The
Hub's cache keeps a repository as ``models--OWNER--NAME/snapshots/REVISION/...`` with ``refs/BRANCH`` naming the
revision each branch points at; :func:`model_directory` turns such a repository folder into the snapshot that holds
the files (that of ``refs/main``, else the only one), so that wherever a model directory is accepted the repository
folder is too. This module reads paths only: it imports nothing of the package but the errors, so that the engine, which
locates what a user names (:mod:`rightreasons.engine.artifacts`), and the models share it.
"""

from __future__ import annotations

from pathlib import Path

from .errors import CheckpointError

__all__ = ["CARD_FILE", "CONFIG_FILE", "model_directory"]

CONFIG_FILE = "config.json"
"""The description of the model in a model directory (architecture, arguments, classes, logit bias, input)."""
CARD_FILE = "README.md"
"""The model card of a model directory (the Hub shows it as the repository's page)."""


def model_directory(path: str | Path) -> Path:
    """The directory that holds the model's files: ``path`` itself, or the snapshot of a Hub cache repository folder
    (one with ``snapshots/``): the revision ``refs/main`` names, else its only snapshot. :class:`CheckpointError`
    naming the folder when the snapshot cannot be told."""
    path = Path(path)
    snapshots = path / "snapshots"
    if not snapshots.is_dir():
        return path
    ref = path / "refs" / "main"
    if ref.is_file():
        revision = ref.read_text(encoding="utf-8").strip()
        if not (snapshots / revision).is_dir():
            raise CheckpointError(f"{ref} names revision {revision!r}, which is not in {snapshots} (an interrupted "
                                  "download?); download the repository again")
        return snapshots / revision
    found = sorted(p for p in snapshots.iterdir() if p.is_dir())
    if len(found) != 1:
        raise CheckpointError(f"{path}: a Hub cache repository with {len(found)} snapshots and no refs/main to choose "
                              f"one ({', '.join(p.name for p in found) or 'none'}); name the snapshot directory")
    return found[0]
