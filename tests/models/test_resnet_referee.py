"""Referee tests: every B-cos ResNet-family model against the ``bcos`` package (B-cos v2 release, 0.1.3).

Both libraries build the same architecture; our random weights (with random norm scales and running variances, so
the norms are not identities) are copied into the reference with a strict ``load_state_dict`` (same module names and
shapes). Logits and explanations (the input gradient in explanation mode) must agree to 1e-5 relative, in eval mode
and in train mode (batch statistics), and train mode must update the running variances identically.
ImageNet nets run on 32 px inputs (they downsample 32×), CIFAR nets on 32 px as well; batch 2.
"""

from __future__ import annotations

import functools
import math

import pytest
import torch
from torch import Tensor, nn

import rightreasons as rr
from rightreasons.explain import explain

ref_resnet = pytest.importorskip("bcos.models.resnet")
ref_modules = pytest.importorskip("bcos.modules")

NUM_CLASSES = 7
RESNETS = rr.list_models(family="resnet", bcos=True)
EXPECTED = {"bcos_resnet18", "bcos_resnet34", "bcos_resnet50", "bcos_resnet101", "bcos_resnet152",
            "bcos_resnext50_32x4d", "bcos_resnext101_32x8d", "bcos_wide_resnet50_2", "bcos_wide_resnet101_2",
            "bcos_cifar10_resnet20", "bcos_cifar10_resnet32", "bcos_cifar10_resnet44", "bcos_cifar10_resnet56",
            "bcos_cifar10_resnet110"}


def test_the_whole_resnet_family_is_registered():
    assert EXPECTED <= set(RESNETS)


def relative_difference(ours: Tensor, theirs: Tensor) -> float:
    return ((ours - theirs).abs().max() / theirs.abs().max()).item()


@functools.lru_cache(maxsize=1)
def model_pair(name: str) -> tuple[nn.Module, nn.Module]:
    """Our model and the reference one with identical random weights (cached: eval and train reuse the pair)."""
    torch.manual_seed(0)
    ours = rr.create_model(name, num_classes=NUM_CLASSES)
    with torch.no_grad():
        for m in ours.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.running_var.uniform_(0.5, 2.0)
    with torch.device("meta"):  # no initialisation: every tensor comes from ours
        theirs = getattr(ref_resnet, name.removeprefix("bcos_"))(
            num_classes=NUM_CLASSES, norm_layer=ref_modules.NoBias(ref_modules.BatchNormUncentered2d),
            conv_layer=ref_modules.BcosConv2d, logit_bias=-math.log(NUM_CLASSES - 1))
    # strict: the same module names and shapes as the release
    theirs.load_state_dict({k: v.clone() for k, v in ours.state_dict().items()}, assign=True)
    return ours, theirs


def reference_explanation(model: nn.Module, x: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
    x = x.clone().requires_grad_(True)
    with model.explanation_mode():
        logits = model(x)
        (weights,) = torch.autograd.grad(logits.gather(1, target[:, None]).sum(), x)
    return logits.detach(), weights


@pytest.mark.parametrize("name, train", [(n, t) for n in RESNETS for t in (False, True)],
                         ids=[f"{n.removeprefix('bcos_')}-{'train' if t else 'eval'}" for n in RESNETS for t in (0, 1)])
def test_resnet_matches_the_reference_package(name, train):
    ours, theirs = model_pair(name)
    ours.train(train), theirs.train(train)
    x = torch.rand(2, 6, 32, 32)
    target = torch.tensor([1, 4])
    e = explain(ours, x, target)
    logits, weights = reference_explanation(theirs, x, target)
    assert relative_difference(e.logits, logits) <= 1e-5
    assert relative_difference(e.weights, weights) <= 1e-5
    if train:
        buffers = dict(theirs.named_buffers())
        for key, value in ours.named_buffers():
            torch.testing.assert_close(value, buffers[key], rtol=1e-5, atol=1e-8, msg=key)
