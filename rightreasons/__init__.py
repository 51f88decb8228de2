"""rightreasons: image classifiers that are right for the right reasons.

B-cos networks with exact, differentiable explanations; model guidance with bounding boxes; explanation-enhanced
knowledge distillation (e²KD). See ``docs/ARCHITECTURE.md`` for how the package is laid out.
"""

from . import bcos
from .errors import RightReasonsError
from .hub import (capabilities, create_model, list_models, load_model, load_weights, register_model,
                  register_timm_models, save_model)
from .version import __version__

__all__ = ["RightReasonsError", "__version__", "bcos", "capabilities", "create_model", "list_models", "load_model",
           "load_weights", "register_model", "register_timm_models", "save_model"]
