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
``num_features`` are attributes.

``model.pretrained_cfg`` carries the model's input in timm's keys, written from the same
:class:`~rightreasons.models.preprocessing.InputConfig` that our model files record: ``input_size`` ``(C, H, W)`` of
the model input (``C`` = 6 for B-cos models; a ViT's own ``image_size``, with ``fixed_input_size``), ``mean`` / ``std``
of the RGB image (ImageNet's for standard models; ``0`` / ``1``, no normalisation, for B-cos models),
``interpolation`` (bilinear) and ``crop_pct`` (the release's ``224 / resize`` for released weights; 1, the whole image,
what training validates on, otherwise), plus ``encoding``.

timm's data pipeline cannot produce the six-channel B-cos input by itself: ``timm.data.create_transform`` is a fixed
chain (resize, crop, ``ToTensor``, a per-channel ``Normalize``) that keeps the image's three channels, and its
prefetcher normalises three-channel batches; a B-cos model refuses that three-channel tensor with an error that says
how to encode it. :func:`create_transform` and :func:`create_loader` are timm's functions with the model in front:
they resolve the model's data config (:func:`data_config`), call timm's function with it, and append what timm's
``Normalize`` leaves of the model's encoding (:func:`encoding_step`: ``[rgb, 1 − rgb]`` for B-cos models, nothing for
standard ones) — per image for the transform, per batch, after timm's prefetcher, for the loader::

    model = timm.create_model("bcos_resnet18", num_classes=10)
    transform = create_transform(model)                         # eval; is_training=True for timm's augmentation
    x = transform(pil_image).unsqueeze(0)                       # [1, 6, 224, 224] in [0, 1]
    loader = create_loader(dataset, model, batch_size=32)       # timm's ImageDataset, prefetcher or not

In evaluation the transform gives our own evaluation view (``InputConfig.transforms()``) wherever the two resize
alike; timm resizes the PIL image in 8 bits with ``floor(size / crop_pct)``, ours the float image with
``round(size / crop_pct)``, so where a resize happens the inputs differ by about one grey level.

timm's feature-extraction mode (``features_only=True``, ``out_indices``, ``feature_cls``) is refused with a
:class:`~rightreasons.errors.UsageError` that names the alternatives: ``model.forward_features(x)`` for the last
feature map, and :func:`rightreasons.explain.capture_outputs` for the outputs of the guidance stages
``mid1``–``mid3`` / ``final`` (hooks on the whole model, which keeps B-cos explanation mode and wrapped models
working; timm's feature wrappers rebuild the network from its children and would lose both).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterator

import timm.data
from timm.data.loader import PrefetchLoader
from timm.models import PretrainedCfg, generate_default_cfgs, get_pretrained_cfg, is_model, register_model
from torch import Tensor, nn
from torch.utils.data import DataLoader
from torchvision import transforms

from ..encoding import encode
from ..errors import UsageError
from .capabilities import capabilities
from .factory import create_model
from .preprocessing import InputConfig, recorded_input
from .pretrained import PRETRAINED, PretrainedWeights, download_pretrained
from .registry import get_model_spec, list_models

__all__ = ["EncodedLoader", "create_loader", "create_transform", "data_config", "encoding_step",
           "register_timm_models"]

default_cfgs: dict[str, Any] = {}
"""timm reads the pretrained configs of an entry point from its module's ``default_cfgs``."""


def _view(encoding: str, weights: PretrainedWeights | None = None) -> InputConfig:
    """The input of a model registered with timm, at 224 px: the release's evaluation view for released weights
    (resize to ``eval_resize``, centre crop), else the whole image, as training validates."""
    return InputConfig(encoding, 224, crop_pct=224 / weights.eval_resize if weights else 1.0,
                       interpolation="bilinear")


def _timm_keys(view: InputConfig) -> dict[str, Any]:
    """``view`` in timm's ``pretrained_cfg`` keys (tuples, as timm writes them), without ``encoding``."""
    return {key: tuple(value) if isinstance(value, list) else value
            for key, value in view.as_dict().items() if key != "encoding"}


def _pretrained_cfgs(name: str) -> dict[str, PretrainedCfg]:
    """timm pretrained configs ``arch`` / ``arch.tag`` for ``name``: one per released weights file, or one without."""
    spec = get_model_spec(name)
    encoding = "bcos" if spec.bcos else "normalize"  # capabilities() reads the same off a built model
    num_classes = spec.defaults.get("num_classes", 1000)
    cfgs = {key: PretrainedCfg(url=w.url, num_classes=num_classes, **_timm_keys(_view(encoding, w)),
                               description=f"B-cos v2 release {w.experiment}, ImageNet top-1 {w.top1}%")
            for key, w in PRETRAINED.items() if w.model == name}
    return cfgs or {name: PretrainedCfg(num_classes=num_classes, **_timm_keys(_view(encoding)))}


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
        image_size = getattr(model, "image_size", None)  # a ViT's input size is fixed when it is built
        fixed = isinstance(image_size, int)
        view = InputConfig(capabilities(model).encoding, image_size if fixed else cfg.input_size[-1], cfg.crop_pct,
                           cfg.interpolation)
        model.pretrained_cfg = {**cfg.to_dict(), **_timm_keys(view), "fixed_input_size": fixed,
                                "encoding": view.encoding,
                                "num_classes": getattr(model, "num_classes", cfg.num_classes)}
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


_DATA_KEYS = frozenset({"input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode"})
"""The keys of timm's data config (``timm.data.resolve_data_config``); the other options go to timm's function."""


def data_config(model: nn.Module, **overrides: Any) -> dict[str, Any]:
    """timm's data config for ``model`` (the keys of ``timm.data.resolve_data_config``: ``input_size``,
    ``interpolation``, ``mean``, ``std``, ``crop_pct``, ``crop_mode``), ``overrides`` applied.

    Read from the input the model records (``model.input_config``, set by our model files), else from its timm
    ``pretrained_cfg`` (set by the entry points of :func:`register_timm_models`), else the model's encoding at 224 px,
    whole image, bilinear. B-cos models take images in [0, 1]: a ``mean`` / ``std`` other than ``0`` / ``1``, from
    ``overrides`` or a foreign ``pretrained_cfg``, is refused with a :class:`ValueError` (the model would receive
    ``[z, 1 − z]`` of a normalised ``z``).
    """
    encoding = capabilities(model).encoding
    view = recorded_input(model)
    if view is None and not getattr(model, "pretrained_cfg", None):
        view = InputConfig(encoding, 224)
    config = timm.data.resolve_data_config(pretrained_cfg=_timm_keys(view)) if view is not None else \
        timm.data.resolve_model_data_config(model)
    config.update(overrides)
    if encoding == "bcos":
        unnormalised = InputConfig("bcos", 1)
        if tuple(config["mean"]) != unnormalised.mean or tuple(config["std"]) != unnormalised.std:
            raise ValueError(f"{type(model).__name__} takes images in [0, 1] without mean/std normalisation "
                             f"(mean={unnormalised.mean}, std={unnormalised.std}), got mean={tuple(config['mean'])}, "
                             f"std={tuple(config['std'])}")
    return config


def encoding_step(model: nn.Module) -> Callable[[Tensor], Tensor] | None:
    """What remains of ``model``'s encoding after timm's transforms or prefetcher normalised the RGB image with
    :func:`data_config`'s ``mean`` / ``std``: :func:`rightreasons.encoding.encode` ``("bcos")`` (``[rgb, 1 − rgb]``,
    for an image ``[3, H, W]`` or a batch ``[N, 3, H, W]``) for B-cos models, ``None`` (nothing) for standard models,
    whose ImageNet normalisation timm applies itself."""
    return encode("bcos") if capabilities(model).encoding == "bcos" else None


def _refuse_unscaled(model: nn.Module, options: dict[str, Any]) -> None:
    if options.get("use_prefetcher") or options.get("normalize") is False:
        raise ValueError(f"{type(model).__name__}: create_transform(use_prefetcher=True or normalize=False) leaves "
                         "uint8 images unnormalised, which cannot be encoded per image; use "
                         "rightreasons.models.timm_bridge.create_loader(dataset, model, use_prefetcher=True, ...), "
                         "which encodes each batch after timm's prefetcher")


def create_transform(model: nn.Module, **kwargs: Any) -> transforms.Compose | tuple[transforms.Compose, ...]:
    """``timm.data.create_transform`` for ``model``: its :func:`data_config` (``kwargs`` override it and pass
    timm's other options, e.g. ``is_training=True``, ``auto_augment``, ``re_prob``), then :func:`encoding_step`.

    Returns a ``torchvision.transforms.Compose`` from a PIL image to the model's input ``[C, H, W]`` (``C`` = 6 in
    [0, 1] for B-cos models), or timm's triple with ``separate=True`` (the step appended to its last stage).
    ``use_prefetcher=True`` and ``normalize=False``, which leave the encoding to a later stage, are refused for B-cos
    models in favour of :func:`create_loader`.
    """
    step = encoding_step(model)
    if step is not None:
        _refuse_unscaled(model, kwargs)
    config = data_config(model, **{k: v for k, v in kwargs.items() if k in _DATA_KEYS})
    transform = timm.data.create_transform(**config, **{k: v for k, v in kwargs.items() if k not in _DATA_KEYS})
    if step is None:
        return transform
    if isinstance(transform, tuple):
        return (*transform[:-1], transforms.Compose([*transform[-1].transforms, step]))
    return transforms.Compose([*transform.transforms, step])


class EncodedLoader:
    """A timm loader whose batches ``(images, targets)`` leave with ``step`` applied to the images (the rest of the
    model's encoding, :func:`encoding_step`), on the loader's device, after timm's prefetcher if it has one.

    Length, ``sampler``, ``dataset`` and timm's ``mixup_enabled`` are the loader's. (timm's ``Mixup`` on the encoded
    batch mixes ``[x, 1 − x]`` into the encoding of the mixed image, since its weights sum to 1.)
    """

    def __init__(self, loader: DataLoader | PrefetchLoader, step: Callable[[Tensor], Tensor]) -> None:
        self.loader = loader
        self.step = step

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for images, targets in self.loader:
            yield self.step(images), targets

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str) -> Any:
        if name in ("loader", "step"):  # not set yet (copy, unpickling): never recurse
            raise AttributeError(name)
        return getattr(self.loader, name)

    @property
    def mixup_enabled(self) -> bool:
        """timm's switch for the mixup of a prefetching loader (``False`` without one)."""
        return bool(getattr(self.loader, "mixup_enabled", False))

    @mixup_enabled.setter
    def mixup_enabled(self, value: bool) -> None:
        self.loader.mixup_enabled = value


def create_loader(dataset: Any, model: nn.Module, **kwargs: Any) -> DataLoader | PrefetchLoader | EncodedLoader:
    """``timm.data.create_loader(dataset, ...)`` for ``model``: its :func:`data_config` (``kwargs`` override it and
    pass timm's other options: ``batch_size`` (required), ``is_training``, ``use_prefetcher`` (timm's default ``True``,
    with ``device`` defaulting to CUDA: pass ``device=torch.device("cpu")`` or ``use_prefetcher=False`` without a
    GPU), ``num_workers``, ...), its batches encoded by :func:`encoding_step`.

    timm sets ``dataset.transform`` (a timm ``ImageDataset`` or anything with that attribute) to its transform of
    the three-channel image, whose channel count (``input_size[0]``) is 3 here whatever the model's; B-cos batches
    are then encoded after the collate and the prefetcher (:class:`EncodedLoader`). Standard models get timm's loader
    itself."""
    config = data_config(model, **{k: v for k, v in kwargs.items() if k in _DATA_KEYS})
    size = config["input_size"]
    if isinstance(size, (tuple, list)) and len(size) == 3:
        config["input_size"] = (3, *size[1:])  # the image's channels: the prefetcher normalises with them
    loader = timm.data.create_loader(dataset, **config, **{k: v for k, v in kwargs.items() if k not in _DATA_KEYS})
    step = encoding_step(model)
    return loader if step is None else EncodedLoader(loader, step)
