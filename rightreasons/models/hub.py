"""Hub-style model directories: :func:`save_pretrained`, :func:`from_pretrained` and :func:`push_to_hub`.

A model directory holds what the Hugging Face Hub shows and what rebuilds the model, and nothing that runs code:

* ``model.safetensors`` — the model file of :func:`~rightreasons.models.weights.save_model` (tensors and metadata);
* ``config.json`` — the same description in plain JSON (:func:`model_config`): ``architecture`` and its
  ``arguments``, ``classes``, ``logit_layers`` (bias, temperature), ``input`` (timm's ``pretrained_cfg`` keys plus the
  encoding, :mod:`.preprocessing`) and, for a trained run, ``training`` (its task and config);
* ``README.md`` — the model card (:func:`~rightreasons.models.model_card.model_card`);
* ``explanation-1.png``, ... — explanation figures of example images that the card shows, when given
  (:func:`~rightreasons.explain.save_explanation` draws them; ``rightreasons export`` those of the run's test split).

:func:`from_pretrained` loads the model file (safetensors and JSON only) and refuses a ``config.json`` that
contradicts it. It takes such a directory, a Hub cache repository folder or snapshot
(``models--OWNER--NAME/snapshots/REVISION``, :func:`~rightreasons.model_layout.model_directory`), or a repository id
(``OWNER/NAME``), which ``huggingface_hub`` fetches when it is installed. Every command that takes a model file
accepts a model directory too (:func:`~rightreasons.models.weights.model_file`). :func:`push_to_hub` uploads a model
directory to a Hub repository through ``huggingface_hub``.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from torch import nn

from ..errors import CheckpointError
from ..fileio import atomic_write_all, json_text, read_json_object
from .factory import load_model
from ..model_layout import CARD_FILE, CONFIG_FILE, model_directory
from .model_card import model_card
from .preprocessing import INPUT_KEY
from .weights import CLASSES_KEY, LOGITS_KEY, METADATA_KEY, RUN_MODEL_FILE, model_metadata, read_metadata, save_model

__all__ = ["LIBRARY_NAME", "PICTURE", "check_repo_id", "from_pretrained", "is_model_directory", "model_config",
           "push_to_hub", "save_pretrained"]

LIBRARY_NAME = "rightreasons"
"""``library_name`` of ``config.json`` and of the model card's Hub metadata."""
_CONFIG_KEYS = {"classes": CLASSES_KEY, "logit_layers": LOGITS_KEY, "input": INPUT_KEY}
"""``config.json`` entry → the model file's metadata entry it repeats (architecture and arguments apart)."""
_REPO_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
PICTURE = "explanation-{}.png"
"""File name of the model card's ``n``-th explanation figure (from 1)."""


def model_config(metadata: Mapping[str, str], training: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``config.json`` of a model file with ``metadata`` (:func:`~rightreasons.models.weights.model_metadata`),
    and the run's ``training`` (``{"task", "config"}``) when given."""
    args = json.loads(metadata[METADATA_KEY])
    config: dict[str, Any] = {"library_name": LIBRARY_NAME, "architecture": args["name"], "arguments": args["kwargs"]}
    config.update({key: json.loads(metadata[entry]) for key, entry in _CONFIG_KEYS.items() if entry in metadata})
    if training is not None:
        config["training"] = dict(training)
    return config


def is_model_directory(path: str | Path) -> bool:
    """Whether ``path`` is a directory :func:`save_pretrained` wrote (its ``config.json`` names this library)."""
    config = Path(path) / CONFIG_FILE
    try:
        return json.loads(config.read_text(encoding="utf-8")).get("library_name") == LIBRARY_NAME
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        return False


def save_pretrained(model: nn.Module, directory: str | Path, *, run: Mapping[str, Any] | None = None,
                    pictures: Sequence[str | Path] = ()) -> Path:
    """Write ``model`` (built by :func:`~rightreasons.create_model` or loaded) as a model directory: its model file,
    ``config.json`` and a model card; ``run`` is the ``summary.json`` of the training run that made it, whose task,
    config and numbers the directory records; ``pictures`` are PNG figures (explanations of example images,
    :func:`~rightreasons.explain.save_explanation`) copied in as :data:`PICTURE` and shown by the card. The files are
    written atomically, the card last; figures of an earlier export that are not replaced are removed. Returns the
    directory."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    training = None if run is None else {"task": run.get("task"), "config": run.get("config")}
    config = model_config(model_metadata(model), training)
    names = [PICTURE.format(i) for i in range(1, len(pictures) + 1)]
    card = model_card(config, run, names)
    atomic_write_all([
        *((directory / name, lambda tmp, source=source: shutil.copyfile(source, tmp))
          for name, source in zip(names, pictures)),
        (directory / RUN_MODEL_FILE, lambda tmp: save_model(model, tmp)),
        (directory / CONFIG_FILE, lambda tmp: tmp.write_text(json_text(config, str(directory / CONFIG_FILE),
                                                                       indent=2) + "\n", encoding="utf-8")),
        (directory / CARD_FILE, lambda tmp: tmp.write_text(card, encoding="utf-8"))])
    for stale in directory.glob(PICTURE.format("*")):
        if stale.name not in names:
            stale.unlink()
    return directory


def _huggingface_hub(purpose: str) -> ModuleType:
    """``huggingface_hub``, or a :class:`CheckpointError` saying that ``purpose`` needs it."""
    try:
        import huggingface_hub
    except ImportError:
        raise CheckpointError(f"{purpose} needs huggingface_hub, which is not installed (pip install "
                              "huggingface_hub)") from None
    return huggingface_hub


def _download(repo_id: str, revision: str | None) -> Path:
    """The local snapshot of Hub repository ``repo_id``, through ``huggingface_hub`` (its cache; the model's three
    files only)."""
    hub = _huggingface_hub(f"{repo_id}: no such model directory, and fetching the Hub repository of that name")
    return Path(hub.snapshot_download(repo_id, revision=revision,
                                      allow_patterns=[RUN_MODEL_FILE, CONFIG_FILE, CARD_FILE]))


def check_repo_id(repo_id: str, what: str = "repo_id") -> None:
    """Refuse a ``repo_id`` (the argument ``what``) that is no Hub repository id ``OWNER/NAME``."""
    if not _REPO_ID.match(repo_id):
        raise CheckpointError(f"{what} {repo_id!r}: expected a Hub repository id OWNER/NAME")


def push_to_hub(directory: str | Path, repo_id: str, *, revision: str | None = None, private: bool = False,
                commit_message: str = "Upload model (rightreasons)") -> str:
    """Upload model directory ``directory`` (:func:`save_pretrained`) to the Hub repository ``repo_id``
    (``OWNER/NAME``, created when missing, ``private`` then) through ``huggingface_hub``'s ``HfApi``, as one commit
    to ``revision`` (default: the main branch). Returns the commit's URL.

    Raises:
        CheckpointError: ``directory`` is no model directory, ``repo_id`` no ``OWNER/NAME``, or ``huggingface_hub`` is
            not installed.
    """
    if not is_model_directory(directory):
        raise CheckpointError(f"{directory}: not a model directory (no {CONFIG_FILE} of rightreasons); write one with "
                              "save_pretrained or `rightreasons export`")
    check_repo_id(repo_id)
    api = _huggingface_hub(f"pushing {directory} to the Hub repository {repo_id}").HfApi()
    api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
    return str(api.upload_folder(folder_path=str(directory), repo_id=repo_id, repo_type="model", revision=revision,
                                 commit_message=commit_message))


def _check_config(directory: Path, path: Path) -> None:
    """Refuse a ``config.json`` in ``directory`` that says something else than the model file ``path``."""
    config_path = directory / CONFIG_FILE
    if not config_path.is_file():
        return
    config = read_json_object(config_path, "model config", CheckpointError)
    recorded = model_config(read_metadata(path))
    differing = [key for key in recorded if key in config and json.loads(json.dumps(config[key])) != recorded[key]]
    if differing:
        raise CheckpointError(f"{config_path}: {differing[0]!r} is {config[differing[0]]!r}, but {path} records "
                              f"{recorded[differing[0]]!r}; the two were not written together (export the model "
                              "again)")


def from_pretrained(source: str | Path, *, revision: str | None = None) -> nn.Module:
    """The model of a model directory (:func:`save_pretrained`), a Hub cache repository or snapshot folder, or a Hub
    repository id ``OWNER/NAME`` (``revision``: a branch, tag or commit; needs ``huggingface_hub``), in evaluation
    mode (as the Hub's ``from_pretrained`` returns models). Loading reads safetensors and JSON only, and never
    executes code from the directory.

    Raises:
        CheckpointError: no model there, a malformed model file, or a ``config.json`` that contradicts it.
    """
    path = Path(source)
    if not path.exists() and _REPO_ID.match(str(source)):
        path = _download(str(source), revision)
    if not path.is_dir():
        raise CheckpointError(f"{source}: not a model directory (expected a folder with {CONFIG_FILE} and "
                              f"{RUN_MODEL_FILE}, a Hub cache folder, or a repository id OWNER/NAME)")
    directory = model_directory(path)
    model_path = directory / RUN_MODEL_FILE
    if not model_path.is_file():
        raise CheckpointError(f"{directory}: a directory without {RUN_MODEL_FILE}; expected a model directory written "
                              "by save_pretrained or `rightreasons export`")
    _check_config(directory, model_path)
    return load_model(model_path).eval()
