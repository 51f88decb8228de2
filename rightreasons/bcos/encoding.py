"""The six-channel input encoding of B-cos networks (``SCIENCE.md`` §4).

Images in [0, 1] become ``[r, g, b, 1 − r, 1 − g, 1 − b]``: every pixel gets the same norm direction-independent of its
brightness, colours become angles (so ``W(x)`` decodes back into colours), and black pixels can still contribute.
No mean/std normalisation is applied to B-cos inputs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchvision import tv_tensors
from torchvision.transforms import v2

__all__ = ["AddInverse", "add_inverse", "check_input_channels"]


def add_inverse(image: Tensor, dim: int = -3) -> Tensor:
    """``[*, 3, H, W] -> [*, 6, H, W]``: append ``1 − image`` along the channel dimension."""
    return torch.cat([image, 1 - image], dim=dim)


def _is_plain_tensor(x: Any) -> bool:
    return isinstance(x, Tensor) and not isinstance(x, tv_tensors.TVTensor)


class AddInverse(v2.Transform):
    """Transform that encodes images in [0, 1] with six channels ``[x, 1 − x]``.

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
                         "rightreasons.bcos.AddInverse() (no mean/std normalisation)")
    raise ValueError(f"{model_name} expects {in_chans} input channels, got shape {tuple(x.shape)}")
