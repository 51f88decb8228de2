"""Exact second-order gradients: an explanation loss differentiated w.r.t. parameters matches finite differences.

Every case builds a small float64 network ending in a fixed linear read-out (so it returns logits ``[N, K]``), takes
``attribute(model, x, target, "bcos_weights", create_graph=True)`` (what ``explain`` returns), computes a smooth loss
on the explanation (weights and contributions, plus a logit term as in joint training), back-propagates it *outside*
explanation mode and compares the parameter gradient with central differences of the same loss:
``‖g − g_fd‖ / ‖g_fd‖ < 1e-6`` (docs/science.md, explanation mode).

The same check covers the units of B-cosified networks (raw weights, gain, bias after the transform), the GELU gate
as a dynamic weight, and whole B-cosified ResNets and ViTs (``rightreasons.bcosify``).

The control tests run the same check on a network whose dynamic weights are detached in the forward pass while
explaining (the reference library's approach, reproduced by monkeypatching and with the ``bcos`` package itself) and
require it to fail by a wide margin, so the check is known to be able to fail.
"""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

import timm

import rightreasons as rr
from rightreasons.bcos import (BcosConv2d, BcosifiedConv2d, BcosifiedLinear, BcosLinear, DynamicGELU, DynamicLinear,
                               norms)
from rightreasons.bcos.dynamic import Recomputed
from rightreasons.explain import attribute
from rightreasons.models.resnet import BcosResNet, Bottleneck
from rightreasons.models.standard import StandardSimpleViT

EPS = 1e-7
TOLERANCE = 1e-6


class Readout(nn.Module):
    """Fixed random linear map of the flattened features to ``num_classes`` logits (a buffer, not a parameter)."""

    def __init__(self, features: int, num_classes: int = 3) -> None:
        super().__init__()
        self.register_buffer("matrix", torch.randn(features, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(1) @ self.matrix


class ChannelsLast(nn.Module):
    """Apply token layers (acting on the last dim) to every position of a ``[N, C, H, W]`` map."""

    def __init__(self, *layers: nn.Module) -> None:
        super().__init__()
        self.layers = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.layers(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


def randomise_norms(model: nn.Module, x: Tensor) -> nn.Module:
    """Give norm parameters random values and running statistics realistic ones (the statistics of ``x`` scaled by
    random factors), so that they matter in the loss while activations stay of order one in eval mode."""
    norm_layers = [m for m in model.modules()
                   if isinstance(m, DynamicLinear) and not isinstance(m, (BcosConv2d, BcosLinear))]
    with torch.no_grad():
        for m in norm_layers:
            if getattr(m, "weight", None) is not None:
                m.weight.uniform_(0.5, 1.5)
            if getattr(m, "bias", None) is not None:
                m.bias.normal_(0, 0.2)
        running = [m for m in norm_layers if getattr(m, "running_var", None) is not None]
        if running:
            momenta = [m.momentum for m in running]
            for m in running:
                m.momentum = 1.0
            model.train()(x)
            for m, momentum in zip(running, momenta):
                m.momentum = momentum
                m.running_var.mul_(torch.empty_like(m.running_var).uniform_(0.7, 1.4))
    return model


class Setup:
    """A float64 model with randomised norms, an input batch, per-sample targets and the fixed tensors of the loss."""

    def __init__(self, model: nn.Module, x: Tensor, train: bool, method: str = "bcos_weights") -> None:
        self.method = method
        self.x = x.double()
        self.model = randomise_norms(model.double(), self.x).train(train)
        with torch.no_grad():
            logits = self.model(self.x)
        n, k = logits.shape
        self.target = torch.arange(n) % k
        self.mask = (torch.rand(n, *x.shape[2:]) > 0.5).double()
        self.direction = torch.randn_like(self.x)

    def loss(self, create_graph: bool) -> Tensor:
        """An explanation loss: masked contribution energy, a term on ``W(x)`` itself and a logit term."""
        e = attribute(self.model, self.x, self.target, self.method, create_graph=create_graph)
        return ((self.mask * e.maps).square().sum() + (self.direction * e.weights).sum()
                + 0.1 * e.logits.square().sum())

    def gradient(self) -> list[Tensor]:
        """The parameter gradient from double backward; the outer backward runs outside explanation mode."""
        params = list(self.model.parameters())
        return list(torch.autograd.grad(self.loss(create_graph=True), params))

    def value_at(self, param: Tensor, index: int, value: float) -> float:
        flat = param.data.view(-1)
        old = flat[index].item()
        flat[index] = value
        try:
            return self.loss(create_graph=False).item()
        finally:
            flat[index] = old

    def central_difference(self, param: Tensor, index: int) -> float:
        v = param.data.view(-1)[index].item()
        return (self.value_at(param, index, v + EPS) - self.value_at(param, index, v - EPS)) / (2 * EPS)

    def directional_difference(self, direction: list[Tensor]) -> float:
        params = list(self.model.parameters())
        values = []
        for sign in (1, -1):
            with torch.no_grad():
                for p, d in zip(params, direction):
                    p.add_(sign * EPS * d)
            values.append(self.loss(create_graph=False).item())
            with torch.no_grad():
                for p, d in zip(params, direction):
                    p.sub_(sign * EPS * d)
        return (values[0] - values[1]) / (2 * EPS)


def relative_error(analytic: Tensor, numeric: Tensor) -> float:
    return ((analytic - numeric).norm() / numeric.norm()).item()


def full_check(setup: Setup) -> float:
    """Relative error of the gradient against central differences on every parameter coordinate."""
    analytic = torch.cat([g.reshape(-1) for g in setup.gradient()])
    numeric = torch.tensor([setup.central_difference(p, i)
                            for p in setup.model.parameters() for i in range(p.numel())], dtype=torch.float64)
    return relative_error(analytic, numeric)


def sampled_check(setup: Setup, coordinates: int = 40, directions: int = 4) -> float:
    """Relative error on a random subset of coordinates plus random directional derivatives (large models)."""
    params = list(setup.model.parameters())
    grads = setup.gradient()
    sizes = torch.tensor([p.numel() for p in params])
    owners = torch.multinomial(sizes.double(), coordinates, replacement=True)
    analytic, numeric = [], []
    for owner in owners.tolist():
        index = int(torch.randint(params[owner].numel(), ()))
        analytic.append(grads[owner].reshape(-1)[index])
        numeric.append(setup.central_difference(params[owner], index))
    for _ in range(directions):
        direction = [torch.randn_like(p) for p in params]
        length = torch.sqrt(sum(d.square().sum() for d in direction))
        direction = [d / length for d in direction]  # a unit step: the FD step stays EPS in parameter space
        analytic.append(sum((g * d).sum() for g, d in zip(grads, direction)))
        numeric.append(setup.directional_difference(direction))
    return relative_error(torch.stack(analytic), torch.tensor(numeric, dtype=torch.float64))


# ---------------------------------------------------------------------------------------------------------- layers

CONV_CASES = {
    "B2": {},
    "B2.5": {"b": 2.5},
    "maxout2": {"max_out": 2},
    "groups2": {"groups": 2},
    "dilation2": {"dilation": 2, "padding": 2},
    "B2.5-maxout2-groups2-stride2": {"b": 2.5, "max_out": 2, "groups": 2, "stride": 2},
}


@pytest.mark.parametrize("config", list(CONV_CASES.values()), ids=list(CONV_CASES))
def test_bcos_conv2d_explanation_gradient_matches_finite_differences(config):
    kwargs = {"padding": 1, **config}
    model = nn.Sequential(BcosConv2d(4, 4, 3, **kwargs), BcosConv2d(4, 2, 3, **kwargs))
    size = 7
    with torch.no_grad():
        features = model(torch.zeros(1, 4, size, size)).numel()
    setup = Setup(nn.Sequential(model, Readout(features)), torch.randn(2, 4, size, size), train=True)
    assert full_check(setup) < TOLERANCE


LINEAR_CASES = {"B2": {}, "B2.5": {"b": 2.5}, "maxout2": {"max_out": 2}}


@pytest.mark.parametrize("config", list(LINEAR_CASES.values()), ids=list(LINEAR_CASES))
def test_bcos_linear_explanation_gradient_matches_finite_differences(config):
    model = nn.Sequential(ChannelsLast(BcosLinear(4, 5, **config), BcosLinear(5, 3, **config)), Readout(3 * 9))
    setup = Setup(model, torch.randn(2, 4, 3, 3), train=True)
    assert full_check(setup) < TOLERANCE


BCOSIFIED_CASES = {
    "raw-B2": {"weight_mode": "raw"},
    "raw-B1.5-bias": {"weight_mode": "raw", "b": 1.5, "bias": True},
    "gain-B2-bias": {"weight_mode": "gain", "bias": True},
    "gain-B2.5-maxout2": {"weight_mode": "gain", "b": 2.5, "max_out": 2},
}


def randomise_gains_and_biases(model: nn.Module) -> nn.Module:
    """Gains away from 1 and biases away from 0 (their values at construction)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (BcosifiedConv2d, BcosifiedLinear)):
                if m.gain is not None:
                    m.gain.uniform_(0.5, 1.5)
                if m.bias is not None:
                    m.bias.normal_(0, 0.2)
    return model


@pytest.mark.parametrize("config", list(BCOSIFIED_CASES.values()), ids=list(BCOSIFIED_CASES))
def test_bcosified_conv2d_explanation_gradient_matches_finite_differences(config):
    model = nn.Sequential(BcosifiedConv2d(4, 4, 3, padding=1, **config), BcosifiedConv2d(4, 2, 3, padding=1, **config))
    setup = Setup(nn.Sequential(randomise_gains_and_biases(model), Readout(2 * 25)), torch.randn(2, 4, 5, 5),
                  train=True)
    assert full_check(setup) < TOLERANCE


@pytest.mark.parametrize("config", list(BCOSIFIED_CASES.values()), ids=list(BCOSIFIED_CASES))
def test_bcosified_linear_explanation_gradient_matches_finite_differences(config):
    body = ChannelsLast(BcosifiedLinear(4, 5, **config), BcosifiedLinear(5, 3, **config))
    setup = Setup(nn.Sequential(randomise_gains_and_biases(body), Readout(3 * 9)), torch.randn(2, 4, 3, 3), train=True)
    assert full_check(setup) < TOLERANCE


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_dynamic_gelu_explanation_gradient_matches_finite_differences(approximate):
    model = nn.Sequential(ChannelsLast(BcosLinear(4, 5), DynamicGELU(approximate), BcosLinear(5, 3)), Readout(3 * 9))
    setup = Setup(model, torch.randn(2, 4, 3, 3), train=True)
    assert full_check(setup) < TOLERANCE


# ----------------------------------------------------------------------------------------------------------- norms

@pytest.fixture
def norm_sandwich(build_norm, is_token_norm):
    """``norm_sandwich(cls)``: B-cos layer → norm → B-cos layer → read-out, so that the explanation depends on the
    norm's dynamic weight."""
    def sandwich(cls: type) -> nn.Module:
        if is_token_norm(cls):
            body = ChannelsLast(BcosLinear(3, 4), build_norm(cls, 4), BcosLinear(4, 3))
        else:
            body = nn.Sequential(BcosConv2d(3, 4, 3, padding=1), build_norm(cls, 4), BcosConv2d(4, 3, 3, padding=1))
        return nn.Sequential(body, Readout(3 * 16))
    return sandwich


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_norm_explanation_gradient_matches_finite_differences(norm_class, train, norm_sandwich):
    setup = Setup(norm_sandwich(norm_class), torch.randn(3, 3, 4, 4), train=train)
    assert full_check(setup) < TOLERANCE


# ---------------------------------------------------------------------------------------------------------- resnets

def tiny_resnext() -> nn.Module:
    """A three-stage Bottleneck ResNeXt with two groups and tiny widths (CIFAR stem)."""
    return BcosResNet(Bottleneck, [1, 1, 1], num_classes=3, inplanes=4, groups=2, width_per_group=32, small_inputs=True)


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("build, size", [
    (lambda: rr.create_model("bcos_cifar10_resnet20", num_classes=3), 8),
    (tiny_resnext, 8),
], ids=["cifar10_resnet20", "tiny_resnext"])
def test_resnet_explanation_gradient_matches_finite_differences(build, size, train):
    setup = Setup(build(), torch.rand(2, 6, size, size), train=train)
    assert sampled_check(setup) < TOLERANCE


BCOSIFIED_MODELS = {
    "resnet": (lambda: rr.bcosify(rr.create_model("resnet18", num_classes=3, inplanes=4, layers=[1, 1, 1, 1])), 32),
    "densenet": (lambda: rr.bcosify(rr.create_model("densenet121", num_classes=3, growth_rate=4,
                                                    block_config=(1, 1, 1, 1), num_init_features=4)), 32),
    "simple_vit": (lambda: rr.bcosify(StandardSimpleViT(image_size=8, patch_size=4, num_classes=3, dim=8, depth=1,
                                                        heads=2, mlp_dim=8)), 8),
    "timm_vit": (lambda: rr.bcosify(timm.create_model("vit_tiny_patch16_224", num_classes=3, img_size=8, patch_size=4,
                                                      embed_dim=8, depth=1, num_heads=2, mlp_ratio=1.0)), 8),
}


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("name", list(BCOSIFIED_MODELS))
def test_bcosified_model_explanation_gradient_matches_finite_differences(name, train):
    build, size = BCOSIFIED_MODELS[name]
    setup = Setup(build(), torch.rand(2, 6, size, size), train=train)
    assert sampled_check(setup) < TOLERANCE


# --------------------------------------------------------------------------------------------------------- controls

def _detaching_dynamic(self: DynamicLinear, weight: Tensor | Recomputed | None, x: Tensor, product="mul",
                       extras=()) -> Tensor:
    """The reference library's mechanism: detach the dynamic weight in the forward pass while explaining.

    The reference library explains with the model switched into explanation mode for the forward pass as well;
    ``explain`` runs its forward pass outside explanation mode (only the input gradient is taken inside), so the
    emulation detaches in every forward pass, like the reference package control below."""
    if isinstance(weight, Recomputed):
        weight = weight.fn(*weight.inputs)
    weight = None if weight is None else weight.detach()
    if callable(product):
        return product(weight, x, *extras)
    return {"mul": lambda: weight * x, "div": lambda: x / weight, "matmul": lambda: weight @ x}[product]()


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_control_detaching_in_forward_fails_the_check(monkeypatch, train, norm_sandwich):
    setup = Setup(norm_sandwich(norms.BatchNormUncentered2d), torch.randn(3, 3, 4, 4), train=train)
    assert full_check(setup) < TOLERANCE
    monkeypatch.setattr(DynamicLinear, "dynamic", _detaching_dynamic)
    assert full_check(setup) > 1e-2


def test_control_reference_package_fails_the_check():
    bcos_modules = pytest.importorskip("bcos.modules")
    body = nn.Sequential(bcos_modules.BcosConv2d(3, 4, 3, padding=1), bcos_modules.BatchNormUncentered2d(4),
                         bcos_modules.BcosConv2d(4, 3, 3, padding=1))
    for m in body.modules():
        if hasattr(m, "set_explanation_mode"):
            m.set_explanation_mode(True)
    # The reference layers are no dynamic-linear modules of ours, so ``explain`` refuses them; in their own explanation
    # mode the plain input gradient (Input×Gradient's weights and map) is the same W(x) and contributions.
    setup = Setup(nn.Sequential(body, Readout(3 * 16)), torch.randn(3, 3, 4, 4), train=True, method="ixg")
    assert full_check(setup) > 1e-2
