"""The attribution callables the evaluations take, so that they work with any attribution method or model.

An :data:`AttributionFn` is ``fn(model, x [N, C, H, W], target [N]) -> [N, H, W]``: one map per sample for that
sample's target class, at the input's spatial resolution. :func:`attribution_fn` builds one from
:func:`rightreasons.explain.attribute`; any other function with that signature (Captum, a resizing wrapper for a ViT,
a fixed map in a test) works as well.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..explain import attribute

__all__ = ["AttributionFn", "attribution_fn", "run_attribution"]

AttributionFn = Callable[[nn.Module, Tensor, Tensor], Tensor]


def attribution_fn(method: str = "bcos", layer: str = "input", **options: Any) -> AttributionFn:
    """An :data:`AttributionFn` returning the maps of ``attribute(model, x, target, method, layer, **options)``
    (:func:`rightreasons.explain.attribute`); ``options`` e.g. ``steps`` for ``intgrad``."""

    def fn(model: nn.Module, x: Tensor, target: Tensor) -> Tensor:
        return attribute(model, x, target, method, layer, **options).maps

    fn.__name__ = f"attribution_fn_{method}_{layer}"
    return fn


def run_attribution(fn: AttributionFn, model: nn.Module, x: Tensor, target: Tensor,
                    batch_size: int | None = None) -> Tensor:
    """Call ``fn`` with gradients enabled (evaluation loops often run under ``no_grad``) and return its detached
    maps, checked to be ``[N, H, W]`` at the resolution of ``x [N, C, H, W]``; ``batch_size`` images per call
    (``None``: all at once)."""
    if batch_size is not None and batch_size < len(x):
        return torch.cat([run_attribution(fn, model, x[s:s + batch_size], target[s:s + batch_size])
                          for s in range(0, len(x), batch_size)])
    with torch.enable_grad():
        maps = fn(model, x, target)
    expected = (x.shape[0], *x.shape[-2:])
    if not isinstance(maps, Tensor) or tuple(maps.shape) != expected:
        got = tuple(maps.shape) if isinstance(maps, Tensor) else type(maps).__name__
        raise ValueError(f"attribution function {getattr(fn, '__name__', fn)!r} must return maps [N, H, W] = "
                         f"{list(expected)} at the input resolution, got {got}; upsample lower-resolution maps "
                         "(and resize for models with a fixed input size) inside the function")
    return maps.detach()
