"""The tasks the applications run, and reading a config for one of them.

Importing this module imports the features, so that each registers its task with the engine
(:func:`rightreasons.engine.register_task`): ``train`` (:mod:`rightreasons.classification`), ``guide``
(:mod:`rightreasons.guidance`), ``distill`` (:mod:`rightreasons.distill`) and ``robust``
(:mod:`rightreasons.robustness`). A new feature adds its package here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn

from .. import classification, distill, guidance, robustness  # noqa: F401  (each registers its task)
from ..config import apply_overrides, from_dict, read_config
from ..data import load_dataset
from ..engine import TrainConfig, get_task, task_for_keys
from ..engine.artifacts import RunArtifact, locate_artifact
from ..errors import ConfigError
from ..models import load_model

__all__ = ["config_for_task", "load_task_config", "load_trained", "trained_architecture", "trained_config"]


def config_for_task(name: str | None, data: dict[str, Any], source: str | Path) -> TrainConfig:
    """The config of task ``name`` (``None``: the task the config's sections describe,
    :func:`~rightreasons.engine.task_for_keys`) from the raw ``data`` read from ``source``. A config with sections
    of another task (``guidance`` given to ``train``) is refused with the command that runs it."""
    task = task_for_keys(data) if name is None else get_task(name)
    fields = set(task.config_class.__dataclass_fields__)
    if not set(data) <= fields:
        other = task_for_keys(data)
        if set(data) <= set(other.config_class.__dataclass_fields__):
            extra = ", ".join(sorted(set(data) - fields))
            raise ConfigError(f"{source}: a config of `rightreasons {other.name}` (it has the section(s) {extra}), "
                              f"not of `rightreasons {task.name}`; run it with `rightreasons {other.name}`")
    try:
        return from_dict(task.config_class, data)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def load_task_config(name: str | None, path: str | Path | None, overrides: list[str] | None = None,
                     grid: dict[str, list[Any]] | None = None) -> TrainConfig:
    """The config of task ``name`` from YAML file ``path`` (``None``: the defaults) with ``key=value`` ``overrides``
    (:func:`config_for_task`); ``grid`` (``--grid``) sets keys of ``selection.grid``, validated with the rest."""
    data = apply_overrides({}, overrides or []) if path is None else read_config(path, overrides)
    if grid:
        section = data.setdefault("selection", {})
        if not isinstance(section, dict) or not isinstance(section.setdefault("grid", {}), dict):
            raise ConfigError(f"{path or 'the command line'}: selection: expected a mapping with a grid mapping, got "
                              f"{section!r}")
        section["grid"].update(grid)
    return config_for_task(name, data, "the command line" if path is None else path)


def trained_config(artifact: RunArtifact, overrides: list[str] | None = None) -> TrainConfig | None:
    """The config a run artefact was trained with (with ``key=value`` ``overrides``); ``None`` for a bare model file."""
    if artifact.config is None:
        return None
    data = apply_overrides(artifact.config, overrides or [])
    return config_for_task(artifact.task, data, artifact.config_source or artifact.weights)


def _validation_data(config: TrainConfig) -> Any:
    """The validation split of the data ``config`` trained on (a checkpoint's classes are its classes)."""
    data = config.data
    return load_dataset(data.name, data.root, data.val_split, **data.options_for(data.val_split))


def trained_architecture(artifact: RunArtifact) -> tuple[str, dict[str, Any]] | None:
    """The registry name and constructor arguments of the model a checkpoint holds, whose weights file does not record
    them: its training config's model with the classes of its validation data. ``None`` for a model file, which
    records them itself."""
    if artifact.architecture_in_file:
        return None
    config = trained_config(artifact)
    return classification.trained_architecture(config, _validation_data(config))


def load_trained(path: str | Path | RunArtifact, what: str = "--checkpoint") -> tuple[nn.Module, TrainConfig | None]:
    """The model that a run artefact holds (a run directory, its model file or a checkpoint directory:
    :func:`~rightreasons.engine.artifacts.locate_artifact`; or the artefact located already) and the config it was
    trained with (``None`` for a bare model file). A checkpoint's architecture comes from the config, its classes
    from the validation data. The model is in evaluation mode: a forward pass never moves its BatchNorm statistics
    (an export that explains a few images writes the run's weights, not weights those images changed)."""
    artifact = path if isinstance(path, RunArtifact) else locate_artifact(path, what)
    config = trained_config(artifact)
    if artifact.architecture_in_file:
        return load_model(artifact.weights).eval(), config
    return classification.trained_model(config, artifact, _validation_data(config)).eval(), config
