"""Conventional (non-B-cos) twins of the zoo for baselines and e²KD, and the X-DNN ResNet-50.

* ``resnet18/34/50`` and ``densenet121/169`` are torchvision's architectures, built without weights, in subclasses that
  keep torchvision's state-dict layout (torchvision checkpoints load with :func:`rightreasons.load_weights`) and add
  timm's conventions: ``forward_features`` (unpooled map ``[N, num_features, h, w]``), ``forward_head(x,
  pre_logits=False)``, ``get_classifier()``, ``num_features``, ``num_classes``, ``in_chans``, and ``stage_names`` for
  guidance at intermediate layers.
* ``vit_tiny_patch16_224`` and ``vit_small_patch16_224`` are timm's ViTs (``pretrained=False``; ``img_size`` and the
  other timm arguments pass through).
* ``simple_vit_{ti,s,b,l}_patch16_224`` and ``vitc_{ti,s,b,l}_patch1_14`` are the standard Simple ViTs and ViT-c of the
  B-cos v2 release (:class:`StandardSimpleViT`): the architecture of :class:`~rightreasons.models.vit.SimpleViT`
  with the release's standard layers (:data:`STANDARD_VIT_LAYERS`) and its key layout, so that the release's
  ``standard_*`` weights load with ``pretrained=True``. They take 3-channel images normalised with the ImageNet mean
  and std. Their ``forward_features`` returns tokens ``[N, T, dim]``, not a feature map, and they name no guidance
  stages (as the B-cos ViTs).
* ``xdnn_resnet50`` is the X-ResNet-50 of Hesse et al., "Fast Axiomatic Attribution for Neural Networks" (NeurIPS
  2021): a ResNet-50 without any additive term, so that the network is positively homogeneous, ``f(αx) = α f(x)`` for
  ``α ≥ 0`` (ReLU and max-pooling are positively homogeneous, convs/linears without bias are linear). The input
  gradient is then constant along the ray ``{αx}``, so Integrated Gradients with a zero baseline,
  ``x ⊙ ∫₀¹ ∇f(αx) dα``, equals Input×Gradient ``x ⊙ ∇f(x)`` and costs one backward pass (the IntGrad path of model
  guidance).

  Why no BatchNorm at all: in eval mode BatchNorm computes ``γ (x − μ_run) / σ_run + β``, and both ``−γ μ_run / σ_run``
  and ``β`` are additive terms. Dropping ``β`` and the centring (an uncentred, bias-free BN) would make the eval-mode
  network homogeneous, but its training-mode statistics couple the samples of a batch. The X-DNN release instead
  removes the norms and trains with Fixup initialisation (``xfixup_resnet50``: residual branches whose last conv starts
  at zero, the other branch convs scaled by ``L^(-1/(2m-2))`` for ``L`` blocks of ``m`` convs, a zero classifier, and
  Fixup's scalar biases removed). :class:`XResNet` follows that architecture and its key layout (conv and classifier
  weights only, ``layerN.0.downsample.weight`` a single 1×1 conv), so the published X-ResNet-50 weights load with
  :func:`rightreasons.load_weights`; homogeneity holds exactly in training and evaluation.
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.models import densenet as tv_densenet
from torchvision.models import resnet as tv_resnet

from ..encoding import check_input_channels
from ..errors import UsageError
from .registry import register_model
from .densenet import DENSENET_CONFIGS, DENSENET_STAGES
from .resnet import RESNET_STAGES
from .vit import RELEASE_VITS, SimpleViT, ViTLayers

__all__ = ["DenseNet", "ResNet", "STANDARD_VIT_LAYERS", "SoftmaxAttention", "StandardSimpleViT", "XResNet",
           "vision_transformer"]


def _replace_stem(conv: nn.Conv2d, in_chans: int) -> nn.Conv2d:
    """A copy of the stem conv's geometry for ``in_chans`` input channels, Kaiming-initialised like torchvision."""
    stem = nn.Conv2d(in_chans, conv.out_channels, conv.kernel_size, conv.stride, conv.padding, bias=False)
    nn.init.kaiming_normal_(stem.weight, mode="fan_out", nonlinearity="relu")
    return stem


class ResNet(tv_resnet.ResNet):
    """torchvision's ResNet ``[N, in_chans, H, W] -> [N, num_classes]`` with timm's interface and guidance stages.

    Args:
        block: torchvision's ``BasicBlock`` or ``Bottleneck``.
        layers: blocks per stage (four stages).
        num_classes, in_chans, groups, width_per_group, zero_init_residual, norm_layer: as in torchvision
            (``in_chans`` replaces the stem conv when it is not 3).
        inplanes: width of the stem and the first stage (torchvision: 64); stage ``i`` has ``inplanes · 2^i`` planes,
            as in :class:`~rightreasons.models.resnet.BcosResNet`, and the key layout stays torchvision's.
    """

    def __init__(self, block: type[tv_resnet.BasicBlock | tv_resnet.Bottleneck], layers: Sequence[int],
                 num_classes: int = 1000, in_chans: int = 3, groups: int = 1, width_per_group: int = 64,
                 zero_init_residual: bool = False, norm_layer: Callable[[int], nn.Module] | None = None,
                 inplanes: int = 64) -> None:
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        if inplanes < 1:
            raise ValueError(f"inplanes must be >= 1, got {inplanes}")
        super().__init__(block, list(layers), num_classes=num_classes, zero_init_residual=zero_init_residual,
                         groups=groups, width_per_group=width_per_group, norm_layer=norm_layer)
        if inplanes != 64:
            self._rebuild_with_width(block, layers, num_classes, inplanes, zero_init_residual)
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.num_features = self.fc.in_features
        if in_chans != 3:
            self.conv1 = _replace_stem(self.conv1, in_chans)

    def _rebuild_with_width(self, block: type[tv_resnet.BasicBlock | tv_resnet.Bottleneck], layers: Sequence[int],
                            num_classes: int, inplanes: int, zero_init_residual: bool) -> None:
        """Replace torchvision's 64-wide stem, stages and classifier with ``inplanes``-wide ones, initialised as
        torchvision does (Kaiming-normal fan-out convs, unit norms, optionally zero-initialised last residual norms)."""
        self.inplanes, self.dilation = inplanes, 1
        self.conv1 = nn.Conv2d(3, inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = self._norm_layer(inplanes)
        for i, depth in enumerate(layers):
            setattr(self, f"layer{i + 1}", self._make_layer(block, inplanes * 2 ** i, depth, stride=1 if i == 0 else 2))
        self.fc = nn.Linear(inplanes * 2 ** (len(layers) - 1) * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        if zero_init_residual:
            for m in self.modules():
                last = getattr(m, "bn3" if isinstance(m, tv_resnet.Bottleneck) else "bn2", None)
                if isinstance(m, (tv_resnet.BasicBlock, tv_resnet.Bottleneck)) and isinstance(last, nn.BatchNorm2d):
                    nn.init.zeros_(last.weight)

    @property
    def stage_names(self) -> dict[str, str]:
        """Guidance layer names → module paths: ``mid1``–``mid3`` after stages 1–3, ``final`` after stage 4."""
        return dict(RESNET_STAGES)

    def get_classifier(self) -> nn.Module:
        return self.fc

    def forward_features(self, x: Tensor) -> Tensor:
        """``[N, in_chans, H, W] -> [N, num_features, H/32, W/32]``."""
        check_input_channels(x, self.in_chans, type(self).__name__)
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """Features ``[N, C, h, w]`` → logits ``[N, num_classes]`` (pooled features ``[N, C]`` with ``pre_logits``)."""
        x = self.avgpool(x).flatten(1)
        return x if pre_logits else self.fc(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


class XResNet(ResNet):
    """X-DNN ResNet (module docstring): no norms, no biases, Fixup initialisation; the X-DNN release's key layout.

    Args:
        block, layers, num_classes, in_chans: as for :class:`ResNet`.
    """

    is_xdnn = True
    """Positively homogeneous: Integrated Gradients with a zero baseline equals Input×Gradient (read by
    :func:`rightreasons.models.capabilities`)."""

    def __init__(self, block: type[tv_resnet.BasicBlock | tv_resnet.Bottleneck], layers: Sequence[int],
                 num_classes: int = 1000, in_chans: int = 3) -> None:
        super().__init__(block, layers, num_classes, in_chans, norm_layer=nn.Identity)
        self.fc = nn.Linear(self.num_features, num_classes, bias=False)
        nn.init.zeros_(self.fc.weight)
        blocks = [b for stage in (self.layer1, self.layer2, self.layer3, self.layer4) for b in stage]
        for b in blocks:
            if b.downsample is not None:
                b.downsample = b.downsample[0]  # (conv, Identity) -> conv: the release's `downsample.weight`
            branch = [b.conv1, b.conv2, b.conv3] if isinstance(b, tv_resnet.Bottleneck) else [b.conv1, b.conv2]
            for conv in branch[:-1]:  # Kaiming (fan-out) from torchvision, scaled as in Fixup
                conv.weight.data.mul_(len(blocks) ** (-1 / (2 * len(branch) - 2)))
            nn.init.zeros_(branch[-1].weight)


class DenseNet(tv_densenet.DenseNet):
    """torchvision's DenseNet ``[N, in_chans, H, W] -> [N, num_classes]`` with timm's interface and guidance stages.

    Args:
        growth_rate, block_config, num_init_features, bn_size, drop_rate, memory_efficient, num_classes: as in
            torchvision.
        in_chans: input channels (replaces the stem conv ``features.conv0`` when it is not 3).
    """

    def __init__(self, growth_rate: int, block_config: Sequence[int], num_init_features: int,
                 num_classes: int = 1000, in_chans: int = 3, bn_size: int = 4, drop_rate: float = 0.0,
                 memory_efficient: bool = False) -> None:
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        super().__init__(growth_rate, tuple(block_config), num_init_features, bn_size, drop_rate, num_classes,
                         memory_efficient)
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.num_features = self.classifier.in_features
        if in_chans != 3:
            self.features.conv0 = _replace_stem(self.features.conv0, in_chans)

    @property
    def stage_names(self) -> dict[str, str]:
        """Guidance layer names → module paths: ``mid1``–``mid3`` after dense blocks 1–3 (before their transition),
        ``final`` the last feature map (``features.norm5``, before the final ReLU)."""
        return dict(DENSENET_STAGES)

    def get_classifier(self) -> nn.Module:
        return self.classifier

    def forward_features(self, x: Tensor) -> Tensor:
        """``[N, in_chans, H, W] -> [N, num_features, H/32, W/32]`` (after the final ReLU)."""
        check_input_channels(x, self.in_chans, type(self).__name__)
        return F.relu(self.features(x))

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """Features ``[N, C, h, w]`` → logits ``[N, num_classes]`` (pooled features ``[N, C]`` with ``pre_logits``)."""
        x = F.adaptive_avg_pool2d(x, (1, 1)).flatten(1)
        return x if pre_logits else self.classifier(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


class SoftmaxAttention(nn.Module):
    """Scaled dot-product attention ``softmax(q kᵀ / sqrt(d)) v`` as plain tensor operations, as in the release (so its
    logits are reproduced exactly, and higher-order gradients work). ``q, k, v [N, heads, T, d] -> [N, heads, T, d]``.

    Args:
        dim_head: features per head ``d``.
        heads: number of heads (part of the :class:`~rightreasons.models.vit.ViTLayers` ``attend`` signature; the
            computation does not need it).
    """

    def __init__(self, dim_head: int, heads: int) -> None:
        super().__init__()
        self.scale = dim_head ** -0.5

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        return torch.matmul((torch.matmul(q, k.transpose(-1, -2)) * self.scale).softmax(dim=-1), v)

    def extra_repr(self) -> str:
        return f"scale={self.scale:.4g}"


STANDARD_VIT_LAYERS = ViTLayers(linear=nn.Linear, conv=nn.Conv2d, token_norm=nn.LayerNorm,
                                stem_norm=partial(nn.GroupNorm, 1), attend=SoftmaxAttention, act=nn.GELU)
"""The release's standard ViT layers: linear layers and convs with biases (the attention output projection without),
affine LayerNorms (the stem's over (C, H, W), a GroupNorm with one group), GELU in the stem and the MLP, softmax
attention without dynamic-linear layers (so B-cos explanations are refused for these models)."""


class StandardSimpleViT(SimpleViT):
    """Standard Simple ViT / ViT-c of the B-cos v2 release: ``[N, in_chans, image_size, image_size] -> logits
    [N, num_classes]`` (no logit layer).

    Args:
        image_size, patch_size, num_classes, dim, depth, heads, mlp_dim, conv_stem: as for
            :class:`~rightreasons.models.vit.SimpleViT`.
        in_chans: input channels (3: images normalised with the ImageNet mean and std).
    """

    def __init__(self, image_size: int = 224, patch_size: int = 16, num_classes: int = 1000, dim: int = 192,
                 depth: int = 12, heads: int = 3, mlp_dim: int = 768, in_chans: int = 3,
                 conv_stem: Sequence[int] | None = None) -> None:
        super().__init__(STANDARD_VIT_LAYERS, image_size, patch_size, num_classes, dim, depth, heads, mlp_dim,
                         in_chans, conv_stem, logit_layer=None)


def vision_transformer(arch: str, **kwargs: Any) -> nn.Module:
    """timm's ViT ``arch`` without weights (``img_size``, ``num_classes``, ... are passed through to timm, which
    checks them: what it refuses is the caller's error, a :class:`~rightreasons.errors.UsageError`)."""
    import timm

    try:
        return timm.create_model(arch, pretrained=False, **kwargs)
    except (TypeError, ValueError) as e:
        raise UsageError(f"timm's {arch} refuses the arguments {kwargs}: {type(e).__name__}: {e}") from e


_RESNETS = {
    "resnet18": (tv_resnet.BasicBlock, [2, 2, 2, 2]),
    "resnet34": (tv_resnet.BasicBlock, [3, 4, 6, 3]),
    "resnet50": (tv_resnet.Bottleneck, [3, 4, 6, 3]),
}
for _name, (_block, _layers) in _RESNETS.items():
    register_model(_name, ResNet, family="resnet", bcos=False, block=_block, layers=_layers)
register_model("xdnn_resnet50", XResNet, family="resnet", bcos=False, block=tv_resnet.Bottleneck, layers=[3, 4, 6, 3])

for _name in ("densenet121", "densenet169"):
    _growth, _blocks, _init = DENSENET_CONFIGS[_name]
    register_model(_name, DenseNet, family="densenet", bcos=False, growth_rate=_growth, block_config=_blocks,
                   num_init_features=_init)

for _name in ("vit_tiny_patch16_224", "vit_small_patch16_224"):
    register_model(_name, partial(vision_transformer, _name), family="vit", bcos=False)

for _name, _args in RELEASE_VITS.items():
    register_model(_name, StandardSimpleViT, family="vit", bcos=False, **_args)
