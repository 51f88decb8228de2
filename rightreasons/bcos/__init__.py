"""B-cos layers, norms, explanation mode and the B-cos model zoo."""

from .dynamic import DynamicLinear, dynamic_apply, explanation_mode, is_explaining
from .encoding import AddInverse
from .layers import BcosConv2d, BcosLinear, LogitLayer, default_logit_bias
from .norms import NORM_LAYERS, NoBias, Unaffine, get_norm_layer
from . import norms

__all__ = [
    "AddInverse", "BcosConv2d", "BcosLinear", "DynamicLinear", "LogitLayer", "NORM_LAYERS", "NoBias", "Unaffine",
    "default_logit_bias", "dynamic_apply", "explanation_mode", "get_norm_layer", "is_explaining", "norms",
]
