"""What a training run leaves behind, resolved to the weights it holds and the config that trained them.

Wherever a trained model is expected, a user may name any of a run's artefacts:

* the run directory (``runs/voc/guided``): its exported model file ``model.safetensors``, config from ``summary.json``;
* the exported model file itself (``runs/voc/guided/model.safetensors``), config from the ``summary.json`` beside it
  (none for a bare model file written by :func:`rightreasons.save_model`);
* a model directory (``rightreasons export``, :func:`rightreasons.models.hub.save_pretrained`; also as the Hub's cache
  lays it out): its model file, config from the ``training`` entry of its ``config.json``;
* one of its checkpoint directories (``runs/voc/guided/checkpoints/step-000120``, as the sweep's Pareto report names
  them), or the weights file inside one: checked against the checkpoint's manifest, config from its trainer state —
  so a checkpoint of a run that has not finished is accepted too.

A checkpoint's weights file is accelerate's plain state dict, without the architecture that an exported model file
records: the model is then rebuilt from the config (:attr:`RunArtifact.architecture_in_file` says which).

What a run leaves behind is its own: :func:`refuse_run_file` keeps every other command's output (``evaluate --out``,
``bcosify --out``) off a run's model, summary, metrics log, lock, checkpoints and TensorBoard logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import CheckpointError, UsageError
from ..fileio import LOCK_FILE, read_json_object
from ..model_layout import CONFIG_FILE, model_directory
from .checkpointing import MANIFEST, STATE_FILE, checkpoint_defect
from .trackers import TENSORBOARD_FOLDER
from .trainer import METRICS_FILE, SUMMARY
from .trainer import MODEL_FILE as WEIGHTS

__all__ = ["RUN_OWNED", "RunArtifact", "locate_artifact", "refuse_run_file"]

CHECKPOINTS = "checkpoints"
RUN_OWNED = (WEIGHTS, SUMMARY, METRICS_FILE, LOCK_FILE, CHECKPOINTS, TENSORBOARD_FOLDER)
"""The files and folders of a run's directory that only its training writes."""


@dataclass(frozen=True)
class RunArtifact:
    """A trained model named by a path: its ``weights`` file, the training ``config`` (a plain mapping; ``None`` for a
    bare model file), the ``task`` that trained it when recorded, and the file the config was read from."""

    weights: Path
    config: dict[str, Any] | None
    task: str | None
    config_source: Path | None
    architecture_in_file: bool


def _is_checkpoint(directory: Path) -> bool:
    return ((directory / STATE_FILE).is_file() or (directory / MANIFEST).is_file()
            or directory.parent.name == CHECKPOINTS and directory.name.startswith("step-"))


def _from_checkpoint(directory: Path) -> RunArtifact:
    defect = checkpoint_defect(directory)
    if defect is not None:
        raise CheckpointError(f"{directory}: not an intact checkpoint: {defect}")
    state = read_json_object(directory / STATE_FILE, "trainer state", CheckpointError)
    if not isinstance(state.get("config"), dict):
        raise CheckpointError(f"{directory / STATE_FILE}: no training 'config' recorded (written by an older "
                              "version?); name the run's exported model file instead")
    summary = directory.parent.parent / SUMMARY
    task = read_json_object(summary, "training summary", CheckpointError).get("task") if summary.is_file() else None
    return RunArtifact(directory / WEIGHTS, state["config"], task, directory / STATE_FILE, False)


def _from_model_file(path: Path) -> RunArtifact:
    summary = path.parent / SUMMARY
    if not summary.is_file():
        return _from_model_directory(path)
    record = read_json_object(summary, "training summary", CheckpointError)
    if not isinstance(record.get("config"), dict):
        raise CheckpointError(f"{summary}: not a training summary with a 'config' (a mapping)")
    return RunArtifact(path, record["config"], record.get("task"), summary, True)


def _from_model_directory(path: Path) -> RunArtifact:
    """A model file without a summary beside it: the training config of the model directory's ``config.json``
    when it records one, else none (a bare model file)."""
    config = path.parent / CONFIG_FILE
    training = read_json_object(config, "model config", CheckpointError).get("training") if config.is_file() else None
    if not isinstance(training, dict) or not isinstance(training.get("config"), dict):
        return RunArtifact(path, None, None, None, True)
    return RunArtifact(path, training["config"], training.get("task"), config, True)


def locate_artifact(path: str | Path, what: str = "model") -> RunArtifact:
    """The weights and training config that ``path`` names (a run directory, its model file, a checkpoint directory
    or the weights file in one); ``what`` names the argument in errors. A :class:`CheckpointError` says what the
    path is and what to name instead."""
    path = Path(path)
    if path.is_file():
        return _from_checkpoint(path.parent) if _is_checkpoint(path.parent) else _from_model_file(path)
    if not path.is_dir():
        raise CheckpointError(f"{what} {path}: no such model file, run directory or checkpoint directory")
    path = model_directory(path)
    if _is_checkpoint(path):
        return _from_checkpoint(path)
    if (path / WEIGHTS).is_file():
        return _from_model_file(path / WEIGHTS)
    checkpoints = path if path.name == CHECKPOINTS else path / CHECKPOINTS
    steps = sorted(p.name for p in checkpoints.glob("step-*"))
    if steps:
        raise CheckpointError(f"{what} {path}: the run has not finished (no {WEIGHTS}); name one of its checkpoints "
                              f"({', '.join(steps[-3:])}) or continue the run with --resume")
    raise CheckpointError(f"{what} {path}: a directory without a model file ({WEIGHTS}), a summary or checkpoints; "
                          "expected a run directory, a model file or a checkpoint directory")


def _is_run(directory: Path) -> bool:
    """Whether ``directory`` is a training run's: it holds a summary, an exported model or checkpoints."""
    return (directory / SUMMARY).is_file() or (directory / WEIGHTS).is_file() or (directory / CHECKPOINTS).is_dir()


def refuse_run_file(path: str | Path, what: str = "output file") -> None:
    """Refuse with :class:`~rightreasons.errors.UsageError`, before any work, to write the file ``path`` (``what``
    names the argument) where it would replace what a training run owns (:data:`RUN_OWNED`: its exported model,
    summary, metrics log, lock, or anything in its checkpoints or TensorBoard logs) — ``evaluate --out
    RUN/model.safetensors`` replaced the trained model with metrics. Files beside them (``RUN/test.json``) are free.
    The path is resolved first, so that a link or ``..`` cannot reach a run's files either."""
    resolved = Path(path).resolve()
    for run in resolved.parents:
        owned = resolved.relative_to(run).parts[0]
        if owned in RUN_OWNED and _is_run(run):
            raise UsageError(f"{what} {path} belongs to the training run {run} (its {owned}), which only training "
                             f"writes: writing there would destroy the run's results; choose a file outside "
                             f"{run / owned}, e.g. {run / 'test.json'}")
