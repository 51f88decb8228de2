"""IROF: a case worked by hand (four quadrant segments on a linear model), ties in label order, batches of images
with different segment counts against the images one by one, and the grid segments."""

import pytest
import torch

from rightreasons.metrics import IROF, grid_segments, irof, segment_ranks
from linear_model import LinearTwoClass

QUADRANTS = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]])
IMAGE = (QUADRANTS + 1).double()[None, None]                  # quadrant values 1, 2, 3, 4; logit = Σ x = 40


def test_by_hand():
    # mean value 40 / 16 = 2.5; attribution = the image, so the quadrants go 4, 3, 2, 1:
    # 40 → 40 − 16 + 10 = 34 → 34 − 12 + 10 = 32 → 32 − 8 + 10 = 34 → 34 − 4 + 10 = 40
    model = LinearTwoClass(torch.ones(1, 1, 4, 4, dtype=torch.float64))
    result = irof(model, IMAGE, torch.tensor([0]), IMAGE[:, 0], segments=QUADRANTS[None], output="logit")
    assert torch.allclose(result.curves, torch.tensor([[1, 0.85, 0.8, 0.85, 1]], dtype=torch.float64))
    assert result.fractions.tolist() == [[0, 0.25, 0.5, 0.75, 1]]
    assert result.aoc.item() == pytest.approx(1 - 0.25 * (0.5 + 0.85 + 0.8 + 0.85 + 0.5))
    # a constant map ties every segment: label order 1, 2, 3, 4 → 46, 48, 46, 40
    tied = irof(model, IMAGE, torch.tensor([0]), torch.zeros(1, 4, 4), segments=QUADRANTS[None], output="logit")
    assert torch.allclose(tied.curves, torch.tensor([[40, 46, 48, 46, 40]], dtype=torch.float64) / 40)
    # a number as the baseline: 0 removes each quadrant's contribution, 40 → 24 → 12 → 4 → 0
    zero = irof(model, IMAGE, torch.tensor([0]), IMAGE[:, 0], segments=QUADRANTS[None], baseline=0.0,
                output="logit")
    assert torch.allclose(zero.curves * 40, torch.tensor([[40, 24, 12, 4, 0]], dtype=torch.float64))


def test_labels_and_segment_counts_per_image():
    segments = torch.stack([QUADRANTS * 7 + 3, (torch.arange(4) >= 2).long().expand(4, 4) * 5])
    ranks, counts = segment_ranks(torch.stack([IMAGE[0, 0], -IMAGE[0, 0]]), segments)
    assert counts.tolist() == [4, 2]
    assert ranks[0].view(4, 4)[0, 0] == 3 and ranks[0].view(4, 4)[3, 3] == 0
    assert ranks[1].view(4, 4)[0, 0] == 0 and ranks[1].view(4, 4)[0, 3] == 1     # left half: mean −2 > −3
    g = torch.Generator().manual_seed(0)
    model = LinearTwoClass(torch.randn(1, 3, 4, 4, generator=g, dtype=torch.float64))
    x = torch.rand(2, 3, 4, 4, generator=g, dtype=torch.float64)
    maps = torch.randn(2, 4, 4, generator=g, dtype=torch.float64)
    both = irof(model, x, torch.tensor([0, 1]), maps, segments=segments)
    for i in range(2):
        one = irof(model, x[i:i + 1], torch.tensor([0, 1])[i:i + 1], maps[i:i + 1], segments=segments[i:i + 1])
        assert both.aoc[i].item() == pytest.approx(one.aoc.item())
    assert both.curves[1, 2:].eq(both.curves[1, 2]).all()     # nothing left to remove after its 2 segments
    metric = IROF()
    metric.update(both.aoc)
    assert metric.compute().item() == pytest.approx(both.aoc.mean().item())


def test_grid_segments_and_the_default():
    grid = grid_segments(torch.zeros(2, 3, 20, 20))
    assert grid.shape == (2, 20, 20) and grid.unique().tolist() == list(range(100))
    assert torch.bincount(grid[0].flatten()).eq(4).all()
    uneven = grid_segments(torch.zeros(1, 1, 10, 7), cells=3)
    assert uneven.unique().tolist() == list(range(9))
    with pytest.raises(ValueError, match="cells"):
        grid_segments(torch.zeros(1, 1, 5, 5), cells=6)
    model = LinearTwoClass(torch.ones(1, 1, 20, 20))
    x = torch.rand(1, 1, 20, 20)
    assert irof(model, x, torch.tensor([0]), x[:, 0]).curves.shape == (1, 101)


def test_zero_intact_score_scores_zero():
    model = LinearTwoClass(torch.zeros(1, 1, 4, 4, dtype=torch.float64))
    result = irof(model, IMAGE, torch.tensor([0]), IMAGE[:, 0], segments=QUADRANTS[None], output="logit")
    assert result.aoc.item() == 0.0
