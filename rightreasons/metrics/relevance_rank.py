"""Rank-based localisation: the share of a map's ``k`` highest-ranked pixels that lie inside the mask.

* :func:`relevance_rank_accuracy` — ``k = |M|``, the mask's own size (Arras et al. 2022, "CLEVR-XAI: a benchmark
  dataset for the ground truth evaluation of neural network explanations", Information Fusion);
* :func:`top_k_intersection` — a fixed ``k`` (Theiner et al. 2021, "Interpretable semantic photo geolocation",
  WACV; Quantus's default ``k = 1000``).

Both rank the signed attributions, so positive evidence ranks first; pass ``attributions.abs()`` to rank magnitudes
(Quantus's default). Both are invariant to the map's scale and offset.

**Ties** at the ``k``-th place are split evenly: the score is its expected value when ties are broken uniformly at
random, so it does not depend on pixel order. A constant map (all zero, say) therefore scores the chance level
``|M| / (H·W)`` — the share of a random choice of ``k`` pixels that lands in the mask. An empty mask scores 0.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import PerSampleMean, check_binary_mask, check_maps

__all__ = ["RelevanceRankAccuracy", "TopKIntersection", "relevance_rank_accuracy", "top_k_intersection",
           "top_k_share"]


def top_k_share(attributions: Tensor, mask: Tensor, k: Tensor) -> Tensor:
    """Expected share ``[N]`` of the ``k[n]`` highest pixels of each map that lie in its mask, ties split evenly.

    ``attributions`` ``[N, H, W]`` float; ``mask`` ``[N, H, W]`` bool; ``k`` ``[N]`` integers in ``[0, H·W]`` (a row
    with ``k = 0`` scores 0). Unchecked: the public functions check their inputs.
    """
    flat, inside = attributions.detach().flatten(1), mask.flatten(1)
    k = k.to(flat.device)
    ranked = flat.sort(1, descending=True).values
    kth = ranked.gather(1, (k.clamp(min=1) - 1)[:, None])               # the value at the k-th place
    above, tied = flat > kth, flat == kth
    need = (k - above.sum(1)).to(flat.dtype)                            # places left for the tied pixels
    tied_inside = (tied & inside).sum(1).to(flat.dtype) / tied.sum(1).to(flat.dtype)
    share = ((above & inside).sum(1).to(flat.dtype) + need * tied_inside) / k.clamp(min=1).to(flat.dtype)
    return torch.where(k > 0, share, torch.zeros_like(share))


def _inputs(where: str, attributions: Tensor, masks: Tensor) -> tuple[Tensor, Tensor]:
    check_maps(where, attributions=attributions, masks=masks)
    if not attributions.is_floating_point():
        raise ValueError(f"{where}: attributions must be a floating-point tensor, got {attributions.dtype}")
    return attributions, check_binary_mask(where, "masks", masks)


def relevance_rank_accuracy(attributions: Tensor, masks: Tensor) -> Tensor:
    """Relevance rank accuracy per pair ``[N]``: the share of the ``|M|`` highest-ranked pixels that lie in the mask
    ``M`` (1 when the mask's pixels outrank all others); ties and degenerate cases as in the module docstring.

    Args:
        attributions: ``[N, H, W]`` maps; masks: ``[N, H, W]`` bool or 0/1 ground-truth masks.
    """
    attributions, mask = _inputs("relevance_rank_accuracy", attributions, masks)
    return top_k_share(attributions, mask, mask.flatten(1).sum(1))


def _check_k(where: str, k: int, pixels: int | None = None) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1 or (pixels is not None and k > pixels):
        limit = f" and <= H·W = {pixels}" if pixels is not None else ""
        raise ValueError(f"{where}: k must be an integer >= 1{limit}, got {k!r}")
    return k


def top_k_intersection(attributions: Tensor, masks: Tensor, k: int = 1000) -> Tensor:
    """Top-k intersection per pair ``[N]``: the share of the ``k`` highest-ranked pixels that lie in the mask; ties
    as in the module docstring. At most ``|M| / k``, so compare maps at one ``k``.

    Args:
        attributions: ``[N, H, W]`` maps; masks: ``[N, H, W]`` bool or 0/1 ground-truth masks.
        k: pixels taken, ``1 <= k <= H·W`` (Quantus: 1000).
    """
    attributions, mask = _inputs("top_k_intersection", attributions, masks)
    k = _check_k("top_k_intersection", k, attributions[0].numel())
    return top_k_share(attributions, mask, torch.full((mask.shape[0],), k, device=mask.device))


class RelevanceRankAccuracy(PerSampleMean):
    """Mean :func:`relevance_rank_accuracy` over every pair passed to ``update(attributions, masks)``."""

    def score(self, attributions: Tensor, masks: Tensor) -> Tensor:
        return relevance_rank_accuracy(attributions, masks)


class TopKIntersection(PerSampleMean):
    """Mean :func:`top_k_intersection` over every pair passed to ``update(attributions, masks)``.

    Args:
        k: pixels taken per map (Quantus: 1000).
    """

    def __init__(self, k: int = 1000, **kwargs) -> None:
        super().__init__(**kwargs)
        self.k = _check_k("TopKIntersection", k)

    def score(self, attributions: Tensor, masks: Tensor) -> Tensor:
        return top_k_intersection(attributions, masks, self.k)
