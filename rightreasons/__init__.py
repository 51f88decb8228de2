"""rightreasons: image classifiers that are right for the right reasons.

B-cos networks with exact, differentiable explanations; model guidance with bounding boxes; explanation-enhanced
knowledge distillation (e²KD).
"""

__version__ = "0.1.0"

from . import bcos  # noqa: E402
from .bcos import models as _bcos_models  # noqa: E402,F401  (registers the B-cos zoo)
from . import standard as _standard  # noqa: E402,F401  (registers the standard twins)
from .checkpoints import load_model, load_weights, save_model  # noqa: E402
from .registry import create_model, list_models, register_model  # noqa: E402
from . import timm_compat as _timm_compat  # noqa: E402,F401  (last: exposes every registered model to timm)

__all__ = ["__version__", "bcos", "create_model", "list_models", "load_model", "load_weights", "register_model",
           "save_model"]
