"""Segmentation masks that stay on their pixels through resampling: :class:`SegmentationMask`.

torchvision resizes a ``tv_tensors.Mask`` with ``NEAREST``: output pixel ``i`` takes input pixel ``floor(i · s)``
(``s`` input pixels per output pixel), which shifts the mask by up to half an input pixel up and left of the image —
on a random resized crop, a mask and the object it covers drift apart by a pixel (the ffcv#339 / DALI#2975 kind of
bug). A :class:`SegmentationMask` is resampled with ``NEAREST_EXACT``: output pixel ``i`` takes the input pixel that
holds its centre, ``floor((i + 0.5) · s)`` — the pixel rule of :mod:`rightreasons.boxes`, and the geometry the image's
bilinear resampling and the boxes' affine map share.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as F

__all__ = ["Points", "SegmentationMask"]


class SegmentationMask(tv_tensors.Mask):
    """A label map ``[H, W]`` (or ``[C, H, W]``) that resize and resized crop resample at pixel centres
    (``NEAREST_EXACT``); every other transform treats it as a ``tv_tensors.Mask``."""


def _at_centres(mask: Tensor, size: list[int] | None, max_size: int | None = None) -> Tensor:
    """``mask`` ``[H, W]`` or ``[..., C, H, W]`` resized with ``NEAREST_EXACT`` through ``F.resize_image``, which takes
    the mode in every torchvision we support (``F.resize_mask`` takes none before 0.29)."""
    flat = mask.ndim < 3
    out = F.resize_image(mask[None] if flat else mask, size, InterpolationMode.NEAREST_EXACT, max_size)
    return out[0] if flat else out


@F.register_kernel(F.resize, SegmentationMask)
def _resize(inpt: SegmentationMask, size: list[int] | None, interpolation: Any = None, max_size: int | None = None,
            antialias: Any = None) -> SegmentationMask:
    return tv_tensors.wrap(_at_centres(inpt.as_subclass(Tensor), size, max_size), like=inpt)


@F.register_kernel(F.resized_crop, SegmentationMask)
def _resized_crop(inpt: SegmentationMask, top: int, left: int, height: int, width: int, size: list[int],
                  interpolation: Any = None, antialias: Any = None) -> SegmentationMask:
    cropped = F.crop_mask(inpt.as_subclass(Tensor), top, left, height, width)
    return tv_tensors.wrap(_at_centres(cropped, size), like=inpt)


class Points(tv_tensors.KeyPoints):
    """Points ``[P, 2]`` XY in the pixel convention of boxes (:mod:`rightreasons.boxes`: pixel ``(i, j)`` is the
    square ``[j, j + 1) × [i, i + 1)``, so its centre is ``(j + 0.5, i + 0.5)``). torchvision's ``KeyPoints`` flip as
    ``x → W − 1 − x`` (points on pixel indices) but resize as ``x → x · s`` (points on the continuous image): one pixel
    off after a flip. A flip of :class:`Points` is ``x → W − x`` (``y → H − y``), as for boxes."""


@F.register_kernel(F.horizontal_flip, Points)
def _horizontal_flip(inpt: Points) -> Points:
    out = inpt.as_subclass(Tensor).clone()
    out[..., 0] = inpt.canvas_size[1] - out[..., 0]
    return tv_tensors.wrap(out, like=inpt)


@F.register_kernel(F.vertical_flip, Points)
def _vertical_flip(inpt: Points) -> Points:
    out = inpt.as_subclass(Tensor).clone()
    out[..., 1] = inpt.canvas_size[0] - out[..., 1]
    return tv_tensors.wrap(out, like=inpt)
