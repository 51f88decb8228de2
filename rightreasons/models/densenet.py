"""B-cos DenseNets (DenseNet-BC, ImageNet and CIFAR variants) with the B-cos v2 release's architecture and module names.

Relative to torchvision's DenseNet: every conv is a :class:`BcosConv2d` (B = 2), all ReLUs are gone, the stem max-pool
is an ``AvgPool2d(3, 2, 1)``, norms default to bias-free uncentred BatchNorm (``"bnu"``, as in the released
checkpoints), the final ``norm5`` is kept, and the classifier is a 1×1 B-cos conv applied *before* global average
pooling, followed by a fixed :class:`LogitLayer`. CIFAR DenseNets (``small_inputs``) have a single 3×3 stem conv with
neither norm nor pooling and three dense blocks. The model is dynamic linear end to end:
``logits − logit_bias == Σ W(x) ⊙ x``.

State-dict keys follow the release: ``features.conv0.linear.weight``, ``features.norm0.*``,
``features.denseblock1.denselayer1.{norm1,conv1,norm2,conv2}``, ``features.transition1.{norm,conv}``,
``features.norm5.*``, ``classifier.linear.weight``.

Stages for guidance (:attr:`BcosDenseNet.stage_names`): ``mid1``–``mid3`` are the outputs of dense blocks 1–3
(``features.denseblock{1,2,3}``, before the following transition), ``final`` is ``features.norm5``, the normalised
output of the last dense block (= :meth:`BcosDenseNet.forward_features`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..bcos.norms import NormFactory, get_norm_layer
from .pretrained import register_pretrained
from .registry import register_model
from .base import BcosCNN

__all__ = ["DENSENET_STAGES", "BcosDenseNet", "DenseBlock", "DenseLayer", "Transition", "cifar_block_config"]

DENSENET_STAGES: dict[str, str] = {"mid1": "features.denseblock1", "mid2": "features.denseblock2",
                                   "mid3": "features.denseblock3", "final": "features.norm5"}
"""Guidance layer names → module paths of a DenseNet (B-cos or torchvision, same key layout): dense blocks 1–3
(before their transition) and ``norm5``, the normalised output of the last block."""

ConvFactory = Callable[..., nn.Module]


class DenseLayer(nn.Module):
    """Bottleneck layer ``norm → 1×1 conv (bn_size·k) → norm → 3×3 conv (k)``: ``[N, C, H, W] -> [N, k, H, W]``."""

    def __init__(self, in_features: int, growth_rate: int, bn_size: int, drop_rate: float, conv: ConvFactory,
                 norm: NormFactory) -> None:
        super().__init__()
        self.norm1 = norm(in_features)
        self.conv1 = conv(in_features, bn_size * growth_rate, kernel_size=1)
        self.norm2 = norm(bn_size * growth_rate)
        self.conv2 = conv(bn_size * growth_rate, growth_rate, kernel_size=3, padding=1)
        self.drop_rate = float(drop_rate)

    def forward(self, x: Tensor) -> Tensor:
        out = self.conv2(self.norm2(self.conv1(self.norm1(x))))
        return F.dropout(out, self.drop_rate, self.training) if self.drop_rate > 0 else out


class DenseBlock(nn.ModuleDict):
    """``num_layers`` dense layers (``denselayer1`` …), each fed the concatenation of the block input and all earlier
    layers' outputs: ``[N, C, H, W] -> [N, C + num_layers·k, H, W]``."""

    def __init__(self, num_layers: int, in_features: int, growth_rate: int, bn_size: int, drop_rate: float,
                 conv: ConvFactory, norm: NormFactory) -> None:
        super().__init__()
        for i in range(num_layers):
            self[f"denselayer{i + 1}"] = DenseLayer(in_features + i * growth_rate, growth_rate, bn_size, drop_rate,
                                                    conv, norm)

    def forward(self, x: Tensor) -> Tensor:
        features = [x]
        for layer in self.values():
            features.append(layer(torch.cat(features, 1)))
        return torch.cat(features, 1)


class Transition(nn.Sequential):
    """``norm → 1×1 conv → 2×2 average pooling``: ``[N, C, H, W] -> [N, C_out, H/2, W/2]``."""

    def __init__(self, in_features: int, out_features: int, conv: ConvFactory, norm: NormFactory) -> None:
        super().__init__(OrderedDict([("norm", norm(in_features)),
                                      ("conv", conv(in_features, out_features, kernel_size=1)),
                                      ("pool", nn.AvgPool2d(kernel_size=2, stride=2))]))


def cifar_block_config(depth: int) -> tuple[int, int, int]:
    """Dense layers per block of a three-block CIFAR DenseNet-BC of the given depth: ``((depth − 4) / 6,) * 3``."""
    if depth < 10 or (depth - 4) % 6:
        raise ValueError(f"a CIFAR DenseNet-BC needs depth = 6·n + 4 with n >= 1, got depth={depth}")
    return ((depth - 4) // 6,) * 3


class BcosDenseNet(BcosCNN):
    """B-cos DenseNet-BC: ``[N, in_chans, H, W] -> logits [N, num_classes]``.

    Args:
        growth_rate: channels added per dense layer (``k``).
        block_config: dense layers per block (three or four blocks); a transition halves the width between blocks.
        num_init_features: width of the stem conv.
        bn_size: bottleneck width factor (the 1×1 conv has ``bn_size·k`` outputs).
        drop_rate: dropout after every dense layer (training only).
        num_classes: outputs of the classifier.
        in_chans: input channels (6 for the ``[x, 1 − x]`` encoding).
        small_inputs: CIFAR stem (3×3 conv, no norm, no pooling) instead of 7×7/2 conv, norm and 3×3/2 average pooling.
        norm_layer: a norm name from :data:`~rightreasons.bcos.norms.NORM_LAYERS` or a factory ``f(num_features)``.
        b, max_out: B-cos settings of every conv.
        logit_bias: fixed logit bias; ``None`` means ``-log(num_classes - 1)``; 0.0 is honoured.
        logit_temperature: fixed logit temperature (``None`` = 1).
    """

    def __init__(self, growth_rate: int = 32, block_config: Sequence[int] = (6, 12, 24, 16),
                 num_init_features: int = 64, bn_size: int = 4, drop_rate: float = 0.0, num_classes: int = 1000,
                 in_chans: int = 6, small_inputs: bool = False, norm_layer: str | NormFactory = "bnu", b: float = 2,
                 max_out: int = 1, logit_bias: float | None = None, logit_temperature: float | None = None) -> None:
        if len(block_config) not in (3, 4):
            raise ValueError(f"BcosDenseNet needs 3 or 4 dense blocks, got block_config={list(block_config)}")
        super().__init__(num_classes, in_chans, b, max_out, logit_bias, logit_temperature)
        norm = get_norm_layer(norm_layer)

        conv = self.conv

        if small_inputs:
            stem = [("conv0", conv(in_chans, num_init_features, kernel_size=3, padding=1))]
        else:
            stem = [("conv0", conv(in_chans, num_init_features, kernel_size=7, stride=2, padding=3)),
                    ("norm0", norm(num_init_features)),
                    ("pool0", nn.AvgPool2d(kernel_size=3, stride=2, padding=1))]
        self.features = nn.Sequential(OrderedDict(stem))
        channels = num_init_features
        for i, num_layers in enumerate(block_config):
            self.features.add_module(f"denseblock{i + 1}", DenseBlock(num_layers, channels, growth_rate, bn_size,
                                                                      drop_rate, conv, norm))
            channels += num_layers * growth_rate
            if i != len(block_config) - 1:
                self.features.add_module(f"transition{i + 1}", Transition(channels, channels // 2, conv, norm))
                channels //= 2
        self.features.add_module("norm5", norm(channels))

        self.num_features = channels
        self.classifier = conv(channels, num_classes, kernel_size=1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight)

    @property
    def stage_names(self) -> dict[str, str]:
        """Guidance layer names → module paths: ``mid1``–``mid3`` after dense blocks 1–3, ``final`` after ``norm5``."""
        return dict(DENSENET_STAGES)


DENSENET_CONFIGS: dict[str, tuple[int, tuple[int, ...], int]] = {
    "densenet121": (32, (6, 12, 24, 16), 64),
    "densenet161": (48, (6, 12, 36, 24), 96),
    "densenet169": (32, (6, 12, 32, 32), 64),
    "densenet201": (32, (6, 12, 48, 32), 64),
}
"""ImageNet DenseNets: growth rate, dense layers per block, stem width (torchvision's and the release's)."""
for _name, (_growth, _blocks, _init) in DENSENET_CONFIGS.items():
    register_model(f"bcos_{_name}", BcosDenseNet, family="densenet", bcos=True, growth_rate=_growth,
                   block_config=_blocks, num_init_features=_init)

for _depth, _growth in ((52, 12), (100, 12), (190, 40), (250, 24)):
    register_model(f"bcos_cifar10_densenet{_depth}", BcosDenseNet, family="densenet", bcos=True, growth_rate=_growth,
                   block_config=cifar_block_config(_depth), num_init_features=2 * _growth, num_classes=10,
                   small_inputs=True)

# released weights (B-cos v2): weights name, hub entry point, experiment, file, ImageNet top-1
register_pretrained("bcos_densenet121", "densenet121", "bcos_final/densenet_121", "densenet_121-b8daf96afb.pth", 73.612)
register_pretrained("bcos_densenet161", "densenet161", "bcos_final/densenet_161", "densenet_161-9e9ea51353.pth", 76.622)
register_pretrained("bcos_densenet169", "densenet169", "bcos_final/densenet_169", "densenet_169-7037ee0604.pth", 75.186)
register_pretrained("bcos_densenet201", "densenet201", "bcos_final/densenet_201", "densenet_201-00ac87066f.pth", 75.480)
register_pretrained("bcos_densenet121.long", "densenet121_long", "bcos_final_long/densenet_121",
                    "densenet_121_long-5175461597.pth", 77.302)
