"""Limited annotations: which training images keep their boxes (docs/science.md, model guidance: 1 %, 10 % of the
training set); the seeded subset they are drawn with (also COCO's held-out images, :mod:`.coco`)."""

from __future__ import annotations

import math

import numpy as np

from .options import require_int, require_number

__all__ = ["annotated_count", "random_subset", "select_annotated"]


def annotated_count(n: int, fraction: float) -> int:
    """Number of annotated images: ``round(fraction · n)`` (halves up), at least 1 when ``fraction > 0``."""
    require_number("annotated_fraction", fraction, 0.0, 1.0)
    if fraction == 0.0 or n == 0:
        return 0
    return max(1, min(n, math.floor(fraction * n + 0.5)))


def random_subset(n: int, count: int, seed: int) -> np.ndarray:
    """Bool ``[n]``: ``count`` of ``n`` items chosen uniformly at random, a function of ``(n, count, seed)`` only."""
    chosen = np.zeros(n, dtype=bool)
    chosen[np.random.Generator(np.random.PCG64(seed)).permutation(n)[:count]] = True
    return chosen


def select_annotated(n: int, fraction: float, seed: int) -> np.ndarray:
    """Bool ``[n]``: exactly :func:`annotated_count` images chosen uniformly at random, a function of ``seed`` only."""
    require_int("annotation_seed", seed, 0)
    return random_subset(n, annotated_count(n, fraction), seed)
