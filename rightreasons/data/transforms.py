"""Box-aware transform presets on ``torchvision.transforms.v2``, applied jointly to a sample dict.

One random crop/flip (and rotation, where asked for: :func:`random_rotation`) moves the image, its ``boxes`` (boxes
leaving the crop are removed with their ``box_labels``), its segmentation ``mask`` (nearest neighbour at pixel
centres) and ``points`` (kept when cropped out of view; they then cover nothing, :mod:`rightreasons.boxes`) —
:mod:`rightreasons.data.geometry` — and a cached ``explanation`` (:class:`ExplanationMap`, resampled like the image)
together. The last step encodes the image for the model (:func:`rightreasons.encoding.encode`: ``"bcos"``,
``"normalize"`` or ``"none"``); :func:`transforms_for` picks the encoding from the model's capabilities.

Frozen e²KD explanations are computed on the *base view* — :func:`eval_transform`'s geometry without encoding,
:func:`base_view` — and :func:`train_transform` with ``explanations=`` first brings each image to that view, then
attaches its cached explanation (:class:`AttachExplanations`) and only then crops and flips both.

:func:`train_transform` without explanations takes the decoded uint8 image (:func:`takes_uint8`; a dataset hands it
that rather than float): its random resized crop runs on the 8-bit pixels, with torchvision's vectorised uint8
kernel, about 3× faster than on floats, and :class:`ToFloat` converts the ``size × size`` result. The resize then
rounds to 8 bits, as resizing a PIL image (the classic torchvision pipeline) does: each value lies within about one
8-bit level of the float pipeline's (1.004/255 at worst over 300 random crops, 0.24/255 on average); crops, flips,
boxes and masks are the same. Float images (a sample from ``dataset[i]``, float tensors of one's own) go through
the same steps in float. With explanations the preset takes float images, so that the image and its explanation,
computed on the float base view, are resampled alike; and :func:`eval_transform` takes float images, so evaluation
and the views frozen explanations are computed on are as they were.
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
from .sample import to_float

__all__ = ["AttachExplanations", "ExplanationMap", "SanitizeBoxes", "ToFloat", "base_view", "eval_transform",
           "random_rotation", "takes_uint8", "train_transform", "transforms_for"]


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

    def forward(self, *inputs: Any) -> Any:
        if len(inputs) == 1 and isinstance(inputs[0], dict) and _without_boxes(inputs[0]):
            return inputs[0]  # nothing to remove (ImageNet, withheld boxes): skip the flattening and the mask
        return super().forward(*inputs)

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if isinstance(inpt, tv_tensors.Mask):
            return inpt
        return super().transform(inpt, params)


def _without_boxes(sample: dict[str, Any]) -> bool:
    """Whether ``sample`` holds ``boxes`` (``BoundingBoxes``) and ``box_labels``, both empty."""
    boxes, labels = sample.get("boxes"), sample.get("box_labels")
    return isinstance(boxes, tv_tensors.BoundingBoxes) and isinstance(labels, Tensor) and not len(boxes) \
        and not len(labels)


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


class ToFloat(v2.Transform):
    """A uint8 image (the decoded pixels a dataset hands a preset that :func:`takes_uint8`) as float32 ``v / 255`` in
    [0, 1], the conversion of :func:`~rightreasons.data.make_sample`; float images, boxes, masks and explanation maps
    pass untouched."""

    _transformed_types = (tv_tensors.Image,)

    def transform(self, inpt: Any, params: dict[str, Any]) -> Any:
        if inpt.is_floating_point():
            return inpt
        return tv_tensors.wrap(to_float(inpt.as_subclass(Tensor)), like=inpt)


def takes_uint8(transform: Callable | None) -> bool:
    """Whether ``transform`` takes samples whose image is the decoded uint8 ``[3, H, W]`` rather than float: its
    ``takes_uint8`` attribute is True, or that of the transform it wraps as ``.transform`` (e.g. the trainer's
    ``SeededTransform``, which only seeds the call), at any depth."""
    while transform is not None:
        if getattr(transform, "takes_uint8", False) is True:
            return True
        transform = getattr(transform, "transform", None)
    return False


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
                    explanations: Mapping[str, Tensor] | None = None, crop_fraction: float = 0.875,
                    rotation: float = 0.0) -> v2.Compose:
    """Training preset: random resized crop to ``size × size`` (area ``scale``, aspect ``ratio``), horizontal flip
    with probability ``hflip``, a random rotation by an angle drawn uniformly from ``[−rotation, rotation]`` degrees
    when ``rotation > 0`` (:func:`random_rotation`), sanitise boxes, convert a uint8 image to float
    (:class:`ToFloat`), encode.

    With ``explanations`` (frozen e²KD), the image first goes to the :func:`base_view` (``size``, ``crop_fraction``)
    on which the explanations were computed, the explanation is attached, and the crop and flip then apply to both.
    A class whose boxes all leave the crop keeps its image label (as in classification training). Without
    ``explanations`` the preset :func:`takes_uint8` images (the module docstring says what that changes).
    """
    steps: list[Callable] = []
    if explanations is not None:
        steps += [base_view(size, crop_fraction), AttachExplanations(explanations)]
    steps += [v2.RandomResizedCrop(size, scale=scale, ratio=ratio, antialias=True), v2.RandomHorizontalFlip(hflip),
              *([random_rotation(rotation)] if rotation else []), SanitizeBoxes(), ToFloat(), encode(encoding)]
    preset = v2.Compose(steps)
    preset.takes_uint8 = explanations is None
    return preset


def random_rotation(degrees: float) -> v2.RandomRotation:
    """Rotate a sample about its centre by an angle drawn uniformly from ``[−degrees, degrees]``, all of it by the same
    angle: the image and a cached explanation bilinearly, the segmentation mask at pixel centres (nearest: each
    output pixel takes the label of the source pixel that holds its centre's rotated position, so mask and image
    never drift apart), points exactly. The corners the rotation brings in are 0 in the image and background (0) in
    the mask. A box is not a rotated box any more: it becomes the tight axis-aligned box of its four rotated corners,
    clipped to the image — larger than the object (up to twice its area at 45°), so box guidance gets coarser under
    rotation while masks and points stay exact."""
    if not 0 <= degrees <= 180:
        raise ValueError(f"rotation must be in [0, 180] degrees, got {degrees}")
    return v2.RandomRotation(degrees, interpolation=v2.InterpolationMode.BILINEAR)


def transforms_for(model: nn.Module, size: int, *, train: bool = False, **options: Any) -> v2.Compose:
    """The preset for ``model``: :func:`train_transform` (``train=True``) or :func:`eval_transform`, ending in the
    input encoding the model takes (``capabilities(model).encoding``). ``options`` go to the preset (e.g.
    ``crop_fraction``, ``scale``, ``explanations``)."""
    encoding = capabilities(model).encoding
    return (train_transform if train else eval_transform)(size, encoding=encoding, **options)
