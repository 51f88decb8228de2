"""Faithfulness correlation: ±1 for the exact contributions of a linear model, against a per-subset loop with
numpy's Pearson correlation on random maps, the degenerate rule, seeding and batched vs one-by-one."""

import numpy as np
import pytest
import torch

from rightreasons.metrics import FaithfulnessCorrelation, faithfulness_correlation, pearson, random_subsets
from linear_model import LinearTwoClass


def data(seed=0, n=4):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(1, 2, 6, 6, generator=g, dtype=torch.float64)
    x = torch.rand(n, 2, 6, 6, generator=g, dtype=torch.float64)
    return LinearTwoClass(weight), x, torch.zeros(n, dtype=torch.long), weight


def test_exact_contributions_correlate_perfectly():
    model, x, target, weight = data()
    baseline = torch.tensor([0.3, -0.2], dtype=torch.float64).view(2, 1, 1)
    contributions = (weight * (x - baseline)).sum(1)                    # the logit drop of removing each pixel
    g = torch.Generator().manual_seed(0)
    score = faithfulness_correlation(model, x, target, contributions, num_subsets=20, subset_size=5,
                                     baseline=baseline, generator=g)
    torch.testing.assert_close(score, torch.ones(4, dtype=torch.float64))
    flipped = faithfulness_correlation(model, x, target, 3 - 1e-6 * contributions, num_subsets=20, subset_size=5,
                                       baseline=baseline, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(flipped, -torch.ones(4, dtype=torch.float64))   # scale and offset ignored, sign not


def test_random_maps_match_a_subset_loop_with_numpy_pearson():
    model, x, target, _ = data(1)
    maps = torch.randn(4, 6, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    score = faithfulness_correlation(model, x, target, maps, num_subsets=15, subset_size=7, output="softmax",
                                     generator=torch.Generator().manual_seed(3), batch_size=3)
    subsets = random_subsets(36, 15, 7, torch.Generator().manual_seed(3))
    assert (subsets.sum(1) == 7).all()
    for n in range(4):
        sums, drops = [], []
        full = model(x[n:n + 1]).softmax(1)[0, 0].item()
        for subset in subsets:
            removed = x[n].clone()
            removed[:, subset.view(6, 6)] = 0.0
            sums.append(maps[n].flatten()[subset].sum().item())
            drops.append(full - model(removed[None]).softmax(1)[0, 0].item())
        assert score[n].item() == pytest.approx(np.corrcoef(sums, drops)[0, 1], abs=1e-10)


def test_degenerate_maps_score_zero_and_batch_equals_one_by_one():
    model, x, target, _ = data(4)
    maps = torch.randn(4, 6, 6, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    maps[0], maps[1], maps[2] = 0.0, 2.5, -maps[2].abs()               # all zero, constant, all negative
    kwargs = {"num_subsets": 10, "subset_size": 4}
    score = faithfulness_correlation(model, x, target, maps, generator=torch.Generator().manual_seed(6), **kwargs)
    assert score[0].item() == 0.0 and score[1].item() == 0.0 and torch.isfinite(score).all()
    singles = torch.cat([faithfulness_correlation(model, x[i:i + 1], target[i:i + 1], maps[i:i + 1],
                                                  generator=torch.Generator().manual_seed(6), **kwargs)
                         for i in range(4)])
    torch.testing.assert_close(score, singles)
    blind = faithfulness_correlation(model, x, target, maps, baseline=x, **kwargs)   # removing changes nothing
    assert torch.equal(blind, torch.zeros(4, dtype=torch.float64))


def test_pearson_matches_numpy_and_metric_is_seeded():
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(3, 9, generator=g, dtype=torch.float64), torch.randn(3, 9, generator=g, dtype=torch.float64)
    torch.testing.assert_close(pearson(a, b), torch.tensor([np.corrcoef(u, v)[0, 1] for u, v in zip(a, b)],
                                                           dtype=torch.float64))
    model, x, target, _ = data(8, n=5)
    maps = torch.randn(5, 6, 6, generator=g, dtype=torch.float64)
    results = []
    for _ in range(2):
        metric = FaithfulnessCorrelation(num_subsets=8, subset_size=6, seed=11)
        metric.update(model, x[:2], target[:2], maps[:2])
        metric.update(model, x[2:], target[2:], maps[2:])
        results.append(metric.compute())
    assert torch.equal(results[0], results[1])
    generator = torch.Generator().manual_seed(11)
    expected = torch.cat([faithfulness_correlation(model, x[s], target[s], maps[s], num_subsets=8, subset_size=6,
                                                   generator=generator) for s in (slice(0, 2), slice(2, None))])
    torch.testing.assert_close(results[0], expected.mean().float())


def test_bad_inputs_are_rejected():
    model, x, target, _ = data()
    maps = torch.zeros(4, 6, 6)
    with pytest.raises(ValueError, match="subset_size <= 36 pixels and num_subsets >= 2"):
        faithfulness_correlation(model, x, target, maps, subset_size=37)
    with pytest.raises(ValueError, match="num_subsets >= 2"):
        faithfulness_correlation(model, x, target, maps, num_subsets=1, subset_size=3)
    with pytest.raises(ValueError, match=r"attributions must be \[N, H, W\] = \[4, 6, 6\]"):
        faithfulness_correlation(model, x, target, maps[:, :5])
    with pytest.raises(ValueError, match="output must be"):
        FaithfulnessCorrelation(output="probability")
