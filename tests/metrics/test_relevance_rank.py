"""Relevance rank accuracy and top-k intersection: the formula without ties (Quantus's argsort), the tie rule against
an enumeration of every tie-breaking choice, degenerate maps and masks, and batched vs one-by-one."""

from itertools import combinations

import pytest
import torch

from rightreasons.metrics import (RelevanceRankAccuracy, TopKIntersection, relevance_rank_accuracy,
                                  top_k_intersection)


def argsort_share(a, m, k):
    """Quantus's formula: the share of the k pixels last in an ascending argsort that lie in the mask (no ties)."""
    top = a.flatten().argsort()[a.numel() - k:]
    return m.flatten()[top].double().sum().item() / k if k else 0.0


def enumerated_share(a, m, k):
    """Mean share over every way of filling the k-th place's ties: all size-`need` subsets of the tied pixels."""
    if k == 0:
        return 0.0
    a, m = a.flatten().tolist(), m.flatten().tolist()
    kth = sorted(a, reverse=True)[k - 1]
    above = sum(1 for v, inside in zip(a, m) if v > kth and inside)
    tied = [inside for v, inside in zip(a, m) if v == kth]
    need = k - sum(1 for v in a if v > kth)
    choices = [above + sum(c) for c in combinations(tied, need)]
    return sum(choices) / len(choices) / k


def test_no_ties_match_the_argsort_formula():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(6, 7, 8, generator=g, dtype=torch.float64)
    m = torch.rand(6, 7, 8, generator=g) > 0.6
    rra = relevance_rank_accuracy(a, m)
    expected = [argsort_share(a[i], m[i], int(m[i].sum())) for i in range(6)]
    torch.testing.assert_close(rra, torch.tensor(expected, dtype=torch.float64))
    for k in (1, 5, 56):
        expected = [argsort_share(a[i], m[i], k) for i in range(6)]
        torch.testing.assert_close(top_k_intersection(a, m, k), torch.tensor(expected, dtype=torch.float64))


def test_ties_are_split_evenly():
    g = torch.Generator().manual_seed(1)
    a = torch.randint(-1, 2, (8, 3, 4), generator=g).float()            # three values: many ties
    m = torch.rand(8, 3, 4, generator=g) > 0.5
    m[2] = False
    expected = [enumerated_share(a[i], m[i], int(m[i].sum())) for i in range(8)]
    torch.testing.assert_close(relevance_rank_accuracy(a, m), torch.tensor(expected))
    for k in (1, 4, 12):
        expected = [enumerated_share(a[i], m[i], k) for i in range(8)]
        torch.testing.assert_close(top_k_intersection(a, m, k), torch.tensor(expected))


def test_hand_built_and_degenerate_cases():
    m = torch.zeros(1, 4, 4, dtype=torch.bool)
    m[0, :2, :2] = True                                                 # |M| = 4 of 16 pixels
    a = m.float() * 2 - 1                                               # +1 inside, -1 outside
    assert relevance_rank_accuracy(a, m).item() == 1.0
    assert relevance_rank_accuracy(-a, m).item() == 0.0
    assert relevance_rank_accuracy(-5 - 1e-6 * a, m).item() == 0.0      # all negative, scale and offset ignored
    assert relevance_rank_accuracy(-5 + 1e-6 * a, m).item() == 1.0
    assert top_k_intersection(a, m, 8).item() == 0.5                    # at most |M| / k
    for constant in (torch.zeros(1, 4, 4), torch.full((1, 4, 4), -2.0)):
        assert relevance_rank_accuracy(constant, m).item() == 0.25      # chance level |M| / (H·W)
        assert top_k_intersection(constant, m, 3).item() == 0.25
    empty = torch.zeros_like(m)
    assert relevance_rank_accuracy(a, empty).item() == 0.0
    assert top_k_intersection(a, empty, 3).item() == 0.0


def test_batched_equals_one_by_one_and_metrics_accumulate():
    g = torch.Generator().manual_seed(2)
    a = torch.randint(0, 5, (9, 6, 6), generator=g).double()
    m = torch.rand(9, 6, 6, generator=g) > 0.7
    for fn in (relevance_rank_accuracy, lambda x, y: top_k_intersection(x, y, 7)):
        assert torch.equal(fn(a, m), torch.cat([fn(a[i:i + 1], m[i:i + 1]) for i in range(9)]))
    for metric, fn in ((RelevanceRankAccuracy(), relevance_rank_accuracy),
                       (TopKIntersection(k=7), lambda x, y: top_k_intersection(x, y, 7))):
        metric.update(a[:4], m[:4].long())
        metric.update(a[4:], m[4:])
        torch.testing.assert_close(metric.compute(), fn(a, m).mean().float())


@pytest.mark.parametrize("k", [0, -3, 17, 2.0, True])
def test_bad_k_is_rejected(k):
    with pytest.raises(ValueError, match="k must be an integer >= 1"):
        top_k_intersection(torch.zeros(1, 4, 4), torch.ones(1, 4, 4), k)


def test_bad_inputs_are_rejected():
    with pytest.raises(ValueError, match="k must be an integer >= 1, got 0"):
        TopKIntersection(k=0)
    with pytest.raises(ValueError, match="attributions must be a floating-point tensor"):
        relevance_rank_accuracy(torch.zeros(1, 4, 4, dtype=torch.long), torch.ones(1, 4, 4))
    with pytest.raises(ValueError, match="masks must be binary"):
        relevance_rank_accuracy(torch.zeros(1, 4, 4), torch.full((1, 4, 4), 0.5))
