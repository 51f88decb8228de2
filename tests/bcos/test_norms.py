"""Normalisation layers: numerics against torch and the ``bcos`` package, the uncentred formulas of docs/science.md, normalisation layers,
explanation mode (forward unchanged, ``1/σ`` held constant) and the NoBias / Unaffine / short-name helpers."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from rightreasons.bcos import NORM_LAYERS, NoBias, Unaffine, explanation_mode, get_norm_layer, norms

ALL_NORMS = {"BatchNormUncentered2d", "BatchNorm2d", "AllNormUncentered2d", "AllNorm2d", "GroupNormUncentered2d",
             "GroupNorm2d", "GNLayerNormUncentered2d", "GNLayerNorm2d", "GNInstanceNormUncentered2d",
             "GNInstanceNorm2d", "PositionNormUncentered2d", "PositionNorm2d", "LayerNorm", "LayerNormUncentered"}


@pytest.fixture
def sample_input(is_token_norm):
    """``sample_input(cls, channels=4)``: a random input of the shape the norm class acts on."""
    def sample(cls: type, channels: int = 4) -> Tensor:
        shape = (2, 5, channels) if is_token_norm(cls) else (3, channels, 4, 5)
        return torch.randn(shape) * 2 + 0.5
    return sample


def randomised(norm: nn.Module) -> nn.Module:
    with torch.no_grad():
        if getattr(norm, "weight", None) is not None:
            norm.weight.uniform_(0.5, 1.5)
        if getattr(norm, "bias", None) is not None:
            norm.bias.normal_()
        if getattr(norm, "running_var", None) is not None:
            norm.running_var.uniform_(0.5, 2.0)
            norm.running_mean.normal_()
    return norm


def input_gradient(module: nn.Module, x: Tensor, upstream: Tensor) -> tuple[Tensor, Tensor]:
    """``(module(x), d<module(x), upstream>/dx)``."""
    x = x.clone().requires_grad_(True)
    y = module(x)
    (g,) = torch.autograd.grad((y * upstream).sum(), x)
    return y.detach(), g


def test_every_norm_class_is_listed(norm_classes):
    assert ALL_NORMS <= {cls.__name__ for cls in norm_classes}


# ------------------------------------------------------------------------------------------------ centred vs torch

def _batch_norm_3d(channels: int) -> nn.Module:
    """AllNorm as torch computes it: BatchNorm3d with one feature over ``[N, 1, C, H, W]``."""
    class AllNormTorch(nn.BatchNorm3d):
        def forward(self, x: Tensor) -> Tensor:
            return super().forward(x.unsqueeze(1)).squeeze(1)

    return AllNormTorch(1)


def _position_layer_norm(channels: int) -> nn.Module:
    class PositionLayerNorm(nn.LayerNorm):
        def forward(self, x: Tensor) -> Tensor:
            return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    return PositionLayerNorm(channels)


TORCH_EQUIVALENTS = {
    norms.BatchNorm2d: nn.BatchNorm2d,
    norms.AllNorm2d: _batch_norm_3d,
    norms.GroupNorm2d: lambda c: nn.GroupNorm(2, c),
    norms.GNLayerNorm2d: lambda c: nn.GroupNorm(1, c),
    norms.GNInstanceNorm2d: lambda c: nn.GroupNorm(c, c),
    norms.PositionNorm2d: _position_layer_norm,
    norms.LayerNorm: nn.LayerNorm,
}


CENTRED_CASES = [(cls, 0.1) for cls in TORCH_EQUIVALENTS] + [(norms.BatchNorm2d, None), (norms.AllNorm2d, None)]


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_gradients_are_the_derivatives_of_the_forward(norm_class, train, build_norm, sample_input):
    """gradcheck and gradgradcheck (float64) in the input and the affine parameters, outside explanation mode: the
    closed-form backward of the normalisation is the derivative of its forward, to the second order."""
    torch.manual_seed(0)
    norm = randomised(build_norm(norm_class, 4)).double().train(train)
    params = {name: p.detach().clone().requires_grad_() for name, p in norm.named_parameters()}

    def forward(x: Tensor, *values: Tensor) -> Tensor:
        with torch.no_grad():  # the running statistics move at every call; the output must not
            buffers = {name: b.clone() for name, b in norm.named_buffers()}
        return torch.func.functional_call(norm, ({**buffers, **dict(zip(params, values))}), (x,))

    inputs = (sample_input(norm_class).double().requires_grad_(), *params.values())
    assert torch.autograd.gradcheck(forward, inputs, fast_mode=True)
    assert torch.autograd.gradgradcheck(forward, inputs, fast_mode=True)


@pytest.mark.parametrize("cls, momentum", CENTRED_CASES, ids=lambda v: getattr(v, "__name__", f"momentum={v}"))
def test_centred_norms_match_torch(cls, momentum, build_norm, sample_input):
    """Outputs in train and eval mode, and the running statistics (unbiased EMA, cumulative with momentum=None)."""
    ours = randomised(build_norm(cls, 4))
    if hasattr(ours, "momentum"):
        ours.momentum = momentum
    theirs = TORCH_EQUIVALENTS[cls](4)
    theirs.load_state_dict(ours.state_dict())
    if hasattr(theirs, "momentum"):
        theirs.momentum = momentum
    for train in (True, True, False):
        ours.train(train), theirs.train(train)
        x = sample_input(cls)
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-5, atol=1e-5)
        for key, value in theirs.state_dict().items():
            torch.testing.assert_close(ours.state_dict()[key], value, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------- uncentred formulas

UNCENTRED_DIMS = {
    norms.BatchNormUncentered2d: (0, 2, 3),
    norms.AllNormUncentered2d: (0, 1, 2, 3),
    norms.GNLayerNormUncentered2d: (1, 2, 3),
    norms.GNInstanceNormUncentered2d: (2, 3),
    norms.PositionNormUncentered2d: (1,),
    norms.LayerNormUncentered: (-1,),
}


def _uncentred_formula(norm: nn.Module, x: Tensor, var: Tensor) -> Tensor:
    shape = (-1,) if x.dim() == 3 else (1, -1, 1, 1)
    return norm.weight.view(shape) * x / torch.sqrt(var + norm.eps) + norm.bias.view(shape)


@pytest.mark.parametrize("cls", list(UNCENTRED_DIMS), ids=lambda cls: cls.__name__)
def test_uncentred_norms_follow_the_formula(cls, build_norm, sample_input):
    norm = randomised(build_norm(cls, 4)).train()
    x = sample_input(cls)
    dims = UNCENTRED_DIMS[cls]
    var = x.var(dim=dims, unbiased=False, keepdim=True)
    torch.testing.assert_close(norm(x), _uncentred_formula(norm, x, var))


def test_uncentred_group_norm_pools_each_group_of_channels(sample_input):
    norm = randomised(norms.GroupNormUncentered2d(2, 4))
    x = sample_input(norms.GroupNormUncentered2d)
    var = x.unflatten(1, (2, 2)).var(dim=(2, 3, 4), unbiased=False).repeat_interleave(2, dim=1)[:, :, None, None]
    torch.testing.assert_close(norm(x), _uncentred_formula(norm, x, var))


@pytest.mark.parametrize("cls", [norms.BatchNormUncentered2d, norms.AllNormUncentered2d], ids=lambda c: c.__name__)
def test_uncentred_running_variance_is_an_ema_of_the_biased_batch_variance(cls, build_norm, sample_input):
    norm = randomised(build_norm(cls, 4)).train()
    var0, mean0 = norm.running_var.clone(), norm.running_mean.clone()
    x = sample_input(cls)
    norm(x)
    dims = UNCENTRED_DIMS[cls]
    batch_var = x.var(dim=dims, unbiased=False).reshape(-1)
    torch.testing.assert_close(norm.running_var, 0.9 * var0 + 0.1 * batch_var)
    assert torch.equal(norm.running_mean, mean0), "the uncentred running_mean is never updated"
    assert int(norm.num_batches_tracked) == 1
    norm.eval()
    torch.testing.assert_close(norm(x), _uncentred_formula(norm, x, norm.running_var.view(1, -1, 1, 1)))


# ------------------------------------------------------------------------------------------ referee: bcos package

def _reference_norm(cls: type, channels: int) -> tuple[nn.Module, bool]:
    """The ``bcos`` package's counterpart of our norm class, and whether its explanation mode supports train mode."""
    ref = pytest.importorskip("bcos.modules.norms")
    builders = {
        norms.BatchNormUncentered2d: (ref.BatchNormUncentered2d, True),
        norms.AllNormUncentered2d: (ref.AllNormUncentered2d, True),
        norms.GroupNormUncentered2d: (lambda c: ref.GroupNormUncentered2d(2, c), True),
        norms.GNLayerNormUncentered2d: (ref.GNLayerNormUncentered2d, True),
        norms.GNInstanceNormUncentered2d: (ref.GNInstanceNormUncentered2d, True),
        norms.PositionNormUncentered2d: (ref.PositionNormUncentered2d, True),
        norms.BatchNorm2d: (ref.BatchNorm2d, False),
        norms.AllNorm2d: (ref.AllNorm2d, False),
        norms.GroupNorm2d: (lambda c: ref.DetachableGroupNorm2d(2, c), True),
        norms.GNLayerNorm2d: (ref.DetachableGNLayerNorm2d, True),
        norms.GNInstanceNorm2d: (ref.DetachableGNInstanceNorm2d, True),
        norms.PositionNorm2d: (ref.DetachablePositionNorm2d, True),
        norms.LayerNorm: (ref.DetachableLayerNorm, True),
    }
    build, explains_in_train = builders[cls]
    return build(channels), explains_in_train


@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_norms_match_the_reference_package_outputs_and_explanations(referenced_norm_class, train, build_norm,
                                                                    sample_input):
    cls = referenced_norm_class
    theirs, explains_in_train = _reference_norm(cls, 4)
    ours = randomised(build_norm(cls, 4)).train(train)
    theirs.train(train).load_state_dict(ours.state_dict())
    x = sample_input(cls)
    upstream = torch.randn_like(x)
    y, _ = input_gradient(ours, x, upstream)
    y_ref, _ = input_gradient(theirs, x, upstream)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    if train and not explains_in_train:
        return
    with explanation_mode(ours):
        _, w = input_gradient(ours, x, upstream)
    theirs.set_explanation_mode(True)
    _, w_ref = input_gradient(theirs, x, upstream)
    torch.testing.assert_close(w, w_ref, rtol=1e-5, atol=1e-5)


# -------------------------------------------------------------------------------------------- explanation mode

@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_forward_is_bit_identical_in_explanation_mode(norm_class, train, build_norm, sample_input):
    cls = norm_class
    norm = randomised(build_norm(cls, 4)).train(train)
    x = sample_input(cls).requires_grad_(True)
    outside = norm(x)
    with explanation_mode(norm):
        inside = norm(x)
    assert torch.equal(outside, inside)


@pytest.mark.parametrize("cls", list(UNCENTRED_DIMS), ids=lambda cls: cls.__name__)
def test_explanation_of_an_uncentred_norm_is_gamma_over_sigma(cls, build_norm, sample_input):
    """In train mode ``σ`` depends on ``x``; explaining holds it constant, so the input gradient is ``γ/σ ⊙ upstream``."""
    norm = randomised(build_norm(cls, 4)).train()
    with torch.no_grad():
        norm.bias = None
    x = sample_input(cls)
    upstream = torch.randn_like(x)
    y, plain = input_gradient(norm, x, upstream)
    with explanation_mode(norm):
        _, w = input_gradient(norm, x, upstream)
    torch.testing.assert_close(w, upstream * y / x)
    assert not torch.allclose(plain, w), "outside explanation mode the gradient includes dσ/dx"


# ------------------------------------------------------------------------------------------- wrappers and names

def test_no_bias_and_unaffine_drop_parameters_and_state_dict_keys():
    no_bias = NoBias(norms.BatchNormUncentered2d)(8)
    assert no_bias.bias is None and no_bias.weight is not None
    assert set(no_bias.state_dict()) == {"weight", "running_mean", "running_var", "num_batches_tracked"}
    unaffine = Unaffine(norms.PositionNorm2d)(8)
    assert unaffine.weight is None and unaffine.bias is None and not list(unaffine.parameters())
    x = torch.randn(2, 8, 3, 3)
    torch.testing.assert_close(unaffine(x), nn.functional.layer_norm(x.permute(0, 2, 3, 1), (8,)).permute(0, 3, 1, 2))


@pytest.mark.parametrize("wrapper", [NoBias, Unaffine])
def test_wrappers_refuse_a_norm_built_without_affine_parameters(wrapper):
    with pytest.raises(ValueError, match="affine=False"):
        wrapper(norms.BatchNormUncentered2d)(8, affine=False)


@pytest.mark.parametrize("name", sorted(NORM_LAYERS))
def test_every_short_name_builds_a_bias_free_norm(name):
    norm = get_norm_layer(name)(8)
    assert getattr(norm, "bias", None) is None
    x = torch.randn(2, 8, 3, 3)
    assert norm(x).shape == x.shape


def test_short_names_resolve_to_the_release_norm():
    assert isinstance(get_norm_layer("bnu")(4), norms.BatchNormUncentered2d)
    assert isinstance(get_norm_layer("pn")(4), norms.PositionNorm2d)
    factory = NoBias(norms.GNLayerNorm2d)
    assert get_norm_layer(factory) is factory


def test_unknown_short_name_lists_the_valid_ones():
    with pytest.raises(ValueError, match=r"unknown norm layer 'batchnorm'.*'bnu'"):
        get_norm_layer("batchnorm")


def test_image_norms_refuse_inputs_that_are_not_4d(image_norm_class, build_norm):
    with pytest.raises(ValueError, match=r"\[N, C, H, W\].*\(2, 4\)"):
        build_norm(image_norm_class, 4)(torch.randn(2, 4))


def test_position_norm_eps_is_configurable():
    norm = norms.PositionNormUncentered2d(4, eps=1e-6)
    x = torch.zeros(1, 4, 1, 1)
    x[0, 0] = 1e-3
    expected = x / math.sqrt(x.var(dim=1, unbiased=False).item() + 1e-6)
    torch.testing.assert_close(norm(x), expected)
