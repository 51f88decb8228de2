"""B-cos ResNets, ResNeXts, Wide-ResNets and CIFAR ResNets with the B-cos v2 release's architecture and module names.

Relative to torchvision's ResNet: every conv is a :class:`BcosConv2d` (B = 2), all ReLUs are gone, the stem max-pool
is an ``AvgPool2d(3, 2, 1)``, norms default to bias-free uncentred BatchNorm (``"bnu"``), and the classifier ``fc`` is
a 1×1 B-cos conv applied *before* global average pooling, followed by a fixed :class:`LogitLayer`. The model is
therefore dynamic linear end to end: ``logits − logit_bias == Σ W(x) ⊙ x``.

Stages for guidance: ``mid1``–``mid3`` are the outputs of ``layer1``–``layer3``, ``final`` the last stage (``layer4``,
or ``layer3`` for the three-stage CIFAR nets); see :attr:`BcosResNet.stage_names`.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Sequence

from torch import Tensor, nn
from torchvision.ops import StochasticDepth

from ..bcos.norms import NormFactory, get_norm_layer
from .pretrained import register_pretrained
from .registry import register_model
from .base import BcosCNN, check_drop_probability

__all__ = ["RESNET_STAGES", "BasicBlock", "Bottleneck", "BcosResNet"]

RESNET_STAGES: dict[str, str] = {"mid1": "layer1", "mid2": "layer2", "mid3": "layer3", "final": "layer4"}
"""Guidance layer names → module paths of a four-stage ResNet (B-cos or torchvision): the outputs of stages 1–4."""

ConvFactory = Callable[..., nn.Module]


class BasicBlock(nn.Module):
    """Two 3×3 B-cos convs with norms and an identity (or 1×1 projection) shortcut; no non-linearity."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int, downsample: nn.Module | None, conv: ConvFactory,
                 norm: NormFactory, groups: int = 1, base_width: int = 64, drop_path: float = 0.0) -> None:
        super().__init__()
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock supports only groups=1 and width_per_group=64")
        self.conv1 = conv(inplanes, planes, kernel_size=3, stride=stride, padding=1)
        self.bn1 = norm(planes)
        self.conv2 = conv(planes, planes, kernel_size=3, padding=1)
        self.bn2 = norm(planes)
        self.downsample = downsample
        self.stochastic_depth = StochasticDepth(drop_path, "row") if drop_path else None

    def residual(self, x: Tensor) -> Tensor:
        return self.bn2(self.conv2(self.bn1(self.conv1(x))))

    def forward(self, x: Tensor) -> Tensor:
        out = self.residual(x)
        if self.stochastic_depth is not None:
            out = self.stochastic_depth(out)
        return out + (x if self.downsample is None else self.downsample(x))


class Bottleneck(BasicBlock):
    """1×1 → 3×3 (grouped, strided) → 1×1 B-cos convs with norms, expansion 4."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int, downsample: nn.Module | None, conv: ConvFactory,
                 norm: NormFactory, groups: int = 1, base_width: int = 64, drop_path: float = 0.0) -> None:
        nn.Module.__init__(self)
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv(inplanes, width, kernel_size=1)
        self.bn1 = norm(width)
        self.conv2 = conv(width, width, kernel_size=3, stride=stride, padding=1, groups=groups)
        self.bn2 = norm(width)
        self.conv3 = conv(width, planes * self.expansion, kernel_size=1)
        self.bn3 = norm(planes * self.expansion)
        self.downsample = downsample
        self.stochastic_depth = StochasticDepth(drop_path, "row") if drop_path else None

    def residual(self, x: Tensor) -> Tensor:
        return self.bn3(self.conv3(self.bn2(self.conv2(self.bn1(self.conv1(x))))))


class BcosResNet(BcosCNN):
    """B-cos ResNet: ``[N, in_chans, H, W] -> logits [N, num_classes]``.

    Args:
        block: :class:`BasicBlock` or :class:`Bottleneck`.
        layers: blocks per stage (three or four stages).
        num_classes: outputs of the classifier.
        in_chans: input channels (6 for the ``[x, 1 − x]`` encoding).
        groups, width_per_group: ResNeXt / Wide-ResNet settings.
        inplanes: width of the stem and first stage (64; 16 for CIFAR nets).
        small_inputs: CIFAR stem (3×3 conv, no pooling) instead of the 7×7/2 conv and 3×3/2 average pooling.
        norm_layer: a norm name from :data:`~rightreasons.bcos.norms.NORM_LAYERS` or a factory ``f(num_features)``.
        b, max_out: B-cos settings of every conv.
        logit_bias: fixed logit bias; ``None`` means ``-log(num_classes - 1)``; 0.0 is honoured.
        logit_temperature: fixed logit temperature (``None`` = 1).
        stochastic_depth_prob: maximum drop-path rate, increased linearly over the blocks.
    """

    classifier_name = "fc"

    def __init__(self, block: type[BasicBlock], layers: Sequence[int], num_classes: int = 1000, in_chans: int = 6,
                 groups: int = 1, width_per_group: int = 64, inplanes: int = 64, small_inputs: bool = False,
                 norm_layer: str | NormFactory = "bnu", b: float = 2, max_out: int = 1,
                 logit_bias: float | None = None, logit_temperature: float | None = None,
                 stochastic_depth_prob: float = 0.0) -> None:
        if len(layers) not in (3, 4):
            raise ValueError(f"BcosResNet needs 3 or 4 stages, got layers={list(layers)}")
        if inplanes < 1:
            raise ValueError(f"inplanes must be >= 1, got {inplanes}")
        check_drop_probability("stochastic_depth_prob", stochastic_depth_prob)
        super().__init__(num_classes, in_chans, b, max_out, logit_bias, logit_temperature)
        norm = get_norm_layer(norm_layer)
        conv = self.conv

        if small_inputs:
            self.conv1 = conv(in_chans, inplanes, kernel_size=3, padding=1)
            self.pool = None
        else:
            self.conv1 = conv(in_chans, inplanes, kernel_size=7, stride=2, padding=3)
            self.pool = nn.AvgPool2d(kernel_size=3, stride=2, padding=1)
        self.bn1 = norm(inplanes)

        total_blocks, built = sum(layers), 0
        channels = inplanes
        for i, depth in enumerate(layers):
            planes, stride = inplanes * 2 ** i, 1 if i == 0 else 2
            downsample = None
            if stride != 1 or channels != planes * block.expansion:
                downsample = nn.Sequential(conv(channels, planes * block.expansion, kernel_size=1, stride=stride),
                                           norm(planes * block.expansion))
            blocks = []
            for j in range(depth):
                drop = stochastic_depth_prob * built / max(total_blocks - 1, 1)
                blocks.append(block(channels, planes, stride if j == 0 else 1, downsample if j == 0 else None, conv,
                                    norm, groups, width_per_group, drop))
                channels, built = planes * block.expansion, built + 1
            self.add_module(f"layer{i + 1}", nn.Sequential(*blocks))
        self.layer4 = getattr(self, "layer4", None)

        self.num_features = channels
        self.fc = conv(channels, num_classes, kernel_size=1)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    @property
    def stage_names(self) -> dict[str, str]:
        """Guidance layer names → module paths: ``mid1``–``mid3`` after stages 1–3, ``final`` after the last stage."""
        return dict(RESNET_STAGES) if self.layer4 is not None else {**RESNET_STAGES, "final": "layer3"}

    def forward_features(self, x: Tensor) -> Tensor:
        """``[N, in_chans, H, W] -> [N, num_features, H/32, W/32]`` (H/4 for CIFAR nets)."""
        x = self.bn1(self.conv1(x))
        if self.pool is not None:
            x = self.pool(x)
        x = self.layer3(self.layer2(self.layer1(x)))
        return x if self.layer4 is None else self.layer4(x)


_RESNETS = {
    "resnet18": (BasicBlock, [2, 2, 2, 2], {}),
    "resnet34": (BasicBlock, [3, 4, 6, 3], {}),
    "resnet50": (Bottleneck, [3, 4, 6, 3], {}),
    "resnet101": (Bottleneck, [3, 4, 23, 3], {}),
    "resnet152": (Bottleneck, [3, 8, 36, 3], {}),
    "resnext50_32x4d": (Bottleneck, [3, 4, 6, 3], {"groups": 32, "width_per_group": 4}),
    "resnext101_32x8d": (Bottleneck, [3, 4, 23, 3], {"groups": 32, "width_per_group": 8}),
    "wide_resnet50_2": (Bottleneck, [3, 4, 6, 3], {"width_per_group": 128}),
    "wide_resnet101_2": (Bottleneck, [3, 4, 23, 3], {"width_per_group": 128}),
}
for _name, (_block, _layers, _extra) in _RESNETS.items():
    register_model(f"bcos_{_name}", partial(BcosResNet, _block, _layers), family="resnet", bcos=True, **_extra)

for _depth in (20, 32, 44, 56, 110):
    register_model(f"bcos_cifar10_resnet{_depth}", partial(BcosResNet, BasicBlock, [(_depth - 2) // 6] * 3),
                   family="resnet", bcos=True, num_classes=10, inplanes=16, small_inputs=True)

# released weights (B-cos v2): weights name, hub entry point, experiment, file, ImageNet top-1
register_pretrained("bcos_resnet18", "resnet18", "bcos_final/resnet_18", "resnet_18-68b4160fff.pth", 68.736)
register_pretrained("bcos_resnet34", "resnet34", "bcos_final/resnet_34", "resnet_34-a63425a03e.pth", 72.284)
register_pretrained("bcos_resnet50", "resnet50", "bcos_final/resnet_50", "resnet_50-ead259efe4.pth", 75.882)
register_pretrained("bcos_resnet101", "resnet101", "bcos_final/resnet_101", "resnet_101-84c3658278.pth", 76.532)
register_pretrained("bcos_resnet152", "resnet152", "bcos_final/resnet_152", "resnet_152-42051a77c1.pth", 76.484)
register_pretrained("bcos_resnext50_32x4d", "resnext50_32x4d", "bcos_final/resnext_50_32x4d",
                    "resnext_50_32x4d-57af241ab9.pth", 75.820)
register_pretrained("bcos_resnet50.long", "resnet50_long", "bcos_final_long/resnet_50", "resnet_50_long-ef38a88533.pth",
                    79.468)
register_pretrained("bcos_resnet152.long", "resnet152_long", "bcos_final_long/resnet_152",
                    "resnet_152_long-0b4b434939.pth", 80.144)
