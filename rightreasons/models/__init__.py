"""The model zoo: B-cos networks and their standard twins, side by side.

Each file defines one family and registers its names with :mod:`rightreasons.hub.registry` at its end; importing this
package imports every file, so the whole zoo is registered. The layers these models are built from (B-cos units, norms,
attention, the dynamic-linear mechanism) live in :mod:`rightreasons.bcos`; weights, the timm bridge and
:func:`~rightreasons.hub.factory.create_model` live in :mod:`rightreasons.hub`.

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
``bcosified``          ``bcosified_<name>`` for every standard twin above but the X-DNN: the standard architecture
                       converted into a B-cos network (:func:`bcosify`)
=====================  ==================================================================================
"""

from .base import BcosCNN
from .bcosified import (BcosifiedDenseNet, BcosifiedResNet, BcosifiedSimpleViT, BcosifiedTimmViT, BcosifyOptions,
                        bcosify)
from .convnext import BcosConvNeXt
from .densenet import BcosDenseNet
from .holistic_vit import BcosHolisticViT
from .resnet import BcosResNet
from .standard import DenseNet, ResNet, StandardSimpleViT, XResNet
from .vgg import BcosVGG
from .vit import BcosSimpleViT

__all__ = ["BcosCNN", "BcosConvNeXt", "BcosDenseNet", "BcosHolisticViT", "BcosResNet", "BcosSimpleViT", "BcosVGG",
           "BcosifiedDenseNet", "BcosifiedResNet", "BcosifiedSimpleViT", "BcosifiedTimmViT", "BcosifyOptions",
           "DenseNet", "ResNet", "StandardSimpleViT", "XResNet", "bcosify"]
