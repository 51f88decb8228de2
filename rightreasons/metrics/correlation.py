"""Batched correlation coefficients along the last dimension, finite for constant inputs (they score 0: a constant
shows no relation), shared by the faithfulness-correlation and randomisation metrics."""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["average_ranks", "pearson", "spearman"]


def pearson(x: Tensor, y: Tensor) -> Tensor:
    """Pearson correlation along the last dimension of ``x`` and ``y`` ``[..., R]``; 0 where either is constant."""
    x = x - x.mean(-1, keepdim=True)
    y = y - y.mean(-1, keepdim=True)
    scale = (x.square().sum(-1) * y.square().sum(-1)).sqrt()
    return torch.where(scale > 0, (x * y).sum(-1) / torch.where(scale > 0, scale, 1.0), 0.0)


def average_ranks(x: Tensor) -> Tensor:
    """1-based ranks along the last dimension of ``x`` ``[..., R]``, tied values sharing their mean rank (as
    ``scipy.stats.rankdata``), in ``x``'s floating dtype (float32 for other dtypes)."""
    values = x.contiguous()
    ordered = values.sort(-1).values
    below = torch.searchsorted(ordered, values, right=False)
    through = torch.searchsorted(ordered, values, right=True)
    dtype = x.dtype if x.is_floating_point() else torch.float32
    return (below + through + 1).to(dtype) / 2


def spearman(x: Tensor, y: Tensor) -> Tensor:
    """Spearman rank correlation along the last dimension (Pearson of :func:`average_ranks`); 0 where either is
    constant."""
    return pearson(average_ranks(x), average_ranks(y))
