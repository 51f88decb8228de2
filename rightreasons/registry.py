"""One registry for every model family: ``create_model(name, ...)`` and ``list_models()``.

Builders register under a name with :func:`register_model`. :func:`create_model` records the name and the constructor
arguments on the model (``model.model_args``) so that :func:`rightreasons.checkpoints.save_model` can write them beside
the weights and :func:`rightreasons.checkpoints.load_model` can rebuild the model without the user repeating them.
"""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from torch import nn

__all__ = ["ModelSpec", "create_model", "get_model_spec", "list_models", "register_model"]


@dataclass(frozen=True)
class ModelSpec:
    """A registered architecture: its builder, family and default constructor arguments."""

    name: str
    builder: Callable[..., nn.Module]
    family: str
    bcos: bool
    defaults: dict[str, Any] = field(default_factory=dict)


_REGISTRY: dict[str, ModelSpec] = {}


def register_model(name: str, builder: Callable[..., nn.Module], *, family: str, bcos: bool = True,
                   **defaults: Any) -> ModelSpec:
    """Register ``builder(**defaults, **kwargs)`` under ``name``; names are unique."""
    if name in _REGISTRY:
        raise ValueError(f"model name {name!r} is already registered")
    spec = ModelSpec(name, builder, family, bcos, dict(defaults))
    _REGISTRY[name] = spec
    return spec


def list_models(pattern: str = "*", *, bcos: bool | None = None, family: str | None = None) -> list[str]:
    """Sorted registered names matching a shell-style ``pattern``, optionally only B-cos or one family."""
    return sorted(n for n, s in _REGISTRY.items() if fnmatch.fnmatch(n, pattern)
                  and (bcos is None or s.bcos == bcos) and (family is None or s.family == family))


def get_model_spec(name: str) -> ModelSpec:
    """The spec registered under ``name``; an unknown name raises ``KeyError`` listing close matches."""
    try:
        return _REGISTRY[name]
    except KeyError:
        close = difflib.get_close_matches(name, list(_REGISTRY), n=5, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else f"; see rightreasons.list_models() ({len(_REGISTRY)} models)"
        raise KeyError(f"unknown model {name!r}{hint}") from None


def create_model(name: str, *, pretrained: bool = False, checkpoint: str | Path | None = None,
                 **kwargs: Any) -> nn.Module:
    """Build a registered model, optionally with weights.

    Args:
        name: a name from :func:`list_models`, e.g. ``"bcos_resnet50"``, optionally with a weights tag in timm's
            ``arch.tag`` convention, e.g. ``"bcos_resnet50.long"`` (the architecture is the part before the dot; the
            tag picks which published weights ``pretrained=True`` loads).
        pretrained: load the published weights of this architecture (or tag; see :mod:`rightreasons.bcos.pretrained`).
        checkpoint: a local weights file (state dict, release or Lightning checkpoint, or our safetensors file).
        **kwargs: constructor arguments, e.g. ``num_classes=20``. When ``num_classes`` differs from the weights',
            the classifier keeps its fresh initialisation and everything else is loaded.
    """
    architecture, _, tag = name.partition(".")
    spec = get_model_spec(architecture)
    if tag and not pretrained:
        raise ValueError(f"{name!r} names published weights (tag {tag!r}); pass pretrained=True, or build "
                         f"{architecture!r} without the tag")
    args = {**spec.defaults, **kwargs}
    model = spec.builder(**args)
    model.model_args = {"name": architecture, "kwargs": dict(kwargs)}
    if pretrained and checkpoint is not None:
        raise ValueError("pass either pretrained=True or checkpoint=PATH, not both")
    if pretrained or checkpoint is not None:
        from .checkpoints import load_weights

        if pretrained:
            from .bcos.pretrained import download_pretrained

            checkpoint = download_pretrained(name)
        load_weights(model, checkpoint, replace_classifier="num_classes" in kwargs)
    return model
