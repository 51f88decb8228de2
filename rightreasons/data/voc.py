"""PASCAL VOC 2007 from the standard VOCdevkit layout.

``root`` is ``VOCdevkit/VOC2007`` (or ``VOCdevkit``, which must then contain ``VOC2007``)::

    JPEGImages/<id>.jpg
    Annotations/<id>.xml
    ImageSets/Main/{train,val,trainval,test}.txt
    SegmentationClass/<id>.png        (optional; 422 images, used by the on-object metric)

Boxes: VOC's ``bndbox`` holds 1-based inclusive pixel indices; they become XYXY ``(xmin − 1, ymin − 1, xmax, ymax)``
so that the box rasterises to exactly the annotated pixels (:mod:`rightreasons.boxes`), and are checked against the
``<size>`` of the file, which must be the JPEG's own size (a mismatch is a :class:`DataError` when the image is
read: the boxes would be misplaced). ``difficult`` objects
are kept by default (``use_difficult=False`` drops them, and their class counts for the image label only through
non-difficult objects). Segmentation masks keep VOC's values: 0 background, k + 1 for class k, 255 void.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from .base import AnnotatedDataset, Records
from .box_policy import check_boxes
from ..errors import UsageError
from .errors import DataError
from .io import read_text, relative_path, require_dir, require_file

__all__ = ["VOC_CLASSES", "VOC2007", "parse_voc_xml", "voc_root"]

VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable",
               "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor")
VOC_SPLITS = ("train", "val", "trainval", "test")


def voc_root(root: str | os.PathLike) -> Path:
    """The ``VOC2007`` directory: ``root`` itself, ``root/VOC2007`` or ``root/VOCdevkit/VOC2007``."""
    root = Path(root)
    for candidate in (root, root / "VOC2007", root / "VOCdevkit" / "VOC2007"):
        if (candidate / "Annotations").is_dir() or (candidate / "ImageSets").is_dir():
            return candidate
    return require_dir(root, "VOC 2007 (expected VOCdevkit/VOC2007 with JPEGImages/, Annotations/, ImageSets/Main/)")


def _text(node: ET.Element, tag: str, path: Path, record: str) -> str:
    child = node.find(tag)
    if child is None or child.text is None or not child.text.strip():
        raise DataError(f"{path}: {record}: missing <{tag}>")
    return child.text.strip()


def _number(node: ET.Element, tag: str, path: Path, record: str) -> float:
    value = _text(node, tag, path, record)
    try:
        return float(value)
    except ValueError:
        raise DataError(f"{path}: {record}: <{tag}> is {value!r}, expected a number") from None


def _dimension(size: ET.Element, tag: str, path: Path) -> int:
    value = _number(size, tag, path, "size")
    if not (1 <= value < 2 ** 31 and value.is_integer()):  # also refuses nan and inf
        raise DataError(f"{path}: size: <{tag}> is {value!r}, expected a positive integer")
    return int(value)


def parse_voc_xml(path: Path, *, use_difficult: bool = True, box_policy: str = "clip"
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[int, int]]:
    """Parse one annotation file into ``boxes [B, 4]`` XYXY (checked against the recorded image size),
    ``box_labels [B]``, the bool ``labels [20]`` of the image and its declared size ``(H, W)`` (which the loader
    checks against the image file's)."""
    try:
        tree = ET.parse(path)
    except (ET.ParseError, ValueError, LookupError) as e:  # also unsupported or unknown declared encodings
        raise DataError(f"{path}: malformed XML: {e}") from e
    ann = tree.getroot()
    size = ann.find("size")
    if size is None:
        raise DataError(f"{path}: annotation: missing <size>")
    canvas = (_dimension(size, "height", path), _dimension(size, "width", path))
    boxes, box_labels, names = [], [], []
    for i, obj in enumerate(ann.findall("object")):
        record = f"object {i}"
        name = _text(obj, "name", path, record)
        if name not in VOC_CLASSES:
            raise DataError(f"{path}: {record}: unknown class name {name!r}; expected one of {', '.join(VOC_CLASSES)}")
        difficult = obj.find("difficult")
        if not use_difficult and difficult is not None and (difficult.text or "0").strip() == "1":
            continue
        bnd = obj.find("bndbox")
        if bnd is None:
            raise DataError(f"{path}: {record} ({name}): missing <bndbox>")
        xmin, ymin, xmax, ymax = (_number(bnd, t, path, f"{record} ({name})") for t in ("xmin", "ymin", "xmax", "ymax"))
        boxes.append([xmin - 1, ymin - 1, xmax, ymax])
        box_labels.append(VOC_CLASSES.index(name))
        names.append(f"{record} ({name})")
    boxes_arr, labels_arr = check_boxes(np.array(boxes, np.float32).reshape(-1, 4), np.array(box_labels, np.int64),
                                        canvas, box_policy, str(path), names)
    labels = np.zeros(len(VOC_CLASSES), dtype=bool)
    labels[labels_arr] = True
    return boxes_arr, labels_arr, labels, canvas


def _read_split(root: Path, split: str) -> list[str]:
    if split not in VOC_SPLITS:
        raise UsageError(f"unknown VOC split {split!r}; expected one of {', '.join(VOC_SPLITS)}")
    path = root / "ImageSets" / "Main" / f"{split}.txt"
    lines = [(n, line.strip()) for n, line in enumerate(read_text(path, f"VOC image set '{split}'").splitlines(), 1)
             if line.strip()]
    for n, image_id in lines:
        if len(image_id.split()) != 1:
            raise DataError(f"{path}: line {n}: {image_id!r} is not a single image id")
        relative_path(image_id, f"{path}: line {n}")
    ids = [image_id for _, image_id in lines]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise DataError(f"{path}: image id {dup!r} is listed twice")
    return ids


class VOC2007(AnnotatedDataset):
    """PASCAL VOC 2007 multi-label classification with boxes (20 classes, :data:`VOC_CLASSES`).

    Options beyond :class:`AnnotatedDataset`'s: ``use_difficult`` (default True), ``segmentation_only`` (only the
    images with a ``SegmentationClass`` mask, for the on-object metric).
    """

    def __init__(self, root: str | os.PathLike, split: str = "trainval", *, use_difficult: bool = True,
                 segmentation_only: bool = False, box_policy: str = "clip", **options) -> None:
        root = voc_root(root)
        ann_dir = require_dir(root / "Annotations", "VOC Annotations")
        require_dir(root / "JPEGImages", "VOC JPEGImages")
        seg_dir = root / "SegmentationClass"
        ids, files, labels, boxes, box_labels, masks, sizes = [], [], [], [], [], [], []
        for image_id in _read_split(root, split):
            mask = f"SegmentationClass/{image_id}.png" if (seg_dir / f"{image_id}.png").is_file() else ""
            if segmentation_only and not mask:
                continue
            xml = require_file(ann_dir / f"{image_id}.xml", f"annotation of image {image_id!r}")
            b, bl, lab, size = parse_voc_xml(xml, use_difficult=use_difficult, box_policy=box_policy)
            ids.append(image_id)
            files.append(f"JPEGImages/{image_id}.jpg")
            labels.append(lab)
            boxes.append(b)
            box_labels.append(bl)
            masks.append(mask)
            sizes.append(size)
        records = Records.build(ids, files, np.array(labels, bool).reshape(-1, len(VOC_CLASSES)), boxes, box_labels,
                                mask_files=masks, sizes=sizes)
        super().__init__(records, VOC_CLASSES, name="voc2007", split=split, image_root=root, box_policy=box_policy,
                         **options)

    def annotation_file(self, index: int) -> str:
        return str(self.image_root / "Annotations" / f"{self.records.ids[index]}.xml")
