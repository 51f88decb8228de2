"""Insertion and deletion curves (RISE): by hand on a linear model whose logit is the sum of its pixel contributions,
against a pixel-by-pixel loop on random inputs, the blurred baseline against an explicit Gaussian, and the
accumulating metric."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rightreasons.metrics import InsertionDeletion, blurred, insertion_deletion, pixel_ranks
from linear_model import LinearTwoClass

W = (torch.arange(16, dtype=torch.float64) - 5).view(1, 1, 4, 4)    # contributions -5 ... 10 on a ones image


def test_curves_and_aucs_by_hand():
    x = torch.ones(1, 1, 4, 4, dtype=torch.float64)
    curves = insertion_deletion(LinearTwoClass(W), x, torch.tensor([0]), W[:, 0] * x[:, 0], num_steps=4,
                                insertion_baseline=0.0, output="logit")
    # four pixels per step, most important first: 10..7 (34), 6..3 (18), 2..-1 (2), -2..-5 (-14); all: 40
    assert curves.fractions.tolist() == [0, 0.25, 0.5, 0.75, 1]
    assert curves.deletion[0].tolist() == [40, 6, -12, -14, 0]
    assert curves.insertion[0].tolist() == [0, 34, 52, 54, 40]
    assert curves.deletion_auc.item() == pytest.approx(0.25 * (40 / 2 + 6 - 12 - 14 + 0 / 2))
    assert curves.insertion_auc.item() == pytest.approx(0.25 * (0 / 2 + 34 + 52 + 54 + 40 / 2))
    flipped = insertion_deletion(LinearTwoClass(W), x, torch.tensor([0]), -1e-9 * W[:, 0] - 3, num_steps=4,
                                 insertion_baseline=0.0, output="logit")
    assert flipped.deletion[0].tolist() == [40, 54, 52, 34, 0]         # the reversed ranking, scale and offset ignored


def loop_curve(model, start, end, a, counts):
    """Logits after moving the counts[s] highest pixels (ties in raster order) from `end` into `start`."""
    order = sorted(range(a.numel()), key=lambda i: (-a.flatten()[i].item(), i))
    out = []
    for count in counts:
        x = start.clone()
        for i in order[:count]:
            r, c = divmod(i, a.shape[1])
            x[:, r, c] = end[:, r, c]
        out.append(model(x[None])[0, 0].item())
    return out


def test_random_inputs_match_a_pixel_loop_and_batch_equals_one_by_one():
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(1, 2, 6, 7, generator=g, dtype=torch.float64)
    model = LinearTwoClass(weight)
    x = torch.rand(4, 2, 6, 7, generator=g, dtype=torch.float64)
    maps = torch.randint(-2, 3, (4, 6, 7), generator=g).double()       # ties, broken in raster order
    maps[1] = 0.0
    baseline = torch.tensor([0.5, -1.0], dtype=torch.float64).view(2, 1, 1)
    target = torch.zeros(4, dtype=torch.long)
    curves = insertion_deletion(model, x, target, maps, num_steps=7, deletion_baseline=baseline, output="logit",
                                batch_size=3)
    counts = [round(f * 42) for f in torch.linspace(0, 1, 8, dtype=torch.float64).tolist()]
    start = blurred(x)
    for n in range(4):
        removed = baseline.expand(2, 6, 7)
        torch.testing.assert_close(curves.deletion[n].tolist(), loop_curve(model, x[n], removed, maps[n], counts))
        torch.testing.assert_close(curves.insertion[n].tolist(), loop_curve(model, start[n], x[n], maps[n], counts))
        single = insertion_deletion(model, x[n:n + 1], target[n:n + 1], maps[n:n + 1], num_steps=7,
                                    deletion_baseline=baseline, output="logit")
        torch.testing.assert_close(single.insertion_auc, curves.insertion_auc[n:n + 1])
        torch.testing.assert_close(single.deletion_auc, curves.deletion_auc[n:n + 1])


def test_blurred_is_a_reflect_padded_gaussian():
    x = torch.rand(2, 3, 12, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    offsets = torch.arange(-5, 6, dtype=torch.float64)
    g1 = torch.exp(-offsets ** 2 / (2 * 5.0 ** 2))
    kernel = torch.outer(g1, g1) / g1.sum() ** 2
    expected = F.conv2d(F.pad(x, [5] * 4, mode="reflect"), kernel.expand(3, 1, 11, 11), groups=3)
    torch.testing.assert_close(blurred(x), expected)


def test_softmax_default_degenerate_maps_and_metric():
    g = torch.Generator().manual_seed(2)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 4)).double()
    x = torch.rand(5, 3, 8, 8, generator=g, dtype=torch.float64)
    target = torch.randint(0, 4, (5,), generator=g)
    maps = torch.randn(5, 8, 8, generator=g, dtype=torch.float64)
    maps[0], maps[1] = 0.0, -maps[1].abs()                             # all-zero and all-negative maps
    curves = insertion_deletion(model, x, target, maps, num_steps=5)
    assert ((curves.insertion >= 0) & (curves.insertion <= 1)).all()
    assert torch.isfinite(curves.insertion_auc).all() and torch.isfinite(curves.deletion_auc).all()
    with torch.no_grad():
        full = model(x).softmax(1).gather(1, target[:, None])[:, 0]
    torch.testing.assert_close(curves.deletion[:, 0], full)           # nothing deleted yet
    torch.testing.assert_close(curves.insertion[:, -1], full)         # everything inserted
    metric = InsertionDeletion(num_steps=5)
    metric.update(curves.insertion[:2], curves.deletion[:2])
    metric.update(curves.insertion[2:], curves.deletion[2:])
    out = metric.compute()
    torch.testing.assert_close(out["insertion"], curves.insertion.mean(0).float())
    torch.testing.assert_close(out["insertion_auc"], curves.insertion_auc.mean().float())
    torch.testing.assert_close(out["deletion_auc"], curves.deletion_auc.mean().float())
    assert math.isclose(out["fractions"][-1].item(), 1.0)


def test_pixel_ranks_rank_highest_or_lowest_first_ties_in_raster_order():
    maps = torch.tensor([[[3.0, 1.0], [3.0, -1.0]]])
    assert pixel_ranks(maps).tolist() == [[0, 2, 1, 3]]
    assert pixel_ranks(maps, most_first=False).tolist() == [[2, 1, 3, 0]]


def test_bad_inputs_are_rejected():
    x, target = torch.ones(2, 1, 4, 4), torch.zeros(2, dtype=torch.long)
    model = LinearTwoClass(W.float())
    with pytest.raises(ValueError, match=r"attributions must be \[N, H, W\] = \[2, 4, 4\]"):
        insertion_deletion(model, x, target, torch.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="need images"):
        insertion_deletion(model, x, target[:1], torch.zeros(2, 4, 4))
    with pytest.raises(ValueError, match="output must be"):
        insertion_deletion(model, x, target, torch.zeros(2, 4, 4), output="prob")
    with pytest.raises(ValueError, match="num_steps >= 1"):
        insertion_deletion(model, x, target, torch.zeros(2, 4, 4), num_steps=0)
    with pytest.raises(ValueError, match="H and W > kernel_size // 2 = 5"):
        insertion_deletion(model, x, target, torch.zeros(2, 4, 4))
    with pytest.raises(ValueError, match=r"must both be \[N, 6\]"):
        InsertionDeletion(num_steps=5).update(torch.zeros(2, 5), torch.zeros(2, 5))
