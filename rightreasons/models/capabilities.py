"""What a model is, read once: :func:`capabilities` returns the record every part of the library consults.

Whether a model is a B-cos network, whether it is an X-DNN, whether its explanations are complete, which input
encoding it takes, where its guidance stages ``mid1``–``mid3`` / ``final`` are and how many classes it has are facts
of the model. They are read here, from the model itself, and nowhere else:

* ``bcos`` — the model holds dynamic-linear layers (:class:`~rightreasons.bcos.dynamic.DynamicLinear`), so it has
  ``W(x)`` explanations and explanation mode;
* ``xdnn`` / ``affine`` — the model class says so (``is_xdnn``: positively homogeneous, so IntGrad equals
  Input×Gradient; ``is_affine``: an additive positional embedding, so contributions miss a constant term);
* ``encoding`` — ``"bcos"`` for B-cos networks, ``"normalize"`` (ImageNet mean/std) for standard ones
  (:mod:`rightreasons.encoding`);
* ``stages`` — the model's ``stage_names`` property, or for plain torchvision ResNets, DenseNets and ConvNeXts the
  same layout as our twins (so torchvision models can be guided at ``mid2`` too);
* ``num_classes``, ``in_chans``, and ``name`` (the registry name when :func:`rightreasons.create_model` built it);
* ``classes`` — the class names in logit order, when the weights named them (``model.classes``, set by released
  weights and by our model files; :mod:`rightreasons.models.weights`), else ``None``.

Wrappers — ``DistributedDataParallel``, ``DataParallel`` and ``torch.compile``'s module — are looked through by
:func:`unwrap_model`, so a wrapped model has its inner model's capabilities.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from torch import nn
from torchvision.models import ConvNeXt as TorchvisionConvNeXt
from torchvision.models import DenseNet as TorchvisionDenseNet
from torchvision.models import ResNet as TorchvisionResNet

from ..bcos.dynamic import DynamicLinear
from .densenet import DENSENET_STAGES
from .resnet import RESNET_STAGES

__all__ = ["Capabilities", "GUIDANCE_LAYERS", "capabilities", "unwrap_model"]

GUIDANCE_LAYERS = ("input", "mid1", "mid2", "mid3", "final")
"""The layer names of model guidance: the input, after stages 1–3, and the output of the last stage."""

_TORCHVISION_STAGES: tuple[tuple[type[nn.Module], Mapping[str, str]], ...] = (
    (TorchvisionResNet, RESNET_STAGES),
    (TorchvisionDenseNet, DENSENET_STAGES),
    (TorchvisionConvNeXt, {"mid1": "features.1", "mid2": "features.3", "mid3": "features.5", "final": "features.7"}),
)


@dataclass(frozen=True)
class Capabilities:
    """The facts about one model (see the module docstring)."""

    name: str
    bcos: bool
    xdnn: bool
    affine: bool
    encoding: str
    num_classes: int | None
    in_chans: int | None
    stages: Mapping[str, str] = field(default_factory=dict)
    classes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "stages", MappingProxyType(dict(self.stages)))


def unwrap_model(model: nn.Module) -> nn.Module:
    """The model inside ``DistributedDataParallel`` / ``DataParallel`` (``.module``) and ``torch.compile``
    (``._orig_mod``) wrappers, however deeply nested; the model itself otherwise. Hooks registered on the inner
    model's submodules fire when the wrapper runs."""
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):
            model = model._orig_mod
        else:
            return model


def _stages(model: nn.Module) -> dict[str, str]:
    names = getattr(model, "stage_names", None)
    if names is not None:
        return dict(names)
    for family, mapping in _TORCHVISION_STAGES:
        if isinstance(model, family):
            return dict(mapping)
    return {}


def _num_classes(model: nn.Module) -> int | None:
    count = getattr(model, "num_classes", None)
    if isinstance(count, int):
        return count
    get = getattr(model, "get_classifier", None)
    classifier = get() if callable(get) else getattr(model, "fc", None)
    count = getattr(classifier, "out_features", None)
    return count if isinstance(count, int) else None


def _classes(model: nn.Module, num_classes: int | None) -> tuple[str, ...] | None:
    names = getattr(model, "classes", None)
    if names is None or num_classes is None or len(names) != num_classes:
        return None
    return tuple(str(n) for n in names)


def capabilities(model: nn.Module) -> Capabilities:
    """The :class:`Capabilities` of ``model`` (wrappers are looked through)."""
    model = unwrap_model(model)
    bcos = any(isinstance(m, DynamicLinear) for m in model.modules())
    args = getattr(model, "model_args", None)
    in_chans = getattr(model, "in_chans", None)
    num_classes = _num_classes(model)
    return Capabilities(
        name=args["name"] if args else type(model).__name__,
        bcos=bcos,
        xdnn=bool(getattr(model, "is_xdnn", False)),
        affine=bool(getattr(model, "is_affine", False)),
        encoding="bcos" if bcos else "normalize",
        num_classes=num_classes,
        in_chans=in_chans if isinstance(in_chans, int) else None,
        stages=_stages(model),
        classes=_classes(model, num_classes),
    )
