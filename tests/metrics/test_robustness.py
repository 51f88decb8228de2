"""Max/avg-sensitivity and infidelity against Captum's sensitivity_max and infidelity with the same perturbations
(the same seeded noise, shared by the images), in float64; a linear model's exact explanation has infidelity 0;
degenerate maps and batched vs one-by-one."""

import pytest
import torch
from captum.metrics import infidelity as captum_infidelity
from captum.metrics import sensitivity_max
from torch import nn

from rightreasons.metrics import Infidelity, Sensitivity, infidelity, sensitivities

C, H, W = 2, 5, 6


def mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Flatten(), nn.Linear(C * H * W, 8), nn.Softplus(), nn.Linear(8, 3)).double().eval()


def input_x_gradient(model, x, target):
    """Input × gradient of the target logit, summed over channels: [N, H, W]."""
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        logit = model(x).gather(1, target[:, None]).sum()
        (grad,) = torch.autograd.grad(logit, x)
    return (x * grad).sum(1).detach()


def data(seed=1, n=4):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, C, H, W, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,), generator=g)


def test_sensitivity_max_matches_captum_with_the_same_noise():
    model, (x, target) = mlp(), data()
    changes = sensitivities(model, x, target, input_x_gradient, radius=0.1, num_samples=6,
                            generator=torch.Generator().manual_seed(5), batch_size=3)
    assert changes.shape == (4, 6)
    noise = (torch.rand(6, C, H, W, generator=torch.Generator().manual_seed(5), dtype=torch.float64) * 2 - 1) * 0.1

    def same_noise(inputs, radius):        # Captum repeats each image 6 times in a row: row n·6 + r gets noise r
        return inputs + noise.repeat(len(inputs) // 6, 1, 1, 1)

    def explain(inputs, target):           # Captum passes the unperturbed inputs as a tuple and wants one back
        return (input_x_gradient(model, inputs[0] if isinstance(inputs, tuple) else inputs, target),)

    expected = sensitivity_max(explain, x, same_noise, perturb_radius=0.1, n_perturb_samples=6, target=target)
    torch.testing.assert_close(changes.amax(1), expected)
    for n in range(4):                     # avg-sensitivity: the mean of the same relative changes, one by one
        base = input_x_gradient(model, x[n:n + 1], target[n:n + 1])
        relative = [(input_x_gradient(model, x[n:n + 1] + d, target[n:n + 1]) - base).norm() / base.norm()
                    for d in noise]
        torch.testing.assert_close(changes[n].mean(), torch.stack(relative).mean())


@pytest.mark.parametrize("normalize", [False, True])
def test_infidelity_matches_captum_with_the_same_noise(normalize):
    model, (x, target) = mlp(2), data(3)
    maps = torch.randn(4, H, W, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    ours = infidelity(model, x, target, maps, std=0.2, num_samples=7, normalize=normalize,
                      generator=torch.Generator().manual_seed(6), batch_size=3)
    noise = torch.randn(7, H, W, generator=torch.Generator().manual_seed(6), dtype=torch.float64) * 0.2

    def same_noise(inputs):                # one noise value per pixel, shared by its channels
        perturbation = noise[:, None].expand(7, C, H, W).repeat(len(inputs) // 7, 1, 1, 1)
        return perturbation, inputs - perturbation

    per_channel = maps[:, None].expand(4, C, H, W) / C          # Σ_c I·Φ/C over C channels = Σ I·Φ per pixel
    expected = captum_infidelity(model, same_noise, x, per_channel, target=target, n_perturb_samples=7,
                                 normalize=normalize)
    torch.testing.assert_close(ours, expected)


def test_exact_linear_explanation_has_zero_infidelity_and_scale_free_normalisation():
    weight = torch.randn(1, C, H, W, generator=torch.Generator().manual_seed(7), dtype=torch.float64)

    class Linear(nn.Module):
        def forward(self, x):
            logit = (weight * x).flatten(1).sum(1)
            return torch.stack([logit, -logit], 1)

    x, _ = data(8)
    target = torch.zeros(4, dtype=torch.long)
    exact = weight.sum(1).expand(4, H, W)                        # Δf = Σ_p I_p Σ_c w_cp for pixel-shared noise
    kwargs = {"num_samples": 5, "normalize": False}
    zero = infidelity(Linear(), x, target, exact, generator=torch.Generator().manual_seed(0), **kwargs)
    torch.testing.assert_close(zero, torch.zeros(4, dtype=torch.float64))
    maps = torch.randn(4, H, W, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    scaled = [infidelity(Linear(), x, target, s * maps, num_samples=5, generator=torch.Generator().manual_seed(0))
              for s in (1.0, 1e-6)]
    torch.testing.assert_close(scaled[0], scaled[1])


def test_degenerate_maps_and_batch_equals_one_by_one():
    model, (x, target) = mlp(3), data(10)
    maps = torch.randn(4, H, W, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    maps[0], maps[1], maps[2] = 0.0, 3.0, -maps[2].abs()
    full = infidelity(model, x, target, maps, generator=torch.Generator().manual_seed(12))
    assert torch.isfinite(full).all()
    singles = torch.cat([infidelity(model, x[i:i + 1], target[i:i + 1], maps[i:i + 1],
                                    generator=torch.Generator().manual_seed(12)) for i in range(4)])
    torch.testing.assert_close(full, singles)
    zero_fn = lambda m, inputs, t: torch.zeros(len(inputs), H, W, dtype=torch.float64)  # noqa: E731
    assert torch.equal(sensitivities(model, x, target, zero_fn, num_samples=3), torch.zeros(4, 3, dtype=torch.float64))
    changes = sensitivities(model, x, target, input_x_gradient, num_samples=3,
                            generator=torch.Generator().manual_seed(13))
    singles = torch.cat([sensitivities(model, x[i:i + 1], target[i:i + 1], input_x_gradient, num_samples=3,
                                       generator=torch.Generator().manual_seed(13)) for i in range(4)])
    torch.testing.assert_close(changes, singles)


def test_metrics_accumulate_seeded_means():
    model, (x, target) = mlp(4), data(14, n=5)
    maps = input_x_gradient(model, x, target)
    sensitivity, infid = Sensitivity(input_x_gradient, num_samples=3, seed=2), Infidelity(num_samples=4, seed=3)
    for rows in (slice(0, 2), slice(2, None)):
        sensitivity.update(model, x[rows], target[rows])
        infid.update(model, x[rows], target[rows], maps[rows])
    g = torch.Generator().manual_seed(2)
    changes = torch.cat([sensitivities(model, x[r], target[r], input_x_gradient, num_samples=3, generator=g)
                         for r in (slice(0, 2), slice(2, None))])
    out = sensitivity.compute()
    torch.testing.assert_close(out["max_sensitivity"], changes.amax(1).mean().float())
    torch.testing.assert_close(out["avg_sensitivity"], changes.mean().float())
    g = torch.Generator().manual_seed(3)
    expected = torch.cat([infidelity(model, x[r], target[r], maps[r], num_samples=4, generator=g)
                          for r in (slice(0, 2), slice(2, None))])
    torch.testing.assert_close(infid.compute(), expected.mean().float())
    assert not Sensitivity.higher_is_better and not Infidelity.higher_is_better


def test_bad_inputs_are_rejected():
    model, (x, target) = mlp(), data()
    with pytest.raises(ValueError, match="need num_samples >= 1 and radius > 0"):
        sensitivities(model, x, target, input_x_gradient, radius=0.0)
    with pytest.raises(ValueError, match="need num_samples >= 1 and std > 0"):
        infidelity(model, x, target, torch.zeros(4, H, W), num_samples=0)
    with pytest.raises(ValueError, match=r"attributions must be \[N, H, W\] = \[4, 5, 6\]"):
        infidelity(model, x, target, torch.zeros(4, H, H))
    with pytest.raises(ValueError, match="need images"):
        sensitivities(model, x[0], target, input_x_gradient)
    with pytest.raises(ValueError, match="output must be"):
        Infidelity(output="prob")
