"""`torch.hub` entry points, as in the original B-cos releases: one per registered model.

    model = torch.hub.load("rightreasons-org/rightreasons", "bcos_resnet50", pretrained=True)
    model = torch.hub.load("rightreasons-org/rightreasons", "bcos_resnet50", pretrained="long")  # the 600-epoch weights
    weights = torch.hub.load("rightreasons-org/rightreasons", "get_weights", name="bcos_resnet50")
    x = weights.transforms()(image)[None]          # PIL image -> [1, 6, 224, 224]
    label = weights.meta["categories"][model(x).argmax()]

Each entry point is `rightreasons.create_model(name, pretrained=..., **kwargs)`: `pretrained=True` loads the default
released weights, a string loads those of that tag (`"long"` → `bcos_resnet50.long`), and keyword arguments are
constructor arguments (`num_classes=20` keeps a fresh classifier). A model with released weights carries their class
names as `model.classes`. `get_weights(name)` returns the release entry (`transforms()`, `meta`); see
`rightreasons/models/pretrained.py`.
"""

from __future__ import annotations

from typing import Any, Callable

from torch import nn

from rightreasons import create_model as _create_model
from rightreasons import list_models as _list_models
from rightreasons.models.pretrained import get_pretrained as get_weights

dependencies = ["torch", "torchvision", "timm", "safetensors"]


def _entrypoint(name: str) -> Callable[..., nn.Module]:
    def build(pretrained: bool | str = False, **kwargs: Any) -> nn.Module:
        if isinstance(pretrained, str):
            return _create_model(f"{name}.{pretrained}", pretrained=True, **kwargs)
        return _create_model(name, pretrained=pretrained, **kwargs)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = (f"`{name}` (`rightreasons.create_model`); `pretrained=True` or a weights tag loads released "
                     "weights, keyword arguments go to the constructor.")
    return build


for _name in _list_models():
    globals()[_name] = _entrypoint(_name)
