"""B-cosification: a pretrained standard network converted into a B-cos network (Arya, Rao, Böhle, Schiele, NeurIPS
2024; docs/science.md, B-cosification), built from the layer kit so that explanation mode, exact second-order
gradients, ``explain``, ``attribute``, guidance and e²KD work on it unchanged.

:func:`bcosify` converts a model of a supported family and returns a new one (the argument is left as it was):

* **input** — the six-channel ``[x, 1 − x]`` encoding of the raw image in [0, 1]. The standard model's per-channel
  normalisation ``n = (x − m) / s`` is folded into the first layer exactly and without a bias: since
  ``x − m = (1 − m)·x − m·(1 − x)``, the weights ``[W·(1 − m)/s, −W·m/s]`` on ``u = [x, 1 − x]`` give ``W·n``.
  Zero padding agrees too: a zero in ``u`` contributes nothing, as does a zero in ``n``. So contributions stay
  complete (the release instead normalises the six channels, which leaves a constant offset outside them);
* **convs and linears** → :class:`~rightreasons.bcos.layers.BcosifiedConv2d` / ``BcosifiedLinear`` with exponent
  ``b`` and the pretrained weights, no MaxOut. ``weight_mode="raw"`` (default) uses the weights as they are, as the
  B-cosification release does (the recipe whose speed-ups were measured; the output is ``‖w‖^B`` times the unit-norm
  B-cos output). ``"gain"`` normalises them and learns a per-channel gain initialised to the pretrained ``‖w‖``
  (exact at B = 1, ``‖w‖^(B − 1)`` times smaller than ``raw`` above);
* **norms** — BatchNorm → uncentred BatchNorm (running variance and γ kept, the running mean folded into the bias
  ``β − γ·μ/σ``), LayerNorm and GroupNorm stay centred; **biases** are removed (``keep_bias=False``, the recipe) or
  kept (``keep_bias=True``; :func:`decay_biases` / :func:`remove_biases` implement a bias-decay schedule);
* **activations** — ReLU stays (piecewise linear: exact as it is), GELU becomes ``x · Φ(x)`` with the gate as a
  dynamic weight (:class:`~rightreasons.bcos.activations.DynamicGELU`);
* **pooling and head** — the stem max-pool becomes an average pool of the same geometry (``maxpool_to_avgpool``); the
  CNN classifier becomes a 1×1 B-cos conv applied at every position before global average pooling (exact: the mean
  commutes with a linear map); a fixed :class:`~rightreasons.bcos.layers.LogitLayer` adds ``−log(C − 1)`` (C = the
  model's classes) when the biases are removed, 0 when they are kept (the classifier's own bias then plays its part);
* **ViTs** — the patch embedding (or the first conv of a ViT-c stem) is widened to six channels, the attention matrix
  is the dynamic weight on the values (:class:`~rightreasons.bcos.attention.AttentionMixing`; q/k/v stay a plain
  linear map), output projections and MLP layers are B-cos units, LayerNorms stay centred. Mean pooling and the head
  keep their order, so the conversion preserves the function. The additive positional embedding (and timm's class
  token) are constant terms: the converted ViTs are affine (``is_affine = True``).

With ``b=1, keep_bias=True, maxpool_to_avgpool=False`` the converted model computes the original's function:
``bcosify(m, b=1, keep_bias=True, maxpool_to_avgpool=False)(encode(x)) == m(normalise(x))`` — colour explanations of
the *original* model. With the defaults (``b=2``, no biases) CNNs are dynamic linear, ``logit − logit_bias ==
Σ W(x) ⊙ x``, ready for fine-tuning with the B-cos recipe (``configs/bcosify/``).

Supported: torchvision-style ResNets and DenseNets (:class:`~rightreasons.models.standard.ResNet` /
:class:`~rightreasons.models.standard.DenseNet` and plain torchvision instances), the standard Simple ViT / ViT-c of
the B-cos release (:class:`~rightreasons.models.standard.StandardSimpleViT`) and timm ``VisionTransformer`` s with
standard blocks (token or average pooling, no attention pooling, gates or attention dropout); anything else is
refused with a :class:`~rightreasons.errors.UsageError` naming the module that cannot be converted.

Every source name ``S`` of :data:`SOURCES` is registered as ``bcosified_S``: ``create_model("bcosified_resnet18",
num_classes=10, inplanes=8, b=2)`` builds ``S`` (source arguments pass through) with fresh weights and converts it.
:func:`bcosify` records that name and every argument as ``model_args`` (for a plain torchvision model it finds the
registered architecture with the same state-dict layout), so ``save_model`` / ``load_model`` round-trip a converted
model and a training config can fine-tune it: ``model: {name: bcosified_resnet18, checkpoint: converted.safetensors}``.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from timm.layers import DropPath, LayerScale, Mlp, PatchEmbed
from timm.layers import LayerNorm as TimmLayerNorm
from timm.models.vision_transformer import Attention as TimmAttention
from timm.models.vision_transformer import Block as TimmBlock
from timm.models.vision_transformer import VisionTransformer
from torch import Tensor, nn
from torchvision.models import densenet as tv_densenet
from torchvision.models import resnet as tv_resnet

from ..bcos.activations import DynamicGELU
from ..bcos.attention import AttentionMixing, merge_heads, split_heads
from ..bcos.dynamic import DynamicLinear
from ..bcos.layers import (WEIGHT_MODES, BcosConv2d, BcosifiedConv2d, BcosifiedLinear, BcosLinear, LogitLayer,
                           WeightMode, default_logit_bias)
from ..bcos.norms import BatchNormUncentered2d, GroupNorm2d, LayerNorm
from ..encoding import IMAGENET_MEAN, IMAGENET_STD, check_input_channels
from ..errors import UsageError
from ..hub.registry import get_model_spec, register_model
from .base import BcosCNN
from .densenet import DENSENET_STAGES
from .resnet import RESNET_STAGES
from .vit import RELEASE_VITS, EncoderBlock, FeedForward, PatchEmbedding, SimpleViT
from .vit import Attention as SimpleViTAttention

__all__ = ["BRamp", "BcosifiedDenseNet", "BcosifiedModel", "BcosifiedResNet", "BcosifiedSimpleViT",
           "BcosifiedTimmViT", "BcosifyOptions", "SOURCES", "bcosify", "decay_biases", "linear_b", "remove_biases",
           "set_b"]

SOURCES: tuple[str, ...] = ("resnet18", "resnet34", "resnet50", "densenet121", "densenet169", *RELEASE_VITS,
                            "vit_tiny_patch16_224", "vit_small_patch16_224")
"""Registered standard models with a B-cosified twin ``bcosified_<name>``."""


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


# ------------------------------------------------------------------------------------------------- leaf conversions

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


def _conv(src: nn.Conv2d, o: BcosifyOptions, path: str, fold: bool = False) -> BcosifiedConv2d:
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


def _linear(src: nn.Linear, o: BcosifyOptions, path: str, patch_fold: bool = False) -> BcosifiedLinear:
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


def _classifier(src: nn.Linear, o: BcosifyOptions) -> BcosifiedConv2d:
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
        self.norm = _convert_tree(source.norm, o, f"{path}.norm")
        self.proj = _convert_tree(source.proj, o, f"{path}.proj")
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
    src.norm = _convert_tree(src.norm, o, f"{path}.norm")
    with torch.device(src.to_qkv.weight.device):
        src.attend = AttentionMixing(src.to_qkv.in_features // src.heads, src.heads)
    src.to_out = _convert_tree(src.to_out, o, f"{path}.to_out")
    return src


def _checked_layer_scale(src: LayerScale, o: BcosifyOptions, path: str) -> LayerScale:
    if src.inplace:
        raise UsageError(f"bcosify: {path} scales in place, which breaks second-order gradients; build the model "
                         "with init_values but without inplace layer scale")
    return src


Converter = Callable[[Any, BcosifyOptions, str], nn.Module]

_CONVERTERS: dict[type, Converter] = {
    nn.Conv2d: _conv,
    nn.Linear: _linear,
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


def _convert_tree(module: nn.Module, o: BcosifyOptions, path: str) -> nn.Module:
    """Convert ``module`` and everything in it (in place where it is a container); refuse what is not known to stay
    dynamic linear, naming it."""
    kind = type(module)
    if kind in _CONVERTERS:
        return _CONVERTERS[kind](module, o, path)
    if kind in _KEPT:
        return module
    if kind in _CONTAINERS:
        for name, child in list(module.named_children()):
            setattr(module, name, _convert_tree(child, o, f"{path}.{name}" if path else name))
        return module
    raise UsageError(f"bcosify: cannot convert {path or 'the model'} ({kind.__module__}.{kind.__qualname__}): not a "
                     "layer B-cosification knows to keep dynamic linear; supported are torchvision ResNets and "
                     "DenseNets, the standard Simple ViT / ViT-c and timm VisionTransformers with standard blocks")


def _avgpool_like(pool: nn.Module, o: BcosifyOptions) -> nn.Module:
    """The stem's max-pooling as average pooling of the same geometry (when asked and when it is a max-pool)."""
    if o.maxpool_to_avgpool and isinstance(pool, nn.MaxPool2d):
        return nn.AvgPool2d(pool.kernel_size, pool.stride, pool.padding)
    return pool


# ------------------------------------------------------------------------------------------------- converted models

class BcosifiedModel:
    """Mixin of every B-cosified model: the :class:`BcosifyOptions` it was converted with (``options``) and the
    B-cos units whose exponent :func:`set_b` changes."""

    options: BcosifyOptions

    def bcos_units(self) -> list[nn.Module]:
        """Every B-cos conv and linear unit of the model."""
        return [m for m in self.modules() if isinstance(m, (BcosConv2d, BcosLinear))]  # type: ignore[attr-defined]


class BcosifiedResNet(BcosifiedModel, BcosCNN):
    """A B-cosified torchvision ResNet: ``[N, 6, H, W] -> logits [N, num_classes]``, torchvision's module names
    (``conv1``, ``bn1``, ``maxpool`` — an average pool by default —, ``layer1``–``layer4``, ``fc`` as a 1×1 conv).

    Built from a (copied) standard ResNet whose modules it takes over; use :func:`bcosify` or
    ``create_model("bcosified_resnet18", ...)``.
    """

    classifier_name = "fc"

    def __init__(self, source: tv_resnet.ResNet, options: BcosifyOptions) -> None:
        num_classes = source.fc.out_features
        super().__init__(num_classes, 6, options.b, 1, options.logit_bias_for(num_classes), None)
        self.options = options
        self.conv1 = _conv(source.conv1, options, "conv1", fold=True)
        self.bn1 = _convert_tree(source.bn1, options, "bn1")
        self.relu = nn.ReLU()
        self.maxpool = _avgpool_like(source.maxpool, options)
        for name in RESNET_STAGES.values():
            setattr(self, name, _convert_tree(getattr(source, name), options, name))
        self.fc = _classifier(source.fc, options)
        self.num_features = source.fc.in_features

    @property
    def stage_names(self) -> dict[str, str]:
        """Guidance layer names → module paths: ``mid1``–``mid3`` after stages 1–3, ``final`` after stage 4."""
        return dict(RESNET_STAGES)

    def forward_features(self, x: Tensor) -> Tensor:
        """``[N, 6, H, W] -> [N, num_features, H/32, W/32]``."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


class BcosifiedDenseNet(BcosifiedModel, BcosCNN):
    """A B-cosified torchvision DenseNet: ``[N, 6, H, W] -> logits [N, num_classes]``, torchvision's module names
    (``features.conv0`` … ``features.norm5``, ``classifier`` as a 1×1 conv). Dense layers never checkpoint
    (``memory_efficient`` is switched off: recomputation would break double backward)."""

    def __init__(self, source: tv_densenet.DenseNet, options: BcosifyOptions) -> None:
        num_classes = source.classifier.out_features
        super().__init__(num_classes, 6, options.b, 1, options.logit_bias_for(num_classes), None)
        self.options = options
        features = source.features
        features.conv0 = _conv(features.conv0, options, "features.conv0", fold=True)
        features.pool0 = _avgpool_like(features.pool0, options)
        for layer in features.modules():
            if isinstance(layer, tv_densenet._DenseLayer):
                layer.memory_efficient = False
        self.features = _convert_tree(features, options, "features")
        self.classifier = _classifier(source.classifier, options)
        self.num_features = source.classifier.in_features

    @property
    def stage_names(self) -> dict[str, str]:
        """Guidance layer names → module paths: dense blocks 1–3 and ``features.norm5``."""
        return dict(DENSENET_STAGES)

    def forward_features(self, x: Tensor) -> Tensor:
        """``[N, 6, H, W] -> [N, num_features, H/32, W/32]`` (after the final ReLU, as torchvision)."""
        return F.relu(self.features(x))


class BcosifiedSimpleViT(BcosifiedModel, SimpleViT):
    """A B-cosified standard Simple ViT / ViT-c of the B-cos release: ``[N, 6, image_size, image_size] -> logits``,
    the release's module names. Affine: the additive positional embedding is not part of the contributions.

    It takes over the converted parts of a (copied) :class:`~rightreasons.models.standard.StandardSimpleViT`, so
    ``SimpleViT.__init__`` (which builds parts from a layer kit) does not run.
    """

    is_affine = True
    """The additive positional embedding is a constant term: ``logit − logit_bias ≠ Σ W(x) ⊙ x`` in general."""

    def __init__(self, source: SimpleViT, options: BcosifyOptions) -> None:
        nn.Module.__init__(self)
        self.options = options
        self.num_classes, self.in_chans, self.num_features = source.num_classes, 6, source.num_features
        self.image_size, self.grid_size = source.image_size, source.grid_size
        embedding = source.to_patch_embedding
        if embedding.conv_stem is not None:
            embedding.conv_stem[0] = _conv(embedding.conv_stem[0], options, "to_patch_embedding.conv_stem.0",
                                           fold=True)
        else:
            embedding.linear = _linear(embedding.linear, options, "to_patch_embedding.linear", patch_fold=True)
        self.to_patch_embedding = _convert_tree(embedding, options, "to_patch_embedding")
        self.register_buffer("pos_embedding", source.pos_embedding, persistent=False)
        self.transformer = _convert_tree(source.transformer, options, "transformer")
        self.linear_head = _convert_tree(source.linear_head, options, "linear_head")
        self.logit_layer = LogitLayer(options.logit_bias_for(self.num_classes))


class BcosifiedTimmViT(BcosifiedModel, nn.Module):
    """A B-cosified timm ``VisionTransformer`` (the converted model as ``vit``, then the fixed logit layer):
    ``[N, 6, H, W] -> logits [N, num_classes]``, timm's interface. Affine: the learnt positional embedding and the
    class token are constant terms."""

    is_affine = True

    def __init__(self, source: VisionTransformer, options: BcosifyOptions) -> None:
        super().__init__()
        self.options = options
        checks = (("attention pooling", source.attn_pool is not None),
                  (f"global_pool={source.global_pool!r}", source.global_pool not in ("token", "avg")),
                  ("no classifier (num_classes=0)", not isinstance(source.head, nn.Linear)))
        problems = [problem for problem, bad in checks if bad]
        problems += [f"block {i} of type {type(b).__qualname__}" for i, b in enumerate(source.blocks)
                     if type(b) is not TimmBlock]
        if problems:
            raise UsageError(f"bcosify: this timm VisionTransformer cannot be B-cosified: {', '.join(problems)} "
                             "(supported: standard blocks, token or average pooling, a linear head)")
        source.patch_embed.proj = _conv(source.patch_embed.proj, options, "patch_embed.proj", fold=True)
        for name, child in list(source.named_children()):
            setattr(source, name, _convert_tree(child, options, name))
        self.vit = source
        self.logit_layer = LogitLayer(options.logit_bias_for(source.num_classes))
        self.num_classes, self.in_chans, self.num_features = source.num_classes, 6, source.num_features

    def get_classifier(self) -> nn.Module:
        return self.vit.head

    def forward_features(self, x: Tensor) -> Tensor:
        """``[N, 6, H, W] -> tokens [N, T, dim]``."""
        check_input_channels(x, self.in_chans, type(self).__name__)
        return self.vit.forward_features(x)

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """Tokens → logits ``[N, num_classes]`` (pooled tokens ``[N, dim]`` with ``pre_logits``)."""
        x = self.vit.forward_head(x, pre_logits=pre_logits)
        return x if pre_logits else self.logit_layer(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


# ------------------------------------------------------------------------------------------------------ conversion

def _registered_twin(model: nn.Module) -> tuple[str, dict[str, Any]] | None:
    """The registered source architecture (name, constructor arguments) that rebuilds ``model``'s layout: its
    ``model_args`` when :func:`~rightreasons.create_model` built it, else, for a plain torchvision ResNet or DenseNet,
    the registered twin with the same state-dict keys and shapes; ``None`` when there is none."""
    args = getattr(model, "model_args", None)
    if args is not None and args["name"] in SOURCES:
        return args["name"], dict(args["kwargs"])
    if isinstance(model, tv_resnet.ResNet):
        candidate = _resnet_arguments(model)
    elif isinstance(model, tv_densenet.DenseNet):
        candidate = _densenet_arguments(model)
    else:
        return None
    name, kwargs = candidate
    with torch.device("meta"):
        twin = get_model_spec(name).build(**kwargs)
    shapes = {k: tuple(v.shape) for k, v in twin.state_dict().items()}
    return candidate if shapes == {k: tuple(v.shape) for k, v in model.state_dict().items()} else None


_RESNET_WIDTH_DEFAULTS = {"inplanes": 64, "groups": 1, "width_per_group": 64}
"""torchvision's ResNet widths; only other values become constructor arguments."""


def _resnet_arguments(model: tv_resnet.ResNet) -> tuple[str, dict[str, Any]]:
    block = type(model.layer1[0])
    layers = [len(getattr(model, name)) for name in RESNET_STAGES.values()]
    names = [n for n in SOURCES if n.startswith("resnet") and get_model_spec(n).defaults["block"] is block]
    exact = [n for n in names if list(get_model_spec(n).defaults["layers"]) == layers]
    kwargs: dict[str, Any] = {"num_classes": model.fc.out_features}
    if not exact:
        kwargs["layers"] = layers
    width = {"inplanes": model.conv1.out_channels, "groups": model.groups, "width_per_group": model.base_width}
    kwargs.update({k: v for k, v in width.items() if v != _RESNET_WIDTH_DEFAULTS[k]})
    return (exact or names or ["resnet18"])[0], kwargs


_DENSENET_OPTION_DEFAULTS = {"bn_size": 4, "drop_rate": 0.0}
"""torchvision's DenseNet bottleneck width and dropout; only other values become constructor arguments."""


def _densenet_arguments(model: tv_densenet.DenseNet) -> tuple[str, dict[str, Any]]:
    blocks = [m for n, m in model.features.named_children() if n.startswith("denseblock")]
    first = blocks[0].denselayer1
    architecture = {"growth_rate": first.conv2.out_channels, "block_config": tuple(len(b) for b in blocks),
                    "num_init_features": model.features.conv0.out_channels}
    options = {"bn_size": first.conv1.out_channels // first.conv2.out_channels, "drop_rate": first.drop_rate}
    kwargs: dict[str, Any] = {"num_classes": model.classifier.out_features,
                              **{k: v for k, v in options.items() if v != _DENSENET_OPTION_DEFAULTS[k]}}
    for name in ("densenet121", "densenet169"):
        if {k: get_model_spec(name).defaults[k] for k in architecture} == architecture:
            return name, kwargs
    return "densenet121", {**kwargs, **architecture, "block_config": list(architecture["block_config"])}


def _convert(model: nn.Module, options: BcosifyOptions) -> nn.Module:
    """The converted model, taking over ``model``'s modules (convert a copy to keep the original)."""
    if any(isinstance(m, DynamicLinear) for m in model.modules()):
        raise UsageError(f"bcosify: {type(model).__name__} is a B-cos network already (it has dynamic-linear layers)")
    if getattr(model, "is_xdnn", False):
        raise UsageError("bcosify: X-DNNs are not supported (they are bias-free ReLU networks without norms already)")
    if isinstance(model, tv_resnet.ResNet):
        return BcosifiedResNet(model, options)
    if isinstance(model, tv_densenet.DenseNet):
        return BcosifiedDenseNet(model, options)
    if isinstance(model, SimpleViT):
        return BcosifiedSimpleViT(model, options)
    if isinstance(model, VisionTransformer):
        return BcosifiedTimmViT(model, options)
    raise UsageError(f"bcosify: cannot convert a {type(model).__module__}.{type(model).__qualname__}; supported are "
                     "torchvision ResNets and DenseNets, the standard Simple ViT / ViT-c (StandardSimpleViT) and timm "
                     "VisionTransformers")


def bcosify(model: nn.Module, *, b: float = 2.0, keep_bias: bool = False, maxpool_to_avgpool: bool = True,
            weight_mode: WeightMode = "raw", mean: Sequence[float] = IMAGENET_MEAN,
            std: Sequence[float] = IMAGENET_STD, logit_bias: float | None = None) -> nn.Module:
    """A B-cos network computed from the pretrained standard ``model`` (module docstring); ``model`` is not changed.

    Args:
        model: a standard ResNet / DenseNet (torchvision layout), StandardSimpleViT or timm VisionTransformer taking
            images normalised with ``mean``/``std``.
        b: B-cos exponent of every converted conv and linear unit (the recipe: 2; 1 keeps the function).
        keep_bias: keep every bias (the running means of BatchNorms folded into theirs); the recipe removes them.
        maxpool_to_avgpool: replace the CNN stem's max-pooling by average pooling (the recipe; changes the function).
        weight_mode: ``"raw"`` (pretrained weights as they are; the recipe) or ``"gain"`` (unit norm × learnt gain).
        mean, std: the RGB normalisation ``model`` was trained with (default ImageNet's), folded into its first layer.
        logit_bias: fixed logit bias; ``None`` = ``−log(C − 1)`` without biases, 0 with ``keep_bias``.

    Returns:
        the converted model, in ``model``'s train/eval mode, taking ``[x, 1 − x]`` of images in [0, 1]; with
        ``model_args`` (``bcosified_<source>`` and every argument) when its architecture is registered, so that
        :func:`~rightreasons.save_model` can store it.

    Raises:
        UsageError: an unsupported family or module (named), a B-cos or X-DNN model, or invalid options.
    """
    options = BcosifyOptions(b, keep_bias, maxpool_to_avgpool, weight_mode, tuple(mean), tuple(std), logit_bias)
    converted = _convert(copy.deepcopy(model), options).train(model.training)
    twin = _registered_twin(model)
    if twin is not None:
        converted.model_args = {"name": f"bcosified_{twin[0]}", "kwargs": {**twin[1], **options.kwargs()}}
    return converted


def build_bcosified(source: str, *, b: float = 2.0, keep_bias: bool = False, maxpool_to_avgpool: bool = True,
                    weight_mode: WeightMode = "raw", mean: Sequence[float] = IMAGENET_MEAN,
                    std: Sequence[float] = IMAGENET_STD, logit_bias: float | None = None,
                    **source_kwargs: Any) -> nn.Module:
    """The registered builder of ``bcosified_<source>``: the source architecture with fresh weights
    (``source_kwargs`` are its constructor arguments), converted; ``load_weights`` then fills in converted ones."""
    spec = get_model_spec(source)
    spec.check_arguments(source_kwargs)
    options = BcosifyOptions(b, keep_bias, maxpool_to_avgpool, weight_mode, tuple(mean), tuple(std), logit_bias)
    return _convert(spec.build(**source_kwargs), options)


# ------------------------------------------------------------------------------ schedules during fine-tuning

def _bcosified(model: nn.Module, what: str) -> BcosifiedModel:
    if not isinstance(model, BcosifiedModel):
        raise UsageError(f"{what} needs a B-cosified model (from rightreasons.bcosify or a bcosified_* name), got "
                         f"{type(model).__name__}")
    return model


def _update_options(model: BcosifiedModel, **changes: Any) -> None:
    """Record changed options on the model and in its ``model_args`` (so that a saved file rebuilds it)."""
    model.options = dataclasses.replace(model.options, **changes)
    args = getattr(model, "model_args", None)
    if args is not None:
        args["kwargs"].update({k: model.options.kwargs()[k] for k in changes})


def linear_b(step: int, ramp_steps: int, start: float = 1.0, end: float = 2.0) -> float:
    """B of a linear ramp from ``start`` to ``end`` over ``ramp_steps`` optimiser steps, ``end`` afterwards (the
    release's ``linear_b`` ablation; use with :func:`set_b` before every step)."""
    if ramp_steps < 1:
        raise UsageError(f"linear_b: ramp_steps must be >= 1, got {ramp_steps}")
    return start + (end - start) * min(max(step, 0) / ramp_steps, 1.0)


@dataclass(frozen=True)
class BRamp:
    """A linear ramp of B over ``steps`` optimiser steps, from ``start`` to ``end`` (then ``end``): the engine's
    ``optim.b_ramp_epochs`` (:func:`linear_b` applied with :func:`set_b`)."""

    steps: int
    end: float
    start: float = 1.0

    @classmethod
    def for_model(cls, model: nn.Module, steps: int, what: str = "BRamp") -> BRamp:
        """A ramp from 1 to the B that the B-cosified ``model`` was built with (``what`` names the caller in the
        error for any other model)."""
        return cls(max(int(steps), 1), _bcosified(model, what).options.b)

    def apply(self, model: nn.Module, step: int) -> None:
        """Give every B-cos unit of ``model`` the B of optimiser step ``step``."""
        set_b(model, linear_b(step, self.steps, self.start, self.end))


def set_b(model: nn.Module, b: float) -> nn.Module:
    """Set the exponent B of every B-cos unit of a B-cosified ``model`` (and of its recorded options) in place."""
    bcosified = _bcosified(model, "set_b")
    if not b >= 1:
        raise UsageError(f"set_b: B must be >= 1, got {b!r}")
    for unit in bcosified.bcos_units():
        unit.b = float(b)
    _update_options(bcosified, b=float(b))
    return model


def _additive_biases(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """``(module, attribute)`` of every bias added to an output: those of the converted units and norms and the v
    bias of timm attention (not q/k biases or the norms of q and k, which only shape the attention matrix)."""
    pairs = [(m, "bias") for m in model.modules()
             if isinstance(m, DynamicLinear) and isinstance(getattr(m, "bias", None), nn.Parameter)]
    return pairs + [(m, "v_bias") for m in model.modules()
                    if isinstance(m, BcosifiedTimmAttention) and m.v_bias is not None]


def decay_biases(model: nn.Module, factor: float) -> None:
    """One step of a bias-decay schedule: multiply every bias of a B-cosified ``model`` kept with ``keep_bias`` by
    ``factor`` in [0, 1] (e.g. after each optimiser step; the q/k biases of timm attention are not additive and
    stay). End the schedule with :func:`remove_biases`."""
    if not 0.0 <= factor <= 1.0:
        raise UsageError(f"decay_biases: factor must lie in [0, 1], got {factor!r}")
    _bcosified(model, "decay_biases")
    with torch.no_grad():
        for module, name in _additive_biases(model):
            getattr(module, name).mul_(factor)


def remove_biases(model: nn.Module) -> nn.Module:
    """Delete every additive bias of a B-cosified ``model`` in place (the end of a bias-decay schedule): CNNs become
    dynamic linear, with complete contributions. The logit bias keeps its value; the recorded options say so."""
    bcosified = _bcosified(model, "remove_biases")
    for module, name in _additive_biases(model):
        setattr(module, name, None)
    _update_options(bcosified, keep_bias=False, logit_bias=model.logit_layer.bias)
    return model


for _name in SOURCES:
    register_model(f"bcosified_{_name}", partial(build_bcosified, _name), family="bcosified", bcos=True)
