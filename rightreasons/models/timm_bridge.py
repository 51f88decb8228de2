"""Our models in timm's registry: ``timm.create_model("bcos_resnet50", num_classes=10)``.

Importing rightreasons leaves timm's registry alone; call :func:`register_timm_models` (also
``rightreasons.register_timm_models()``) once to add our models to it. It adds an entry point for every name of
:func:`rightreasons.list_models` that timm does not
know (the ``bcos_*`` and ``xdnn_*`` models); names timm already has, such as ``resnet50`` or ``vit_tiny_patch16_224``,
keep timm's own definition. Each entry point builds the model with :func:`rightreasons.create_model`, so constructor
arguments are ours (``num_classes``, ``norm_layer``, ...). Released weights are registered as timm pretrained configs:
``timm.create_model("bcos_resnet50", pretrained=True)`` loads the default weights and ``"bcos_resnet50.long"`` the
long-recipe ones (see :mod:`rightreasons.models.pretrained`); ``timm.list_pretrained("bcos_*")`` lists them.

The models follow timm's interface: ``forward_features(x)`` returns the unpooled feature map, ``forward_head(x,
pre_logits=False)`` pools and classifies, ``get_classifier()`` returns the classifier module, and ``num_classes`` /
``num_features`` are attributes. ``model.pretrained_cfg`` carries the data config: B-cos models take images in [0, 1]
without mean/std normalisation (``mean = 0``, ``std = 1``), encoded to six channels with
:class:`rightreasons.bcos.AddInverse` after timm's transforms.

timm's feature-extraction mode (``features_only=True``, ``out_indices``, ``feature_cls``) is refused with a
:class:`~rightreasons.errors.UsageError` that names the alternatives: ``model.forward_features(x)`` for the last
feature map, and :func:`rightreasons.explain.capture_outputs` for the outputs of the guidance stages
``mid1``–``mid3`` / ``final`` (hooks on the whole model, which keeps B-cos explanation mode and wrapped models
working; timm's feature wrappers rebuild the network from its children and would lose both).
"""

from __future__ import annotations

import sys
from typing import Any, Callable

from timm.models import PretrainedCfg, generate_default_cfgs, get_pretrained_cfg, is_model, register_model
from torch import nn

from ..errors import UsageError
from .factory import create_model
from .pretrained import PRETRAINED, download_pretrained
from .registry import get_model_spec, list_models

__all__ = ["register_timm_models"]

default_cfgs: dict[str, Any] = {}
"""timm reads the pretrained configs of an entry point from its module's ``default_cfgs``."""


def _pretrained_cfgs(name: str) -> dict[str, PretrainedCfg]:
    """timm pretrained configs ``arch`` / ``arch.tag`` for ``name``: one per released weights file, or one without."""
    spec = get_model_spec(name)
    data = {"mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0)} if spec.bcos else {}
    common = {"num_classes": spec.defaults.get("num_classes", 1000), **data}
    cfgs = {key: PretrainedCfg(url=w.url, interpolation="bilinear", crop_pct=224 / w.eval_resize,
                               description=f"B-cos v2 release {w.experiment}, ImageNet top-1 {w.top1}%", **common)
            for key, w in PRETRAINED.items() if w.model == name}
    return cfgs or {name: PretrainedCfg(**common)}


def _entrypoint(name: str) -> Callable[..., nn.Module]:
    def build(pretrained: bool = False, pretrained_cfg: str | None = None,
              pretrained_cfg_overlay: dict[str, Any] | None = None, cache_dir: Any = None, **kwargs: Any) -> nn.Module:
        if pretrained_cfg is not None and not isinstance(pretrained_cfg, str):
            raise ValueError(f"{name}: choose released weights by tag (e.g. '{name}.long' or pretrained_cfg='long'), "
                             f"got pretrained_cfg of type {type(pretrained_cfg).__name__}")
        if pretrained_cfg_overlay or cache_dir is not None:
            raise ValueError(f"{name}: pretrained_cfg_overlay and cache_dir are not supported; released weights live "
                             "in the torch hub checkpoint directory (TORCH_HOME)")
        features = sorted(k for k in ("features_only", "out_indices", "feature_cls") if k in kwargs)
        if features:
            raise UsageError(
                f"{name}: timm's feature extraction ({', '.join(features)}) is not supported for rightreasons models; "
                "use model.forward_features(x) for the last feature map, or "
                "rightreasons.explain.capture_outputs(model, ['mid1', 'mid2', 'mid3', 'final']) around a forward "
                "pass for the stage outputs")
        weights = f"{name}.{pretrained_cfg}" if pretrained_cfg else name
        cfg = get_pretrained_cfg(weights)  # an unknown tag raises here, as in timm
        checkpoint = download_pretrained(weights) if pretrained else None
        model = create_model(name, checkpoint=checkpoint, **kwargs)
        model.pretrained_cfg = {**cfg.to_dict(), "num_classes": getattr(model, "num_classes", cfg.num_classes)}
        return model

    build.__name__ = build.__qualname__ = name
    build.__module__ = __name__
    build.__doc__ = f"``{name}`` from rightreasons (see ``rightreasons.create_model``), for ``timm.create_model``."
    return build


def register_timm_models() -> list[str]:
    """Register every rightreasons model whose name timm lacks; returns the names added (idempotent).

    Call it again after registering models of your own to expose them to timm too.
    """
    module = sys.modules[__name__]
    added = []
    for name in list_models():
        if is_model(name):
            continue
        default_cfgs.update(generate_default_cfgs(_pretrained_cfgs(name)))
        entrypoint = _entrypoint(name)
        setattr(module, name, entrypoint)  # timm lists entry points in the module's __all__; they must exist there
        register_model(entrypoint)
        added.append(name)
    return added
