"""Box-aware transform presets on ``torchvision.transforms.v2``, applied jointly to a sample dict.

One random crop/flip moves the image, its ``boxes`` (boxes leaving the crop are removed with their ``box_labels``),
its segmentation ``mask`` (nearest-neighbour) and a cached ``explanation`` (:class:`ExplanationMap`, resampled like
the image) together. The last step encodes the image for the model (:func:`rightreasons.encoding.encode`: ``"bcos"``,
``"normalize"`` or ``"none"``); :func:`transforms_for` picks the encoding from the model's capabilities.

Frozen e²KD explanations are computed on the *base view* — :func:`eval_transform`'s geometry without encoding,
:func:`base_view` — and :func:`train_transform` with ``explanations=`` first brings each image to that view, then
attaches its cached explanation (:class:`AttachExplanations`) and only then crops and flips both.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torchvision import tv_tensors
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as F

from ..encoding import encode
from ..models.capabilities import capabilities
from .errors import DataError

__all__ = ["AttachExplanations", "ExplanationMap", "SanitizeBoxes", "base_view", "eval_transform", "train_transform",
           "transforms_for"]


class ExplanationMap(tv_tensors.Mask):
    """A float ``[C, H, W]`` map aligned with the image (e.g. a teacher's ``W(x)`` or contributions).

    It is a ``Mask`` for ``transforms.v2``, so every geometric transform moves it with the image and photometric
    transforms and encodings leave it alone; unlike a ``Mask`` it is resampled like the image (bilinear,
    antialiased) by resize, resized crop, affine, rotate, perspective and elastic transforms, not nearest-neighbour.
    """


def _as_image_kernel(kernel: Callable[..., Tensor]) -> Callable[..., ExplanationMap]:
    def apply(inpt: ExplanationMap, *args: Any, **kwargs: Any) -> ExplanationMap:
        return tv_tensors.wrap(kernel(inpt.as_subclass(Tensor), *args, **kwargs), like=inpt)
    return apply


for _functional, _kernel in ((F.resize, F.resize_image), (F.resized_crop, F.resized_crop_image),
                             (F.affine, F.affine_image), (F.rotate, F.rotate_image),
                             (F.perspective, F.perspective_image), (F.elastic, F.elastic_image)):
    F.register_kernel(_functional, ExplanationMap)(_as_image_kernel(_kernel))


def _box_labels(sample: dict[str, Any]) -> Tensor:
    return sample["box_labels"]


MIN_BOX_SIDE = 1e-3
"""Boxes narrower or lower than this (in pixels), e.g. cropped away, are removed by :class:`SanitizeBoxes`."""


class SanitizeBoxes(v2.SanitizeBoundingBoxes):
    """Remove boxes without area (narrower or lower than :data:`MIN_BOX_SIDE`: cropped away or outside the image)
    together with their ``box_labels``.

    Unlike torchvision's transform it keeps boxes thinner than a pixel — torchvision's dropped every box under 1 × 1
    pixels, so a 1-pixel box of a 400 × 400 image vanished at 32 px and guidance went silently off for it; the
    rasteriser turns such a box into the pixel that holds its centre (:mod:`rightreasons.boxes`). And it never touches
    masks: a segmentation ``[H, W]`` or an explanation ``[C, H, W]`` whose first dimension happens to equal the number
    of boxes must not be filtered as per-instance masks.
    """

    def __init__(self) -> None:
        super().__init__(labels_getter=_box_labels)
        self.min_size, self.min_area = MIN_BOX_SIDE, MIN_BOX_SIDE ** 2  # below torchvision's own floor of 1 pixel

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if isinstance(inpt, tv_tensors.Mask):
            return inpt
        return super().transform(inpt, params)


class AttachExplanations:
    """Add ``sample["explanation"]`` = ``explanations[sample["id"]]`` as an :class:`ExplanationMap` (float32).

    ``explanations``: any mapping from sample id to a ``[C, H, W]`` tensor at the current image size (a dict, or a
    memory-mapped cache with ``__getitem__``). Must run after the image is brought to the base view.
    """

    def __init__(self, explanations: Mapping[str, Tensor]) -> None:
        self.explanations = explanations

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        key = sample["id"]
        try:
            value = self.explanations[key]
        except KeyError:
            raise DataError(f"sample {key!r}: no cached explanation for this id") from None
        value = torch.as_tensor(value)
        if value.dim() == 2:
            value = value[None]
        size = tuple(sample["image"].shape[-2:])
        if value.dim() != 3 or tuple(value.shape[-2:]) != size:
            raise DataError(f"sample {key!r}: cached explanation of shape {tuple(value.shape)} does not match the "
                            f"base view {size}; expected [C, {size[0]}, {size[1]}]")
        return {**sample, "explanation": ExplanationMap(value.float())}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self.explanations)} explanations)"


def base_view(size: int, crop_fraction: float = 0.875) -> v2.Compose:
    """Deterministic view: resize the shorter side to ``round(size / crop_fraction)``, centre-crop ``size × size``
    (``crop_fraction=1`` on square images of side ``size`` is the identity)."""
    if not 0.0 < crop_fraction <= 1.0:
        raise ValueError(f"crop_fraction must be in (0, 1], got {crop_fraction}")
    return v2.Compose([v2.Resize(round(size / crop_fraction), antialias=True), v2.CenterCrop(size)])


def eval_transform(size: int, *, encoding: str = "bcos", crop_fraction: float = 0.875) -> v2.Compose:
    """Evaluation preset: :func:`base_view`, drop boxes cut off by the crop, encode."""
    return v2.Compose([base_view(size, crop_fraction), SanitizeBoxes(), encode(encoding)])


def train_transform(size: int, *, encoding: str = "bcos", scale: tuple[float, float] = (0.25, 1.0),
                    ratio: tuple[float, float] = (3 / 4, 4 / 3), hflip: float = 0.5,
                    explanations: Mapping[str, Tensor] | None = None, crop_fraction: float = 0.875) -> v2.Compose:
    """Training preset: random resized crop to ``size × size`` (area ``scale``, aspect ``ratio``), horizontal flip
    with probability ``hflip``, sanitise boxes, encode.

    With ``explanations`` (frozen e²KD), the image first goes to the :func:`base_view` (``size``, ``crop_fraction``)
    on which the explanations were computed, the explanation is attached, and the crop and flip then apply to both.
    A class whose boxes all leave the crop keeps its image label (as in classification training).
    """
    steps: list[Callable] = []
    if explanations is not None:
        steps += [base_view(size, crop_fraction), AttachExplanations(explanations)]
    steps += [v2.RandomResizedCrop(size, scale=scale, ratio=ratio, antialias=True), v2.RandomHorizontalFlip(hflip),
              SanitizeBoxes(), encode(encoding)]
    return v2.Compose(steps)


def transforms_for(model: nn.Module, size: int, *, train: bool = False, **options: Any) -> v2.Compose:
    """The preset for ``model``: :func:`train_transform` (``train=True``) or :func:`eval_transform`, ending in the
    input encoding the model takes (``capabilities(model).encoding``). ``options`` go to the preset (e.g.
    ``crop_fraction``, ``scale``, ``explanations``)."""
    encoding = capabilities(model).encoding
    return (train_transform if train else eval_transform)(size, encoding=encoding, **options)
