"""How each layer of a standard network becomes a B-cos layer: :class:`BcosifyOptions` and one converter per module
type (:func:`convert_tree` walks a module and converts everything in it, refusing what it does not know to stay
dynamic linear). The rules are those of :mod:`rightreasons.models.bcosify`."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from timm.layers import DropPath, LayerScale, Mlp, PatchEmbed
from timm.layers import LayerNorm as TimmLayerNorm
from timm.models.vision_transformer import Attention as TimmAttention
from timm.models.vision_transformer import Block as TimmBlock
from torch import Tensor, nn
from torchvision.models import densenet as tv_densenet
from torchvision.models import resnet as tv_resnet

from ...bcos.activations import DynamicGELU
from ...bcos.attention import AttentionMixing, merge_heads, split_heads
from ...bcos.layers import WEIGHT_MODES, BcosifiedConv2d, BcosifiedLinear, WeightMode, default_logit_bias
from ...bcos.norms import BatchNormUncentered2d, GroupNorm2d, LayerNorm
from ...encoding import IMAGENET_MEAN, IMAGENET_STD
from ...errors import UsageError
from ..vit import Attention as SimpleViTAttention
from ..vit import EncoderBlock, FeedForward, PatchEmbedding

__all__ = ["BcosifiedTimmAttention", "BcosifyOptions", "avgpool_like", "convert_classifier", "convert_conv",
           "convert_linear", "convert_tree", "fold_normalisation"]


@dataclass(frozen=True)
class BcosifyOptions:
    """How :func:`bcosify` converts (see the module docstring); validated on construction.

    Attributes:
        b: the B-cos exponent of every converted conv and linear layer (>= 1; 1 keeps them linear).
        keep_bias: keep every bias (conv, linear, norm — BatchNorm's with the running mean folded in).
        maxpool_to_avgpool: replace the CNN stem's max-pooling by average pooling of the same geometry.
        weight_mode: ``"raw"`` (pretrained weights as they are) or ``"gain"`` (unit norm times a learnt gain).
        mean, std: the per-channel normalisation the standard model was trained with, folded into the first layer.
        logit_bias: the fixed logit bias; ``None`` = ``−log(C − 1)`` without biases, 0 with them.
    """

    b: float = 2.0
    keep_bias: bool = False
    maxpool_to_avgpool: bool = True
    weight_mode: WeightMode = "raw"
    mean: tuple[float, ...] = IMAGENET_MEAN
    std: tuple[float, ...] = IMAGENET_STD
    logit_bias: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
        if not (isinstance(self.b, (int, float)) and self.b >= 1):
            raise UsageError(f"bcosify: b must be a number >= 1, got b={self.b!r}")
        if self.weight_mode not in WEIGHT_MODES:
            raise UsageError(f"bcosify: unknown weight_mode {self.weight_mode!r}; expected one of {list(WEIGHT_MODES)}")
        if len(self.mean) != 3 or len(self.std) != 3 or min(self.std) <= 0:
            raise UsageError(f"bcosify: mean and std need three values (RGB), std > 0; got mean={list(self.mean)}, "
                             f"std={list(self.std)}")
        if self.logit_bias is not None and not math.isfinite(self.logit_bias):
            raise UsageError(f"bcosify: logit_bias must be finite or None, got {self.logit_bias!r}")

    def kwargs(self) -> dict[str, Any]:
        """The options as JSON-serialisable constructor arguments of a ``bcosified_*`` model."""
        return {"b": float(self.b), "keep_bias": self.keep_bias, "maxpool_to_avgpool": self.maxpool_to_avgpool,
                "weight_mode": self.weight_mode, "mean": list(self.mean), "std": list(self.std),
                "logit_bias": self.logit_bias}

    def logit_bias_for(self, num_classes: int) -> float:
        """The fixed logit bias of a model with ``num_classes`` outputs."""
        if self.logit_bias is not None:
            return self.logit_bias
        return 0.0 if self.keep_bias else default_logit_bias(num_classes)


def fold_normalisation(weight: Tensor, mean: Sequence[float], std: Sequence[float], dim: int) -> Tensor:
    """The first layer's weight for ``u = [x, 1 − x]`` of a layer ``weight`` that read ``(x − mean) / std``:
    ``[W·(1 − m)/s, −W·m/s]`` along ``dim`` (3 RGB entries → 6), exact and bias-free (module docstring)."""
    if weight.shape[dim] != 3:
        raise UsageError(f"bcosify: the first layer must read 3 colour channels to be widened to [x, 1 - x], got a "
                         f"weight of shape {tuple(weight.shape)} ({weight.shape[dim]} at dimension {dim})")
    shape = [1] * weight.dim()
    shape[dim] = 3
    m = torch.tensor(mean, dtype=weight.dtype, device=weight.device).view(shape)
    s = torch.tensor(std, dtype=weight.dtype, device=weight.device).view(shape)
    return torch.cat([weight * (1 - m) / s, -weight * m / s], dim=dim)


def _fill_unit(unit: BcosifiedConv2d | BcosifiedLinear, weight: Tensor, bias: Tensor | None) -> nn.Module:
    """Give a new unit the converted ``weight`` (and ``bias``), in the weight's dtype; a gain starts at ``‖w‖``."""
    unit.to(dtype=weight.dtype)
    with torch.no_grad():
        unit.linear.weight.copy_(weight)
        if unit.gain is not None:
            unit.gain.copy_(torch.linalg.vector_norm(weight.flatten(1), dim=1))
        if unit.bias is not None:
            unit.bias.copy_(bias)
    return unit


def convert_conv(src: nn.Conv2d, o: BcosifyOptions, path: str, fold: bool = False) -> BcosifiedConv2d:
    """A conv as a B-cosified conv (``fold``: the first layer, widened to six input channels)."""
    if src.padding_mode != "zeros" or isinstance(src.padding, str):
        raise UsageError(f"bcosify: {path} pads with {src.padding_mode!r} / {src.padding!r}; only explicit zero "
                         "padding is supported (B-cos patch norms assume it)")
    weight = fold_normalisation(src.weight, o.mean, o.std, dim=1) if fold else src.weight
    bias = src.bias if o.keep_bias else None
    with torch.device(weight.device):
        unit = BcosifiedConv2d(weight.shape[1] * src.groups, src.out_channels, src.kernel_size, src.stride,
                               src.padding, src.dilation, src.groups, b=o.b, bias=bias is not None,
                               weight_mode=o.weight_mode)
    return _fill_unit(unit, weight, bias)


def convert_linear(src: nn.Linear, o: BcosifyOptions, path: str, patch_fold: bool = False) -> BcosifiedLinear:
    """A linear layer as a B-cosified one (``patch_fold``: the patch embedding of a ViT without conv stem, whose
    inputs are patches flattened with the colour channel last, widened to six channels)."""
    weight = src.weight
    if patch_fold:
        weight = fold_normalisation(weight.unflatten(1, (-1, 3)), o.mean, o.std, dim=2).flatten(1)
    bias = src.bias if o.keep_bias else None
    with torch.device(weight.device):
        unit = BcosifiedLinear(weight.shape[1], src.out_features, b=o.b, bias=bias is not None,
                               weight_mode=o.weight_mode)
    return _fill_unit(unit, weight, bias)


def convert_classifier(src: nn.Linear, o: BcosifyOptions) -> BcosifiedConv2d:
    """A CNN's linear classifier as a 1×1 B-cos conv, applied at every position before global average pooling."""
    bias = src.bias if o.keep_bias else None
    with torch.device(src.weight.device):
        unit = BcosifiedConv2d(src.in_features, src.out_features, 1, b=o.b, bias=bias is not None,
                               weight_mode=o.weight_mode)
    return _fill_unit(unit, src.weight[:, :, None, None], bias)


def _batchnorm(src: nn.BatchNorm2d, o: BcosifyOptions, path: str) -> BatchNormUncentered2d:
    """BatchNorm as uncentred BatchNorm: γ and running variance kept, the running mean folded into the bias
    ``β − γ·μ/σ`` (kept with ``keep_bias``, else removed)."""
    if not (src.affine and src.track_running_stats):
        raise UsageError(f"bcosify: {path} is a BatchNorm without affine parameters or running statistics")
    with torch.device(src.weight.device):
        norm = BatchNormUncentered2d(src.num_features, src.eps, src.momentum).to(src.weight.dtype)
    with torch.no_grad():
        norm.weight.copy_(src.weight)
        norm.running_var.copy_(src.running_var)
        norm.num_batches_tracked.copy_(src.num_batches_tracked)
        if o.keep_bias:
            norm.bias.copy_(src.bias - src.weight * src.running_mean / torch.sqrt(src.running_var + src.eps))
    if not o.keep_bias:
        norm.bias = None
    return norm


def _centred_norm(norm: LayerNorm | GroupNorm2d, src: nn.LayerNorm | nn.GroupNorm, o: BcosifyOptions,
                  path: str) -> nn.Module:
    """Give our centred norm the standard norm's γ (and β with ``keep_bias``)."""
    if src.weight is None:
        raise UsageError(f"bcosify: {path} is a norm without affine parameters")
    norm.to(dtype=src.weight.dtype)
    with torch.no_grad():
        norm.weight.copy_(src.weight)
        if o.keep_bias and src.bias is not None:
            norm.bias.copy_(src.bias)
    if not (o.keep_bias and src.bias is not None):
        norm.bias = None
    return norm


def _layernorm(src: nn.LayerNorm, o: BcosifyOptions, path: str) -> LayerNorm:
    if len(src.normalized_shape) != 1:
        raise UsageError(f"bcosify: {path} normalises over {tuple(src.normalized_shape)}; only the last dimension "
                         "is supported")
    with torch.device(src.weight.device if src.weight is not None else "cpu"):
        norm = LayerNorm(src.normalized_shape[0], eps=src.eps)
    return _centred_norm(norm, src, o, path)


def _groupnorm(src: nn.GroupNorm, o: BcosifyOptions, path: str) -> GroupNorm2d:
    with torch.device(src.weight.device if src.weight is not None else "cpu"):
        norm = GroupNorm2d(src.num_groups, src.num_channels, src.eps)
    return _centred_norm(norm, src, o, path)


class BcosifiedTimmAttention(nn.Module):
    """timm's multi-head self-attention, B-cosified: ``[N, T, dim] -> [N, T, dim]``.

    q, k and v come from the pretrained plain ``qkv`` projection; the q and k biases stay (they only shape the
    attention matrix), the v bias only with ``keep_bias``. The attention matrix is the dynamic weight applied to the
    values (:class:`~rightreasons.bcos.attention.AttentionMixing`), ``q_norm`` / ``k_norm`` stay as they are,
    ``norm`` and the output projection ``proj`` are converted.
    """

    def __init__(self, source: TimmAttention, o: BcosifyOptions, path: str) -> None:
        super().__init__()
        if source.gate is not None or source.attn_drop.p > 0:
            raise UsageError(f"bcosify: {path} uses an output gate or attention dropout, which B-cosification does "
                             "not support")
        self.num_heads, self.head_dim = source.num_heads, source.head_dim
        width = self.num_heads * self.head_dim
        bias = source.qkv.bias
        self.qkv = source.qkv
        self.qkv.bias = None
        self.qk_bias = None if bias is None else nn.Parameter(bias.detach()[:2 * width].clone())
        self.v_bias = nn.Parameter(bias.detach()[2 * width:].clone()) if bias is not None and o.keep_bias else None
        self.q_norm, self.k_norm = source.q_norm, source.k_norm
        self.attend = AttentionMixing(self.head_dim, self.num_heads)
        self.norm = convert_tree(source.norm, o, f"{path}.norm")
        self.proj = convert_tree(source.proj, o, f"{path}.proj")
        self.proj_drop = source.proj_drop

    def forward(self, x: Tensor, attn_mask: Tensor | None = None, is_causal: bool = False) -> Tensor:
        if attn_mask is not None or is_causal:
            raise UsageError("B-cosified timm attention supports neither attention masks nor causal attention")
        width = self.num_heads * self.head_dim
        qkv = self.qkv(x)
        qk, v = qkv[..., :2 * width], qkv[..., 2 * width:]
        if self.qk_bias is not None:
            qk = qk + self.qk_bias
        if self.v_bias is not None:
            v = v + self.v_bias
        q, k = (split_heads(t, self.num_heads) for t in qk.chunk(2, dim=-1))
        out = merge_heads(self.attend(self.q_norm(q), self.k_norm(k), split_heads(v, self.num_heads)))
        return self.proj_drop(self.proj(self.norm(out)))


def _simple_vit_attention(src: SimpleViTAttention, o: BcosifyOptions, path: str) -> SimpleViTAttention:
    """The release's ViT attention: norm and output projection converted, ``to_qkv`` kept plain, softmax attention
    as :class:`~rightreasons.bcos.attention.AttentionMixing`."""
    src.norm = convert_tree(src.norm, o, f"{path}.norm")
    with torch.device(src.to_qkv.weight.device):
        src.attend = AttentionMixing(src.to_qkv.in_features // src.heads, src.heads)
    src.to_out = convert_tree(src.to_out, o, f"{path}.to_out")
    return src


def _checked_layer_scale(src: LayerScale, o: BcosifyOptions, path: str) -> LayerScale:
    if src.inplace:
        raise UsageError(f"bcosify: {path} scales in place, which breaks second-order gradients; build the model "
                         "with init_values but without inplace layer scale")
    return src


Converter = Callable[[Any, BcosifyOptions, str], nn.Module]

_CONVERTERS: dict[type, Converter] = {
    nn.Conv2d: convert_conv,
    nn.Linear: convert_linear,
    nn.BatchNorm2d: _batchnorm,
    nn.LayerNorm: _layernorm,
    TimmLayerNorm: _layernorm,
    nn.GroupNorm: _groupnorm,
    nn.GELU: lambda src, o, path: DynamicGELU(src.approximate),
    nn.ReLU: lambda src, o, path: nn.ReLU(),  # not in place: the next layer's autograd may need its input
    SimpleViTAttention: _simple_vit_attention,
    TimmAttention: BcosifiedTimmAttention,
    LayerScale: _checked_layer_scale,
}
"""Module type → converter ``(module, options, path) -> module``."""

_KEPT: tuple[type, ...] = (nn.Identity, nn.Dropout, DropPath, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.MaxPool2d,
                           nn.Flatten, BcosifiedConv2d, BcosifiedLinear)
"""Modules that stay as they are: linear or piecewise-linear selections, and units converted already."""

_CONTAINERS: tuple[type, ...] = (
    nn.Sequential, tv_resnet.BasicBlock, tv_resnet.Bottleneck, tv_densenet._DenseBlock, tv_densenet._DenseLayer,
    tv_densenet._Transition, PatchEmbedding, EncoderBlock, FeedForward, PatchEmbed, TimmBlock, Mlp)
"""Modules whose own forward is linear in their children's outputs (sums, concatenations, reshapes, dropout): their
children are converted and they are kept."""


def convert_tree(module: nn.Module, o: BcosifyOptions, path: str) -> nn.Module:
    """Convert ``module`` and everything in it (in place where it is a container); refuse what is not known to stay
    dynamic linear, naming it."""
    kind = type(module)
    if kind in _CONVERTERS:
        return _CONVERTERS[kind](module, o, path)
    if kind in _KEPT:
        return module
    if kind in _CONTAINERS:
        for name, child in list(module.named_children()):
            setattr(module, name, convert_tree(child, o, f"{path}.{name}" if path else name))
        return module
    raise UsageError(f"bcosify: cannot convert {path or 'the model'} ({kind.__module__}.{kind.__qualname__}): not a "
                     "layer B-cosification knows to keep dynamic linear; supported are torchvision ResNets and "
                     "DenseNets, the standard Simple ViT / ViT-c and timm VisionTransformers with standard blocks")


def avgpool_like(pool: nn.Module, o: BcosifyOptions) -> nn.Module:
    """The stem's max-pooling as average pooling of the same geometry (when asked and when it is a max-pool)."""
    if o.maxpool_to_avgpool and isinstance(pool, nn.MaxPool2d):
        return nn.AvgPool2d(pool.kernel_size, pool.stride, pool.padding)
    return pool

