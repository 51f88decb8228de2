"""The grid pointing game of the B-cos papers (docs/science.md, evaluating explanations; thesis eq. 4.1 / 5.14).

Images that the model classifies correctly and confidently on their own are tiled into ``n × n`` grids (2×2, 3×3)
of distinct classes. For each tile's class the attribution map of the whole grid is computed, and the score is the
share of positive attribution that falls inside that class's tile: 1 for a perfect map, ``1/n²`` for a uniform one.

Construction follows the papers: candidates are sorted by confidence per class; each grid draws a random set of
``n²`` distinct classes and takes, per class, the most confident image not used by an earlier grid.

Works with any model and any :data:`~rightreasons.metrics.AttributionFn`. The model sees the grid at ``n`` times
the tile resolution, which CNNs accept; for a model with a fixed input size (ViTs) the attribution function must
resize the grid to the model's size and its maps back to the grid size (or evaluate in sliding windows) itself.
The B-cos v2 paper smooths maps with a 15×15 box filter (3×3 on CIFAR-10) before scoring: ``smoothing=15``.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attribution_fn import AttributionFn, run_attribution
from .base import PerSampleMean, check_maps
from .localization import energy_ratio

__all__ = ["GridBatch", "GridPointingGame", "build_grids", "grid_pointing_game", "pointing_game_scores",
           "select_confident", "smooth_attributions", "tile_masks"]


@torch.no_grad()
def select_confident(model: nn.Module, images: Tensor, labels: Tensor, threshold: float = 0.5,
                     batch_size: int = 64) -> tuple[Tensor, Tensor]:
    """Images the model classifies correctly with softmax confidence ``>= threshold`` in their true class.

    Args:
        model: classifier returning logits ``[M, K]`` (put it in eval mode first).
        images: ``[M, C, H, W]`` candidate images (for a dataset, stack a candidate subset first).
        labels: ``[M]`` true classes.

    Returns:
        ``(indices [S], confidences [S])``: rows of ``images`` sorted by decreasing confidence.
    """
    if images.dim() != 4 or labels.shape != (images.shape[0],):
        raise ValueError(f"select_confident: need images [M, C, H, W] and labels [M], got shapes "
                         f"{tuple(images.shape)} and {tuple(labels.shape)}")
    probs = torch.cat([model(images[i:i + batch_size]).softmax(1) for i in range(0, len(images), batch_size)])
    labels = labels.to(probs.device).long()
    confidence = probs.gather(1, labels[:, None])[:, 0]
    keep = (probs.argmax(1) == labels) & (confidence >= threshold)
    indices = keep.nonzero()[:, 0]
    order = confidence[indices].argsort(descending=True, stable=True)
    return indices[order], confidence[indices][order]


@dataclass
class GridBatch:
    """``G`` grids of ``n × n`` tiles.

    Attributes:
        images: ``[G, C, n·H, n·W]`` the grids.
        classes: ``[G, n²]`` the class of each tile, tiles in row-major order.
        sources: ``[G, n²]`` the row of each tile's image in the ``images`` the grids were built from.
        n: tiles per side.
    """

    images: Tensor
    classes: Tensor
    sources: Tensor
    n: int


def build_grids(images: Tensor, labels: Tensor, indices: Tensor, n: int = 3, num_grids: int | None = None,
                generator: torch.Generator | None = None) -> GridBatch:
    """Tile confidently classified images into grids of ``n²`` distinct classes.

    Args:
        images: ``[M, C, H, W]`` images; ``labels``: ``[M]`` their classes.
        indices: candidate rows, most confident first (from :func:`select_confident`).
        n: tiles per side (2 or 3 in the papers).
        num_grids: how many grids; ``None`` = as many as the candidates allow. When fewer can be built, the ones
            built are returned with a warning.
        generator: seeds the random choice of classes per grid.
    """
    if n < 1:
        raise ValueError(f"build_grids: n must be >= 1, got {n}")
    classes = labels.tolist()
    queues: dict[int, list[int]] = {}
    for i in indices.tolist():
        queues.setdefault(int(classes[i]), []).append(i)
    chosen: list[list[int]] = []
    while num_grids is None or len(chosen) < num_grids:
        available = sorted(c for c, q in queues.items() if q)
        if len(available) < n * n:
            break
        picks = torch.randperm(len(available), generator=generator)[:n * n].tolist()
        chosen.append([queues[available[p]].pop(0) for p in picks])
    if not chosen:
        raise ValueError(f"build_grids: an {n}x{n} grid needs confident images of {n * n} distinct classes, "
                         f"the candidates cover {len(queues)}")
    if num_grids is not None and len(chosen) < num_grids:
        warnings.warn(f"build_grids: only {len(chosen)} of {num_grids} grids could be built from the candidates",
                      stacklevel=2)
    sources = torch.tensor(chosen, device=images.device)
    g, (c, h, w) = len(chosen), images.shape[1:]
    tiles = images[sources.flatten()].view(g, n, n, c, h, w)
    grids = tiles.permute(0, 3, 1, 4, 2, 5).reshape(g, c, n * h, n * w)
    return GridBatch(grids, labels.to(images.device)[sources].long(), sources, n)


def tile_masks(tiles: Tensor, n: int, height: int, width: int) -> Tensor:
    """Bool masks ``[P, H, W]`` of tile ``tiles[p]`` (row-major) in an ``n × n`` grid of size ``H × W``."""
    if height % n or width % n:
        raise ValueError(f"tile_masks: grid size {height}x{width} is not divisible into {n}x{n} tiles")
    rows = torch.arange(height, device=tiles.device) // (height // n)
    cols = torch.arange(width, device=tiles.device) // (width // n)
    cell = rows[:, None] * n + cols[None, :]
    return cell[None] == tiles[:, None, None]


def smooth_attributions(attributions: Tensor, kernel_size: int) -> Tensor:
    """Box-filter maps ``[N, H, W]`` with an odd ``kernel_size`` (stride 1, same size; 0 or 1 = unchanged)."""
    if kernel_size in (0, 1):
        return attributions
    if kernel_size < 0 or kernel_size % 2 == 0:
        raise ValueError(f"smooth_attributions: kernel_size must be odd (or 0 for none), got {kernel_size}")
    return F.avg_pool2d(attributions[:, None], kernel_size, stride=1, padding=kernel_size // 2,
                        count_include_pad=False)[:, 0]


def pointing_game_scores(attributions: Tensor, tiles: Tensor, n: int, smoothing: int = 0) -> Tensor:
    """Share of positive attribution inside the correct tile, per map ``[P]`` (0 for a map without positive values).

    Args:
        attributions: ``[P, H, W]`` maps of whole grids; ``tiles``: ``[P]`` the tile (row-major) of each map's class.
        n: tiles per side; ``smoothing``: box-filter size applied first (see :func:`smooth_attributions`).
    """
    check_maps("pointing_game_scores", attributions=attributions)
    if tiles.shape != (attributions.shape[0],) or tiles.is_floating_point() or ((tiles < 0) | (tiles >= n * n)).any():
        raise ValueError(f"pointing_game_scores: tiles must be [P] = [{attributions.shape[0]}] ids in "
                         f"[0, {n * n - 1}], got {tiles.tolist()}")
    masks = tile_masks(tiles.to(attributions.device), n, *attributions.shape[-2:])
    return energy_ratio(smooth_attributions(attributions, smoothing), masks)


class GridPointingGame(PerSampleMean):
    """Mean pointing-game score over all (grid, tile) pairs passed to ``update(attributions [P,H,W], tiles [P])``.

    Args:
        n: tiles per side; smoothing: box-filter size before scoring (B-cos v2: 15 at 224 px per tile).
    """

    def __init__(self, n: int = 3, smoothing: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        self.n = n
        self.smoothing = smoothing

    def score(self, attributions: Tensor, tiles: Tensor) -> Tensor:
        return pointing_game_scores(attributions, tiles, self.n, self.smoothing)


def grid_pointing_game(model: nn.Module, grids: GridBatch, attribution: AttributionFn, batch_size: int = 16,
                       smoothing: int = 0) -> Tensor:
    """Pointing-game scores ``[G, n²]`` of ``attribution`` on every tile's class of every grid.

    Each grid is explained once per tile class (``batch_size`` grid-class pairs per attribution call); entry
    ``[g, t]`` is the share of positive attribution for ``grids.classes[g, t]`` that falls inside tile ``t``.
    """
    g, tiles_per_grid = grids.classes.shape
    grid_index = torch.arange(g, device=grids.images.device).repeat_interleave(tiles_per_grid)
    tiles = torch.arange(tiles_per_grid, device=grids.images.device).repeat(g)
    targets = grids.classes.flatten()
    scores = []
    for start in range(0, len(targets), batch_size):
        part = slice(start, start + batch_size)
        maps = run_attribution(attribution, model, grids.images[grid_index[part]], targets[part])
        scores.append(pointing_game_scores(maps, tiles[part], grids.n, smoothing))
    return torch.cat(scores).view(g, tiles_per_grid)
