"""Reading annotation text, images and segmentation masks from disk, with errors that name the file, and the check
that keeps file names read from annotation files inside the dataset root."""

from __future__ import annotations

import os
from pathlib import Path, PureWindowsPath

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from .errors import DataError

__all__ = ["read_image", "read_mask", "read_text", "relative_path", "require_dir", "require_file"]


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


def read_text(path: str | os.PathLike, what: str) -> str:
    """The contents of annotation file ``path`` decoded as UTF-8 (a leading byte-order mark is dropped), or a
    :class:`DataError` naming the file when it is missing, unreadable or not UTF-8 text."""
    path = require_file(path, what)
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: {what} is not UTF-8 text ({e})") from e
    except OSError as e:
        raise DataError(f"{path}: cannot read {what}: {e}") from e


def relative_path(name: object, source: str) -> str:
    """Check a file name read from an annotation file before it is joined to the dataset root, and return it.

    Every loader resolves image and mask paths as ``root / name``; a name that is absolute (``/etc/x``, ``C:\\x``,
    ``\\\\server\\x``), holds a ``..`` component or a NUL byte, or is not a non-empty string is refused with a
    :class:`DataError` naming ``source`` (``"file: record"``), so that annotation files from others can only name
    files inside the dataset.
    """
    if not isinstance(name, str) or not name.strip():
        raise DataError(f"{source}: file name {name!r} is not a non-empty string")
    if "\x00" in name:
        raise DataError(f"{source}: file name {name!r} contains a NUL byte")
    if name.startswith(("/", "\\")) or PureWindowsPath(name).drive or ".." in name.replace("\\", "/").split("/"):
        raise DataError(f"{source}: file name {name!r} escapes the dataset root (an absolute path or a '..' "
                        "component); annotation files may only name files inside the dataset directory")
    return name


def read_image(path: str | os.PathLike) -> Tensor:
    """Decode a JPEG/PNG/... with PIL into uint8 ``[3, H, W]`` RGB (grey, palette and CMYK images are converted)."""
    path = require_file(path, "image file")
    try:
        with Image.open(path) as img:
            array = np.asarray(img.convert("RGB"))
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError) as e:
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
