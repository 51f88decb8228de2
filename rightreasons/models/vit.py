"""The Simple ViT and ViT-c of the B-cos v2 release (docs/science.md, architectures), B-cos or standard, with the
release's module names.

:class:`SimpleViT` computes, for an image ``[N, C, H, W]``:

* patch embedding (``to_patch_embedding``): an optional conv stem of 3×3 convs, each followed by a LayerNorm over
  (C, H, W) (stride 2 where the width grows: the ViT-c of "Early convolutions help transformers see better"), then
  non-overlapping ``p×p`` patches flattened in ``(p1, p2, c)`` order and a linear layer;
* a fixed 2-D sin-cos positional embedding added to the tokens;
* encoder blocks ``x = attn(x) + x; x = ff(x) + x`` with attention = LayerNorm → plain q/k/v linear (no bias) →
  softmax attention → output projection (no bias), and MLP = LayerNorm → linear → linear;
* mean pooling over tokens, head = LayerNorm → linear.

Which layers fill these slots is a :class:`ViTLayers` kit; the module names, and so the state-dict keys, do not depend
on it. :class:`BcosSimpleViT` (six-channel input) uses :func:`bcos_layers`: B-cos linear layers and convs, bias-free
LayerNorms, no activation, the attention matrix applied as a dynamic weight (see :mod:`rightreasons.bcos.attention`),
and the fixed :class:`LogitLayer` after the head. The release saves it wrapped as ``Sequential(vit, logit_layer)``, so
its keys start with ``0.``; :func:`rightreasons.models.weights.load_weights` strips that prefix and the logit layer has
no state, so the keys match. The standard twin (:class:`rightreasons.models.standard.StandardSimpleViT`) uses plain
layers.

The additive positional embedding makes the B-cos model *affine*, not linear (``is_affine = True``): the contributions
``Σ W(x) ⊙ x`` miss the part of the logit that the embedding produces. The LayerNorms' centring and the attention matrix
are part of ``W(x)``; the token count is fixed by the embedding, so the input size is fixed too.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from functools import partial
from typing import Any, Callable, Sequence

import torch
from torch import Tensor, nn

from ..bcos.attention import AttentionMixing, merge_heads, split_heads
from ..bcos.layers import BcosConv2d, BcosLinear, LogitLayer, default_logit_bias
from ..bcos.norms import NORM_LAYERS, LayerNorm, NoBias
from ..encoding import check_input_channels
from .pretrained import register_pretrained
from .registry import register_model

__all__ = ["Attention", "BcosSimpleViT", "EncoderBlock", "FeedForward", "MeanPooledHead", "PatchEmbedding",
           "RELEASE_VITS", "SIMPLE_VIT_SIZES", "SimpleViT", "VITC_STEMS", "ViTLayers", "bcos_layers",
           "check_image_size", "sincos_2d_embedding"]

LinearFactory = Callable[[int, int], nn.Module]

SIMPLE_VIT_SIZES: dict[str, dict[str, int]] = {
    "ti": dict(dim=192, heads=3, mlp_dim=768, depth=12),
    "s": dict(dim=384, heads=6, mlp_dim=1536, depth=12),
    "b": dict(dim=768, heads=12, mlp_dim=3072, depth=12),
    "l": dict(dim=1024, heads=16, mlp_dim=4096, depth=14),
}
"""Width, heads, MLP width and depth of the release's ViT sizes (ViT-c uses one block less)."""

VITC_STEMS: dict[str, tuple[int, ...]] = {
    "ti": (24, 48, 96, 192),
    "s": (48, 96, 192, 384),
    "b": (64, 128, 128, 256, 256, 512),
    "l": (64, 128, 128, 256, 256, 512),
}
"""Output channels of the ViT-c conv stems (four stride-2 convs: 224 px → 14×14 tokens)."""


def _release_vits() -> dict[str, dict[str, Any]]:
    configs: dict[str, dict[str, Any]] = {}
    for size, cfg in SIMPLE_VIT_SIZES.items():
        configs[f"simple_vit_{size}_patch16_224"] = dict(image_size=224, patch_size=16, **cfg)
        configs[f"vitc_{size}_patch1_14"] = dict(image_size=224, patch_size=1, conv_stem=VITC_STEMS[size],
                                                 **{**cfg, "depth": cfg["depth"] - 1})
    return configs


RELEASE_VITS: dict[str, dict[str, Any]] = _release_vits()
"""The release's ViT architectures → constructor arguments: ``simple_vit_{ti,s,b,l}_patch16_224`` and
``vitc_{ti,s,b,l}_patch1_14`` (one block less than the plain ViT of the same size, for its conv stem). Registered as
``bcos_<name>`` (:class:`BcosSimpleViT`) and ``<name>`` (the standard twin)."""


@dataclass(frozen=True)
class ViTLayers:
    """The layers that make a :class:`SimpleViT` B-cos or standard (module names and key layout are the same).

    Attributes:
        linear: ``linear(in, out, bias=...)``: patch embedding, MLP and head (default bias), attention output
            projection (called with ``bias=False``). Shapes ``[*, in] -> [*, out]``.
        conv: ``conv(in, out, kernel_size=, stride=, padding=)`` of the ViT-c stem.
        token_norm: ``token_norm(dim)``, a norm over the last dimension of ``[N, T, dim]`` tokens.
        stem_norm: ``stem_norm(channels)``, a norm over (C, H, W) of the stem's ``[N, C, H, W]`` maps.
        attend: ``attend(dim_head, heads)``: softmax attention ``q, k, v [N, heads, T, d] -> [N, heads, T, d]``.
        act: ``act()`` after every stem norm and between the two MLP layers, or ``None`` for no activation (no module
            is then created).
    """

    linear: Callable[..., nn.Module]
    conv: Callable[..., nn.Module]
    token_norm: Callable[[int], nn.Module]
    stem_norm: Callable[[int], nn.Module]
    attend: Callable[[int, int], nn.Module]
    act: Callable[[], nn.Module] | None


def bcos_layers(b: float) -> ViTLayers:
    """The B-cos ViT's layers: B-cos linear layers and convs with exponent ``b``, bias-free LayerNorms (centred), the
    attention matrix as a dynamic weight, no activation."""
    return ViTLayers(linear=partial(BcosLinear, b=b), conv=partial(BcosConv2d, b=b), token_norm=NoBias(LayerNorm),
                     stem_norm=NORM_LAYERS["ln"], attend=AttentionMixing, act=None)


def sincos_2d_embedding(height: int, width: int, dim: int, temperature: float = 10_000.0) -> Tensor:
    """Fixed 2-D sin-cos positional embedding ``[height·width, dim]`` (float32), tokens in row-major order.

    Features are ``[sin(x ω), cos(x ω), sin(y ω), cos(y ω)]`` with ``ω_i = temperature^(−i / (dim/4 − 1))``,
    ``i < dim/4`` (x: column, y: row), computed in float32 as in the release.
    """
    if dim % 4 or dim < 8:
        raise ValueError(f"the sin-cos positional embedding needs a width divisible by 4 and >= 8, got dim={dim}")
    y, x = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    omega = 1.0 / temperature ** (torch.arange(dim // 4) / (dim // 4 - 1))
    y = y.flatten()[:, None] * omega[None, :]
    x = x.flatten()[:, None] * omega[None, :]
    return torch.cat((x.sin(), x.cos(), y.sin(), y.cos()), dim=1).float()


def check_image_size(x: Tensor, image_size: int, model_name: str, detail: str) -> None:
    """Refuse inputs other than ``[N, C, image_size, image_size]``; ``detail`` says why the size is fixed."""
    if tuple(x.shape[-2:]) != (image_size, image_size):
        raise ValueError(f"{model_name} expects images of {image_size}×{image_size} pixels ({detail}), "
                         f"got {x.shape[-2]}×{x.shape[-1]}")


def _conv_stem(in_chans: int, channels: Sequence[int], layers: ViTLayers) -> tuple[nn.Sequential, int]:
    """3×3 conv + norm over (C, H, W) (+ activation) per entry of ``channels``; stride 2 where the width grows.

    Returns the stem and its total stride. Modules are named ``3i`` (conv), ``3i+1`` (norm) and ``3i+2`` (activation,
    absent without one), as in the release's stem, so that its state-dict keys match.
    """
    modules: OrderedDict[str, nn.Module] = OrderedDict()
    stride = 1
    for i, out in enumerate(channels):
        step = 2 if out > in_chans else 1
        modules[str(3 * i)] = layers.conv(in_chans, out, kernel_size=3, stride=step, padding=1)
        modules[str(3 * i + 1)] = layers.stem_norm(out)
        if layers.act is not None:
            modules[str(3 * i + 2)] = layers.act()
        in_chans, stride = out, stride * step
    return nn.Sequential(modules), stride


class PatchEmbedding(nn.Module):
    """``[N, C, H, W] -> [N, H/s, W/s, dim]`` with ``s`` = stem stride × patch size.

    An optional conv stem (``conv_stem``), then each ``p×p`` patch flattened in ``(p1, p2, c)`` order and projected by
    ``linear``.
    """

    def __init__(self, in_chans: int, dim: int, patch_size: int, conv_stem: Sequence[int] | None,
                 layers: ViTLayers) -> None:
        super().__init__()
        self.patch_size = patch_size
        self.stride = patch_size
        if conv_stem:
            self.conv_stem, stem_stride = _conv_stem(in_chans, conv_stem, layers)
            self.stride *= stem_stride
            in_chans = conv_stem[-1]
        else:
            self.conv_stem = None
        self.linear = layers.linear(in_chans * patch_size * patch_size, dim)

    def forward(self, x: Tensor) -> Tensor:
        if self.conv_stem is not None:
            x = self.conv_stem(x)
        n, c, h, w = x.shape
        p = self.patch_size
        patches = x.reshape(n, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(n, h // p, w // p, p * p * c)
        return self.linear(patches)


class Attention(nn.Module):
    """Release attention: ``norm`` → plain ``to_qkv`` (no bias) → ``attend`` → ``to_out`` (no bias).

    Shapes: ``[N, T, dim] -> [N, T, dim]``.
    """

    def __init__(self, dim: int, heads: int, layers: ViTLayers) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"Attention: dim={dim} must be divisible by heads={heads}")
        self.heads = heads
        self.norm = layers.token_norm(dim)
        self.to_qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.attend = layers.attend(dim // heads, heads)
        self.to_out = layers.linear(dim, dim, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = (split_heads(t, self.heads) for t in self.to_qkv(self.norm(x)).chunk(3, dim=-1))
        return self.to_out(merge_heads(self.attend(q, k, v)))


class FeedForward(nn.Module):
    """MLP ``net`` = (optional ``norm``) → ``linear1`` → (optional ``act``) → ``linear2``:
    ``[N, T, dim] -> [N, T, dim]``.

    Args:
        linear: factory ``linear(in, out)`` of the two layers (e.g. B-cos layers with MaxOut).
        norm: token norm before the first layer, or ``None`` (the holistic ViT has none).
        act: activation between the layers, or ``None`` (the B-cos ViTs have none).
    """

    def __init__(self, dim: int, hidden_dim: int, linear: LinearFactory, norm: nn.Module | None,
                 act: nn.Module | None = None) -> None:
        super().__init__()
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        if norm is not None:
            layers["norm"] = norm
        layers["linear1"] = linear(dim, hidden_dim)
        if act is not None:
            layers["act"] = act
        layers["linear2"] = linear(hidden_dim, dim)
        self.net = nn.Sequential(layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class EncoderBlock(nn.Module):
    """Pre-norm transformer block with residuals: ``x = attn(x) + x; x = ff(x) + x``."""

    def __init__(self, attn: nn.Module, ff: nn.Module) -> None:
        super().__init__()
        self.attn = attn
        self.ff = ff

    def forward(self, x: Tensor) -> Tensor:
        x = self.attn(x) + x
        return self.ff(x) + x


class MeanPooledHead:
    """The head of the ViTs: mean-pool the tokens, apply the classifier module named :attr:`head_name`, then the
    model's ``logit_layer`` (the fixed logit transform of B-cos models; ``None`` for standard ones). A mixin for
    ``nn.Module`` subclasses that define ``forward_features``."""

    head_name: str
    logit_layer: nn.Module | None

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """Tokens ``[N, T, dim]`` → logits ``[N, num_classes]``, or the mean-pooled tokens ``[N, dim]`` with
        ``pre_logits``."""
        x = x.mean(dim=1)
        if pre_logits:
            return x
        x = getattr(self, self.head_name)(x)
        return x if self.logit_layer is None else self.logit_layer(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.forward_head(self.forward_features(x))


class SimpleViT(MeanPooledHead, nn.Module):
    """Simple ViT / ViT-c built from a :class:`ViTLayers` kit: ``[N, in_chans, image_size, image_size] -> logits
    [N, num_classes]``. Use :class:`BcosSimpleViT` or :class:`rightreasons.models.standard.StandardSimpleViT`.

    Args:
        layers: the layer kit (B-cos or standard).
        image_size: input height and width in pixels (fixed: the positional embedding fixes the token grid).
        patch_size: patch side after the stem (16 for the plain ViTs, 1 for ViT-c).
        num_classes: outputs of the head.
        dim, depth, heads, mlp_dim: transformer width, blocks, attention heads (``dim_head = dim // heads``) and MLP
            width.
        in_chans: input channels.
        conv_stem: output channels of the ViT-c conv stem, or ``None`` for a plain patch embedding.
        logit_layer: module applied to the head's output (no state), or ``None``.
    """

    head_name = "linear_head"

    def __init__(self, layers: ViTLayers, image_size: int, patch_size: int, num_classes: int, dim: int, depth: int,
                 heads: int, mlp_dim: int, in_chans: int, conv_stem: Sequence[int] | None,
                 logit_layer: nn.Module | None) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.num_features = dim
        self.image_size = image_size
        self.to_patch_embedding = PatchEmbedding(in_chans, dim, patch_size, conv_stem, layers)
        stride = self.to_patch_embedding.stride
        if image_size % stride:
            stem = f" (conv stem stride {stride // patch_size} × patch_size {patch_size})" if conv_stem else ""
            raise ValueError(f"image_size={image_size} must be a multiple of the patch size {stride}{stem}")
        self.grid_size = image_size // stride
        self.register_buffer("pos_embedding", sincos_2d_embedding(self.grid_size, self.grid_size, dim),
                             persistent=False)
        self.transformer = nn.Sequential(OrderedDict(
            (f"encoder_{i}", EncoderBlock(Attention(dim, heads, layers),
                                          FeedForward(dim, mlp_dim, layers.linear, layers.token_norm(dim),
                                                      None if layers.act is None else layers.act())))
            for i in range(depth)))
        self.linear_head = nn.Sequential(OrderedDict(norm=layers.token_norm(dim),
                                                     linear=layers.linear(dim, num_classes)))
        self.logit_layer = logit_layer

    def get_classifier(self) -> nn.Module:
        """The linear layer of the head (its norm is shared by every class)."""
        return self.linear_head.linear

    def forward_features(self, x: Tensor) -> Tensor:
        """``[N, in_chans, H, W] -> tokens [N, T, dim]`` after the last block (``T`` = grid size squared)."""
        check_input_channels(x, self.in_chans, type(self).__name__)
        stride = self.to_patch_embedding.stride
        check_image_size(x, self.image_size, type(self).__name__,
                         f"{self.grid_size}×{self.grid_size} tokens of {stride}×{stride} pixels, fixed by the "
                         "positional embedding")
        tokens = self.to_patch_embedding(x).flatten(1, 2) + self.pos_embedding
        return self.transformer(tokens)


class BcosSimpleViT(SimpleViT):
    """B-cos Simple ViT / ViT-c (:func:`bcos_layers`): ``[N, in_chans, image_size, image_size] -> logits
    [N, num_classes]``.

    Args:
        image_size, patch_size, num_classes, dim, depth, heads, mlp_dim, conv_stem: as for :class:`SimpleViT`.
        in_chans: input channels (6 for the ``[x, 1 − x]`` encoding).
        b: B-cos exponent of every B-cos layer.
        logit_bias: fixed logit bias; ``None`` means ``-log(num_classes - 1)``; 0.0 is honoured.
        logit_temperature: fixed logit temperature (``None`` = 1).
    """

    is_affine = True
    """The additive positional embedding is a constant term: ``logit − logit_bias ≠ Σ W(x) ⊙ x`` in general."""

    def __init__(self, image_size: int = 224, patch_size: int = 16, num_classes: int = 1000, dim: int = 192,
                 depth: int = 12, heads: int = 3, mlp_dim: int = 768, in_chans: int = 6,
                 conv_stem: Sequence[int] | None = None, b: float = 2, logit_bias: float | None = None,
                 logit_temperature: float | None = None) -> None:
        logit_layer = LogitLayer(default_logit_bias(num_classes) if logit_bias is None else logit_bias,
                                 logit_temperature)
        super().__init__(bcos_layers(b), image_size, patch_size, num_classes, dim, depth, heads, mlp_dim, in_chans,
                         conv_stem, logit_layer)


for _name, _args in RELEASE_VITS.items():  # the standard twins are registered in rightreasons.models.standard
    register_model(f"bcos_{_name}", BcosSimpleViT, family="vit", bcos=True, **_args)

# released weights (B-cos v2) of the B-cos ViTs and of their standard twins (rightreasons.models.standard):
# size → (B-cos file hash, B-cos ImageNet top-1, standard file hash, standard top-1)
_RELEASED = {"simple_vit_{}_patch16_224": {"ti": ("4b0824b1c1", 59.960, "2ae8c65a39", 70.230),
                                           "s": ("75e99d1f73", 69.246, "f2934fcdcf", 74.470),
                                           "b": ("1fc4750806", 74.408, "87074200ed", 75.300),
                                           "l": ("9613b2ad0a", 75.060, "62dc536e03", 75.710)},
             "vitc_{}_patch1_14": {"ti": ("ddd6193a77", 67.260, "a5d6bded37", 72.590),
                                   "s": ("cf55c88f0c", 74.504, "34ecd7288e", 75.756),
                                   "b": ("a13c46397b", 77.152, "4d374b0220", 76.790),
                                   "l": ("8739e18b8d", 77.782, "560e48f246", 77.866)}}
for _pattern, _sizes in _RELEASED.items():
    for _size, (_bcos_hash, _bcos_top1, _standard_hash, _standard_top1) in _sizes.items():
        _arch = _pattern.format(_size)
        register_pretrained(f"bcos_{_arch}", _arch, f"vit_final/bcos_{_arch}", f"bcos_{_arch}-{_bcos_hash}.pth",
                            _bcos_top1)
        register_pretrained(_arch, f"standard_{_arch}", f"vit_final/{_arch}", f"standard_{_arch}-{_standard_hash}.pth",
                            _standard_top1)
