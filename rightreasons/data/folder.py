"""Images of one's own in folders (``folder``): class sub-folders, or one folder and a labels file, with boxes and
masks from rows written by hand — the simplest dataset a person makes.

Layouts of ``root``:

* class sub-folders per split (torchvision's ImageFolder): ``train/cat/a.jpg``, ``val/dog/b.png``, ...; single-label,
  the folder is the class. The classes are the sorted folder names of all split folders (``train``, ``val``,
  ``test``), so every split has the same ones.
* one folder and a labels file (``labels: labels.csv``): one row per (image, class); an image with several rows has
  several labels (multi-hot). A ``split`` column puts each image in ``train``, ``val`` or ``test``; without one every
  image is in ``train``. The classes are the sorted class names of the file.

Rows — of the labels file, or of ``annotations`` beside either layout — are CSV with a header or JSON lines
(``.jsonl``), with the fields

* ``image``: the image file, relative to ``root``; ``class``: a class name;
* ``x1, y1, x2, y2`` (optional): a box of that class, XYXY pixels of the image as viewers show it (EXIF applied);
* ``x, y`` (optional): a point on an object of that class (a click), in the same pixels; the sample's ``points``
  (:mod:`rightreasons.regions` turns them into discs);
* ``mask`` (optional): a single-channel PNG of the image's size, relative to ``root``, non-zero on that object; the
  sample's ``mask [H, W]`` is 0 background and ``k + 1`` on the objects of class k (later rows paint over earlier);
* ``split`` (labels file only).

A row of ``annotations`` must name an image of the dataset and one of its labels; other fields are errors. Ids are the
image paths relative to ``root``. ``holdout`` (a number of images or a fraction) holds out part of ``train`` with
``holdout_seed`` as split ``val`` where the dataset has no ``val`` of its own.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..errors import UsageError
from .annotations import random_subset
from .base import AnnotatedDataset, Records
from .box_policy import check_boxes, require_box_policy
from .coco import VOID, check_holdout, holdout_count
from .errors import DataError
from .io import csv_rows, inside_root, read_mask, read_text, relative_path, require_dir, require_file
from .options import require_int

__all__ = ["FIELDS", "FOLDER_SPLITS", "IMAGE_SUFFIXES", "FolderDataset", "read_rows"]

FOLDER_SPLITS = ("train", "val", "test")
FIELDS = ("image", "class", "x1", "y1", "x2", "y2", "x", "y", "mask", "split")
"""The fields of a row; ``split`` only in a labels file."""
IMAGE_SUFFIXES = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".tif", ".tiff", ".webp")
"""The files of class sub-folders that are images (in any case)."""


def read_rows(path: Path, fields: tuple[str, ...]) -> list[tuple[str, dict[str, str]]]:
    """``("file: line N", row)`` of a CSV (with a header) or JSON-lines file whose fields are ``image``, ``class``
    and some of ``fields``; values as stripped strings, ``""`` where missing."""
    if path.suffix.lower() == ".jsonl":
        rows = []
        for n, text in enumerate(read_text(path, "annotation file").splitlines(), 1):
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as e:
                raise DataError(f"{path}: line {n}: malformed JSON: {e}") from e
            if not isinstance(record, dict):
                raise DataError(f"{path}: line {n}: expected a JSON object, got {text[:60]}")
            rows.append((n, {k: "" if v is None else str(v) for k, v in record.items()}))
    else:
        rows = csv_rows(require_file(path, "annotation file"), ("image", "class"))
    out = []
    for n, row in rows:
        where = f"{path}: line {n}"
        unknown = sorted(str(k) for k in row if k not in fields)
        if unknown:
            raise DataError(f"{where}: unknown field(s) {', '.join(unknown)}; expected {', '.join(fields)}")
        out.append((where, {k: (row.get(k) or "").strip() for k in fields}))
    return out


def _box(row: dict[str, str], where: str, box_policy: str) -> np.ndarray | None:
    """The row's box ``[4]`` XYXY, or None where it has none or ``box_policy`` drops it (degenerate)."""
    values = [row[c] for c in ("x1", "y1", "x2", "y2")]
    if not any(values):
        return None
    try:
        box = np.array([float(v) for v in values], np.float32)
    except ValueError:
        raise DataError(f"{where}: box x1, y1, x2, y2 = {values} is not four numbers") from None
    kept, _ = check_boxes(box[None], np.zeros(1), None, box_policy, where, [f"class {row['class']}"])
    return kept[0] if len(kept) else None


def _point(row: dict[str, str], where: str) -> np.ndarray | None:
    """The row's point ``[2]`` XY, or None where it has none."""
    values = [row["x"], row["y"]]
    if not any(values):
        return None
    try:
        return np.array([float(v) for v in values], np.float32)
    except ValueError:
        raise DataError(f"{where}: point x, y = {values} is not two numbers") from None


class FolderDataset(AnnotatedDataset):
    """Images in class sub-folders or named by a labels file, with optional boxes and masks; see the module
    docstring."""

    def __init__(self, root: str | os.PathLike, split: str = "train", *, labels: str | None = None,
                 annotations: str | None = None, holdout: int | float = 0, holdout_seed: int = 0,
                 box_policy: str = "error", **options) -> None:
        check_holdout(holdout)
        require_int("holdout_seed", holdout_seed, 0)
        for option, value in (("labels", labels), ("annotations", annotations)):
            if value is not None and not (isinstance(value, str) and value.strip()):
                raise UsageError(f"dataset option {option!r} must be a file relative to the root, got {value!r}")
        require_box_policy(box_policy)
        if split not in FOLDER_SPLITS:
            raise UsageError(f"unknown folder split {split!r}; expected one of {', '.join(FOLDER_SPLITS)}")
        root = require_dir(root, "folder dataset")
        rows = read_rows(root / labels, FIELDS) if labels else []
        images, classes = self._labelled(rows) if labels else self._sub_folders(root)
        if holdout and any(s == "val" for s, _ in images.values()):
            raise UsageError("dataset option 'holdout' makes split 'val' of train, but the dataset has a val split")
        if annotations:
            rows += read_rows(root / annotations, FIELDS[:-1])
        index = {name: i for i, name in enumerate(classes)}
        boxes: dict[str, list] = {name: [] for name in images}
        masks: dict[str, list] = {name: [] for name in images}
        points: dict[str, list] = {name: [] for name in images}
        for where, row in rows:
            name, k = relative_path(row["image"], where), index.get(row["class"], -1)
            if name not in images:
                raise DataError(f"{where}: image {name!r} is not an image of the dataset")
            if k not in images[name][1]:
                raise DataError(f"{where}: class {row['class']!r} is not a label of image {name!r} (its labels: "
                                f"{', '.join(classes[j] for j in sorted(images[name][1])) or 'none'})")
            box = _box(row, where, box_policy)
            if box is not None:
                boxes[name].append((box, k))
            point = _point(row, where)
            if point is not None:
                points[name].append((point, k))
            if row["mask"]:
                if len(classes) >= VOID:
                    raise DataError(f"{where}: {len(classes)} classes; masks hold at most {VOID - 1}")
                masks[name].append((relative_path(row["mask"], where), k + 1))
        part = "train" if holdout and split == "val" else split
        names = [name for name, (s, _) in images.items() if s == part]
        if holdout and part == "train":
            held = random_subset(len(names), holdout_count(len(names), holdout), holdout_seed)
            names = [name for name, h in zip(names, held) if h == (split == "val")]
        label_rows = np.zeros((len(names), len(classes)), bool)
        for i, name in enumerate(names):
            label_rows[i, sorted(images[name][1])] = True
        pointed = any(points.values())
        records = Records.build(names, names, label_rows, [np.array([b for b, _ in boxes[n]]) for n in names],
                                [np.array([k for _, k in boxes[n]]) for n in names],
                                points=[np.array([p for p, _ in points[n]]) for n in names] if pointed else None,
                                point_labels=[np.array([k for _, k in points[n]]) for n in names] if pointed else None)
        self._mask_offsets = np.cumsum([0, *(len(masks[n]) for n in names)])
        self._mask_files = np.array([f for n in names for f, _ in masks[n]], dtype=str)
        self._mask_values = np.array([v for n in names for _, v in masks[n]], np.uint8)
        super().__init__(records, classes, name="folder", split=split, image_root=root, box_policy=box_policy,
                         **options)

    @staticmethod
    def _sub_folders(root: Path) -> tuple[dict[str, tuple[str, set[int]]], list[str]]:
        """``{image: (split, {class})}`` and the classes of the class sub-folders of every split folder."""
        folders = [d for split in FOLDER_SPLITS if (root / split).is_dir()
                   for d in sorted((root / split).iterdir()) if d.is_dir()]
        if not folders:
            raise DataError(f"{root}: no class sub-folders in {', '.join(FOLDER_SPLITS)}/; expected train/<class>/"
                            "<image> (or the dataset option 'labels' naming a labels file)")
        classes = sorted({d.name for d in folders})
        images = {}
        for d in folders:
            for path in sorted(d.rglob("*")):
                if path.suffix.lower() in IMAGE_SUFFIXES and path.is_file():
                    images[path.relative_to(root).as_posix()] = (d.parent.name, {classes.index(d.name)})
        return images, classes

    @staticmethod
    def _labelled(rows: list[tuple[str, dict[str, str]]]) -> tuple[dict[str, tuple[str, set[int]]], list[str]]:
        """``{image: (split, {class})}`` and the classes of a labels file's rows."""
        classes = sorted({row["class"] for _, row in rows if row["class"]})
        images: dict[str, tuple[str, set[int]]] = {}
        for where, row in rows:
            name = relative_path(row["image"], where)
            if not row["class"]:
                raise DataError(f"{where}: empty class; expected a class name")
            split = row["split"] or "train"
            if split not in FOLDER_SPLITS:
                raise DataError(f"{where}: split {split!r}; expected one of {', '.join(FOLDER_SPLITS)}")
            if images.setdefault(name, (split, set()))[0] != split:
                raise DataError(f"{where}: image {name!r} in split {split!r}, but an earlier row puts it in "
                                f"{images[name][0]!r}")
            images[name][1].add(classes.index(row["class"]))
        return images, classes

    def load_mask(self, index: int) -> Tensor | None:
        """uint8 ``[H, W]`` mask of sample ``index`` painted from its rows' mask files, or None without any."""
        mask = None
        for m in range(self._mask_offsets[index], self._mask_offsets[index + 1]):
            path = inside_root(self.image_root / self._mask_files[m], self.image_root, self.record(index))
            layer = read_mask(path, self.max_pixels)
            if mask is None:
                mask = torch.zeros_like(layer)
            elif layer.shape != mask.shape:
                raise DataError(f"{path}: mask of size {tuple(layer.shape)}; the image's other masks are "
                                f"{tuple(mask.shape)}")
            mask[layer > 0] = int(self._mask_values[m])
        return mask
