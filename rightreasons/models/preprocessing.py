"""What a model takes as input — size, encoding and transform — recorded in its model file.

A model trained at 64 px on B-cos-encoded images must be explained and evaluated at 64 px on B-cos-encoded images;
:class:`InputConfig` is that record. It follows timm's ``pretrained_cfg`` (``input_size`` ``[C, H, W]``, ``mean``,
``std``, ``crop_pct``, ``interpolation``) plus the input ``encoding`` (:mod:`rightreasons.encoding`), and
:meth:`InputConfig.transforms` is the evaluation preprocessing, as torchvision's ``weights.transforms()``: shorter side
resized to ``round(size / crop_pct)``, centre crop, encoded — the view the trainer validated on.

Model files store it as JSON in the metadata entry :data:`INPUT_KEY`; loading one sets ``model.input_config``
(:func:`restore_input_config`), and ``explain``, ``evaluate`` and :func:`rightreasons.metrics.evaluation.score_model`
take their resolution from it unless told otherwise. Files written before it was recorded have no entry: the model
then has no ``input_config`` and the callers keep their old defaults (the run's ``data.image_size``, else 224).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

import torch
from torch import nn
from torchvision.transforms import v2

from ..encoding import ENCODINGS, IMAGENET_MEAN, IMAGENET_STD, encode
from ..errors import CheckpointError

__all__ = ["INPUT_KEY", "InputConfig", "recorded_crop", "recorded_input", "recorded_size",
           "restore_input_config"]

INPUT_KEY = "rightreasons_input"
"""Metadata entry of our model files: JSON of :meth:`InputConfig.as_dict` (optional; absent in older files)."""

_INTERPOLATIONS = {"bilinear": v2.InterpolationMode.BILINEAR, "bicubic": v2.InterpolationMode.BICUBIC,
                   "nearest": v2.InterpolationMode.NEAREST}


@dataclass(frozen=True)
class InputConfig:
    """A model's input: square images of side ``size``, ``encoding`` (``bcos``, ``normalize`` or ``none``), the
    evaluation view's ``crop_pct`` (1: the whole image, what training validates on) and resize ``interpolation``."""

    encoding: str
    size: int
    crop_pct: float = 1.0
    interpolation: str = "bilinear"

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise ValueError(f"encoding {self.encoding!r}: expected one of {', '.join(ENCODINGS)}")
        if isinstance(self.size, bool) or not isinstance(self.size, int) or self.size < 1:
            raise ValueError(f"size {self.size!r}: expected a positive integer")
        if not 0.0 < self.crop_pct <= 1.0:
            raise ValueError(f"crop_pct {self.crop_pct!r}: expected a number in (0, 1]")
        if self.interpolation not in _INTERPOLATIONS:
            raise ValueError(f"interpolation {self.interpolation!r}: expected one of {', '.join(_INTERPOLATIONS)}")

    @property
    def input_size(self) -> tuple[int, int, int]:
        """timm's ``input_size``: ``(C, H, W)`` of the encoded model input (6 channels for ``bcos``)."""
        return 6 if self.encoding == "bcos" else 3, self.size, self.size

    @property
    def mean(self) -> tuple[float, float, float]:
        """timm's ``mean`` of the RGB image: ImageNet's for ``normalize``, 0 (no normalisation) otherwise."""
        return IMAGENET_MEAN if self.encoding == "normalize" else (0.0, 0.0, 0.0)

    @property
    def std(self) -> tuple[float, float, float]:
        """timm's ``std`` of the RGB image: ImageNet's for ``normalize``, 1 (no normalisation) otherwise."""
        return IMAGENET_STD if self.encoding == "normalize" else (1.0, 1.0, 1.0)

    def as_dict(self) -> dict[str, Any]:
        """The timm ``pretrained_cfg`` keys plus ``encoding``, as model files and ``config.json`` record them."""
        return {"encoding": self.encoding, "input_size": list(self.input_size), "interpolation": self.interpolation,
                "crop_pct": self.crop_pct, "mean": list(self.mean), "std": list(self.std)}

    @classmethod
    def from_dict(cls, data: Any, source: str) -> InputConfig:
        """The config :meth:`as_dict` wrote; :class:`CheckpointError` naming ``source`` and the key when it is
        malformed or contradicts itself (``input_size``, ``mean``/``std`` other than the encoding's)."""
        def bad(key: str, why: str) -> CheckpointError:
            return CheckpointError(f"{source}: malformed {INPUT_KEY!r} entry: {key} {why}")

        if not isinstance(data, Mapping):
            raise bad("the entry", f"is {type(data).__name__}, expected a mapping")
        for key in ("encoding", "input_size"):
            if key not in data:
                raise bad(key, "is missing")
        size = data["input_size"]
        if not (isinstance(size, list) and len(size) == 3 and all(type(s) is int for s in size) and size[1] == size[2]):
            raise bad("input_size", f"{size!r}: expected [C, H, W] of a square input, e.g. [6, 224, 224]")
        try:
            config = cls(data["encoding"], size[1], float(data.get("crop_pct", 1.0)),
                         data.get("interpolation", "bilinear"))
        except (ValueError, TypeError) as e:
            raise bad("a value", str(e)) from None
        for key in ("input_size", "mean", "std"):
            if key in data and list(map(float, data[key])) != list(map(float, config.as_dict()[key])):
                raise bad(key, f"{data[key]!r} contradicts encoding {config.encoding!r} (expected "
                               f"{config.as_dict()[key]})")
        return config

    def transforms(self) -> v2.Compose:
        """The evaluation preprocessing, torchvision-style: a PIL image (or a ``[3, H, W]`` uint8 or float tensor in
        [0, 1]) → the encoded ``input_size`` float input."""
        return v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True),
                           v2.Resize(round(self.size / self.crop_pct),
                                     interpolation=_INTERPOLATIONS[self.interpolation], antialias=True),
                           v2.CenterCrop(self.size), encode(self.encoding)])


def recorded_input(model: nn.Module) -> InputConfig | None:
    """The input ``model`` records (``model.input_config``), ``None`` when it records none."""
    return getattr(model, "input_config", None)


def recorded_size(model: nn.Module, default: int | None) -> int | None:
    """The input size ``model`` records, else ``default`` (a command's ``--size``-less fallback)."""
    recorded = recorded_input(model)
    return recorded.size if recorded else default


def recorded_crop(model: nn.Module) -> float:
    """The evaluation view's ``crop_pct`` ``model`` records, else 1 (the whole image, what training validates on)."""
    recorded = recorded_input(model)
    return recorded.crop_pct if recorded else 1.0


def restore_input_config(model: nn.Module, metadata: Mapping[str, str], source: str) -> None:
    """Set ``model.input_config`` from a file's :data:`INPUT_KEY` metadata (nothing when the file has none)."""
    if INPUT_KEY not in metadata:
        return
    try:
        data = json.loads(metadata[INPUT_KEY])
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{source}: malformed {INPUT_KEY!r} metadata (not JSON: {e})") from None
    model.input_config = InputConfig.from_dict(data, source)
