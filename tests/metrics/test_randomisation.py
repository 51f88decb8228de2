"""Model-randomisation sanity check and the rank correlations it uses: Spearman against its textbook definition with
averaged tied ranks, both modes against a re-initialisation done here step by step, determinism, and the fixed
points (a model-blind explanation correlates 1, a constant one 0)."""

import copy

import numpy as np
import pytest
import torch
from torch import nn

from rightreasons.metrics import (ModelRandomisation, average_ranks, model_randomisation, randomisable_layers,
                                  spearman)

C, H, W = 2, 4, 5


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(C * H * W, 6), nn.Softplus(), nn.Linear(6, 3)).double().eval()


def input_x_gradient(model, x, target):
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        (grad,) = torch.autograd.grad(model(x).gather(1, target[:, None]).sum(), x)
    return (x * grad).sum(1).detach()


def data(n=5):
    g = torch.Generator().manual_seed(1)
    return torch.rand(n, C, H, W, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)


def ranks_by_hand(values):
    """1-based ranks, ties sharing the mean of the positions they occupy."""
    order = sorted(values)
    return [np.mean([i + 1 for i, v in enumerate(order) if v == x]) for x in values]


def test_average_ranks_and_spearman_by_definition():
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, 4, (3, 9), generator=g).double()            # ties
    y = torch.randn(3, 9, generator=g, dtype=torch.float64)
    assert average_ranks(x).tolist() == [ranks_by_hand(row) for row in x.tolist()]
    expected = [np.corrcoef(ranks_by_hand(a), ranks_by_hand(b))[0, 1] for a, b in zip(x.tolist(), y.tolist())]
    torch.testing.assert_close(spearman(x, y), torch.tensor(expected, dtype=torch.float64))
    assert spearman(torch.zeros(1, 9), y[:1].float()).item() == 0.0  # a constant has no ranking: 0


def reinitialised(model, names, seed, cumulative):
    """The randomised models, re-initialised here with reset_parameters under a CPU seed of seed + step."""
    models, current = [], copy.deepcopy(model)
    for step, name in enumerate(names):
        if not cumulative:
            current = copy.deepcopy(model)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + step)
            current.get_submodule(name).reset_parameters()
        models.append(copy.deepcopy(current))
    return models


@pytest.mark.parametrize("mode", ["cascade", "independent"])
def test_both_modes_match_a_step_by_step_reinitialisation(mode):
    model, (x, target) = mlp(), data()
    before = copy.deepcopy(model.state_dict())
    names, scores = model_randomisation(model, x, target, input_x_gradient, mode=mode, seed=3, batch_size=2)
    assert names == randomisable_layers(model) == ["3", "1"]            # output side first
    assert scores.shape == (5, 2) and scores.dtype == torch.float64
    trained = input_x_gradient(model, x, target).flatten(1)
    for step, randomised in enumerate(reinitialised(model, names, 3, cumulative=mode == "cascade")):
        after = input_x_gradient(randomised, x, target).flatten(1)
        expected = [np.corrcoef(ranks_by_hand(a), ranks_by_hand(b))[0, 1]
                    for a, b in zip(trained.tolist(), after.tolist())]
        torch.testing.assert_close(scores[:, step], torch.tensor(expected, dtype=torch.float64))
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())   # the model is untouched
    again = model_randomisation(model, x, target, input_x_gradient, mode=mode, seed=3)[1]
    assert torch.equal(scores, again)                                   # deterministic, batch size irrelevant


def test_fixed_points_and_batch_equals_one_by_one():
    model, (x, target) = mlp(), data()
    blind = model_randomisation(model, x, target, lambda m, inputs, t: inputs[:, 0], layers=["1"])[1]
    torch.testing.assert_close(blind, torch.ones(5, 1, dtype=torch.float64))   # ignores the model: fails the check
    flat = model_randomisation(model, x, target, lambda m, inputs, t: torch.zeros(len(inputs), H, W))[1]
    assert torch.equal(flat, torch.zeros(5, 2))
    scores = model_randomisation(model, x, target, input_x_gradient)[1]
    singles = torch.cat([model_randomisation(model, x[i:i + 1], target[i:i + 1], input_x_gradient)[1]
                         for i in range(5)])
    torch.testing.assert_close(scores, singles)


def test_metric_accumulates_per_layer_means():
    model, (x, target) = mlp(), data()
    metric = ModelRandomisation(input_x_gradient, ["3", "1"], mode="independent", seed=4)
    metric.update(model, x[:2], target[:2])
    metric.update(model, x[2:], target[2:])
    expected = model_randomisation(model, x, target, input_x_gradient, ["3", "1"], "independent", seed=4)[1]
    torch.testing.assert_close(metric.compute(), expected.mean(0).float())
    assert not ModelRandomisation.higher_is_better


def test_bad_inputs_are_rejected():
    model, (x, target) = mlp(), data()
    with pytest.raises(ValueError, match="mode must be 'cascade' or 'independent'"):
        model_randomisation(model, x, target, input_x_gradient, mode="top-down")
    with pytest.raises(ValueError, match=r"layers must be a non-empty list of the model's module names"):
        model_randomisation(model, x, target, input_x_gradient, layers=["fc"])
    with pytest.raises(ValueError, match="layers must be a non-empty list"):
        model_randomisation(model, x, target, input_x_gradient, layers=[])
    with pytest.raises(ValueError, match="need images"):
        model_randomisation(model, x[0], target, input_x_gradient)
    with pytest.raises(ValueError, match="non-empty list of layers"):
        ModelRandomisation(input_x_gradient, [])
