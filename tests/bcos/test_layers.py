"""B-cos layers: the formulas of docs/science.md, the B-cos transform, the ``bcos`` package as referee, explanation mode, construction errors
and the fixed logit layer."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

import rightreasons as rr
from rightreasons.bcos import (BcosConv2d, BcosifiedConv2d, BcosifiedLinear, BcosLinear, DynamicLinear, LogitLayer,
                               default_logit_bias, explanation_mode)

pytestmark = pytest.mark.filterwarnings("ignore:dilation > 1 is much slower")  # the reference package's warning


def _scale(lin: Tensor, norm: Tensor, b: float) -> Tensor:
    """``|cos|^(B-1)`` with the release's numerics (exact ``|cos|`` for B = 2, ``+1e-6`` otherwise)."""
    cos = lin / norm
    return cos.abs() if b == 2 else (cos.abs() + 1e-6) ** (b - 1)


def conv_formula(layer: BcosConv2d, x: Tensor) -> Tensor:
    """B-cos convolution from unfolded patches: per output unit and patch, ``ŵᵀx · |ŵᵀx / ‖x_patch‖|^(B-1)``."""
    n, _, h, w = x.shape
    g, m = layer.groups, layer.max_out
    patches = F.unfold(x, layer.kernel_size, layer.dilation, layer.padding, layer.stride)  # [N, C*k*k, L]
    patches = patches.unflatten(1, (g, -1))  # [N, G, C/G*k*k, L]
    weight = layer.linear.weight.flatten(1)
    weight = (weight / weight.norm(dim=1, keepdim=True)).unflatten(0, (g, -1))  # [G, O*M/G, C/G*k*k]
    lin = torch.einsum("gof,ngfl->ngol", weight, patches)  # [N, G, O*M/G, L]
    norm = (patches.square().sum(2, keepdim=True) + 1e-6).sqrt()  # [N, G, 1, L]
    lin = lin.unflatten(2, (-1, m)).amax(3)  # MaxOut over consecutive channels, before scaling
    out = lin if layer.b == 1 else lin * _scale(lin, norm, layer.b)
    h_out = (h + 2 * layer.padding[0] - layer.dilation[0] * (layer.kernel_size[0] - 1) - 1) // layer.stride[0] + 1
    return out.flatten(1, 2).unflatten(2, (h_out, -1))


def linear_formula(layer: BcosLinear, x: Tensor) -> Tensor:
    weight = layer.linear.weight / layer.linear.weight.norm(dim=1, keepdim=True)
    lin = (x @ weight.T).unflatten(-1, (-1, layer.max_out)).amax(-1)
    norm = x.norm(dim=-1, keepdim=True) + 1e-12
    return lin if layer.b == 1 else lin * _scale(lin, norm, layer.b)


CONV_CASES = {
    "B2": {"padding": 1},
    "B1": {"b": 1, "padding": 1},
    "B2.5": {"b": 2.5, "padding": 1},
    "maxout2": {"max_out": 2, "padding": 1},
    "groups2": {"groups": 2, "padding": 1},
    "dilation2": {"dilation": 2, "padding": 2},
    "stride2-nopad": {"stride": 2},
    "B2.5-maxout3-groups2-stride2": {"b": 2.5, "max_out": 3, "groups": 2, "stride": 2, "padding": 1},
    "1x1": {"kernel_size": 1},
}


def make_conv(config: dict) -> BcosConv2d:
    return BcosConv2d(4, 6, **{"kernel_size": 3, **config})


@pytest.mark.parametrize("config", list(CONV_CASES.values()), ids=list(CONV_CASES))
def test_bcos_conv2d_follows_the_formula(config):
    layer = make_conv(config)
    x = torch.randn(2, 4, 7, 8)
    torch.testing.assert_close(layer(x), conv_formula(layer, x), rtol=1e-5, atol=1e-6)


LINEAR_CASES = {"B2": {}, "B1": {"b": 1}, "B2.5": {"b": 2.5}, "maxout2": {"max_out": 2}}


@pytest.mark.parametrize("config", list(LINEAR_CASES.values()), ids=list(LINEAR_CASES))
def test_bcos_linear_follows_the_formula(config):
    layer = BcosLinear(5, 3, **config)
    x = torch.randn(2, 4, 5)
    torch.testing.assert_close(layer(x), linear_formula(layer, x))


def _input_gradient(layer, x: Tensor, upstream: Tensor) -> tuple[Tensor, Tensor]:
    x = x.clone().requires_grad_(True)
    y = layer(x)
    (g,) = torch.autograd.grad((y * upstream).sum(), x)
    return y.detach(), g


def _gradchecked(layer: torch.nn.Module, x: Tensor) -> None:
    """gradcheck and gradgradcheck (float64) of ``layer`` in its input and weight, outside explanation mode: the
    closed-form backward of its products is the derivative of the forward, to the second order."""
    layer = layer.double()
    weight = layer.linear.weight

    def forward(x: Tensor, w: Tensor) -> Tensor:
        return torch.func.functional_call(layer, {"linear.weight": w}, (x,))

    inputs = (x.double().requires_grad_(), weight.detach().clone().requires_grad_())
    assert torch.autograd.gradcheck(forward, inputs, fast_mode=True)
    assert torch.autograd.gradgradcheck(forward, inputs, fast_mode=True)


@pytest.mark.parametrize("config", list(CONV_CASES.values()), ids=list(CONV_CASES))
def test_bcos_conv2d_gradients_are_the_derivatives_of_its_forward(config):
    torch.manual_seed(0)
    _gradchecked(BcosConv2d(2, 2, **{"kernel_size": 3, **config}), torch.randn(1, 2, 5, 5))


@pytest.mark.parametrize("config", list(LINEAR_CASES.values()), ids=list(LINEAR_CASES))
def test_bcos_linear_gradients_are_the_derivatives_of_its_forward(config):
    torch.manual_seed(0)
    _gradchecked(BcosLinear(4, 3, **config), torch.randn(2, 4))


@pytest.mark.parametrize("config", list(CONV_CASES.values()), ids=list(CONV_CASES))
def test_bcos_conv2d_matches_the_reference_package(config):
    """Same weights in both libraries: equal outputs and equal explanations (input gradient in explanation mode)."""
    ref = pytest.importorskip("bcos.modules")
    ours = make_conv(config)
    kwargs = {"kernel_size": 3, **config}
    theirs = ref.BcosConv2d(4, 6, **kwargs)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, 4, 7, 8)
    upstream = torch.randn_like(ours(x))
    with explanation_mode(ours):
        y, w = _input_gradient(ours, x, upstream)
    theirs.set_explanation_mode(True)
    y_ref, w_ref = _input_gradient(theirs, x, upstream)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w, w_ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("config", list(LINEAR_CASES.values()), ids=list(LINEAR_CASES))
def test_bcos_linear_matches_the_reference_package(config):
    ref = pytest.importorskip("bcos.modules")
    ours = BcosLinear(5, 3, **config)
    theirs = ref.BcosLinear(5, 3, **config)
    theirs.load_state_dict(ours.state_dict())
    x = torch.randn(2, 4, 5)
    upstream = torch.randn(2, 4, 3)
    with explanation_mode(ours):
        y, w = _input_gradient(ours, x, upstream)
    theirs.set_explanation_mode(True)
    y_ref, w_ref = _input_gradient(theirs, x, upstream)
    torch.testing.assert_close(y, y_ref)
    torch.testing.assert_close(w, w_ref)


@pytest.mark.parametrize("b", [2, 2.5])
def test_bcos_linear_explanation_is_the_dynamic_weight(b):
    """Explaining output j gives ``w̃_j(x) = |cos_j|^(B-1) ŵ_j`` (docs/science.md, the B-cos transform), not the full derivative."""
    layer = BcosLinear(5, 3, b=b)
    x = torch.randn(5)
    weight = layer.linear.weight / layer.linear.weight.norm(dim=1, keepdim=True)
    lin = weight @ x
    expected = _scale(lin, x.norm() + 1e-12, b)[:, None] * weight
    rows = []
    for j in range(3):
        upstream = torch.zeros(3)
        upstream[j] = 1
        with explanation_mode(layer):
            rows.append(_input_gradient(layer, x, upstream)[1])
    torch.testing.assert_close(torch.stack(rows), expected)
    torch.testing.assert_close(torch.stack(rows) @ x, layer(x))


@pytest.mark.parametrize("layer", [*(make_conv(c) for c in CONV_CASES.values()),
                                   *(BcosLinear(5, 3, **c) for c in LINEAR_CASES.values())],
                         ids=[*(f"conv-{k}" for k in CONV_CASES), *(f"linear-{k}" for k in LINEAR_CASES)])
def test_forward_is_bit_identical_in_explanation_mode(layer):
    assert isinstance(layer, DynamicLinear)
    x = torch.randn(2, 4, 7, 8) if isinstance(layer, BcosConv2d) else torch.randn(2, 4, 5)
    x.requires_grad_(True)
    outside = layer(x)
    with explanation_mode(layer):
        inside = layer(x)
    assert torch.equal(outside, inside)
    assert not layer.explaining, "explanation_mode restores the previous state on exit"


# ------------------------------------------------------------------------------- units of B-cosified networks

def _bcosified_pair(mode: str, b: float) -> tuple[BcosifiedConv2d, BcosifiedLinear]:
    """A B-cosified conv and linear unit (float64) with weights of norm far from 1, a bias and, in ``gain`` mode, the
    gain a converter sets: the pretrained ``‖w‖``."""
    units = (BcosifiedConv2d(4, 6, 3, padding=1, b=b, bias=True, weight_mode=mode).double(),
             BcosifiedLinear(5, 3, b=b, bias=True, weight_mode=mode).double())
    with torch.no_grad():
        for unit in units:
            unit.linear.weight.mul_(3.0)
            unit.bias.normal_()
            if unit.gain is not None:
                unit.gain.copy_(unit.linear.weight.flatten(1).norm(dim=1))
    return units


@pytest.mark.parametrize("b", [1, 2, 2.5])
@pytest.mark.parametrize("mode", ["raw", "gain"])
def test_bcosified_units_scale_the_pretrained_preactivation(mode, b):
    """``raw``: ``wᵀx · (‖w‖·|cos|)^(B-1) + bias``; ``gain`` (g = ‖w‖): ``wᵀx · |cos|^(B-1) + bias``; at B = 1 both
    are the pretrained layer ``wᵀx + bias`` (the release's numerics: patch norms with ``+1e-6`` / ``+1e-12``)."""
    conv, linear = _bcosified_pair(mode, b)
    x = torch.randn(2, 4, 6, 6, dtype=torch.float64)
    patches = F.unfold(x, 3, padding=1)  # [N, 4*3*3, 36]
    z = torch.randn(2, 5, dtype=torch.float64)
    cases = [(conv, conv(x).flatten(2), torch.einsum("of,nfl->nol", conv.linear.weight.flatten(1), patches),
              (patches.square().sum(1, keepdim=True) + 1e-6).sqrt(), conv.bias[:, None]),
             (linear, linear(z), z @ linear.linear.weight.T, z.norm(dim=1, keepdim=True) + 1e-12, linear.bias)]
    for unit, out, pre, norm, bias in cases:
        w_norm = unit.linear.weight.flatten(1).norm(dim=1)
        w_norm = w_norm[:, None] if pre.dim() == 3 else w_norm
        cos_times = pre if mode == "raw" else pre / w_norm  # ‖w‖·cos·‖x‖ (raw) or cos·‖x‖ (gain)
        expected = pre if b == 1 else pre * _scale(cos_times, norm, b)
        torch.testing.assert_close(out, expected + bias, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("mode", ["raw", "gain"])
def test_bcosified_linear_explanation_is_the_dynamic_weight(mode):
    """Without a bias, explaining output j gives ``(‖w_j‖·|cos_j|) w_j`` (raw) or ``g_j |cos_j| ŵ_j`` (gain), B = 2."""
    _, layer = _bcosified_pair(mode, 2)
    layer.bias = None
    x = torch.randn(5, dtype=torch.float64)
    w = layer.linear.weight
    cos = (w @ x) / (w.norm(dim=1) * (x.norm() + 1e-12))
    expected = (w.norm(dim=1) * cos.abs())[:, None] * w if mode == "raw" else \
        (layer.gain * cos.abs())[:, None] * w / w.norm(dim=1, keepdim=True)
    rows = []
    for j in range(3):
        with explanation_mode(layer):
            rows.append(_input_gradient(layer, x, F.one_hot(torch.tensor(j), 3).double())[1])
    torch.testing.assert_close(torch.stack(rows), expected)
    torch.testing.assert_close(torch.stack(rows) @ x, layer(x))


@pytest.mark.parametrize("build", [BcosifiedConv2d, BcosifiedLinear], ids=["conv", "linear"])
def test_bcosified_units_refuse_an_unknown_weight_mode(build):
    with pytest.raises(ValueError, match=f"{build.__name__}: unknown weight_mode 'unit'; expected one of"):
        build(4, 4, weight_mode="unit")


# ------------------------------------------------------------------------------------------- construction errors

@pytest.mark.parametrize("build", [lambda **kw: BcosConv2d(4, 4, 3, **kw), lambda **kw: BcosLinear(4, 4, **kw)],
                         ids=["conv", "linear"])
@pytest.mark.parametrize("kwargs, message", [
    ({"b": 0.5}, r"B must be >= 1, got b=0.5"),
    ({"b": float("nan")}, r"B must be >= 1"),
    ({"max_out": 0}, r"max_out must be an integer >= 1, got max_out=0"),
    ({"max_out": 1.5}, r"max_out must be an integer >= 1"),
    ({"bias": True}, r"never has a bias"),
], ids=["b<1", "b-nan", "max_out0", "max_out-float", "bias"])
def test_invalid_bcos_layers_are_refused_at_construction(build, kwargs, message):
    with pytest.raises(ValueError, match=message):
        build(**kwargs)


def test_conv_groups_must_divide_channels():
    with pytest.raises(ValueError, match=r"in_channels=6 and out_channels=4 must both be divisible by groups=4"):
        BcosConv2d(6, 4, 3, groups=4)


# ------------------------------------------------------------------------------------------------- logit layer

def test_default_logit_bias_is_minus_log_of_c_minus_1():
    assert default_logit_bias(1000) == -math.log(999)
    assert default_logit_bias(20) == -math.log(19)
    assert default_logit_bias(2) == 0.0


def test_logit_layer_applies_temperature_then_bias_and_has_no_state():
    layer = LogitLayer(bias=-1.5, temperature=2.0)
    z = torch.randn(3, 4)
    torch.testing.assert_close(layer(z), z / 2.0 - 1.5)
    assert torch.equal(LogitLayer()(z), z)
    assert not layer.state_dict() and not list(layer.parameters())


@pytest.mark.parametrize("kwargs, message", [({"temperature": 0.0}, "temperature must be > 0"),
                                             ({"bias": float("inf")}, "bias must be finite")])
def test_logit_layer_refuses_invalid_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        LogitLayer(**kwargs)


@pytest.mark.parametrize("name, num_classes", [("bcos_resnet18", 7), ("bcos_cifar10_resnet20", None)])
def test_models_default_to_minus_log_c_minus_1_and_honour_a_zero_logit_bias(name, num_classes):
    kwargs = {} if num_classes is None else {"num_classes": num_classes}
    default = rr.create_model(name, **kwargs).eval()
    classes = default.num_classes
    assert default.logit_layer.bias == pytest.approx(-math.log(classes - 1))
    zero = rr.create_model(name, logit_bias=0.0, **kwargs).eval()
    assert zero.logit_layer.bias == 0.0
    zero.load_state_dict(default.state_dict())
    x = torch.rand(2, 6, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(default(x), zero(x) - math.log(classes - 1))
