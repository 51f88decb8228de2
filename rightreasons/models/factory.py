"""Building models by name, with weights: :func:`create_model` and :func:`load_model`.

This module joins the registry (:mod:`.registry`: which architectures exist; the package registers the whole zoo
before this module runs), the released weights (:mod:`.pretrained`) and weight IO
(:mod:`.weights`). :func:`create_model` records the registry name and constructor arguments on the model
(``model.model_args``), so that :func:`~rightreasons.models.weights.save_model` can store them and :func:`load_model`
can rebuild the model from the file alone.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn

from ..errors import CheckpointError, UsageError
from .capabilities import capabilities
from .preprocessing import restore_input_config
from .pretrained import download_pretrained, get_pretrained
from .registry import get_model_spec
from .weights import (METADATA_KEY, fitted_state, load_weights, model_file, read_metadata, read_state_dict,
                      restore_classes, restore_logit_layers)

__all__ = ["create_model", "load_model", "recorded_architecture", "resolve_architecture"]


def create_model(name: str, *, pretrained: bool = False, checkpoint: str | Path | None = None,
                 **kwargs: Any) -> nn.Module:
    """Build a registered model, optionally with weights.

    Args:
        name: a name from :func:`~rightreasons.models.registry.list_models`, e.g. ``"bcos_resnet50"``, optionally with a
            weights tag in timm's ``arch.tag`` convention, e.g. ``"bcos_resnet50.long"`` (the architecture is the part
            before the dot; the tag picks which published weights ``pretrained=True`` loads).
        pretrained: load the published weights of this architecture (or tag; see :mod:`rightreasons.models.pretrained`).
        checkpoint: a local weights file (state dict, release or Lightning checkpoint, or our safetensors file).
        **kwargs: constructor arguments, e.g. ``num_classes=20``. When ``num_classes`` differs from the weights',
            the classifier keeps its fresh initialisation and everything else is loaded.

    With released weights whose classifier is kept, ``model.classes`` holds their class names
    (``PretrainedWeights.meta["categories"]``); a model file of ours restores its logit layers and class names
    (:mod:`.weights`).

    Raises:
        UnknownNameError: no architecture of that name (the message suggests close ones).
        UsageError: constructor arguments the architecture does not accept, or contradicting options.
        CheckpointError, WeightsUnavailableError: weights that cannot be read, do not fit, or cannot be fetched.
    """
    architecture, _, tag = name.partition(".")
    spec = get_model_spec(architecture)
    if tag and not pretrained:
        raise UsageError(f"{name!r} names published weights (tag {tag!r}); pass pretrained=True, or build "
                         f"{architecture!r} without the tag")
    if pretrained and checkpoint is not None:
        raise UsageError("pass either pretrained=True or checkpoint=PATH, not both")
    spec.check_arguments(kwargs)
    try:
        model = spec.build(**kwargs)
    except ValueError as e:  # a constructor's own validation (e.g. num_classes < 1)
        raise UsageError(f"{architecture}: {e}") from e
    model.model_args = {"name": architecture, "kwargs": dict(kwargs)}
    if pretrained:
        checkpoint = download_pretrained(name)
    if checkpoint is not None:
        load_weights(model, checkpoint, replace_classifier="num_classes" in kwargs)
    if pretrained:
        categories = get_pretrained(name).meta["categories"]
        if capabilities(model).num_classes == len(categories):
            model.classes = tuple(categories)
    return model


_WEIGHT_SOURCES = ("pretrained", "checkpoint", "cache_dir", "url", "hub", "download", "file")
"""Words of constructor arguments that say where weights come from (timm's ``pretrained_cfg_overlay``,
``checkpoint_path``, ``cache_dir``; a ``pretrained`` flag): a model file's metadata may not pass any of them, since
whoever wrote the file would choose what this machine downloads or reads."""


def _recorded(metadata: dict[str, str], path: str | Path) -> tuple[str, dict[str, Any]] | None:
    """The registry name and constructor arguments a model file's ``metadata`` records (``None``: not our file)."""
    if METADATA_KEY not in metadata:
        return None
    try:
        args = json.loads(metadata[METADATA_KEY])
        name, kwargs = args["name"], args["kwargs"]
        if not isinstance(name, str) or not isinstance(kwargs, dict):
            raise TypeError("expected a name string and a kwargs mapping")
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: malformed {METADATA_KEY!r} metadata ({type(e).__name__}: {e})") from e
    sources = sorted(key for key in kwargs if any(word in str(key).lower() for word in _WEIGHT_SOURCES))
    if sources:
        raise CheckpointError(f"{path}: the {METADATA_KEY!r} metadata passes {sources} to {name}; a model file "
                              "describes an architecture, never where weights come from (a download or another "
                              "file), so a file cannot turn one on; expected constructor arguments of the "
                              "architecture only")
    return name, kwargs


def recorded_architecture(path: str | Path) -> tuple[str, dict[str, Any]] | None:
    """The registry name and constructor arguments that a model file written by rightreasons records (read from its
    header only); ``None`` for any other weights file (a release, a checkpoint's state dict)."""
    return _recorded(read_metadata(path), path)


def resolve_architecture(name: str | None, kwargs: dict[str, Any], checkpoint: str | Path | None,
                         key: str = "model") -> tuple[str, dict[str, Any]]:
    """The architecture to build for config section ``key``: the one ``checkpoint`` records when it is our model file
    (``name`` ``None`` takes it as it is; a ``name``/``kwargs`` that differ from it are a :class:`CheckpointError`
    naming each differing argument), else ``name`` with ``kwargs``. ``num_classes`` is never compared (fine-tuning
    may change it); with a file, the arguments are the file's (``num_classes`` included) updated by ``kwargs``."""
    recorded = None if checkpoint is None else recorded_architecture(checkpoint)
    if recorded is None:
        if name is None:
            source = "is not set" if checkpoint is None else \
                f"({checkpoint}) does not record an architecture (not a model file written by rightreasons)"
            raise UsageError(f"{key}.name is not set and {key}.checkpoint {source}: set {key}.name")
        return name, kwargs
    file_name, file_kwargs = recorded
    if name is None:
        name, kwargs = file_name, {**file_kwargs, **kwargs}
    if _differing(file_name, file_kwargs, name, kwargs):
        _refuse(key, checkpoint, file_name, file_kwargs, name, kwargs)
    return name, {**file_kwargs, **kwargs}


def _as_recorded(value: Any) -> Any:
    """``value`` as a model file records it (JSON: tuples become lists)."""
    return json.loads(json.dumps(value, default=str))


def _differing(file_name: str, file_kwargs: dict[str, Any], name: str, kwargs: dict[str, Any]) -> list[str]:
    """The constructor arguments (defaults filled in) whose values differ between the two."""
    if name.partition(".")[0] != file_name:
        return ["name"]
    file_args, args = (_as_recorded(get_model_spec(file_name).arguments(k)) for k in (file_kwargs, kwargs))
    return [k for k in dict.fromkeys([*file_args, *args]) if k != "num_classes" and file_args.get(k) != args.get(k)]


def _refuse(key: str, checkpoint: str | Path, file_name: str, file_kwargs: dict[str, Any], name: str,
            kwargs: dict[str, Any]) -> NoReturn:
    if name.partition(".")[0] != file_name:
        detail = f"architecture: {file_name} in the file, {name} in the config"
    else:
        spec = get_model_spec(file_name)
        file_args, args = _as_recorded(spec.arguments(file_kwargs)), _as_recorded(spec.arguments(kwargs))
        detail = "; ".join(f"{k}: {file_args.get(k)!r} in the file, {args.get(k)!r} in the config"
                           for k in _differing(file_name, file_kwargs, name, kwargs))
    raise CheckpointError(f"{key}.checkpoint={checkpoint} holds a {file_name} that differs from {key}.name/{key}.kwargs "
                          f"({detail}); set {key}.name=null and drop {key}.kwargs to build the file's architecture")


def load_model(path: str | Path) -> nn.Module:
    """Rebuild a model saved by :func:`~rightreasons.models.weights.save_model` (architecture and arguments come from
    the file) and load its weights, logit layers, class names (``model.classes``) and input (``model.input_config``,
    :mod:`.preprocessing`), the last two when the file has them. ``path`` may also be a model directory (an export
    of :func:`~rightreasons.models.hub.save_pretrained`, a Hub snapshot; :func:`~rightreasons.models.model_file`)."""
    if Path(path).is_dir():
        path = model_file(path, "model")
    state, metadata = read_state_dict(path)
    recorded = _recorded(metadata, path)
    if recorded is None:
        raise CheckpointError(f"{path}: not a rightreasons model file (no {METADATA_KEY!r} metadata), so it does not "
                              "say which architecture it holds; name it (a config's model.name, the CLI's --model, "
                              "or create_model(name, checkpoint=path) in Python)")
    name, kwargs = recorded
    try:
        with torch.device("meta"):  # check that the file's tensors fit before allocating anything it describes
            fitted = fitted_state(create_model(name, **kwargs), state)
    except (UsageError, KeyError) as e:
        raise CheckpointError(f"{path}: the file describes a model that cannot be built: {e}") from e
    except CheckpointError as e:
        raise CheckpointError(f"{path}: the weights do not fit the model the file describes: {e}") from None
    model = create_model(name, **kwargs)
    model.load_state_dict(fitted, strict=False)
    restore_logit_layers(model, metadata, str(path))
    restore_classes(model, metadata, str(path))
    restore_input_config(model, metadata, str(path))
    return model
