"""The model zoo: B-cos networks and their standard twins side by side, and everything about building them.

As in timm, the machinery lives beside the model files:

* :mod:`.registry` — the name → architecture table (no model code); every model file registers its names there at
  its end, and its released weights in :mod:`.pretrained`; importing this package imports every model file, so the
  whole zoo and its weights are registered;
* :mod:`.capabilities` — :func:`capabilities` (B-cos or standard, X-DNN, affine, input encoding, guidance stages,
  classes), the one place every other module asks;
* :mod:`.weights` — reading any release or checkpoint layout strictly, writing our safetensors model files (with
  their logit layers and class names), and finding the model file of a finished run;
* :mod:`.pretrained` — the released weights (each model file registers its family's), their download, and what each
  weights entry carries (``transforms()``, ``meta``), as torchvision's weights do;
* :mod:`.factory` — :func:`create_model` and :func:`load_model`;
* :mod:`.timm_bridge` — :func:`register_timm_models`, our models in ``timm.create_model``;
* :mod:`.checkpointing` — activation checkpointing of a model's stages (``model.activation_checkpointing``);
* :mod:`.bcosify` — B-cosification: standard models converted into B-cos models, and the schedules that fine-tune them.

The layers the models are built from (B-cos units, norms, attention, the dynamic-linear mechanism) live in
:mod:`rightreasons.bcos`.

=====================  ==================================================================================
file                   registered names
=====================  ==================================================================================
``resnet``             ``bcos_resnet{18,34,50,101,152}``, ResNeXts, Wide-ResNets, ``bcos_cifar10_resnet*``
``densenet``           ``bcos_densenet{121,161,169,201}``, ``bcos_cifar10_densenet*``
``vgg``                ``bcos_vgg{11,13,16,19}`` and ``_bnu``
``convnext``           ``bcos_convnext_{atto,tiny,small,base,large}`` and ``_bnu``
``vit``                the release's ``bcos_simple_vit_*`` / ``bcos_vitc_*``
``holistic_vit``       ``bcos_holistic_vit_{ti,s,b}`` and DenseNet-121 hybrids
``standard``           ``resnet{18,34,50}``, ``densenet{121,169}``, ``xdnn_resnet50``, timm ViTs, the release's
                       standard ``simple_vit_*`` / ``vitc_*``
``bcosify``            ``bcosified_<name>`` for every standard twin above but the X-DNN: the standard architecture
                       converted into a B-cos network
=====================  ==================================================================================
"""

from .base import BcosCNN
from .bcosify import BcosifiedDenseNet, BcosifiedResNet, BcosifiedSimpleViT, BcosifiedTimmViT, BcosifyOptions
from .capabilities import GUIDANCE_LAYERS, Capabilities, capabilities, unwrap_model
from .convnext import BcosConvNeXt
from .densenet import BcosDenseNet
from .factory import create_model, load_model, recorded_architecture, resolve_architecture
from .holistic_vit import BcosHolisticViT
from .registry import ModelSpec, checked_arguments, get_model_spec, list_models, register_model
from .resnet import BcosResNet
from .standard import DenseNet, ResNet, StandardSimpleViT, XResNet
from .timm_bridge import register_timm_models
from .vgg import BcosVGG
from .vit import BcosSimpleViT
from .weights import load_weights, model_file, read_state_dict, save_model

__all__ = ["BcosCNN", "BcosConvNeXt", "BcosDenseNet", "BcosHolisticViT", "BcosResNet", "BcosSimpleViT", "BcosVGG",
           "BcosifiedDenseNet", "BcosifiedResNet", "BcosifiedSimpleViT", "BcosifiedTimmViT", "BcosifyOptions",
           "Capabilities", "DenseNet", "GUIDANCE_LAYERS", "ModelSpec", "ResNet", "StandardSimpleViT", "XResNet",
           "capabilities", "checked_arguments", "create_model", "get_model_spec", "list_models", "load_model",
           "load_weights", "model_file", "read_state_dict", "recorded_architecture", "register_model",
           "register_timm_models", "resolve_architecture", "save_model", "unwrap_model"]
