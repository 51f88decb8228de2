"""Reading annotation text, images and segmentation masks from disk, with errors that name the file, and the checks
that keep what a dataset reads inside its root.

* File names read from annotation files must be relative and free of ``..`` (:func:`relative_path`), and the file
  they name, with every symbolic link resolved, must lie inside the dataset's directory (:func:`inside_root`): a
  symlink inside the dataset that points elsewhere is refused (link the dataset directory itself instead).
* Images larger than :data:`MAX_PIXELS` (or the limit given) are refused from their header, before any pixel is
  decoded: a 17 kB PNG can declare 12000 × 12000 pixels and cost gigabytes once decoded.
* An image is read as every viewer shows it: its EXIF orientation applied (:func:`ImageOps.exif_transpose`), so that
  boxes, points and masks drawn on the displayed image land on the same pixels; the loaders compare the oriented size
  with the one the annotation declares. A mask file is read the same way: as stored when it has no EXIF orientation
  (PNGs of labelling tools have none: they are drawn in the displayed frame), turned when it has one.
* An image whose longer side is more than :data:`MAX_ASPECT_RATIO` times its shorter side is refused from its header
  too: resizing its shorter side to a model's input size would make it enormous (a 2 × 20,000,000 image within the
  pixel limit asked for 6 TB).
* High-bit-depth grey images are scaled to 8 bits, not clipped (:data:`DEEP_RANGES`): 16-bit integers (PNG, TIFF)
  ``v → round(v · 255 / 65535)``; floats (TIFF) must lie in ``[0, 1]`` and become ``round(v · 255)``. A NaN or
  infinite pixel, or a value outside the mode's range, is a :class:`DataError` naming the file.
"""

from __future__ import annotations

import csv
import io
import os
import warnings
from pathlib import Path, PureWindowsPath

import numpy as np
import torch
from PIL import ExifTags, Image, ImageOps, UnidentifiedImageError
from torch import Tensor

from .errors import DataError

__all__ = ["DEEP_RANGES", "MAX_ASPECT_RATIO", "MAX_PIXELS", "csv_rows", "inside_root", "open_image", "read_image",
           "read_mask", "read_text", "relative_path", "require_dir", "require_file"]

MAX_PIXELS = 40_000_000
"""Default largest image (width × height) a dataset or command reads: 40 megapixels."""

MAX_ASPECT_RATIO = 100
"""Largest ratio of an image's longer side to its shorter side that a dataset or command reads (panoramas reach about
10): the transforms resize the shorter side to the input size, which makes the longer one this many times as long."""

#: PIL mode of a high-bit-depth grey image → the range of its pixel values that maps onto 0 … 255 (16-bit integers in
#: PIL's 16-bit modes or its 32-bit mode ``I``, which PNG and TIFF readers also use for them; floats in [0, 1])
DEEP_RANGES = {**dict.fromkeys(("I;16", "I;16L", "I;16B", "I;16N", "I"), 65535.0), "F": 1.0}


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


def csv_rows(path: str | os.PathLike, required: tuple[str, ...]) -> list[tuple[int, dict[str, str]]]:
    """(line number, row) pairs of a CSV file with a header holding the ``required`` columns."""
    reader = csv.DictReader(io.StringIO(read_text(path, "CSV file"), newline=""))
    try:
        columns = reader.fieldnames or []
        missing = [c for c in required if c not in columns]
        if missing:
            raise DataError(f"{path}: missing column(s) {', '.join(missing)}; found {', '.join(columns) or 'none'}")
        return [(reader.line_num, row) for row in reader]
    except csv.Error as e:
        raise DataError(f"{path}: line {reader.line_num + 1}: malformed CSV: {e}") from e


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


def inside_root(path: str | os.PathLike, root: str | os.PathLike, source: str) -> Path:
    """``path`` unchanged, after checking that it resolves (symbolic links followed) to a place inside ``root``;
    otherwise a :class:`DataError` naming ``source``, the path and where it leads."""
    real, real_root = Path(path).resolve(), Path(root).resolve()
    if not real.is_relative_to(real_root):
        raise DataError(f"{source}: {path} resolves to {real}, outside the dataset directory {real_root}; symbolic "
                        "links may not point out of a dataset (link the dataset directory itself instead)")
    return Path(path)


#: what PIL raises for a file it cannot read as an image
_DECODE_ERRORS = (UnidentifiedImageError, Image.DecompressionBombError, OSError, ValueError)


def open_image(path: str | os.PathLike, max_pixels: int | None = MAX_PIXELS, mode: str = "RGB") -> Image.Image:
    """Decode an image file with PIL, converted to ``mode`` (grey, palette and CMYK images become RGB by default).

    The image is turned by its EXIF orientation, as viewers show it. An image of more than ``max_pixels`` pixels
    (``None``: no limit but PIL's own) or of an aspect ratio beyond :data:`MAX_ASPECT_RATIO` is refused from its
    header, before decoding, with a :class:`DataError` naming the file; so is anything PIL cannot decode."""
    path = require_file(path, "image file")
    try:
        with _open_checked(path, max_pixels) as img:
            return _eight_bit(_oriented(img), path).convert(mode)
    except DataError:
        raise
    except _DECODE_ERRORS as e:
        raise DataError(f"{path}: cannot decode image: {e}") from e


def _open_checked(path: Path, max_pixels: int | None) -> Image.Image:
    """The image file ``path`` opened by PIL from its header alone, after refusing more than ``max_pixels`` pixels (a
    :class:`DataError` naming the file)."""
    with warnings.catch_warnings():  # PIL's own bomb warning: the limit below is stricter
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        img = Image.open(path)
    width, height = img.size
    if max_pixels is not None and width * height > max_pixels:
        img.close()
        raise DataError(f"{path}: the image has {width} × {height} = {width * height:,} pixels, more than the "
                        f"limit of {max_pixels:,} (data.options.max_pixels); resize it or raise the limit")
    if max(width, height) > MAX_ASPECT_RATIO * max(min(width, height), 1):
        img.close()
        ratio = max(width, height) / max(min(width, height), 1)
        raise DataError(f"{path}: the image is {width} × {height} pixels (W × H), an aspect ratio of {ratio:,.0f}:1; "
                        "resizing its shorter side to the model's input size would make its longer side "
                        f"{ratio:,.0f} times that size; expected an aspect ratio of at most {MAX_ASPECT_RATIO}:1 "
                        "(crop or pad the image)")
    return img


def _oriented(img: Image.Image) -> Image.Image:
    """``img`` turned and mirrored as its EXIF orientation says (what every viewer shows, and what boxes drawn on
    the shown image refer to); ``img`` itself when it has no orientation to apply (no copy)."""
    if img.getexif().get(ExifTags.Base.Orientation, 1) in (1, None):
        return img
    return ImageOps.exif_transpose(img)


def _eight_bit(img: Image.Image, path: Path) -> Image.Image:
    """A high-bit-depth grey image (:data:`DEEP_RANGES`) as 8-bit grey ``L``, scaled from its range; others as
    they are. Non-finite or out-of-range pixel values are a :class:`DataError` naming ``path``."""
    if img.mode not in DEEP_RANGES:
        return img
    values = np.asarray(img, dtype=np.float64)
    finite = np.isfinite(values)
    if not finite.all():
        raise DataError(f"{path}: {int((~finite).sum())} pixel value(s) of the {img.mode} image are not finite (NaN "
                        "or ±inf); expected finite grey values")
    top = DEEP_RANGES[img.mode]
    low, high = float(values.min()), float(values.max())
    if low < 0 or high > top:
        raise DataError(f"{path}: pixel values of the {img.mode} image span [{low:g}, {high:g}], expected "
                        f"[0, {top:g}]; convert it to 8-bit (or to floats in [0, 1])")
    return Image.fromarray(np.rint(values * (255.0 / top)).astype(np.uint8))


def read_image(path: str | os.PathLike, max_pixels: int | None = MAX_PIXELS) -> Tensor:
    """An image file as uint8 ``[3, H, W]`` RGB, the pixels of :func:`open_image`: a channels-last view of the
    decoded ``[H, W, 3]`` array. It is not copied into colour planes here (:func:`~rightreasons.data.sample.to_float`
    does that while converting to float, in the same pass; torchvision's uint8 resize prefers this layout), nor
    copied by a conversion of an RGB image to RGB, as :func:`open_image` would."""
    path = require_file(path, "image file")
    try:
        with _open_checked(path, max_pixels) as img:
            oriented = _oriented(img)
            rgb = oriented if oriented.mode == "RGB" else _eight_bit(oriented, path).convert("RGB")
            pixels = np.array(rgb)  # decodes (a turned image: already decoded); a writable copy of the pixels
    except DataError:
        raise
    except _DECODE_ERRORS as e:
        raise DataError(f"{path}: cannot decode image: {e}") from e
    return torch.from_numpy(pixels).permute(2, 0, 1)


def read_mask(path: str | os.PathLike, max_pixels: int | None = MAX_PIXELS) -> Tensor:
    """Read a single-channel (greyscale or palette) PNG as uint8 ``[H, W]`` of stored values (palette indices for
    VOC's ``SegmentationClass``), turned by its EXIF orientation if it has one (as :func:`read_image`); at most
    ``max_pixels`` pixels, checked before decoding."""
    path = require_file(path, "segmentation mask")
    try:
        with Image.open(path) as img:
            if img.mode not in ("P", "L"):
                raise DataError(f"{path}: segmentation mask has mode {img.mode!r}; expected a single-channel "
                                "palette ('P') or greyscale ('L') PNG of class indices")
            if max_pixels is not None and img.width * img.height > max_pixels:
                raise DataError(f"{path}: the mask has {img.width} × {img.height} pixels, more than the limit of "
                                f"{max_pixels:,} (data.options.max_pixels)")
            return torch.from_numpy(np.array(_oriented(img), dtype=np.uint8))
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError) as e:
        raise DataError(f"{path}: cannot decode segmentation mask: {e}") from e
