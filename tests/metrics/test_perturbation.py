"""Pixel-perturbation curves on a linear model, where removing a pixel lowers the logit by exactly its
Input×Gradient contribution, so both curves and the area between them follow by hand."""

import pytest
import torch
from torch import nn

from rightreasons.metrics import PixelPerturbation, area_between, perturbation_curves, removal_fractions
from linear_model import LinearTwoClass

W = (torch.arange(16, dtype=torch.float32) - 5).view(1, 1, 4, 4)    # contributions -5 ... 10 on a ones image


def input_x_gradient(model, x, target):
    return (W * x).sum(1)


def test_curves_and_area_hand_computed():
    x = torch.ones(1, 1, 4, 4)
    curves = perturbation_curves(LinearTwoClass(W), x, torch.tensor([0]), input_x_gradient, num_steps=4,
                                 output="logit")
    # 25 % of 16 pixels in 4 steps = one pixel per step; the full logit is Σ(-5..10) = 40.
    assert curves.fractions.tolist() == pytest.approx([0, 1 / 16, 2 / 16, 3 / 16, 4 / 16])
    assert curves.most_first[0].tolist() == [40, 30, 21, 13, 6]       # remove 10, 9, 8, 7
    assert curves.least_first[0].tolist() == [40, 45, 49, 52, 54]     # remove -5, -4, -3, -2
    # differences 0, 15, 28, 39, 48 at spacing 1/16: (0/2 + 15 + 28 + 39 + 48/2) / 16
    assert curves.area.item() == pytest.approx(106 / 16)


def test_probability_outputs_and_baselines():
    x = torch.ones(1, 1, 4, 4)
    logit = perturbation_curves(LinearTwoClass(W), x / 10, torch.tensor([0]), input_x_gradient, num_steps=4,
                                output="logit")
    soft = perturbation_curves(LinearTwoClass(W), x / 10, torch.tensor([0]), input_x_gradient, num_steps=4)
    torch.testing.assert_close(soft.most_first, torch.sigmoid(logit.most_first))   # softmax over (l, 0)
    sig = perturbation_curves(LinearTwoClass(W), x / 10, torch.tensor([1]), input_x_gradient, num_steps=4, output="sigmoid")
    assert torch.equal(sig.most_first, torch.full((1, 5), 0.5))                      # logit_1 is always 0
    # removing to the image's own value changes nothing: flat curves, zero area
    same = perturbation_curves(LinearTwoClass(W), x, torch.tensor([0]), input_x_gradient, num_steps=4, baseline=1.0,
                               output="logit")
    assert torch.equal(same.most_first, torch.full((1, 5), 40.0)) and same.area.item() == 0.0


def test_per_channel_baseline_removes_all_channels_of_a_pixel():
    model = nn.Sequential(nn.Flatten(), nn.Linear(2 * 16, 2, bias=False))
    with torch.no_grad():
        model[1].weight.zero_()
        model[1].weight[0, :16] = 1.0       # channel 0 counts
    x = torch.ones(1, 2, 4, 4)
    baseline = torch.tensor([0.0, 5.0]).view(2, 1, 1)
    curves = perturbation_curves(model, x, torch.tensor([0]), lambda m, x, t: x[:, 0], num_steps=4,
                                 baseline=baseline, output="logit")
    assert curves.most_first[0].tolist() == [16, 15, 14, 13, 12]


def test_batches_and_the_accumulating_metric():
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()

    def input_x_gradient_real(model, x, target):
        x = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(model(x).gather(1, target[:, None]).sum(), x)
        return (grad * x).sum(1)

    x, target = torch.randn(5, 3, 8, 8), torch.tensor([0, 1, 2, 3, 0])
    full = perturbation_curves(model, x, target, input_x_gradient_real, num_steps=5, batch_size=2)
    parts = [perturbation_curves(model, x[i:i + 2], target[i:i + 2], input_x_gradient_real, num_steps=5)
             for i in range(0, 5, 2)]
    torch.testing.assert_close(torch.cat([p.most_first for p in parts]), full.most_first)
    metric = PixelPerturbation(num_steps=5)
    for p in parts:
        metric.update(p.most_first, p.least_first)
    out = metric.compute()
    torch.testing.assert_close(out["most_first"], full.most_first.mean(0))
    torch.testing.assert_close(out["least_first"], full.least_first.mean(0))
    torch.testing.assert_close(out["area"], full.area.mean())
    assert out["fractions"].tolist() == pytest.approx(removal_fractions(5).tolist())
    with pytest.raises(ValueError, match=r"most_first and least_first must both be \[N, 6\]"):
        metric.update(full.most_first[:, :3], full.least_first[:, :3])


def test_area_between_and_bad_arguments():
    assert area_between(torch.zeros(3), torch.ones(3), torch.tensor([0.0, 0.1, 0.2])).item() == pytest.approx(0.2)
    with pytest.raises(ValueError, match="output must be"):
        perturbation_curves(LinearTwoClass(W), torch.ones(1, 1, 4, 4), torch.tensor([0]), input_x_gradient, output="prob")
    with pytest.raises(ValueError, match="max_fraction"):
        removal_fractions(4, 0.0)
