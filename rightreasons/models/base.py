"""The skeleton shared by the B-cos CNNs: features → classifier convs before global pooling → fixed logit layer.

B-cos CNNs apply their classifier (B-cos convs) to every position of the last feature map and average the
class maps afterwards, so that the whole network stays dynamic linear; the fixed :class:`LogitLayer` adds the
logit bias. Subclasses build ``features`` and the classifier (named by :attr:`BcosCNN.classifier_name`) and may
override :meth:`BcosCNN.forward_features` and :meth:`BcosCNN.classifier_input`.
"""

from __future__ import annotations

from torch import Tensor, nn

from ..bcos.layers import BcosConv2d, LogitLayer, default_logit_bias
from ..encoding import check_input_channels

__all__ = ["BcosCNN", "check_drop_probability"]


def check_drop_probability(name: str, p: float) -> None:
    """Refuse a stochastic-depth or dropout probability ``p`` (argument ``name``) outside [0, 1) at construction,
    not at the first forward pass."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {p}")


class BcosCNN(nn.Module):
    """Base of the B-cos CNNs with timm's ``forward_features`` / ``forward_head`` / ``get_classifier`` interface.

    Args:
        num_classes: outputs of the classifier.
        in_chans: input channels (6 for the ``[x, 1 − x]`` encoding).
        b, max_out: B-cos settings of every conv built with :meth:`conv`.
        logit_bias: fixed logit bias; ``None`` means ``-log(num_classes - 1)``; 0.0 is honoured.
        logit_temperature: fixed logit temperature (``None`` = 1).
    """

    classifier_name = "classifier"

    def __init__(self, num_classes: int, in_chans: int, b: float, max_out: int, logit_bias: float | None,
                 logit_temperature: float | None) -> None:
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        if in_chans < 1:
            raise ValueError(f"in_chans must be >= 1, got {in_chans}")
        self.num_classes = num_classes
        self.in_chans = in_chans
        self._conv_args = {"b": b, "max_out": max_out}
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.logit_layer = LogitLayer(default_logit_bias(num_classes) if logit_bias is None else logit_bias,
                                      logit_temperature)

    def conv(self, *args, **kwargs) -> BcosConv2d:
        """A :class:`BcosConv2d` with this model's B and MaxOut."""
        return BcosConv2d(*args, **self._conv_args, **kwargs)

    def get_classifier(self) -> nn.Module:
        """The classifier, applied to every position before global pooling."""
        return getattr(self, self.classifier_name)

    def forward_features(self, x: Tensor) -> Tensor:
        """``[N, in_chans, H, W] -> [N, num_features, h, w]``."""
        return self.features(x)

    def classifier_input(self, x: Tensor) -> Tensor:
        """What ``forward_head(pre_logits=True)`` pools: the input of the last classifier conv (the features here)."""
        return x

    def forward_head(self, x: Tensor, pre_logits: bool = False) -> Tensor:
        """Features ``[N, C, h, w]`` → logits ``[N, num_classes]``, or pooled :meth:`classifier_input` with
        ``pre_logits``."""
        if pre_logits:
            return self.avgpool(self.classifier_input(x)).flatten(1)
        return self.logit_layer(self.avgpool(self.get_classifier()(x)).flatten(1))

    def forward(self, x: Tensor) -> Tensor:
        """``[N, in_chans, H, W] -> [N, num_classes]``; a wrong channel count explains the six-channel encoding."""
        check_input_channels(x, self.in_chans, type(self).__name__)
        return self.forward_head(self.forward_features(x))
