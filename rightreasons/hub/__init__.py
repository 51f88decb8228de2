"""The model hub: which models exist, what each one is, and their weights.

* :mod:`.registry` — the name → architecture table (imports nothing of ours but the error classes); every model file
  of :mod:`rightreasons.models` registers itself there.
* :mod:`.capabilities` — :func:`capabilities` (B-cos or standard, X-DNN, affine, input encoding, guidance stages,
  classes), the one place every other module asks.
* :mod:`.weights` — reading any release or checkpoint layout strictly, writing our safetensors model files (with
  their logit layers and class names).
* :mod:`.pretrained` — the B-cos v2 release table, its download, and what each weights entry carries
  (``transforms()``, ``meta``: class names, accuracy, recipe), as torchvision's weights do.
* :mod:`.factory` — :func:`create_model` and :func:`load_model`, joining the above.
* :mod:`.timm_bridge` — :func:`register_timm_models`, our models in ``timm.create_model``.
"""

from .capabilities import GUIDANCE_LAYERS, Capabilities, capabilities, unwrap_model
from .factory import create_model, load_model
from .registry import ModelSpec, get_model_spec, list_models, register_model
from .timm_bridge import register_timm_models
from .weights import load_weights, read_state_dict, save_model

__all__ = ["GUIDANCE_LAYERS", "Capabilities", "ModelSpec", "capabilities", "create_model", "get_model_spec",
           "list_models", "load_model", "load_weights", "read_state_dict", "register_model", "register_timm_models",
           "save_model", "unwrap_model"]
