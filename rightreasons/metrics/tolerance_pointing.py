"""The standard pointing game with a tolerance (Zhang et al. 2018, "Top-down neural attention by excitation
backprop", IJCV; the TorchRay benchmark): a map *hits* when its maximum lies within ``tolerance`` pixels of the
object mask. (The grid pointing game of the B-cos papers is :mod:`.pointing_game`.)

Rules, stated once:

* **Distance** — as TorchRay: a point hits when some mask pixel lies at Euclidean distance ``< tolerance`` from it
  (TorchRay's default 15 px). ``tolerance = 1`` asks for the point itself to lie in the mask.
* **Ties** — every maximal pixel counts: a map hits when *any* pixel holding its maximum is within tolerance (the
  rule of Quantus's ``PointingGame``; TorchRay takes one ``argmax``, which leaves the choice among ties to the
  implementation).
* **Sign** — the raw maximum is used, so the score ignores a map's scale and offset; an all-negative map points at
  its least negative pixel.
* **Degenerate maps and masks** — a constant map (all zero, say) points nowhere and misses; an empty mask is a
  miss (pass only pairs whose class is present, as TorchRay does).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .base import PerSampleMean, check_binary_mask, check_maps

__all__ = ["PointingGame", "pointing_game"]


def _check_tolerance(where: str, tolerance: float) -> float:
    if isinstance(tolerance, bool) or not (isinstance(tolerance, (int, float)) and math.isfinite(tolerance)
                                           and tolerance > 0):
        raise ValueError(f"{where}: tolerance must be a finite number of pixels > 0, got {tolerance!r}")
    return float(tolerance)


def _dilate(masks: Tensor, tolerance: float) -> Tensor:
    """Bool masks ``[N, H, W]`` grown to every pixel at Euclidean distance ``< tolerance`` from the mask (a disc
    structuring element; ``tolerance = 1`` returns the masks unchanged)."""
    radius = math.ceil(tolerance) - 1
    offsets = torch.arange(-radius, radius + 1, device=masks.device, dtype=torch.float32)
    disc = (offsets[:, None] ** 2 + offsets[None, :] ** 2 < tolerance ** 2).to(torch.float32)
    # The counts are exact small integers in float32, so "> 0.5" is exact.
    covered = F.conv2d(masks[:, None].to(torch.float32), disc[None, None], padding=radius)[:, 0]
    return covered > 0.5


def pointing_game(attributions: Tensor, masks: Tensor, tolerance: float = 15) -> Tensor:
    """Pointing-game hits per pair ``[N]`` (1.0 hit, 0.0 miss), with the rules of the module docstring.

    Args:
        attributions: ``[N, H, W]`` maps (any sign; only their maximal pixels matter).
        masks: ``[N, H, W]`` bool or 0/1 object masks at the maps' resolution.
        tolerance: hit radius in pixels, ``> 0`` (strict: distance ``< tolerance``).
    """
    check_maps("pointing_game", attributions=attributions, masks=masks)
    mask = check_binary_mask("pointing_game", "masks", masks)
    tolerance = _check_tolerance("pointing_game", tolerance)
    flat = attributions.detach().flatten(1)
    high = flat.amax(1, keepdim=True)
    maximal = (flat == high) & (flat.amin(1, keepdim=True) < high)   # a constant map has no maximal pixel
    hit = (maximal & _dilate(mask, tolerance).flatten(1)).any(1)
    return hit.to(torch.promote_types(attributions.dtype, torch.float32))


class PointingGame(PerSampleMean):
    """Pointing-game accuracy (hits / pairs) over every pair passed to ``update(attributions [N,H,W], masks [N,H,W])``.

    Args:
        tolerance: hit radius in pixels (TorchRay: 15), see :func:`pointing_game`.

    TorchRay reports the mean of per-class accuracies; for that, keep one metric per class.
    """

    def __init__(self, tolerance: float = 15, **kwargs) -> None:
        super().__init__(**kwargs)
        self.tolerance = _check_tolerance("PointingGame", tolerance)

    def score(self, attributions: Tensor, masks: Tensor) -> Tensor:
        return pointing_game(attributions, masks, self.tolerance)
