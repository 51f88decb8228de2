"""rightreasons: image classifiers that are right for the right reasons.

B-cos networks with exact, differentiable explanations; model guidance with bounding boxes; explanation-enhanced
knowledge distillation (e²KD). See `docs/ARCHITECTURE.md` for how the package is laid out.

The names below are imported on first use (PEP 562): `import rightreasons` alone loads neither torch nor the model
zoo, so that the command line answers `--help` and `--version` at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import RightReasonsError
from .version import __version__

if TYPE_CHECKING:
    from . import bcos
    from .bcos.sync import convert_sync_batchnorm
    from .models import (capabilities, create_model, list_models, load_model, load_weights, register_model,
                         register_timm_models, save_model)
    from .models.bcosify import bcosify

__all__ = ["RightReasonsError", "__version__", "bcos", "bcosify", "capabilities", "convert_sync_batchnorm",
           "create_model", "list_models", "load_model", "load_weights", "register_model", "register_timm_models",
           "save_model"]

_FROM_MODELS = {"capabilities", "create_model", "list_models", "load_model", "load_weights", "register_model",
             "register_timm_models", "save_model"}


def __getattr__(name: str) -> Any:
    """The public API of [`__all__`][rightreasons.__all__], imported when first asked for."""
    if name == "bcos":
        from . import bcos
        return bcos
    if name == "bcosify":
        from .models.bcosify import bcosify
        return bcosify
    if name == "convert_sync_batchnorm":
        from .bcos.sync import convert_sync_batchnorm
        return convert_sync_batchnorm
    if name in _FROM_MODELS:
        from . import models
        return getattr(models, name)
    raise AttributeError(f"module 'rightreasons' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
