"""Fixtures shared by the B-cos layer tests: every norm class of ``rightreasons.bcos.norms`` and how to build one."""

from __future__ import annotations

import inspect

import pytest
from torch import nn

from rightreasons.bcos import DynamicLinear, norms

NORM_CLASSES = sorted((cls for cls in vars(norms).values()
                       if isinstance(cls, type) and issubclass(cls, DynamicLinear) and cls.__module__ == norms.__name__
                       and not cls.__name__.startswith("_")), key=lambda cls: cls.__name__)
"""Every public norm class defined in ``norms.py`` (new ones are picked up automatically)."""


def _build_norm(cls: type, channels: int) -> nn.Module:
    """Construct a norm class with default settings (two groups where a group count is asked)."""
    if "num_groups" in inspect.signature(cls.__init__).parameters:
        return cls(2, channels)
    return cls(channels)


def _is_token_norm(cls: type) -> bool:
    """Token norms act on the last dim of ``[N, T, C]``; all others on ``[N, C, H, W]``."""
    return issubclass(cls, nn.LayerNorm) and not getattr(cls, "channels_first", False)


def _name(cls: type) -> str:
    return cls.__name__


@pytest.fixture
def norm_classes() -> list[type]:
    """Every public norm class defined in ``norms.py``, sorted by name."""
    return list(NORM_CLASSES)


@pytest.fixture(params=NORM_CLASSES, ids=_name)
def norm_class(request) -> type:
    """Each public norm class of ``norms.py`` in turn."""
    return request.param


@pytest.fixture(params=[cls for cls in NORM_CLASSES if not _is_token_norm(cls)], ids=_name)
def image_norm_class(request) -> type:
    """Each norm class acting on ``[N, C, H, W]`` images (all but the token norms)."""
    return request.param


@pytest.fixture(params=[cls for cls in NORM_CLASSES if cls is not norms.LayerNormUncentered], ids=_name)
def referenced_norm_class(request) -> type:
    """Each norm class with a counterpart in the ``bcos`` package (all but ``LayerNormUncentered``)."""
    return request.param


@pytest.fixture
def build_norm():
    """``build_norm(cls, channels)``: a norm with default settings (two groups where a group count is asked)."""
    return _build_norm


@pytest.fixture
def is_token_norm():
    """``is_token_norm(cls)``: whether the norm acts on the last dim of ``[N, T, C]`` rather than ``[N, C, H, W]``."""
    return _is_token_norm
