"""Holistic B-cos ViTs ("Holistically Explainable Vision Transformers", Böhle et al.; docs/science.md, architectures).

Every component is dynamic linear, so the whole transformer — tokeniser included — is summarised exactly by ``W(x)``:

* tokeniser: a B-cos CNN cut at a chosen depth (or none), then a patchifying B-cos conv with MaxOut
  (:class:`~rightreasons.models.tokeniser.ConvTokeniser`);
* attention: LayerNorm *only* before the query/key computation (it shapes the attention matrix, a dynamic weight, and
  so never enters the linear path), B-cos value and output projections with MaxOut;
* MLP: two B-cos layers with MaxOut, no norm, no activation;
* classifier: mean pooling over tokens, one B-cos linear layer without MaxOut, then the fixed :class:`LogitLayer`;
* positional information (``pos``): a learnt per-head, per-layer attention prior, multiplied with the softmax
  attention (``"multiplicative_prior"``, the paper's best) or added before it (``"additive_prior"``) — the model is then
  dynamic *linear* (``logits − logit_bias == Σ W(x) ⊙ x``) — or a learnt additive token embedding (``"embedding"``),
  which makes it affine (``is_affine``).

The paper additionally rescales B-cos outputs and backbone features by fixed constants for signal propagation; those
are not part of this architecture (use ``logit_temperature`` to rescale the logits).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from torch import Tensor, nn

from ..bcos.attention import AttentionMixing, Prior, merge_heads, split_heads
from ..bcos.layers import BcosLinear, LogitLayer, default_logit_bias
from ..encoding import check_input_channels
from .registry import register_model
from .densenet import DENSENET_STAGES
from .tokeniser import ConvTokeniser
from .vit import SIMPLE_VIT_SIZES, EncoderBlock, FeedForward, MeanPooledHead, check_image_size

__all__ = ["BcosHolisticViT", "HolisticAttention", "POSITIONAL"]

_PRIORS: dict[str, Prior | None] = {"multiplicative_prior": "multiplicative", "additive_prior": "additive",
                                    "embedding": None}
POSITIONAL: tuple[str, ...] = tuple(_PRIORS)
"""Values of ``pos``: how the holistic ViT learns positional information."""


class HolisticAttention(nn.Module):
    """B-cos attention block: ``to_out(A(LN(x)) · to_v(x))`` with ``A`` the (prior-shaped) softmax attention.

    ``norm`` (LayerNorm) and ``to_qk`` (plain linear, no bias) only compute the attention matrix; ``to_v`` and
    ``to_out`` are B-cos layers with MaxOut; ``attend`` holds the optional prior.
    Shapes: ``[N, T, dim] -> [N, T, dim]``.
    """

    def __init__(self, dim: int, heads: int, num_tokens: int, prior: Prior | None, b: float, max_out: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"HolisticAttention: dim={dim} must be divisible by heads={heads}")
        self.heads = heads
        self.norm = nn.LayerNorm(dim)
        self.to_qk = nn.Linear(dim, 2 * dim, bias=False)
        self.to_v = BcosLinear(dim, dim, b=b, max_out=max_out)
        self.attend = AttentionMixing(dim // heads, heads, prior, num_tokens)
        self.to_out = BcosLinear(dim, dim, b=b, max_out=max_out)

    def forward(self, x: Tensor) -> Tensor:
        q, k = (split_heads(t, self.heads) for t in self.to_qk(self.norm(x)).chunk(2, dim=-1))
        v = split_heads(self.to_v(x), self.heads)
        return self.to_out(merge_heads(self.attend(q, k, v)))


class BcosHolisticViT(MeanPooledHead, nn.Module):
    """Holistic B-cos ViT: ``[N, in_chans, image_size, image_size] -> logits [N, num_classes]``.

    Args:
        image_size: input height and width in pixels (fixed: priors and embeddings are learnt per token).
        patch_size: kernel/stride of the tokenising B-cos conv on the image or the backbone's feature map.
        num_classes: outputs of the classifier.
        dim, depth, heads, mlp_dim: transformer width, blocks, heads and MLP width.
        in_chans: input channels (6 for the ``[x, 1 − x]`` encoding).
        pos: ``"multiplicative_prior"``, ``"additive_prior"`` or ``"embedding"`` (see the module docstring).
        b: B-cos exponent of every B-cos layer.
        max_out: MaxOut units of the tokeniser conv, value/output projections and MLP layers (2 in the paper).
        backbone, backbone_cut, backbone_kwargs: a registered B-cos CNN cut after a submodule as tokeniser (hybrid
            ViT), e.g. ``"bcos_densenet121"`` after ``"features.denseblock3"``; ``None`` patchifies the image.
        logit_bias: fixed logit bias; ``None`` means ``-log(num_classes - 1)``.
        logit_temperature: fixed logit temperature (``None`` = 1).
    """

    head_name = "head"

    def __init__(self, image_size: int = 224, patch_size: int = 16, num_classes: int = 1000, dim: int = 192,
                 depth: int = 12, heads: int = 3, mlp_dim: int = 768, in_chans: int = 6,
                 pos: str = "multiplicative_prior", b: float = 2, max_out: int = 2, backbone: str | None = None,
                 backbone_cut: str | None = None, backbone_kwargs: dict[str, Any] | None = None,
                 logit_bias: float | None = None, logit_temperature: float | None = None) -> None:
        super().__init__()
        if pos not in _PRIORS:
            raise ValueError(f"BcosHolisticViT: unknown pos={pos!r}; expected one of {POSITIONAL}")
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.num_features = dim
        self.image_size = image_size
        self.pos = pos
        self.is_affine = pos == "embedding"
        self.tokeniser = ConvTokeniser(in_chans, image_size, dim, patch_size, b, max_out, backbone, backbone_cut,
                                       backbone_kwargs)
        tokens = self.tokeniser.num_tokens
        if self.is_affine:
            self.pos_embedding = nn.Parameter(nn.init.trunc_normal_(torch.empty(1, tokens, dim), std=0.02))
        else:
            self.pos_embedding = None

        def linear(i: int, o: int) -> BcosLinear:
            return BcosLinear(i, o, b=b, max_out=max_out)

        self.transformer = nn.Sequential(OrderedDict(
            (f"encoder_{i}", EncoderBlock(HolisticAttention(dim, heads, tokens, _PRIORS[pos], b, max_out),
                                          FeedForward(dim, mlp_dim, linear, norm=None)))
            for i in range(depth)))
        self.head = BcosLinear(dim, num_classes, b=b)
        self.logit_layer = LogitLayer(default_logit_bias(num_classes) if logit_bias is None else logit_bias,
                                      logit_temperature)

    def get_classifier(self) -> nn.Module:
        """The B-cos linear classifier."""
        return self.head

    def forward_features(self, x: Tensor) -> Tensor:
        """``[N, in_chans, H, W] -> tokens [N, T, dim]`` after the last block."""
        check_input_channels(x, self.in_chans, type(self).__name__)
        grid, stride = self.tokeniser.grid_size, self.tokeniser.stride
        check_image_size(x, self.image_size, type(self).__name__,
                         f"{grid[0]}×{grid[1]} tokens of {stride}×{stride} pixels, fixed by the learnt "
                         + ("positional embedding" if self.is_affine else "attention priors"))
        tokens = self.tokeniser(x)
        if self.pos_embedding is not None:
            tokens = tokens + self.pos_embedding
        return self.transformer(tokens)


_DENSENET121_CUTS = {13: ("mid1", 4), 38: ("mid2", 2), 87: ("mid3", 1)}
"""Conv layers of DenseNet-121 → (the stage whose output is tokenised, tokeniser patch size giving 14×14 tokens at
224 px)."""
for _size in ("ti", "s", "b"):
    register_model(f"bcos_holistic_vit_{_size}", BcosHolisticViT, family="holistic_vit", bcos=True, image_size=224,
                   patch_size=16, **SIMPLE_VIT_SIZES[_size])
    for _layers, (_stage, _patch) in _DENSENET121_CUTS.items():
        register_model(f"bcos_holistic_vit_{_size}_densenet121_l{_layers}", BcosHolisticViT, family="holistic_vit",
                       bcos=True, image_size=224, patch_size=_patch, backbone="bcos_densenet121",
                       backbone_cut=DENSENET_STAGES[_stage], **SIMPLE_VIT_SIZES[_size])
