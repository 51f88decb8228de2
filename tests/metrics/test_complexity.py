"""Sparseness (Gini index of |A|) and complexity (entropy of |A| / Σ|A|) against their textbook formulas computed
here independently (pairwise Gini, scipy-free entropy), on hand-built and degenerate maps."""

import math

import pytest
import torch

from rightreasons.metrics import Complexity, Sparseness, complexity, sparseness


def pairwise_gini(a):
    """Gini = Σᵢ Σⱼ |xᵢ − xⱼ| / (2·n·Σ x) over x = |A|, from the mean absolute difference."""
    x = a.flatten().abs().double()
    return ((x[:, None] - x[None, :]).abs().sum() / (2 * len(x) * x.sum())).item()


def entropy(a):
    x = a.flatten().abs().double()
    p = [v / x.sum().item() for v in x.tolist()]
    return -sum(v * math.log(v) for v in p if v > 0)


def test_random_maps_match_the_formulas_and_batch_equals_one_by_one():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(7, 5, 6, generator=g, dtype=torch.float64)
    a[2] = a[2].clamp(max=0)                                            # some zeros and negatives
    torch.testing.assert_close(sparseness(a), torch.tensor([pairwise_gini(m) for m in a], dtype=torch.float64))
    torch.testing.assert_close(complexity(a), torch.tensor([entropy(m) for m in a], dtype=torch.float64))
    for fn in (sparseness, complexity):
        assert torch.equal(fn(a), torch.cat([fn(a[i:i + 1]) for i in range(7)]))


def test_extremes_sign_scale_and_degenerate_maps():
    n = 16
    one_pixel = torch.zeros(1, 4, 4)
    one_pixel[0, 1, 2] = -3.0                                           # sign does not matter: |A|
    torch.testing.assert_close(sparseness(one_pixel), torch.tensor([1 - 1 / n]))
    torch.testing.assert_close(complexity(one_pixel), torch.tensor([0.0]))
    for uniform in (torch.zeros(1, 4, 4), torch.full((1, 4, 4), 2.0), torch.full((1, 4, 4), -1e-12)):
        torch.testing.assert_close(sparseness(uniform), torch.tensor([0.0]))
        torch.testing.assert_close(complexity(uniform), torch.tensor([math.log(n)]))
    g = torch.Generator().manual_seed(1)
    a = torch.randn(3, 4, 4, generator=g)
    for fn in (sparseness, complexity):
        torch.testing.assert_close(fn(1e-9 * a), fn(a))                 # scale-free
        torch.testing.assert_close(fn(-a), fn(a))
        assert torch.isfinite(fn(torch.zeros(2, 4, 4))).all()


def test_metrics_accumulate_the_mean():
    g = torch.Generator().manual_seed(2)
    a = torch.rand(10, 8, 8, generator=g)
    for metric, fn in ((Sparseness(), sparseness), (Complexity(), complexity)):
        metric.update(a[:3])
        metric.update(a[3:])
        torch.testing.assert_close(metric.compute(), fn(a).mean())
    assert Sparseness.higher_is_better and not Complexity.higher_is_better


@pytest.mark.parametrize("fn", [sparseness, complexity])
def test_bad_inputs_are_rejected(fn):
    with pytest.raises(ValueError, match="attributions must have shape"):
        fn(torch.zeros(4, 4))
    with pytest.raises(ValueError, match="attributions must be a floating-point tensor"):
        fn(torch.zeros(1, 4, 4, dtype=torch.long))
