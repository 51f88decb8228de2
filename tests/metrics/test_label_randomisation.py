"""Label (data) randomisation sanity check: the per-image Spearman correlation between two models' maps against
scipy-free hand cases (identical, reversed and rescaled maps, a constant map) and the accumulating metric."""

import pytest
import torch

from rightreasons.metrics import LabelRandomisation, label_randomisation, spearman
from linear_model import LinearTwoClass


def input_x_gradient(model, x, target):
    """Exact for LinearTwoClass: class 0's contributions weight ⊙ x (summed over channels), class 1's zero."""
    return torch.where(target[:, None, None] == 0, (model.weight * x).sum(1), 0.0)


def test_correlations_by_hand():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(1, 2, 5, 6, generator=g, dtype=torch.float64)
    x = torch.rand(4, 2, 5, 6, generator=g, dtype=torch.float64) + 0.1
    targets = torch.tensor([0, 0, 1, 0])
    model = LinearTwoClass(weight)
    same = label_randomisation(model, LinearTwoClass(3 * weight), x, targets, input_x_gradient)
    assert same.tolist() == pytest.approx([1, 1, 0, 1])        # a rescaled model ranks alike; class 1: constant maps
    flipped = label_randomisation(model, LinearTwoClass(-weight), x, targets, input_x_gradient, batch_size=3)
    assert flipped.tolist() == pytest.approx([-1, -1, 0, -1])
    other = LinearTwoClass(torch.randn(1, 2, 5, 6, generator=g, dtype=torch.float64))
    scores = label_randomisation(model, other, x, targets, input_x_gradient, batch_size=1)
    expected = spearman(input_x_gradient(model, x, targets).flatten(1), input_x_gradient(other, x, targets).flatten(1))
    assert torch.allclose(scores, expected)
    metric = LabelRandomisation(input_x_gradient, batch_size=2)
    metric.update(model, other, x, targets)
    metric.update(model, LinearTwoClass(-weight), x, targets)
    assert metric.compute().item() == pytest.approx(torch.cat([scores, flipped]).mean().item())
    with pytest.raises(ValueError, match="targets"):
        label_randomisation(model, other, x, targets[:2], input_x_gradient)
