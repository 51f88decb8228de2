"""B-cos ConvNeXts (atto/tiny/small/base/large, PositionNorm and ``_bnu``) with the B-cos v2 release's architecture.

Relative to torchvision's ConvNeXt: every conv is a :class:`BcosConv2d` (B = 2, no biases), the block is
``B-cos depthwise 7×7 → norm → B-cos 1×1 (dim → 4·dim) → B-cos 1×1 (4·dim → dim)`` with no GELU (the B-cos transform is
itself non-linear), followed by a layer scale (init 1e-6) and stochastic depth on the residual branch. The classifier is
``norm → B-cos 1×1 conv`` applied *before* global average pooling, then a fixed :class:`LogitLayer`.

Norms: the release's default is a bias-free centred PositionNorm (LayerNorm over C at every position) with eps 1e-6
(``norm_layer="pn"``; ``"pnu"`` also gets eps 1e-6); the ``_bnu`` variants use bias-free uncentred BatchNorm with the
usual eps 1e-5. Both are linear in the input once their statistics are held constant, so the model is dynamic linear:
``logits − logit_bias == Σ W(x) ⊙ x``.

State-dict keys follow the release: ``features.0`` (4×4/4 stem conv), ``features.1`` (stem norm), ``features.{2,4,6,8}``
(stages of blocks ``.{j}.block.{0: dwconv, 1: norm, 2: pwconv1, 3: pwconv2}`` and ``.{j}.layer_scale``),
``features.{3,5,7}`` (downsampling ``.0`` norm, ``.1`` 2×2/2 conv), ``classifier.0`` (norm), ``classifier.1`` (conv).

Stages for guidance (:attr:`BcosConvNeXt.stage_names`): ``mid1``–``mid3`` are the outputs of stages 1–3
(``features.2``, ``features.4``, ``features.6``, strides 4, 8, 16), ``final`` is the last stage ``features.8``
(stride 32, = :meth:`BcosConvNeXt.forward_features`).
"""

from __future__ import annotations

from functools import partial
from typing import Callable, Sequence

import torch
from torch import Tensor, nn
from torchvision.ops import StochasticDepth

from ..bcos.norms import NormFactory, get_norm_layer
from .pretrained import register_pretrained
from .registry import register_model
from .base import BcosCNN, check_drop_probability

__all__ = ["CONVNEXT_SIZES", "BcosConvNeXt", "CNBlock"]

ConvFactory = Callable[..., nn.Module]

CONVNEXT_SIZES: dict[str, tuple[tuple[int, ...], tuple[int, ...], float]] = {
    "atto": ((2, 2, 6, 2), (40, 80, 160, 320), 0.1),
    "tiny": ((3, 3, 9, 3), (96, 192, 384, 768), 0.1),
    "small": ((3, 3, 27, 3), (96, 192, 384, 768), 0.4),
    "base": ((3, 3, 27, 3), (128, 256, 512, 1024), 0.5),
    "large": ((3, 3, 27, 3), (192, 384, 768, 1536), 0.5),
}
"""Size → (blocks per stage, widths per stage, the release's default stochastic-depth rate)."""

POSITION_NORM_EPS = 1e-6
"""The eps of the release's ConvNeXt PositionNorms (other norms keep their own default)."""


def _norm_factory(norm_layer: str | NormFactory) -> NormFactory:
    """Resolve ``norm_layer``; position norms given by name get the release's eps 1e-6."""
    norm = get_norm_layer(norm_layer)
    if isinstance(norm_layer, str) and norm_layer in ("pn", "pnu"):
        return partial(norm, eps=POSITION_NORM_EPS)
    return norm


class CNBlock(nn.Module):
    """ConvNeXt block ``x + drop_path(γ ⊙ block(x))``: ``[N, dim, H, W] -> [N, dim, H, W]``."""

    def __init__(self, dim: int, layer_scale: float, drop_path: float, conv: ConvFactory, norm: NormFactory) -> None:
        super().__init__()
        self.block = nn.Sequential(conv(dim, dim, kernel_size=7, padding=3, groups=dim),
                                   norm(dim),
                                   conv(dim, 4 * dim, kernel_size=1),
                                   conv(4 * dim, dim, kernel_size=1))
        self.layer_scale = nn.Parameter(torch.full((dim, 1, 1), float(layer_scale)))
        self.stochastic_depth = StochasticDepth(drop_path, "row")

    def forward(self, x: Tensor) -> Tensor:
        return self.stochastic_depth(self.layer_scale * self.block(x)) + x


class BcosConvNeXt(BcosCNN):
    """B-cos ConvNeXt: ``[N, in_chans, H, W] -> logits [N, num_classes]``.

    Args:
        depths: blocks per stage (four stages).
        dims: widths of the four stages.
        num_classes: outputs of the classifier.
        in_chans: input channels (6 for the ``[x, 1 − x]`` encoding).
        norm_layer: a norm name from :data:`~rightreasons.bcos.norms.NORM_LAYERS` (``"pn"``: the release's PositionNorm,
            eps 1e-6; ``"bnu"`` for the ``_bnu`` variants) or a factory ``f(num_features)``.
        b, max_out: B-cos settings of every conv.
        logit_bias: fixed logit bias; ``None`` means ``-log(num_classes - 1)``; 0.0 is honoured.
        logit_temperature: fixed logit temperature (``None`` = 1).
        stochastic_depth_prob: maximum drop-path rate, increased linearly over the blocks.
        layer_scale: initial value of the per-channel residual scale γ.
    """

    def __init__(self, depths: Sequence[int], dims: Sequence[int], num_classes: int = 1000, in_chans: int = 6,
                 norm_layer: str | NormFactory = "pn", b: float = 2, max_out: int = 1,
                 logit_bias: float | None = None, logit_temperature: float | None = None,
                 stochastic_depth_prob: float = 0.0, layer_scale: float = 1e-6) -> None:
        if len(depths) != 4 or len(dims) != 4:
            raise ValueError(f"BcosConvNeXt needs four stages, got depths={list(depths)} and dims={list(dims)}")
        check_drop_probability("stochastic_depth_prob", stochastic_depth_prob)
        super().__init__(num_classes, in_chans, b, max_out, logit_bias, logit_temperature)
        norm = _norm_factory(norm_layer)

        conv = self.conv

        layers: list[nn.Module] = [conv(in_chans, dims[0], kernel_size=4, stride=4), norm(dims[0])]
        total_blocks, built = sum(depths), 0
        for i, (depth, dim) in enumerate(zip(depths, dims)):
            blocks = []
            for _ in range(depth):
                drop = stochastic_depth_prob * built / max(total_blocks - 1, 1)
                blocks.append(CNBlock(dim, layer_scale, drop, conv, norm))
                built += 1
            layers.append(nn.Sequential(*blocks))
            if i < len(depths) - 1:
                layers.append(nn.Sequential(norm(dim), conv(dim, dims[i + 1], kernel_size=2, stride=2)))
        self.features = nn.Sequential(*layers)

        self.num_features = dims[-1]
        self.classifier = nn.Sequential(norm(dims[-1]), conv(dims[-1], num_classes, kernel_size=1))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.trunc_normal_(m.weight, std=0.02)

    @property
    def stage_names(self) -> dict[str, str]:
        """Guidance layer names → module paths: ``mid1``–``mid3`` after stages 1–3, ``final`` after stage 4."""
        return {"mid1": "features.2", "mid2": "features.4", "mid3": "features.6", "final": "features.8"}

    def classifier_input(self, x: Tensor) -> Tensor:
        """The normalised features ``[N, C, h, w]`` (the input of the classifier conv)."""
        return self.classifier[0](x)


for _size, (_depths, _dims, _drop) in CONVNEXT_SIZES.items():
    register_model(f"bcos_convnext_{_size}", partial(BcosConvNeXt, _depths, _dims), family="convnext", bcos=True,
                   norm_layer="pn", stochastic_depth_prob=_drop)
    register_model(f"bcos_convnext_{_size}_bnu", partial(BcosConvNeXt, _depths, _dims), family="convnext",
                   bcos=True, norm_layer="bnu", stochastic_depth_prob=_drop)

# released weights (B-cos v2): weights name, hub entry point, experiment, file, ImageNet top-1
register_pretrained("bcos_convnext_tiny", "convnext_tiny", "bcos_final_long/convnext_tiny_pn",
                    "convnext_tiny_pn-539b1bfb37.pth", 77.488)
register_pretrained("bcos_convnext_base", "convnext_base", "bcos_final_long/convnext_base_pn",
                    "convnext_base_pn-b0495852c6.pth", 79.650)
register_pretrained("bcos_convnext_tiny_bnu", "convnext_tiny_bnu", "bcos_final_long/convnext_tiny_bnu",
                    "convnext_tiny_bnu-dbd7f5ef9d.pth", 76.826)
register_pretrained("bcos_convnext_base_bnu", "convnext_base_bnu", "bcos_final_long/convnext_base_bnu",
                    "convnext_base_bnu-7c32a704b3.pth", 80.142)
