"""Complexity of attribution maps: how concentrated a map's magnitude ``|A|`` is, whatever its sign and scale.

* :func:`sparseness` — the Gini index of ``|A|`` (Chalasani et al. 2020, "Concise explanations of neural networks
  using adversarial training", ICML): 0 for a uniform map, ``1 − 1/(H·W)`` for a single non-zero pixel; higher is
  more concise.
* :func:`complexity` — the entropy of ``|A| / Σ|A|`` in nats (Bhatt et al. 2020, "Evaluating and aggregating
  feature-based model explanations", IJCAI): 0 for a single non-zero pixel, ``log(H·W)`` for a uniform map; lower
  is more concise.

An all-zero map is scored as the uniform map it is the limit of (sparseness 0, complexity ``log(H·W)``): it singles
out no pixel. Quantus adds 1e-7 to ``|A|`` instead, which makes its scores depend on the map's scale.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .base import PerSampleMean, check_maps

__all__ = ["Complexity", "Sparseness", "complexity", "sparseness"]


def _magnitudes(where: str, attributions: Tensor) -> Tensor:
    """``|A|`` flattened to ``[N, H·W]``, with all-zero rows replaced by ones (the uniform map)."""
    check_maps(where, attributions=attributions)
    if not attributions.is_floating_point():
        raise ValueError(f"{where}: attributions must be a floating-point tensor, got {attributions.dtype}")
    magnitude = attributions.detach().flatten(1).abs()
    empty = (magnitude.sum(1, keepdim=True) == 0).expand_as(magnitude)
    return torch.where(empty, torch.ones_like(magnitude), magnitude)


def sparseness(attributions: Tensor) -> Tensor:
    """Gini index of ``|A|`` per map ``[N]``, in ``[0, 1 − 1/(H·W)]``: ``Σᵢ (2i − n − 1)·a₍ᵢ₎ / (n·Σ a)`` over the
    ``n = H·W`` magnitudes sorted ascending (ties need no rule: tied values are interchangeable).

    Args:
        attributions: ``[N, H, W]`` maps (any sign; all zero scores 0).
    """
    magnitude = _magnitudes("sparseness", attributions).sort(1).values
    n = magnitude.shape[1]
    weights = 2 * torch.arange(1, n + 1, device=magnitude.device, dtype=magnitude.dtype) - n - 1
    return (magnitude * weights).sum(1) / (n * magnitude.sum(1))


def complexity(attributions: Tensor) -> Tensor:
    """Entropy ``−Σ p·log p`` of ``p = |A| / Σ|A|`` per map ``[N]``, in nats, in ``[0, log(H·W)]`` (``0·log 0 = 0``).

    Args:
        attributions: ``[N, H, W]`` maps (any sign; all zero scores ``log(H·W)``).
    """
    magnitude = _magnitudes("complexity", attributions)
    p = magnitude / magnitude.sum(1, keepdim=True)
    return -torch.xlogy(p, p).sum(1)


class Sparseness(PerSampleMean):
    """Mean :func:`sparseness` over every map passed to ``update(attributions [N, H, W])``; higher is better."""

    def score(self, attributions: Tensor) -> Tensor:
        return sparseness(attributions)


class Complexity(PerSampleMean):
    """Mean :func:`complexity` over every map passed to ``update(attributions [N, H, W])``; lower is better."""

    higher_is_better = False

    def score(self, attributions: Tensor) -> Tensor:
        return complexity(attributions)
