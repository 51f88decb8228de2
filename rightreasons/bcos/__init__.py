"""The B-cos layer kit: B-cos units, norms, attention and activations on one dynamic-linear mechanism, and explanation
mode; synchronised BatchNorm across processes (:mod:`.sync`, on the collective of :mod:`.collectives`).

Models built from these layers live in :mod:`rightreasons.models`; this package imports nothing above it (only
:mod:`rightreasons.encoding` for the six-channel input encoding, re-exported here as :class:`AddInverse`).
"""

from ..encoding import AddInverse
from .activations import DynamicGELU
from .dynamic import DynamicLinear, dynamic_apply, explanation_mode, is_explaining
from .layers import (WEIGHT_MODES, BcosConv2d, BcosifiedConv2d, BcosifiedLinear, BcosLinear, LogitLayer, WeightMode,
                     default_logit_bias)
from .norms import NORM_LAYERS, NoBias, Unaffine, get_norm_layer
from .sync import convert_sync_batchnorm
from . import norms, sync

__all__ = [
    "AddInverse", "BcosConv2d", "BcosLinear", "BcosifiedConv2d", "BcosifiedLinear", "DynamicGELU", "DynamicLinear",
    "LogitLayer", "NORM_LAYERS", "NoBias", "Unaffine", "WEIGHT_MODES", "WeightMode", "default_logit_bias",
    "convert_sync_batchnorm", "dynamic_apply", "explanation_mode", "get_norm_layer", "is_explaining", "norms", "sync",
]
