"""Model input encodings: how an RGB image in [0, 1] becomes a model's input, and back.

=============  =======================================================================================================
encoding       model input
=============  =======================================================================================================
``bcos``       six channels ``[r, g, b, 1 − r, 1 − g, 1 − b]`` (B-cos networks): no pixel is a zero vector (its
               norm lies between √1.5 and √3), so black pixels can contribute too, and colours become angles, so
               ``W(x)`` decodes back into colours. No mean/std normalisation.
``normalize``  ``(rgb − mean) / std`` per channel with the ImageNet statistics (standard networks).
``none``       the RGB image itself.
=============  =======================================================================================================

Which encoding a model takes is one of its capabilities (:func:`rightreasons.models.capabilities`); the data pipeline
appends :func:`encode` as its last transform, and :func:`reencode` converts a batch between two encodings exactly
(a B-cos teacher and a standard student read the same images).

This module imports nothing of rightreasons.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms import v2

__all__ = ["ENCODINGS", "IMAGENET_MEAN", "IMAGENET_STD", "AddInverse", "add_inverse", "check_input_channels",
           "encode", "reencode", "to_rgb"]

ENCODINGS: tuple[str, ...] = ("bcos", "normalize", "none")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def add_inverse(image: Tensor, dim: int = -3) -> Tensor:
    """``[*, 3, H, W] -> [*, 6, H, W]``: append ``1 − image`` along the channel dimension."""
    return torch.cat([image, 1 - image], dim=dim)


def _is_plain_tensor(x: Any) -> bool:
    return isinstance(x, Tensor) and not isinstance(x, tv_tensors.TVTensor)


class AddInverse(v2.Transform):
    """Transform that encodes images in [0, 1] with six channels ``[x, 1 − x]`` (the ``bcos`` encoding).

    Works on plain tensors ``[3, H, W]`` / ``[N, 3, H, W]`` and, inside a ``transforms.v2`` pipeline, on
    :class:`tv_tensors.Image` while boxes, masks and labels pass through untouched (torchvision's rule: a plain tensor
    is an image only when the sample holds no ``tv_tensors.Image``).
    """

    _transformed_types = (tv_tensors.Image, _is_plain_tensor)

    def transform(self, inpt: Tensor, params: dict[str, Any]) -> Tensor:
        if not inpt.is_floating_point():
            raise TypeError(f"AddInverse expects a float image in [0, 1], got dtype {inpt.dtype}; "
                            "convert first with transforms.v2.ToDtype(torch.float32, scale=True)")
        if inpt.shape[-3] != 3:
            raise ValueError(f"AddInverse expects 3 colour channels at dim -3, got shape {tuple(inpt.shape)}")
        out = add_inverse(inpt.as_subclass(Tensor))
        return tv_tensors.wrap(out, like=inpt) if isinstance(inpt, tv_tensors.Image) else out


def check_input_channels(x: Tensor, in_chans: int, model_name: str) -> None:
    """Refuse inputs whose channel count does not match the model, explaining the six-channel B-cos encoding."""
    if x.dim() != 4:
        raise ValueError(f"{model_name} expects a batch [N, C, H, W], got a tensor of shape {tuple(x.shape)}")
    if x.shape[1] == in_chans:
        return
    if in_chans == 6 and x.shape[1] == 3:
        raise ValueError(f"{model_name} expects the six-channel B-cos encoding [r, g, b, 1-r, 1-g, 1-b] of an image "
                         f"in [0, 1], got 3 channels (shape {tuple(x.shape)}); encode it with "
                         "rightreasons.bcos.AddInverse() (no mean/std normalisation), or for timm's data pipeline use "
                         "rightreasons.models.timm_bridge.create_transform(model) / create_loader(dataset, model, ...)")
    raise ValueError(f"{model_name} expects {in_chans} input channels, got shape {tuple(x.shape)}")


def _check(encoding: str) -> None:
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; expected one of {', '.join(ENCODINGS)}")


def encode(encoding: str) -> v2.Transform:
    """The ``transforms.v2`` step that encodes an RGB image in [0, 1] for a model taking ``encoding``."""
    _check(encoding)
    if encoding == "bcos":
        return AddInverse()
    if encoding == "normalize":
        return v2.Normalize(list(IMAGENET_MEAN), list(IMAGENET_STD))
    return v2.Identity()


def _stats(like: Tensor) -> tuple[Tensor, Tensor]:
    return like.new_tensor(IMAGENET_MEAN)[:, None, None], like.new_tensor(IMAGENET_STD)[:, None, None]


def to_rgb(images: Tensor, encoding: str) -> Tensor:
    """The RGB images ``[N, 3, H, W]`` in [0, 1] that a batch ``[N, C, H, W]`` in ``encoding`` encodes."""
    _check(encoding)
    if encoding == "bcos":
        return images[:, :3]
    if encoding == "normalize":
        mean, std = _stats(images)
        return images * std + mean
    return images


def reencode(images: Tensor, source: str, target: str) -> Tensor:
    """Convert a batch ``[N, C, H, W]`` from encoding ``source`` to ``target`` (identity when they agree)."""
    _check(source)
    _check(target)
    if source == target:
        return images
    rgb = to_rgb(images, source)
    if target == "bcos":
        return add_inverse(rgb, dim=1)
    if target == "normalize":
        mean, std = _stats(rgb)
        return (rgb - mean) / std
    return rgb
