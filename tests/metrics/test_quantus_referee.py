"""Our metrics against Quantus 0.6.0 (a test-only referee, the ``dev`` extra) on fixed seeded inputs, where both
compute the same thing. Where Quantus differs by definition, the test converts between the two or says why it
compares less; where Quantus 0.6.0 breaks, the test says how.

* pointing game (ours with ``tolerance=1``: the maximum inside the mask), relevance rank accuracy, top-k
  intersection (no ties in continuous maps), sparseness and complexity (Quantus adds 1e-7 to |A|: 1e-5 relative);
* faithfulness correlation: Quantus draws its subsets with ``np.random.choice``; it is handed ours;
* ROAD: the noisy linear imputation against Quantus's sparse direct solve (noise 0), and the MoRF accuracy curve on
  one-channel images — Quantus 0.6.0 ranks the map broadcast to every channel and uses those element indices as
  pixel indices, which fails (IndexError) on three-channel images;
* IROF: Quantus reports ``S − trapz(y_1 … y_S)`` in units of segments; ours is ``1 − ∫ y d(k / S)`` from
  ``k = 0``, so ``Quantus = S · ours + (1 + y_1) / 2``. Quantus's ``"mean"`` baseline is the mean of the image as
  already perturbed, so both are given a fixed number. Quantus 0.6.0 calls ``np.trapz``, gone in NumPy 2 (the test
  lends it ``np.trapezoid``), and asserts that its one-channel segment mask has the image's shape, so it fails on
  three-channel images: compared on one channel.
* model randomisation: Quantus's MPRT seeds every layer's re-draw with the same ``torch.manual_seed(seed + 1)``, ours
  the ``l``-th with ``seed + l``; the test makes Quantus's seeds count up like ours, then both draw the same weights
  (``reset_parameters`` on the CPU) and must give the same Spearman correlations, cascading and independent.
"""

import warnings

import numpy as np
import pytest
import torch
from torch import nn

quantus = pytest.importorskip("quantus")

from rightreasons.metrics import (complexity, faithfulness_correlation, irof, model_randomisation,  # noqa: E402
                                  noisy_linear_imputation, randomisable_layers,
                                  pointing_game, random_subsets, relevance_rank_accuracy, road, slic_segments,
                                  sparseness, top_k_intersection)

N, H, W = 8, 10, 10


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def conv_model(channels=1, size=H, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(channels, 4, 3, padding=1), nn.Softplus(), nn.Flatten(),
                          nn.Linear(4 * size * size, 3)).eval()
    model[3].weight.data *= 30
    return model


def inputs(channels=1, size=H, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(N, channels, size, size, generator=g)
    maps = torch.randn(N, size, size, generator=g)
    masks = torch.zeros(N, size, size, dtype=torch.bool)
    masks[:, 3:7, 4:9] = True
    masks[::2, 0:2, :] = True
    return x, maps, masks


def quantus_scores(metric, model, x, y, maps, masks=None):
    return np.asarray(metric(model=model, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=maps[:, None].numpy(),
                             s_batch=None if masks is None else masks[:, None].numpy().astype(float),
                             device="cpu"), dtype=float)


def test_localisation_and_complexity_metrics_agree():
    x, maps, masks = inputs()
    model, y = conv_model(), torch.zeros(N, dtype=torch.long)
    plain = {"disable_warnings": True, "abs": False, "normalise": False}
    cases = [
        (quantus.PointingGame(disable_warnings=True), pointing_game(maps, masks, tolerance=1), 0),
        (quantus.RelevanceRankAccuracy(**plain), relevance_rank_accuracy(maps, masks), 1e-6),
        (quantus.TopKIntersection(k=30, **plain), top_k_intersection(maps, masks, 30), 1e-6),
        (quantus.Sparseness(**{**plain, "abs": True}), sparseness(maps), 1e-5),
        (quantus.Complexity(**{**plain, "abs": True}), complexity(maps), 1e-5),
    ]
    for metric, ours, tolerance in cases:
        theirs = quantus_scores(metric, model, x, y, maps, masks)
        assert np.allclose(theirs, ours.double().numpy(), rtol=tolerance, atol=tolerance), type(metric).__name__
    assert 0 < pointing_game(maps, masks, tolerance=1).sum() < N    # both hits and misses are compared


def test_faithfulness_correlation_agrees_on_the_same_subsets(monkeypatch):
    x, maps, _ = inputs()
    model = conv_model()
    with torch.no_grad():
        y = model(x).argmax(1)
    subsets = random_subsets(H * W, 20, 30, torch.Generator().manual_seed(5))
    ours = faithfulness_correlation(model, x, y, maps, num_subsets=20, subset_size=30,
                                    generator=torch.Generator().manual_seed(5))
    calls = iter(range(20 * N))

    def choice(n, size, replace=False):      # Quantus draws one subset per image and run: hand it ours
        return subsets[next(calls) // N].nonzero()[:, 0].numpy()

    monkeypatch.setattr(np.random, "choice", choice)
    metric = quantus.FaithfulnessCorrelation(nr_runs=20, subset_size=30, perturb_baseline=0.0, abs=False,
                                             normalise=False, return_aggregate=False, disable_warnings=True)
    theirs = quantus_scores(metric, model, x, y, maps)
    assert np.allclose(theirs, ours.numpy(), atol=1e-4)


def test_road_imputation_matches_quantus_sparse_solve():
    from quantus.functions.perturb_func import noisy_linear_imputation as quantus_imputation

    g = torch.Generator().manual_seed(2)
    image = torch.rand(3, 34, 37, generator=g, dtype=torch.float64)
    for share in (0.2, 0.6, 0.95):
        removed = torch.rand(34, 37, generator=g) < share
        theirs = quantus_imputation(image.numpy(), removed.flatten().nonzero()[:, 0].numpy(), noise=0.0)
        ours = noisy_linear_imputation(image[None], removed[None], noise=0.0, tolerance=1e-12)[0]
        assert np.allclose(ours.numpy(), theirs, atol=1e-9)


def test_road_morf_accuracy_curve_agrees_on_one_channel_images():
    x, maps, _ = inputs(seed=3)
    torch.manual_seed(3)
    model = nn.Sequential(nn.Flatten(), nn.Linear(H * W, 3)).eval()      # close logits: removal flips some
    with torch.no_grad():
        y = model(x).argmax(1)
    curves = road(model, x, y, maps, num_steps=4, max_fraction=0.8, noise=0.0, tolerance=1e-10)
    metric = quantus.ROAD(noise=0.0, percentages=[20, 40, 60, 80], abs=False, normalise=False,
                          disable_warnings=True)
    theirs = metric(model=model, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=maps[:, None].numpy(), device="cpu")
    assert np.allclose([theirs[p] for p in (20, 40, 60, 80)], curves.morf[:, 1:].mean(0).numpy())
    assert curves.morf[:, 1:].min() < 1                        # the removal changes some predictions


@pytest.mark.parametrize("seed", [0, 1])
def test_irof_agrees_through_the_conversion(monkeypatch, seed):
    monkeypatch.setattr(np, "trapz", np.trapezoid, raising=False)
    x, maps, _ = inputs(channels=1, size=20, seed=seed)     # Quantus 0.6.0's IROF asserts a one-channel mask
    model = conv_model(channels=1, size=20, seed=seed)     # shape == image shape: three channels fail
    with torch.no_grad():
        y = model(x).argmax(1)
    segments = slic_segments(x)
    ours = irof(model, x, y, maps, segments=segments, baseline=0.3)
    metric = quantus.IROF(perturb_baseline=0.3, abs=False, normalise=False, return_aggregate=False,
                          disable_warnings=True)
    for i in range(N):                     # one image a call: Quantus pads a batch's curves with zeros
        count = len(segments[i].unique())
        theirs = quantus_scores(metric, model, x[i:i + 1], y[i:i + 1], maps[i:i + 1])
        converted = count * ours.aoc[i].item() + (1 + ours.curves[i, 1].item()) / 2
        assert theirs[0] == pytest.approx(converted, rel=1e-4, abs=1e-4)


def input_times_gradient(model, images, targets):
    """``Σ_c x ⊙ ∂y_target/∂x`` ``[N, H, W]``: the attribution both sides judge."""
    images = images.detach().clone().requires_grad_()
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(model(images).gather(1, targets[:, None]).sum(), images)
    return (grad * images).sum(1).detach()


@pytest.mark.parametrize("mode", ["cascade", "independent"])
def test_model_randomisation_agrees_with_mprt_given_the_same_draws(monkeypatch, mode):
    model, base = conv_model(), 7
    x, _, _ = inputs()
    y = model(x).argmax(1)
    real_manual_seed, seeded = torch.manual_seed, []

    def counting_up(seed):   # Quantus: seed + 1 before every layer; ours: seed + l for the l-th
        seeded.append(seed)
        return real_manual_seed(base + len(seeded) - 1)

    def explain(model, inputs, targets, **kwargs):
        return input_times_gradient(model, torch.as_tensor(inputs), torch.as_tensor(targets).long())[:, None].numpy()

    layers = randomisable_layers(model) if mode == "cascade" else randomisable_layers(model)[::-1]  # Quantus's order
    names, ours = model_randomisation(model, x, y, input_times_gradient, layers, mode=mode, seed=base)
    monkeypatch.setattr(torch, "manual_seed", counting_up)
    theirs = quantus.MPRT(layer_order="top_down" if mode == "cascade" else "independent", seed=base, abs=False,
                          normalise=False, disable_warnings=True)(
        model=model, x_batch=x.numpy(), y_batch=y.numpy(), a_batch=input_times_gradient(model, x, y)[:, None].numpy(),
        explain_func=explain, device="cpu")
    assert len(seeded) == len(names) == 2 and list(theirs)[1:] == names
    for step, name in enumerate(names):
        np.testing.assert_allclose(ours[:, step].numpy(), theirs[name], atol=1e-6)
    assert (ours[:, -1] < 0.9).all()   # the check has teeth: a randomised network's maps change
