"""The judging's metrics that build inputs of their own from a batch (opt-in in :data:`~.suite.SUITE`): ROAD (noisy
linear imputation), IROF (grid superpixels) and the grid pointing game (grids of the batch's own images).

Each takes a :class:`~.suite.Scored` batch and returns ``{column: [N]}`` as the suite's other metrics do.

The **grid pointing game** (:mod:`rightreasons.metrics.pointing_game`) needs images of distinct classes that the
model classifies correctly and confidently (softmax ``≥ 0.5``); a judging builds its ``2 × 2`` grids from the images
of each batch (``judge --batch-size``, 32 by default): the confident ones, most confident first, four distinct
classes per grid, the classes drawn with the judging's seeded generator. Each image used in a grid is scored by the
share of positive attribution of its class that falls in its own tile (1 perfect, 1/4 uniform); the other images —
not confident, of a class already used up, or in a batch without four confident classes — are NaN, so the column
averages over the images placed in grids (its ``_n`` says how many). The model sees the grid at twice the image's
side, which CNNs accept; a model with a fixed input size (a ViT) cannot take it. Multi-label datasets have no
single class per image: the column is NaN there.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..metrics import build_grids, grid_pointing_game, grid_segments, irof, road, select_confident

__all__ = ["GRID_SIDE", "IROF_CELLS", "grid_pointing_game_score", "irof_score", "road_score"]

GRID_SIDE = 2
"""Tiles per side of the judging's grids (2 × 2: four distinct classes per batch suffice)."""
IROF_CELLS = 10
"""Cells per side of IROF's grid of superpixels (at most the image's side)."""


def road_score(b: Any) -> dict[str, Tensor]:
    """ROAD areas of the tracked score over 0 … 90 % removed (the batch's ``output``; ROAD's own measure, the
    accuracy, is 0 or 1 per image): ``road_morf`` (lower is better) and ``road_lerf`` (higher is better)."""
    curves = road(b.model, b.images, b.targets, b.maps, output=b.output, generator=b.generator,
                  batch_size=len(b.images))
    return {"road_morf": curves.morf_area, "road_lerf": curves.lerf_area}


def irof_score(b: Any) -> dict[str, Tensor]:
    """IROF over a grid of ``IROF_CELLS²`` superpixels, removed to the image's per-channel mean."""
    cells = min(IROF_CELLS, *b.images.shape[-2:])
    return {"irof": irof(b.model, b.images, b.targets, b.maps, segments=grid_segments(b.images, cells),
                         output=b.output, batch_size=len(b.images)).aoc}


def grid_pointing_game_score(b: Any) -> dict[str, Tensor]:
    """The grid pointing game of every image placed in a grid of its batch; NaN for the others (module docstring)."""
    out = torch.full((len(b.images),), torch.nan, device=b.maps.device)
    if b.output != "softmax":
        return {"grid_pointing_game": out}
    picked, _ = select_confident(b.model, b.images, b.targets, batch_size=len(b.images))
    if len(set(b.targets[picked].tolist())) < GRID_SIDE ** 2:
        return {"grid_pointing_game": out}
    grids = build_grids(b.images, b.targets, picked, n=GRID_SIDE, generator=b.generator)
    scores = grid_pointing_game(b.model, grids, b.attribution, batch_size=len(b.images))
    out[grids.sources.flatten().to(out.device)] = scores.flatten().to(out.dtype)
    return {"grid_pointing_game": out}
