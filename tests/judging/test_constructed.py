"""The judging's metrics that build inputs of their own (ROAD, IROF, the grid pointing game) on a hand-made batch:
they give the metric functions' values, and the grid pointing game scores exactly the images placed in grids."""

import math

import torch
from torch import nn

from rightreasons.judging import SUITE
from rightreasons.judging.suite import Scored
from rightreasons.metrics import grid_segments, irof, road

K, SIDE = 5, 8


class ChannelMean(nn.Module):
    """Logit k = 10 · mean of channel k, at any image size: an image whose channel c is 1 is class c, confidently."""

    def forward(self, x):
        return 10 * x.mean((2, 3))


def own_channel(model, x, target):
    """A perfect map: the explained class's channel (1 exactly where that class's image lies)."""
    return x[torch.arange(len(x)), target]


def batch(classes, output="softmax", attribution=own_channel, seed=0, noise=0.0):
    targets = torch.tensor(classes)
    images = torch.zeros(len(classes), K, SIDE, SIDE)
    images[torch.arange(len(classes)), targets] = 1.0
    images += noise * torch.rand(images.shape, generator=torch.Generator().manual_seed(seed))
    maps = attribution(ChannelMean(), images, targets)
    return Scored(ChannelMean(), images, targets, maps, torch.zeros(len(classes), SIDE, SIDE, dtype=torch.bool),
                  attribution, output, torch.Generator().manual_seed(seed))


def test_grid_pointing_game_scores_the_images_placed_in_grids():
    scores = SUITE["grid_pointing_game"].score(batch([0, 1, 2, 3, 4, 0]))["grid_pointing_game"]
    placed = ~scores.isnan()
    assert placed.sum() == 4                                   # one 2x2 grid; 5 classes cannot fill a second
    assert len(set(torch.tensor([0, 1, 2, 3, 4, 0])[placed].tolist())) == 4
    assert torch.allclose(scores[placed], torch.ones(4))     # the map lies on its own tile exactly
    uniform = batch([0, 1, 2, 3, 4, 0], attribution=lambda m, x, t: torch.ones(len(x), *x.shape[-2:]))
    scores = SUITE["grid_pointing_game"].score(uniform)["grid_pointing_game"]
    assert torch.allclose(scores[~scores.isnan()], torch.full((4,), 0.25))


def test_grid_pointing_game_is_nan_without_four_classes_or_single_labels():
    assert SUITE["grid_pointing_game"].score(batch([0, 1, 2, 0]))["grid_pointing_game"].isnan().all()
    multi = batch([0, 1, 2, 3], output="sigmoid")
    assert SUITE["grid_pointing_game"].score(multi)["grid_pointing_game"].isnan().all()


def test_road_and_irof_columns_are_the_metric_functions():
    b = batch([0, 1, 2, 3], attribution=lambda m, x, t: x[torch.arange(len(x)), t] + x[:, 4], noise=0.01)
    values = SUITE["road"].score(b)
    curves = road(b.model, b.images, b.targets, b.maps, output="softmax", generator=torch.Generator().manual_seed(0))
    assert torch.allclose(values["road_morf"], curves.morf_area) and torch.allclose(values["road_lerf"],
                                                                                    curves.lerf_area)
    expected = irof(b.model, b.images, b.targets, b.maps, segments=grid_segments(b.images, SIDE)).aoc
    assert torch.allclose(SUITE["irof"].score(b)["irof"], expected)
    assert all(math.isfinite(v) for v in expected.tolist())
