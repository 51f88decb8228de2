"""Where to attribute: the guidance layer names ``input``, ``mid1``–``mid3``, ``final`` and arbitrary module paths.

Model guidance (thesis ch. 7) attributes at the input, after stages 1–3 (``mid1``–``mid3``) and at the output of the
last convolutional stage (``final``). A model names its stages with a ``stage_names`` property mapping these names to
module paths (every :class:`~rightreasons.bcos.models.resnet.BcosResNet` has one). Plain torchvision models have none,
so their families get this mapping (``mid1``, ``mid2``, ``mid3``, ``final``):

* torchvision ``ResNet``: ``layer1``, ``layer2``, ``layer3``, ``layer4``;
* torchvision ``DenseNet``: ``features.denseblock1``–``features.denseblock3`` (before their transitions),
  ``features.norm5``;
* torchvision ``ConvNeXt``: ``features.1``, ``features.3``, ``features.5``, ``features.7`` (the four stages).

Any other layer is addressed by its module path as in ``model.named_modules()`` (e.g. ``"layer3.1"``).
"""

from __future__ import annotations

from torch import nn
from torchvision.models import ConvNeXt, DenseNet, ResNet

__all__ = ["GUIDANCE_LAYERS", "resolve_layer", "stage_names"]

GUIDANCE_LAYERS = ("input", "mid1", "mid2", "mid3", "final")

_TORCHVISION_STAGES: tuple[tuple[type[nn.Module], dict[str, str]], ...] = (
    (ResNet, {"mid1": "layer1", "mid2": "layer2", "mid3": "layer3", "final": "layer4"}),
    (DenseNet, {"mid1": "features.denseblock1", "mid2": "features.denseblock2", "mid3": "features.denseblock3",
                "final": "features.norm5"}),
    (ConvNeXt, {"mid1": "features.1", "mid2": "features.3", "mid3": "features.5", "final": "features.7"}),
)


def stage_names(model: nn.Module) -> dict[str, str]:
    """The model's guidance stage names → module paths: its ``stage_names``, else the torchvision family mapping,
    else ``{}`` (only ``input`` and module paths are then available)."""
    names = getattr(model, "stage_names", None)
    if names is not None:
        return dict(names)
    for family, mapping in _TORCHVISION_STAGES:
        if isinstance(model, family):
            return dict(mapping)
    return {}


def resolve_layer(model: nn.Module, layer: str) -> nn.Module | None:
    """The module whose output is attributed, or ``None`` for the input.

    ``layer`` is ``"input"``, a stage name (``mid1``–``mid3``, ``final``; case-insensitive, so the Model-Guidance
    spellings ``"Mid2"``/``"Final"`` work) or a module path. Raises ``ValueError`` listing the valid names otherwise.
    """
    if not isinstance(layer, str):
        raise TypeError(f"layer must be a string (a guidance layer name or a module path), got {type(layer).__name__}")
    if layer.lower() == "input":
        return None
    while isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
        model = model.module  # hooks on the wrapped model fire inside the wrapper's forward
    stages = stage_names(model)
    path = stages.get(layer.lower(), layer)
    try:
        return model.get_submodule(path)
    except AttributeError:
        valid = ["input", *stages]
        children = [name for name, _ in model.named_children()]
        raise ValueError(f"unknown layer {layer!r} for {type(model).__name__}: expected one of {valid} or a module "
                         f"path from model.named_modules() (top-level modules: {children})") from None
