"""B-cos VGGs (VGG-11/13/16/19, plain and ``_bnu``) with the B-cos v2 release's architecture and module names.

Relative to torchvision's VGG: every conv is a :class:`BcosConv2d` (B = 2), ReLUs and dropout are gone, max-pooling is
``AvgPool2d(2)``, and the fully connected classifier becomes three B-cos convs applied *before* global average pooling
(7×7 with padding 3, 512 → 4096; 1×1, 4096 → 4096; 1×1, 4096 → C), followed by a fixed :class:`LogitLayer`. There is no
adaptive pooling to 7×7, so any input size that survives five 2×2 poolings works (32 px upwards). The ``_bnu`` variants
put a bias-free uncentred BatchNorm after every feature conv; the plain ones hold an ``nn.Identity`` in that slot, so
both share the release's module indices: ``features.0.linear.weight`` (conv), ``features.1.*`` (norm),
``features.2`` (pool), …, ``classifier.{0,1,2}.linear.weight``. The model is dynamic linear end to end:
``logits − logit_bias == Σ W(x) ⊙ x``.

Stages for guidance (:attr:`BcosVGG.stage_names`): the outputs of the last four pooling layers, i.e. at strides 4, 8,
16 and 32 like the ResNet stages: ``mid1``–``mid3`` after pools 2–4, ``final`` after the last pool
(= :meth:`BcosVGG.forward_features`). For VGG-11 these are ``features.5``, ``features.10``, ``features.15``,
``features.20``.
"""

from __future__ import annotations

from functools import partial
from typing import Sequence

from torch import Tensor, nn

from ..bcos.norms import NormFactory, get_norm_layer
from .pretrained import register_pretrained
from .registry import register_model
from .base import BcosCNN

__all__ = ["VGG_CONFIGS", "BcosVGG"]

VGG_CONFIGS: dict[str, list[int | str]] = {
    "vgg11": [64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg13": [64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"],
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}
"""Feature layouts: an int is a 3×3 conv (+ norm) with that many outputs, ``"M"`` a 2×2 average pooling."""


class BcosVGG(BcosCNN):
    """B-cos VGG: ``[N, in_chans, H, W] -> logits [N, num_classes]``.

    Args:
        cfg: feature layout (see :data:`VGG_CONFIGS`); needs at least four ``"M"`` pooling entries.
        num_classes: outputs of the classifier.
        in_chans: input channels (6 for the ``[x, 1 − x]`` encoding).
        norm_layer: norm after every feature conv, by name (``"bnu"`` for the ``_bnu`` variants, ``"none"`` for the
            plain ones) or a factory ``f(num_features)``.
        hidden_features: width of the two hidden classifier convs (4096 in the release).
        b, max_out: B-cos settings of every conv.
        logit_bias: fixed logit bias; ``None`` means ``-log(num_classes - 1)``; 0.0 is honoured.
        logit_temperature: fixed logit temperature (``None`` = 1).
    """

    def __init__(self, cfg: Sequence[int | str], num_classes: int = 1000, in_chans: int = 6,
                 norm_layer: str | NormFactory = "bnu", hidden_features: int = 4096, b: float = 2, max_out: int = 1,
                 logit_bias: float | None = None, logit_temperature: float | None = None) -> None:
        bad = [v for v in cfg if v != "M" and not (isinstance(v, int) and v > 0)]
        if bad:
            raise ValueError(f"BcosVGG cfg entries must be positive ints (conv widths) or 'M' (pooling), got {bad}")
        pools = [i for i, v in enumerate(cfg) if v == "M"]
        if len(pools) < 4 or isinstance(cfg[0], str):
            raise ValueError(f"BcosVGG cfg must start with a conv and hold at least four 'M' entries, got {list(cfg)}")
        super().__init__(num_classes, in_chans, b, max_out, logit_bias, logit_temperature)
        norm = get_norm_layer(norm_layer)

        conv = self.conv

        layers: list[nn.Module] = []
        pool_indices: list[int] = []
        channels = in_chans
        for v in cfg:
            if v == "M":
                pool_indices.append(len(layers))
                layers.append(nn.AvgPool2d(kernel_size=2, stride=2))
            else:
                layers += [conv(channels, v, kernel_size=3, padding=1), norm(v)]
                channels = v
        self.features = nn.Sequential(*layers)
        self._stage_indices = pool_indices[-4:]

        self.num_features = channels
        self.head_hidden_size = hidden_features  # timm's name for the width of forward_head(pre_logits=True)
        self.classifier = nn.Sequential(conv(channels, hidden_features, kernel_size=7, padding=3),
                                        conv(hidden_features, hidden_features, kernel_size=1),
                                        conv(hidden_features, num_classes, kernel_size=1))
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    @property
    def stage_names(self) -> dict[str, str]:
        """Guidance layer names → module paths: the last four pooling layers (strides 4, 8, 16, 32)."""
        return {name: f"features.{i}" for name, i in zip(("mid1", "mid2", "mid3", "final"), self._stage_indices)}

    def classifier_input(self, x: Tensor) -> Tensor:
        """The output of the two hidden classifier convs ``[N, hidden_features, h, w]`` (input of the last one)."""
        return self.classifier[:-1](x)


for _name, _cfg in VGG_CONFIGS.items():
    register_model(f"bcos_{_name}", partial(BcosVGG, _cfg), family="vgg", bcos=True, norm_layer="none")
    register_model(f"bcos_{_name}_bnu", partial(BcosVGG, _cfg), family="vgg", bcos=True, norm_layer="bnu")

# released weights (B-cos v2): weights name, hub entry point, experiment, file, ImageNet top-1
register_pretrained("bcos_vgg11_bnu", "vgg11_bnu", "bcos_final/vgg_11_bnu", "vgg_11_bnu-34036029f0.pth", 69.310)
