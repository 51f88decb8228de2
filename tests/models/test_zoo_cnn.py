"""B-cos DenseNets, VGGs and ConvNeXts against the B-cos v2 release (the ``bcos`` package as referee).

Every family is built twice, once by us and once by the ``bcos`` package, with the same random weights (norm weights
and running statistics included): logits and explanations must agree in eval and train mode (eval only for VGG, whose
norm is checked in train mode on the other families), the explanation must be complete, and release state dicts must
load in every wrapper layout. The referee models use the smallest widths the
architectures allow (the VGG classifier is fixed at 512 → 4096 → 4096 by the release, so VGG-11 runs at full width on
32 px inputs); full-size models of every registered size are compared on the ``meta`` device for key layout only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from typing import Callable

import pytest
import torch
from bcos.models import convnext as ref_convnext
from bcos.models import densenet as ref_densenet
from bcos.models import vgg as ref_vgg
from bcos.modules import BcosConv2d as RefBcosConv2d
from bcos.modules import norms as ref_norms
from torch import nn

from rightreasons import create_model, list_models, load_weights, save_model
from rightreasons.errors import CheckpointError
from rightreasons.explain import explain
from rightreasons.models import BcosConvNeXt, BcosDenseNet

REF_CONV = partial(RefBcosConv2d, b=2, max_out=1)  # what the release's get_model passes (bcos_args b=2, max_out=1)
REF_BNU = ref_norms.NoBias(ref_norms.BatchNormUncentered2d)  # the release's ImageNet norm for CNNs

# Two classes: the default logit bias -log(C - 1) is 0 on both sides, so logits keep full float32 precision
# (random B-cos weights give raw logits far below 1, which a bias of -log(999) would swamp).
DENSE = dict(growth_rate=4, block_config=(2, 2, 2, 2), num_init_features=8, bn_size=2, num_classes=2)
DENSE_CIFAR = dict(growth_rate=4, block_config=(2, 2, 2), num_init_features=8, bn_size=2, num_classes=2,
                   small_inputs=True)
CONVNEXT_DEPTHS, CONVNEXT_DIMS = (1, 1, 2, 1), (8, 16, 24, 32)
REF_CONVNEXT_SETTING = [ref_convnext.CNBlockConfig(8, 16, 1), ref_convnext.CNBlockConfig(16, 24, 1),
                        ref_convnext.CNBlockConfig(24, 32, 2), ref_convnext.CNBlockConfig(32, None, 1)]


@dataclass(frozen=True)
class Case:
    """One family variant: our builder, the release's builder, input size, the modes worth comparing, and the mean
    of the random conv weights."""

    ours: Callable[[], nn.Module]
    ref: Callable[[], nn.Module]
    size: int
    modes: tuple[str, ...] = ("eval", "train")
    weight_mean: float = 0.0


CASES = {
    "densenet": Case(lambda: BcosDenseNet(**DENSE),
                     lambda: ref_densenet.BcosDenseNet(**DENSE, conv_layer=REF_CONV, norm_layer=REF_BNU), 64),
    "densenet_cifar": Case(lambda: BcosDenseNet(**DENSE_CIFAR),
                           lambda: ref_densenet.BcosDenseNet(**DENSE_CIFAR, conv_layer=REF_CONV, norm_layer=REF_BNU),
                           16),
    # VGG without norms computes the same in train and eval mode. Nothing renormalises its signal, and zero-mean
    # random filters shrink it by ~sqrt(fan-in) per layer until the +1e-6 in the patch norm makes every layer
    # quadratic and the logits underflow to 0; filters with a positive mean stay aligned with the positive input.
    "vgg": Case(lambda: create_model("bcos_vgg11", num_classes=2),
                lambda: ref_vgg.vgg11(conv_layer=REF_CONV, num_classes=2), 32, ("eval",), weight_mean=0.5),
    # Eval only: BatchNorm's train path (the same norm module) is checked on DenseNet and ConvNeXt, and every pass
    # through VGG's 120 M-weight classifier costs CI seconds.
    "vgg_bnu": Case(lambda: create_model("bcos_vgg11_bnu", num_classes=2),
                    lambda: ref_vgg.vgg11_bnu(conv_layer=REF_CONV, norm_layer=REF_BNU, num_classes=2), 32, ("eval",)),
    "convnext_pn": Case(lambda: BcosConvNeXt(CONVNEXT_DEPTHS, CONVNEXT_DIMS, num_classes=2),
                        lambda: ref_convnext.BcosConvNeXt(REF_CONVNEXT_SETTING, conv_layer=REF_CONV, num_classes=2),
                        64),
    "convnext_bnu": Case(lambda: BcosConvNeXt(CONVNEXT_DEPTHS, CONVNEXT_DIMS, num_classes=2, norm_layer="bnu"),
                         lambda: ref_convnext.BcosConvNeXt(REF_CONVNEXT_SETTING, conv_layer=REF_CONV,
                                                           norm_layer=REF_BNU, num_classes=2), 64),
}


def _assert_rel_close(actual: torch.Tensor, expected: torch.Tensor, rtol: float, what: str) -> None:
    """``max |actual − expected| <= rtol · max |expected|`` (and the reference is not trivially zero)."""
    scale = expected.abs().max()
    assert scale > 0, f"{what}: the reference is all zeros, the comparison would be vacuous"
    err = (actual - expected).abs().max()
    assert err <= rtol * scale, f"{what}: max abs error {err:.3g} > {rtol} · {scale:.3g}"


def _randomise(model: nn.Module, x: torch.Tensor, generator: torch.Generator, weight_mean: float) -> None:
    """Random weights everywhere; BatchNorm running variances calibrated on ``x`` then perturbed per channel.

    Calibration keeps eval-mode activations O(1) through deep nets (uncalibrated random variances shrink or blow up
    the signal geometrically); the perturbation makes eval differ from train mode.
    """
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("linear.weight"):
                p.normal_(mean=weight_mean, generator=generator)
            else:  # norm weights γ, ConvNeXt layer scales
                p.uniform_(0.5, 1.5, generator=generator)
        batch_norms = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
        for m in batch_norms:
            m.running_mean.normal_(generator=generator)
            m.running_var.fill_(1.0)
            m.num_batches_tracked.zero_()
            m.momentum = None  # cumulative average: the first batch sets the running variance
        if batch_norms:
            model.train()(x)
        for m in batch_norms:
            m.momentum = 0.1
            m.running_var.mul_(torch.empty_like(m.running_var).uniform_(0.8, 1.25, generator=generator))
            m.num_batches_tracked.fill_(7)


def _on_meta(build: Callable[[], nn.Module]) -> nn.Module:
    """Build without initialising (VGG's classifier alone has 120 M weights); storage allocated, left empty."""
    with torch.device("meta"):
        model = build()
    return model.to_empty(device="cpu")


@pytest.fixture(scope="module", params=list(CASES))
def pair(request):
    """``(case, ours, ref)``: the release model with random weights, and ours loaded from its state dict."""
    case = CASES[request.param]
    generator = torch.Generator().manual_seed(1234)
    ref = _on_meta(case.ref)
    x = torch.rand(3, 6, case.size, case.size, generator=generator)
    _randomise(ref, x, generator, case.weight_mean)
    ours = load_weights(_on_meta(case.ours), ref.state_dict())
    return case, ours, ref


def _reference_explanation(ref: nn.Module, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The release's explanation: the input gradient of the target logits in its explanation mode."""
    x = x.clone().requires_grad_(True)
    with ref.explanation_mode():
        logits = ref(x)
        (weights,) = torch.autograd.grad(logits.gather(1, target[:, None]).sum(), x)
    return logits.detach(), weights


def test_logits_and_explanations_match_the_release(pair):
    case, ours, ref = pair
    x = torch.rand(3, 6, case.size, case.size)
    target = torch.tensor([0, 1, 1])
    for mode in case.modes:
        ours.train(mode == "train")
        ref.train(mode == "train")
        ours_expl = explain(ours, x, target)
        ref_logits, ref_weights = _reference_explanation(ref, x, target)
        _assert_rel_close(ours_expl.logits, ref_logits, 1e-5, f"{mode} logits")
        _assert_rel_close(ours_expl.weights, ref_weights, 1e-5, f"{mode} explanation")
        explained = ours_expl.logits.gather(1, target[:, None])[:, 0] - ours.logit_layer.bias
        _assert_rel_close(ours_expl.maps.sum((1, 2)), explained, 1e-4, f"{mode} completeness")
        if mode == "train":  # both updated their running statistics once, from the same batch
            ref_state = ref.state_dict()
            for name, buf in ours.named_buffers():
                assert torch.allclose(buf.double(), ref_state[name].double(), rtol=1e-5, atol=0), name


LAYOUTS = {
    "plain": lambda sd: dict(sd),
    "zero_prefix": lambda sd: {f"0.{k}": v for k, v in sd.items()},  # Model-Guidance release, ViT release files
    "lightning": lambda sd: {"state_dict": {f"model.{k}": v for k, v in sd.items()}},
    "lightning_ema": lambda sd: {"state_dict": {**{f"model.{k}": torch.zeros_like(v) for k, v in sd.items()},
                                                **{f"ema.module.{k}": v for k, v in sd.items()}}},
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("pair", [c for c in CASES if not c.startswith("vgg")], indirect=True)
def test_release_state_dicts_load_in_every_layout(pair, layout):
    """Values included (the EMA copy wins over the ``model.`` copy); VGG's 130 M weights are loaded once by the
    fixture in the plain layout, and in every layout on the meta device below."""
    _, ours, ref = pair
    with torch.no_grad():
        for t in ours.state_dict().values():
            t.zero_()
    load_weights(ours, LAYOUTS[layout](ref.state_dict()), ema=layout == "lightning_ema")
    expected = ref.state_dict()
    for name, tensor in ours.state_dict().items():
        assert torch.equal(tensor, expected[name]), name


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", ["bcos_vgg11", "bcos_vgg11_bnu"])
def test_release_vgg_state_dicts_load_in_every_layout(name, layout):
    """Keys and shapes only (strict loading refuses any mismatch); values are checked on the smaller families."""
    with torch.device("meta"):
        ours, ref = create_model(name), _release_builder(name)()
        load_weights(ours, LAYOUTS[layout](ref.state_dict()), ema=layout == "lightning_ema")


@pytest.mark.parametrize(("name", "size", "expected"), [
    ("bcos_densenet121", 224, [56, 28, 14, 7]),
    ("bcos_cifar10_densenet52", 32, [32, 16, 8, 8]),
    ("bcos_vgg11_bnu", 224, [56, 28, 14, 7]),
    ("bcos_convnext_tiny", 224, [56, 28, 14, 7]),
])
def test_stages_and_head(name, size, expected):
    """Guidance stages resolve to modules with the documented strides; ``final`` is the feature map (shapes only)."""
    with torch.device("meta"):
        model = create_model(name).eval()
        x = torch.empty(2, 6, size, size)
    modules = dict(model.named_modules())
    outputs = {}
    for key, path in model.stage_names.items():
        modules[path].register_forward_hook(lambda m, i, o, key=key: outputs.__setitem__(key, o))
    features = model.forward_features(x)
    assert list(outputs) == ["mid1", "mid2", "mid3", "final"] and outputs["final"] is features
    assert [outputs[k].shape[-1] for k in outputs] == expected and features.shape[1] == model.num_features
    assert model.forward_head(features).shape == (2, model.num_classes)
    assert model.forward_head(features, pre_logits=True).shape == (2, getattr(model, "head_hidden_size",
                                                                             model.num_features))
    assert any(m is model.get_classifier() for m in model.modules())
    with pytest.raises(ValueError, match="six-channel"):
        model(x[:, :3])


def _release_builder(name: str) -> Callable[[], nn.Module]:
    """The ``bcos`` package's builder for one of our registry names, with the release's norm and conv."""
    arch = name.removeprefix("bcos_")
    if arch.startswith("convnext"):
        size, _, norm = arch.removeprefix("convnext_").partition("_")
        return partial(getattr(ref_convnext, f"convnext_{size}"), conv_layer=REF_CONV,
                       norm_layer=REF_BNU if norm == "bnu" else None)
    if arch.startswith("vgg") and not arch.endswith("_bnu"):
        return partial(getattr(ref_vgg, arch), conv_layer=REF_CONV)
    module = ref_vgg if arch.startswith("vgg") else ref_densenet
    return partial(getattr(module, arch), conv_layer=REF_CONV, norm_layer=REF_BNU)


@pytest.mark.parametrize("name", list_models(family="densenet", bcos=True) + list_models(family="vgg", bcos=True)
                         + list_models(family="convnext", bcos=True))
def test_full_size_key_layout_matches_the_release(name):
    with torch.device("meta"):
        ours, ref = create_model(name), _release_builder(name)()
    assert {k: v.shape for k, v in ours.state_dict().items()} == {k: v.shape for k, v in ref.state_dict().items()}
    ours_modules = dict(ours.named_modules())
    for path, m in ref.named_modules():  # same norm eps and drop-path rates as the release defaults
        if hasattr(m, "eps") or hasattr(m, "p"):
            assert getattr(ours_modules[path], "eps", None) == getattr(m, "eps", None), path
            assert getattr(ours_modules[path], "p", None) == getattr(m, "p", None), path


def test_registered_names_and_logit_layer():
    assert list_models(family="densenet", bcos=True) == sorted(
        [f"bcos_densenet{d}" for d in (121, 161, 169, 201)]
        + [f"bcos_cifar10_densenet{d}" for d in (52, 100, 190, 250)])
    assert list_models(family="vgg", bcos=True) == sorted(
        f"bcos_vgg{d}{s}" for d in (11, 13, 16, 19) for s in ("", "_bnu"))
    assert list_models(family="convnext", bcos=True) == sorted(
        f"bcos_convnext_{n}{s}" for n in ("atto", "tiny", "small", "base", "large") for s in ("", "_bnu"))
    with torch.device("meta"):
        default = create_model("bcos_convnext_tiny", num_classes=10)
        zero = create_model("bcos_densenet121", num_classes=10, logit_bias=0.0, logit_temperature=2.0)
    assert default.logit_layer.bias == pytest.approx(-math.log(9)) and default.num_classes == 10
    assert zero.logit_layer.bias == 0.0 and zero.logit_layer.temperature == 2.0 and zero.in_chans == 6


def test_checkpoint_of_another_architecture_names_both(tmp_path):
    path = save_model(create_model("bcos_cifar10_densenet52"), tmp_path / "densenet.safetensors")
    with torch.device("meta"):
        convnext = create_model("bcos_convnext_atto")
    with pytest.raises(CheckpointError, match=r"bcos_convnext_atto.*bcos_cifar10_densenet52"):
        load_weights(convnext, path)
