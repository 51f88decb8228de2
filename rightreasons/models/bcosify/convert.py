"""Converting a model: :func:`bcosify` (a pretrained standard model → a B-cos model, recorded as a registered
``bcosified_<source>`` architecture where one fits) and :func:`build_bcosified`, the builder registered for every
source name of :data:`SOURCES`."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from timm.models.vision_transformer import VisionTransformer
from torch import nn
from torchvision.models import densenet as tv_densenet
from torchvision.models import resnet as tv_resnet

from ...bcos.dynamic import DynamicLinear
from ...bcos.layers import WeightMode
from ...encoding import IMAGENET_MEAN, IMAGENET_STD
from ...errors import UsageError
from ..registry import get_model_spec, register_model
from ..resnet import RESNET_STAGES
from ..vit import RELEASE_VITS, SimpleViT
from .layers import BcosifyOptions
from .models import BcosifiedDenseNet, BcosifiedResNet, BcosifiedSimpleViT, BcosifiedTimmViT

__all__ = ["SOURCES", "bcosify", "build_bcosified"]

SOURCES: tuple[str, ...] = ("resnet18", "resnet34", "resnet50", "densenet121", "densenet169", *RELEASE_VITS,
                            "vit_tiny_patch16_224", "vit_small_patch16_224")
"""Registered standard models with a B-cosified twin ``bcosified_<name>``."""


def _registered_twin(model: nn.Module) -> tuple[str, dict[str, Any]] | None:
    """The registered source architecture (name, constructor arguments) that rebuilds ``model``'s layout: its
    ``model_args`` when :func:`~rightreasons.create_model` built it, else, for a plain torchvision ResNet or DenseNet,
    the registered twin with the same state-dict keys and shapes; ``None`` when there is none."""
    args = getattr(model, "model_args", None)
    if args is not None and args["name"] in SOURCES:
        return args["name"], dict(args["kwargs"])
    if isinstance(model, tv_resnet.ResNet):
        candidate = _resnet_arguments(model)
    elif isinstance(model, tv_densenet.DenseNet):
        candidate = _densenet_arguments(model)
    else:
        return None
    name, kwargs = candidate
    with torch.device("meta"):
        twin = get_model_spec(name).build(**kwargs)
    shapes = {k: tuple(v.shape) for k, v in twin.state_dict().items()}
    return candidate if shapes == {k: tuple(v.shape) for k, v in model.state_dict().items()} else None


_RESNET_WIDTH_DEFAULTS = {"inplanes": 64, "groups": 1, "width_per_group": 64}
"""torchvision's ResNet widths; only other values become constructor arguments."""


def _resnet_arguments(model: tv_resnet.ResNet) -> tuple[str, dict[str, Any]]:
    block = type(model.layer1[0])
    layers = [len(getattr(model, name)) for name in RESNET_STAGES.values()]
    names = [n for n in SOURCES if n.startswith("resnet") and get_model_spec(n).defaults["block"] is block]
    exact = [n for n in names if list(get_model_spec(n).defaults["layers"]) == layers]
    kwargs: dict[str, Any] = {"num_classes": model.fc.out_features}
    if not exact:
        kwargs["layers"] = layers
    width = {"inplanes": model.conv1.out_channels, "groups": model.groups, "width_per_group": model.base_width}
    kwargs.update({k: v for k, v in width.items() if v != _RESNET_WIDTH_DEFAULTS[k]})
    return (exact or names or ["resnet18"])[0], kwargs


_DENSENET_OPTION_DEFAULTS = {"bn_size": 4, "drop_rate": 0.0}
"""torchvision's DenseNet bottleneck width and dropout; only other values become constructor arguments."""


def _densenet_arguments(model: tv_densenet.DenseNet) -> tuple[str, dict[str, Any]]:
    blocks = [m for n, m in model.features.named_children() if n.startswith("denseblock")]
    first = blocks[0].denselayer1
    architecture = {"growth_rate": first.conv2.out_channels, "block_config": tuple(len(b) for b in blocks),
                    "num_init_features": model.features.conv0.out_channels}
    options = {"bn_size": first.conv1.out_channels // first.conv2.out_channels, "drop_rate": first.drop_rate}
    kwargs: dict[str, Any] = {"num_classes": model.classifier.out_features,
                              **{k: v for k, v in options.items() if v != _DENSENET_OPTION_DEFAULTS[k]}}
    for name in ("densenet121", "densenet169"):
        if {k: get_model_spec(name).defaults[k] for k in architecture} == architecture:
            return name, kwargs
    return "densenet121", {**kwargs, **architecture, "block_config": list(architecture["block_config"])}


def _convert(model: nn.Module, options: BcosifyOptions) -> nn.Module:
    """The converted model, taking over ``model``'s modules (convert a copy to keep the original)."""
    if any(isinstance(m, DynamicLinear) for m in model.modules()):
        raise UsageError(f"bcosify: {type(model).__name__} is a B-cos network already (it has dynamic-linear layers)")
    if getattr(model, "is_xdnn", False):
        raise UsageError("bcosify: X-DNNs are not supported (they are bias-free ReLU networks without norms already)")
    if isinstance(model, tv_resnet.ResNet):
        return BcosifiedResNet(model, options)
    if isinstance(model, tv_densenet.DenseNet):
        return BcosifiedDenseNet(model, options)
    if isinstance(model, SimpleViT):
        return BcosifiedSimpleViT(model, options)
    if isinstance(model, VisionTransformer):
        return BcosifiedTimmViT(model, options)
    raise UsageError(f"bcosify: cannot convert a {type(model).__module__}.{type(model).__qualname__}; supported are "
                     "torchvision ResNets and DenseNets, the standard Simple ViT / ViT-c (StandardSimpleViT) and timm "
                     "VisionTransformers")


def bcosify(model: nn.Module, *, b: float = 2.0, keep_bias: bool = False, maxpool_to_avgpool: bool = True,
            weight_mode: WeightMode = "raw", mean: Sequence[float] = IMAGENET_MEAN,
            std: Sequence[float] = IMAGENET_STD, logit_bias: float | None = None) -> nn.Module:
    """A B-cos network computed from the pretrained standard ``model`` (module docstring); ``model`` is not changed.

    Args:
        model: a standard ResNet / DenseNet (torchvision layout), StandardSimpleViT or timm VisionTransformer taking
            images normalised with ``mean``/``std``.
        b: B-cos exponent of every converted conv and linear unit (the recipe: 2; 1 keeps the function).
        keep_bias: keep every bias (the running means of BatchNorms folded into theirs); the recipe removes them.
        maxpool_to_avgpool: replace the CNN stem's max-pooling by average pooling (the recipe; changes the function).
        weight_mode: ``"raw"`` (pretrained weights as they are; the recipe) or ``"gain"`` (unit norm × learnt gain).
        mean, std: the RGB normalisation ``model`` was trained with (default ImageNet's), folded into its first layer.
        logit_bias: fixed logit bias; ``None`` = ``−log(C − 1)`` without biases, 0 with ``keep_bias``.

    Returns:
        the converted model, in ``model``'s train/eval mode, taking ``[x, 1 − x]`` of images in [0, 1]; with
        ``model_args`` (``bcosified_<source>`` and every argument) when its architecture is registered, so that
        :func:`~rightreasons.save_model` can store it.

    Raises:
        UsageError: an unsupported family or module (named), a B-cos or X-DNN model, or invalid options.
    """
    options = BcosifyOptions(b, keep_bias, maxpool_to_avgpool, weight_mode, tuple(mean), tuple(std), logit_bias)
    converted = _convert(copy.deepcopy(model), options).train(model.training)
    twin = _registered_twin(model)
    if twin is not None:
        converted.model_args = {"name": f"bcosified_{twin[0]}", "kwargs": {**twin[1], **options.kwargs()}}
    return converted


def build_bcosified(source: str, *, b: float = 2.0, keep_bias: bool = False, maxpool_to_avgpool: bool = True,
                    weight_mode: WeightMode = "raw", mean: Sequence[float] = IMAGENET_MEAN,
                    std: Sequence[float] = IMAGENET_STD, logit_bias: float | None = None,
                    **source_kwargs: Any) -> nn.Module:
    """The registered builder of ``bcosified_<source>``: the source architecture with fresh weights
    (``source_kwargs`` are its constructor arguments), converted; ``load_weights`` then fills in converted ones."""
    spec = get_model_spec(source)
    spec.check_arguments(source_kwargs)
    options = BcosifyOptions(b, keep_bias, maxpool_to_avgpool, weight_mode, tuple(mean), tuple(std), logit_bias)
    return _convert(spec.build(**source_kwargs), options)



for _name in SOURCES:
    register_model(f"bcosified_{_name}", partial(build_bcosified, _name), family="bcosified", bcos=True)
