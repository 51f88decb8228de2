"""The confidence interval of a metric's mean over images: a percentile bootstrap, resampling the images with a seed.

Bootstrap rather than a t-interval because the per-image scores are bounded and often far from normal (the pointing
game is 0 or 1 per image); the percentile interval stays inside the metric's range. NaN scores (an image without a
box of its class, for a localisation metric) are left out before resampling.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["BOOTSTRAP_RESAMPLES", "Interval", "bootstrap_interval"]

BOOTSTRAP_RESAMPLES = 1000
"""Resamples of the images per interval."""


@dataclass(frozen=True)
class Interval:
    """The ``mean`` of ``n`` scores and the bounds ``low``, ``high`` of its 95 % interval (all NaN for ``n = 0``)."""

    mean: float
    low: float
    high: float
    n: int


def bootstrap_interval(scores: Tensor, seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES,
                       level: float = 0.95) -> Interval:
    """The mean of ``scores [N]`` (NaN left out) and its percentile-bootstrap interval at ``level``: the
    ``(1 ± level) / 2`` quantiles of the means of ``resamples`` resamples drawn with replacement, seeded by ``seed``."""
    values = scores.detach().double().cpu()
    values = values[~values.isnan()]
    if not len(values):
        return Interval(float("nan"), float("nan"), float("nan"), 0)
    generator = torch.Generator().manual_seed(seed)
    means = values[torch.randint(len(values), (resamples, len(values)), generator=generator)].mean(1)
    tail = (1 - level) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1 - tail], dtype=means.dtype)).tolist()
    return Interval(values.mean().item(), low, high, len(values))
