"""Fixtures of the B-cosification tests: small standard models of every supported family with non-trivial weights
(float64, eval mode), and the two input views of the same images (normalised RGB and the six-channel encoding)."""

from __future__ import annotations

from typing import Callable

import pytest
import timm
import torch
import torchvision
from torch import Tensor, nn

import rightreasons as rr
from rightreasons.encoding import IMAGENET_MEAN, IMAGENET_STD, add_inverse
from rightreasons.models.standard import StandardSimpleViT

VIT = dict(num_classes=5, dim=16, depth=2, heads=2, mlp_dim=32)
TIMM_VIT = dict(num_classes=5, img_size=32, patch_size=8, embed_dim=16, depth=2, num_heads=2, mlp_ratio=2.0)

FAMILIES: dict[str, Callable[[], nn.Module]] = {
    "resnet18": lambda: rr.create_model("resnet18", num_classes=5, inplanes=8, layers=[1, 1, 1, 1]),
    "resnet50": lambda: rr.create_model("resnet50", num_classes=5, inplanes=8, layers=[1, 1, 1, 1]),
    "torchvision_resnet": lambda: torchvision.models.resnet.ResNet(torchvision.models.resnet.BasicBlock,
                                                                   [1, 1, 1, 1], num_classes=5),
    "densenet121": lambda: rr.create_model("densenet121", num_classes=5, growth_rate=4, block_config=(1, 2, 1, 1),
                                           num_init_features=8),
    "torchvision_densenet": lambda: torchvision.models.DenseNet(4, (1, 1, 2, 1), 8, num_classes=5),
    "simple_vit": lambda: StandardSimpleViT(image_size=32, patch_size=8, **VIT),
    "vitc": lambda: StandardSimpleViT(image_size=32, patch_size=1, conv_stem=[8, 16], **VIT),
    "timm_vit": lambda: timm.create_model("vit_tiny_patch16_224", **TIMM_VIT),
    "timm_vit_avg_qknorm_layerscale": lambda: timm.create_model("vit_tiny_patch16_224", global_pool="avg",
                                                                qk_norm=True, init_values=0.5, **TIMM_VIT),
}
"""Every supported family, small: our twins, plain torchvision models, the release's standard ViT / ViT-c and timm
ViTs (class token or average pooling, q/k norms and layer scale)."""


def _randomise(model: nn.Module) -> nn.Module:
    """Non-trivial eval-mode BatchNorm statistics, norm scales, biases and embeddings (defaults are 0 / 1), so that a
    misplaced bias, mean or scale shows in the logits."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.5)
                m.running_var.uniform_(0.5, 2.0)
        for name, p in model.named_parameters():
            if p.dim() == 1 and name.endswith(("weight", "gamma")):
                p.uniform_(0.5, 1.5)
            elif p.dim() == 1 or name.endswith(("pos_embed", "cls_token")):
                p.normal_(0, 0.3)
    return model


@pytest.fixture(params=list(FAMILIES))
def family(request) -> str:
    """The name of each supported family in turn."""
    return request.param


@pytest.fixture
def standard_model() -> Callable[[str], nn.Module]:
    """``standard_model(family)``: a small standard model of that family, randomised, float64, eval mode."""
    return lambda name: _randomise(FAMILIES[name]()).double().eval()


@pytest.fixture
def images() -> Callable[..., tuple[Tensor, Tensor]]:
    """``images(n=2, size=32)``: random RGB images in [0, 1] (float64) as ``(normalised with the ImageNet statistics,
    encoded as [x, 1 − x])``."""
    def make(n: int = 2, size: int = 32) -> tuple[Tensor, Tensor]:
        x = torch.rand(n, 3, size, size, dtype=torch.float64)
        mean = torch.tensor(IMAGENET_MEAN, dtype=torch.float64).view(1, 3, 1, 1)
        std = torch.tensor(IMAGENET_STD, dtype=torch.float64).view(1, 3, 1, 1)
        return (x - mean) / std, add_inverse(x, dim=1)
    return make


@pytest.fixture
def relative_error() -> Callable[[Tensor, Tensor], float]:
    """``relative_error(ours, reference)``: max absolute difference over the reference's max absolute value."""
    return lambda ours, reference: ((ours - reference).abs().max() / reference.abs().max()).item()
