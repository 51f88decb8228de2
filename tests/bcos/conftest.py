"""Fixtures shared by the B-cos layer tests: every norm class of ``rightreasons.bcos.norms``, how to build one, and a
tiny network with every kind of dynamic-linear product."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from rightreasons.bcos import BcosConv2d, BcosLinear, DynamicGELU, DynamicLinear, norms

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


def tiny_network(norm_classes: list[type]) -> nn.Module:
    """Every kind of dynamic-linear product: B-cos units (one with MaxOut), each of ``norm_classes``, a GELU gate, a
    B-cos linear layer on pooled features. ``[N, 6, 8, 8] -> [N, 3]``."""
    layers = [BcosConv2d(6, 8, 3, padding=1)]
    for norm_class in norm_classes:
        norm = _build_norm(norm_class, 8)
        if _is_token_norm(norm_class):  # token norms act on [N, T, C]: run them on the pixels as tokens
            norm = nn.Sequential(nn.Flatten(2), _Transpose(), norm, _Transpose(), nn.Unflatten(2, (8, 8)))
        layers.append(norm)
    return nn.Sequential(*layers, DynamicGELU(), BcosConv2d(8, 8, 3, padding=1, max_out=2), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), BcosLinear(8, 3))


class _Transpose(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(1, 2)
