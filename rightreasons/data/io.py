"""Reading images and segmentation masks from disk, with errors that name the file."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from .errors import DataError

__all__ = ["read_image", "read_mask", "require_dir", "require_file"]


def require_file(path: str | os.PathLike, what: str) -> Path:
    """``path`` as a Path, or a :class:`DataError` saying which ``what`` (e.g. "VOC annotation") is missing."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: {what} not found")
    return path


def require_dir(path: str | os.PathLike, what: str) -> Path:
    path = Path(path)
    if not path.is_dir():
        raise DataError(f"{path}: {what} directory not found")
    return path


def read_image(path: str | os.PathLike) -> Tensor:
    """Decode a JPEG/PNG/... with PIL into uint8 ``[3, H, W]`` RGB (grey, palette and CMYK images are converted)."""
    path = require_file(path, "image file")
    try:
        with Image.open(path) as img:
            array = np.asarray(img.convert("RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as e:
        raise DataError(f"{path}: cannot decode image: {e}") from e
    return torch.from_numpy(array.copy()).permute(2, 0, 1).contiguous()


def read_mask(path: str | os.PathLike) -> Tensor:
    """Read a single-channel (greyscale or palette) PNG as uint8 ``[H, W]`` of stored values (palette indices for
    VOC's ``SegmentationClass``)."""
    path = require_file(path, "segmentation mask")
    try:
        with Image.open(path) as img:
            if img.mode not in ("P", "L"):
                raise DataError(f"{path}: segmentation mask has mode {img.mode!r}; expected a single-channel "
                                "palette ('P') or greyscale ('L') PNG of class indices")
            return torch.from_numpy(np.array(img, dtype=np.uint8))
    except (UnidentifiedImageError, OSError) as e:
        raise DataError(f"{path}: cannot decode segmentation mask: {e}") from e
