"""Localisation losses: direct formulas, edge cases, reductions, gradients through every method × layer, and exact
second-order gradients of Energy and L1 on B-cos contributions (float64 finite differences)."""

import math

import numpy as np
import pytest
import torch

from rightreasons.explain import GUIDANCE_LAYERS, attribute
from rightreasons.guidance import LOSSES, energy_loss, get_loss, l1_loss, ppce_loss, rrr_loss

NAMES = sorted(LOSSES)


def direct(name: str, a: np.ndarray, m: np.ndarray) -> float:
    """The thesis's formula (eqs. 7.3–7.6) for one map ``a [H, W]`` and mask ``m [H, W]``, written out in NumPy."""
    pos = np.maximum(a, 0.0)
    hat_pos = pos / pos.max() if pos.max() > 0 else pos
    if name in ("energy", "energy-size"):
        total = pos.sum()
        energy = 1.0 - ((m * pos).sum() / total if total >= 1e-7 else (m * pos).sum())
        return energy if name == "energy" else float(energy / max(1.0 - m.mean(), 0.1))
    if name == "l1":
        return float(np.abs(m - hat_pos).sum() / m.size)
    if name == "ppce":
        if m.sum() == 0:
            return 0.0
        with np.errstate(divide="ignore"):
            logs = np.maximum(np.log(hat_pos), -100.0)
        return float(-(m * logs).sum() / m.sum())
    hat = a / np.abs(a).max() if np.abs(a).max() > 0 else a
    return float(((1 - m) * hat**2).sum())


def edge_cases(h: int = 6, w: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """Random maps and masks with an empty mask, all-zero and all-negative maps and a full mask in the batch."""
    a = torch.randn(8, h, w, dtype=torch.float64)
    m = torch.rand(8, h, w) > 0.6
    m[0] = False                     # empty mask
    a[1] = 0.0                       # all-zero attribution
    a[2] = -a[2].abs() - 0.1         # all-negative attribution
    m[3] = True                      # full mask
    a[4], m[4] = 0.0, True           # all-zero with a full mask
    a[5], m[5] = -1.0, False         # all-negative with an empty mask
    a[6] = a[6].abs() * 1e-9         # positive energy below the fallback threshold
    return a, m


@pytest.mark.parametrize("name", NAMES)
def test_each_loss_matches_its_formula_including_edge_cases(name):
    a, m = edge_cases()
    ours = get_loss(name)(a, m, reduction="none")
    expected = [direct(name, a[i].numpy(), m[i].double().numpy()) for i in range(a.shape[0])]
    torch.testing.assert_close(ours, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_losses_and_their_gradients_are_finite_at_the_edge_cases(name):
    a, m = edge_cases()
    a.requires_grad_(True)
    loss = get_loss(name)(a, m, reduction="none")
    (grad,) = torch.autograd.grad(loss.sum(), a)
    assert torch.isfinite(loss).all() and torch.isfinite(grad).all()


def test_edge_case_values():
    a, m = edge_cases()
    energy, l1 = energy_loss(a, m, "none"), l1_loss(a, m, "none")
    ppce, rrr = ppce_loss(a, m, "none"), rrr_loss(a, m, "none")
    assert energy[0] == 1 and energy[1] == 1 and energy[2] == 1 and energy[3] == 0
    assert ppce[0] == 0 and ppce[4] == 100 and rrr[3] == 0 and rrr[1] == 0
    assert l1[4] == 1 and l1[5] == 0
    assert rrr[5] == a.shape[1] * a.shape[2]  # Â = −1 everywhere outside an empty mask


def test_ppce_is_bce_on_the_pixels_inside_the_mask():
    """The Model-Guidance code computes PPCE as ``BCELoss`` of Â⁺ against 1 over the masked pixels."""
    a = torch.randn(5, 7, 7, dtype=torch.float64)
    m = torch.rand(5, 7, 7) > 0.5
    positive = a.clamp(min=0)
    scaled = positive / positive.flatten(1).amax(1)[:, None, None]
    expected = [torch.nn.functional.binary_cross_entropy(scaled[i][m[i]], torch.ones(int(m[i].sum()),
                                                                                      dtype=torch.float64))
                for i in range(5)]
    torch.testing.assert_close(ppce_loss(a, m, "none"), torch.stack(expected))


def test_ppce_gradient_is_bounded_for_denormal_attributions_and_exact_elsewhere():
    a = torch.zeros(1, 2, 2)
    a[0, 0, 0], a[0, 0, 1] = 1.0, 1e-40  # a denormal float32 share of the maximum
    a.requires_grad_(True)
    m = torch.tensor([[[True, True], [False, False]]])
    loss = ppce_loss(a, m, "none")
    (grad,) = torch.autograd.grad(loss.sum(), a)
    assert torch.isfinite(grad).all() and 0 < -grad[0, 0, 1] <= 0.5 / 1e-12
    assert loss.item() == pytest.approx(-0.5 * math.log(1e-40), rel=1e-3)  # not yet at the −100 floor

    # float64, away from the floor: first and second derivatives agree with finite differences
    x = torch.rand(2, 3, 3, dtype=torch.float64) + 0.05
    masks = torch.rand(2, 3, 3) > 0.3
    assert torch.autograd.gradcheck(lambda t: ppce_loss(t, masks, "none"), (x.requires_grad_(),))
    assert torch.autograd.gradgradcheck(lambda t: ppce_loss(t, masks, "none"), (x,))


def test_reductions_average_or_sum_over_annotated_samples():
    a, m = edge_cases()
    per_sample = energy_loss(a, m, "none")
    non_empty = m.flatten(1).any(1)
    torch.testing.assert_close(energy_loss(a, m), per_sample[non_empty].mean())
    torch.testing.assert_close(energy_loss(a, m, "sum"), per_sample[non_empty].sum())
    annotated = torch.tensor([True, False, True, False, False, False, False, False])
    torch.testing.assert_close(energy_loss(a, m, annotated=annotated), per_sample[annotated].mean())
    nobody = torch.zeros(8, dtype=torch.bool)
    assert energy_loss(a.requires_grad_(), m, annotated=nobody) == 0


def test_loss_registry_and_errors():
    assert get_loss("Energy") is energy_loss and get_loss("RRR*") is rrr_loss and get_loss("PPCE") is ppce_loss
    with pytest.raises(ValueError, match=r"valid names: \['energy', 'energy-size', 'l1', 'ppce', 'rrr'\]"):
        get_loss("iou")
    with pytest.raises(ValueError, match="masks must have the attributions' shape"):
        l1_loss(torch.zeros(2, 4, 4), torch.zeros(2, 4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="valid reductions"):
        l1_loss(torch.zeros(2, 4, 4), torch.zeros(2, 4, 4, dtype=torch.bool), reduction="mean")


def central_box_masks(n: int, size: int) -> torch.Tensor:
    masks = torch.zeros(n, size, size, dtype=torch.bool)
    for i in range(n):
        masks[i, i % 3 + 2:size - 3, 3:size - i % 2 - 2] = True
    return masks


def gradient_cases():
    for method in ("bcos", "ixg", "gradcam", "intgrad"):
        yield "bcos", method
    for method in ("ixg", "gradcam", "intgrad"):
        yield "standard", method


@pytest.mark.parametrize("layer", GUIDANCE_LAYERS)
@pytest.mark.parametrize("family,method", list(gradient_cases()))
def test_every_loss_reaches_the_parameters_through_every_method_and_layer(family, method, layer, tiny_bcos_resnet,
                                                                          bcos_input, tiny_cnn):
    if family == "bcos":
        model, x = tiny_bcos_resnet(), bcos_input()
    else:
        model, x = tiny_cnn(), torch.randn(4, 3, 16, 16)
    model.train(method != "intgrad")  # Riemann IntGrad runs in eval mode only
    result = attribute(model, x, torch.tensor([0, 1, 2, 4]), method, layer, create_graph=True, steps=3)
    masks = central_box_masks(4, 16)
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    for name in NAMES:  # the first conv and the classifier: both ends of the network
        grads = torch.autograd.grad(get_loss(name)(result.maps, masks), [weights[0], weights[-1]], retain_graph=True)
        assert all(torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads), name


def localisation(model, x, layer, name):
    result = attribute(model, x, torch.tensor([0, 2]), "bcos", layer, create_graph=True)
    return get_loss(name)(result.maps, central_box_masks(2, 8))


@pytest.mark.parametrize("layer", ["input", "mid2"])
@pytest.mark.parametrize("name", ["energy", "l1"])
def test_second_order_gradients_of_bcos_losses_are_exact(name, layer, tiny_bcos_resnet, bcos_input):
    """Float64 central differences on a sample of coordinates of four parameter tensors (train-mode BatchNorm)."""
    torch.manual_seed(1)
    model = tiny_bcos_resnet(num_classes=3).double().train()
    x = bcos_input(2, 8, torch.float64)
    params = {n: p for n, p in model.named_parameters()}
    chosen = ["conv1.linear.weight", "bn1.weight", "layer2.0.conv1.linear.weight", "fc.linear.weight"]
    analytic = torch.autograd.grad(localisation(model, x, layer, name), [params[n] for n in chosen])
    generator = torch.Generator().manual_seed(0)
    ours, numeric, h = [], [], 1e-5
    for pname, grad in zip(chosen, analytic):
        flat = params[pname].data.view(-1)
        for index in torch.randperm(flat.numel(), generator=generator)[:3].tolist():
            values = []
            for step in (h, -h):
                flat[index] += step
                values.append(localisation(model, x, layer, name).item())
                flat[index] -= step
            ours.append(grad.reshape(-1)[index].item())
            numeric.append((values[0] - values[1]) / (2 * h))
    ours, numeric = torch.tensor(ours, dtype=torch.float64), torch.tensor(numeric, dtype=torch.float64)
    assert ours.abs().max() > 0
    relative = (ours - numeric).norm() / ours.norm()
    assert relative < 1e-6, (relative, ours, numeric)
