"""MS COCO 2014 multi-label classification with boxes, read through pycocotools.

``root`` holds the official files::

    annotations/instances_train2014.json     train2014/COCO_train2014_<id:012d>.jpg
    annotations/instances_val2014.json       val2014/COCO_val2014_<id:012d>.jpg

(``annotation_file=`` / ``image_dir=`` point elsewhere, e.g. to a train/val partition of train2014 as used by the
Model-Guidance release, which tested on val2014.)

COCO 2014 publishes no test annotations. ``holdout=`` holds out part of train2014 for model selection, so that val2014
can serve as the test split, scored once: split ``"holdout"`` holds those images and split ``"train"`` the rest
(``holdout``: a number of images, or a fraction of them in (0, 1), rounded half up). They are drawn uniformly from the
images the split keeps (after ``crowd`` and ``include_unannotated``) with ``holdout_seed`` — not the run's seed, so
every run of a sweep selects on the same images; the two splits never share an image. ``"val"`` is val2014 whatever
``holdout`` says.

* The 80 category ids (1…90 with gaps) map to contiguous class indices 0…79 in increasing id order.
* Every annotation must have an id of its own and name an image and a category of the file; every image's
  ``height`` and ``width`` must be its file's (a mismatch is a :class:`DataError` when the image is read).
* Boxes ``[x, y, w, h]`` become XYXY. Crowd annotations (``iscrowd=1``) follow ``crowd=``: ``"label"`` (default) —
  the class counts for the image label but the region gives no box, so it is excluded from guidance masks;
  ``"ignore"`` — dropped entirely; ``"box"`` — used like any other box (the reference release's behaviour).
* Images without any (kept) annotation are excluded unless ``include_unannotated=True``.
* ``box_policy`` defaults to ``"drop"``: the official files hold a few degenerate boxes.
* Only annotations are indexed (into numpy arrays; the parsed JSON is released); images are decoded on access.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO

from .annotations import random_subset
from .base import AnnotatedDataset, Records, check_points
from .box_policy import check_boxes
from ..errors import UsageError
from .errors import DataError
from .io import read_text, relative_path, require_dir, require_file
from .options import require_int

__all__ = ["COCO2014", "COCO_SPLITS", "CROWD_POLICIES", "CocoIndex", "HOLDOUT_SPLIT", "VOID", "check_holdout",
           "holdout_count", "index_coco", "load_coco", "rle_counts"]

CROWD_POLICIES = ("label", "ignore", "box")
COCO_SPLITS = ("train", "val")
"""The splits of the release: ``annotations/instances_<split>2014.json`` and the folder ``<split>2014/``."""
HOLDOUT_SPLIT = "holdout"
"""The held-out part of train2014 (option ``holdout``): the validation split when val2014 is the test split."""


def check_holdout(holdout: object) -> None:
    fraction = isinstance(holdout, float) and 0 < holdout < 1
    if not (fraction or isinstance(holdout, int) and not isinstance(holdout, bool) and holdout >= 0):
        raise UsageError(f"dataset option 'holdout' must be a number of images (an integer >= 0) or a fraction of "
                         f"them in (0, 1), got {holdout!r}")


def holdout_count(n: int, holdout: int | float) -> int:
    """How many of ``n`` images ``holdout`` holds out: ``holdout`` itself (an integer; 0: none), or the fraction
    ``holdout`` in (0, 1) of them, rounded half up and at least one. Never all of them (nothing would be left to
    train on)."""
    check_holdout(holdout)
    count = max(1, math.floor(holdout * n + 0.5)) if isinstance(holdout, float) else holdout
    if count and count >= n:
        raise UsageError(f"dataset option 'holdout' = {holdout!r} holds out {count} of the {n} images of the "
                         "split, leaving none to train on")
    return count


def load_coco(path: Path) -> COCO:
    """Parse an instances JSON into a pycocotools index (quietly), with errors that name the file."""
    try:
        dataset = json.loads(read_text(path, "COCO annotation file"))
    except (json.JSONDecodeError, RecursionError) as e:
        raise DataError(f"{path}: malformed JSON: {type(e).__name__}: {e}") from e
    if not isinstance(dataset, dict):
        raise DataError(f"{path}: expected a JSON object with 'images', 'annotations', 'categories'")
    missing = [k for k in ("images", "annotations", "categories") if k not in dataset]
    if missing:
        raise DataError(f"{path}: missing top-level key(s) {', '.join(missing)}")
    coco = COCO()
    coco.dataset = dataset
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            coco.createIndex()
    except (KeyError, TypeError) as e:
        raise DataError(f"{path}: malformed COCO record (missing or invalid key {e})") from e
    for kind, index in (("images", coco.imgs), ("categories", coco.cats)):
        for k, record in enumerate(dataset[kind]):
            if isinstance(record["id"], bool) or not isinstance(record["id"], int):
                raise DataError(f"{path}: {kind}[{k}]: id {record['id']!r} is not an integer")
        if len(index) != len(dataset[kind]):  # pycocotools would silently keep only the last record of an id
            raise DataError(f"{path}: {kind}: {len(dataset[kind]) - len(index)} repeated id(s); ids must be unique")
    _check_annotations(path, dataset["annotations"], coco)
    return coco


def _check_annotations(path: Path, annotations: list, coco: COCO) -> None:
    """Every annotation has an integer id of its own and names an image and a category of the file: pycocotools
    would keep only the last annotation of a repeated id and silently leave out those of a missing image."""
    first: dict[int, int] = {}
    categories = sorted(coco.cats)
    for k, ann in enumerate(annotations):
        what = f"annotations[{k}] (id {ann['id']!r})"
        if isinstance(ann["id"], bool) or not isinstance(ann["id"], int):
            raise DataError(f"{path}: {what}: id is not an integer")
        if ann["id"] in first:
            raise DataError(f"{path}: annotations[{k}]: id {ann['id']} is used by annotations[{first[ann['id']]}] "
                            "as well; annotation ids must be unique")
        first[ann["id"]] = k
        if ann["image_id"] not in coco.imgs:
            raise DataError(f"{path}: {what}: image_id {ann['image_id']!r} is not the id of any image of the file "
                            f"({len(coco.imgs)} images)")
        if ann["category_id"] not in coco.cats:
            raise DataError(f"{path}: {what}: category_id {ann['category_id']!r} is not the id of any category of "
                            f"the file; it defines {len(categories)} categories with ids {categories[:5]}"
                            f"{'...' if len(categories) > 5 else ''}")


def _field(record: dict, key: str, path: Path, what: str):
    if not isinstance(record, dict) or key not in record:
        raise DataError(f"{path}: {what}: missing key '{key}'")
    return record[key]


def _as_float(value: object) -> float | None:
    """``value`` as a float when it is a JSON number that a float can hold, else None (strings, bools, lists...)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:
        return None


def _dimension(record: dict, key: str, path: Path, what: str) -> int:
    value = _field(record, key, path, what)
    number = _as_float(value)
    if number is None or not (1 <= number < 2 ** 31 and number.is_integer()):
        raise DataError(f"{path}: {what}: {key} is {value!r}, expected a positive integer")
    return int(number)


VOID = 255
"""The mask value of a crowd region under ``crowd="label"`` (VOC's void / ignore)."""


@dataclass
class CocoIndex:
    """The images of a COCO file that a split keeps, in increasing image id: ``ids``, ``files`` (relative to the
    image folder), ``labels[i] [K]`` bool, ``boxes[i] [B_i, 4]`` XYXY pixels with ``box_labels[i] [B_i]``, ``sizes[i]``
    ``(H, W)`` and ``segments[i]``, the ``(value, compressed RLE)`` of each of its masks in file order (value ``k + 1``
    for class k, :data:`VOID` for a crowd region under ``crowd="label"``; empty unless indexed with ``masks``);
    ``points[i] [P_i, 2]`` XY with ``point_labels[i] [P_i]``, the labelled ``keypoints`` (visibility > 0) of its
    annotations."""

    classes: list[str]
    ids: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    labels: list[np.ndarray] = field(default_factory=list)
    boxes: list[np.ndarray] = field(default_factory=list)
    box_labels: list[np.ndarray] = field(default_factory=list)
    sizes: list[tuple[int, int]] = field(default_factory=list)
    segments: list[list[tuple[int, dict]]] = field(default_factory=list)
    points: list[np.ndarray] = field(default_factory=list)
    point_labels: list[np.ndarray] = field(default_factory=list)

    def held_out(self, holdout: int | float, seed: int, held: bool) -> CocoIndex:
        """The images ``holdout`` holds out with ``seed`` (``held``) or the others (:func:`holdout_count`)."""
        chosen = random_subset(len(self.ids), holdout_count(len(self.ids), holdout), seed)
        kept = [k for k in range(len(self.ids)) if chosen[k] == held]
        return CocoIndex(self.classes, *([column[k] for k in kept] for column in (
            self.ids, self.files, self.labels, self.boxes, self.box_labels, self.sizes, self.segments, self.points,
            self.point_labels)))

    def records(self) -> Records:
        """The :class:`Records` of the index; with points when any annotation has a labelled keypoint."""
        pointed = any(len(p) for p in self.points)
        return Records.build(self.ids, self.files, np.array(self.labels, bool).reshape(-1, len(self.classes)),
                             self.boxes, self.box_labels, sizes=self.sizes,
                             points=self.points if pointed else None,
                             point_labels=self.point_labels if pointed else None)


def index_coco(coco: COCO, ann_path: Path, cat_ids: list[int], crowd: str, include_unannotated: bool,
               box_policy: str, masks: bool = False) -> CocoIndex:
    """Index the images of ``coco`` (read from ``ann_path`` by :func:`load_coco`) with classes ``cat_ids`` (category
    ids in class order): labels, boxes under ``crowd`` and ``box_policy``, and with ``masks`` the segmentations."""
    contiguous = {cid: i for i, cid in enumerate(cat_ids)}
    classes = [str(_field(coco.cats[c], "name", ann_path, f"category {c}")) for c in cat_ids]
    repeated = sorted({name for name in classes if classes.count(name) > 1})
    if repeated:
        raise DataError(f"{ann_path}: categories: the name(s) {', '.join(map(repr, repeated))} are used by more than "
                        "one category id; expected one id per class name")
    if masks and len(classes) >= VOID:
        raise DataError(f"{ann_path}: {len(classes)} categories; masks hold at most {VOID - 1} classes")
    index = CocoIndex(classes)
    for img_id in sorted(coco.getImgIds()):
        img = coco.imgs[img_id]
        what = f"image {img_id}"
        file_name = relative_path(_field(img, "file_name", ann_path, what), f"{ann_path}: {what}")
        canvas = (_dimension(img, "height", ann_path, what), _dimension(img, "width", ann_path, what))
        label = np.zeros(len(cat_ids), dtype=bool)
        b, bl, names, segments, points, point_labels = [], [], [], [], [], []
        for ann in coco.imgToAnns.get(img_id, []):
            ann_what = f"annotation {ann.get('id')} of image {img_id}"
            cat = ann["category_id"]  # an id of a category: load_coco checked
            if ann.get("iscrowd", 0) not in (0, 1):
                raise DataError(f"{ann_path}: {ann_what}: iscrowd is {ann['iscrowd']!r}, expected 0 or 1")
            is_crowd = bool(ann.get("iscrowd", 0))
            if is_crowd and crowd == "ignore":
                continue
            label[contiguous[cat]] = True
            rle = _segment_rle(ann.get("segmentation", []), canvas, f"{ann_path}: {ann_what}") if masks else None
            if rle is not None:
                segments.append((VOID if is_crowd and crowd == "label" else contiguous[cat] + 1, rle))
            if is_crowd and crowd == "label":
                continue
            clicks = _keypoints(ann.get("keypoints", []), canvas, f"{ann_path}: {ann_what}")
            points.append(clicks)
            point_labels.append(np.full(len(clicks), contiguous[cat], np.int64))
            bbox = _field(ann, "bbox", ann_path, ann_what)
            numbers = [_as_float(v) for v in bbox] if isinstance(bbox, list) else []
            if len(numbers) != 4 or None in numbers:
                raise DataError(f"{ann_path}: {ann_what}: bbox {bbox!r} is not [x, y, w, h] (four numbers)")
            x, y, w, h = numbers
            b.append([x, y, x + w, y + h])
            bl.append(contiguous[cat])
            names.append(ann_what)
        if not label.any() and not include_unannotated:
            continue
        b_arr, bl_arr = check_boxes(np.array(b, np.float32).reshape(-1, 4), np.array(bl, np.int64), canvas,
                                    box_policy, f"{ann_path}: {file_name}", names)
        for column, value in ((index.ids, str(img_id)), (index.files, file_name), (index.labels, label),
                              (index.boxes, b_arr), (index.box_labels, bl_arr), (index.sizes, canvas),
                              (index.segments, segments),
                              (index.points, np.concatenate([np.zeros((0, 2), np.float32), *points])),
                              (index.point_labels, np.concatenate([np.zeros(0, np.int64), *point_labels]))):
            column.append(value)
    return index


def _keypoints(keypoints: object, canvas: tuple[int, int], what: str) -> np.ndarray:
    """An annotation's ``keypoints`` ``[x1, y1, v1, x2, y2, v2, ...]`` as the labelled points ``[P, 2]`` XY
    (visibility ``v > 0``); a point outside the image is an error naming ``what``."""
    numbers = [_as_float(v) for v in keypoints] if isinstance(keypoints, list) else [None]
    if None in numbers or len(numbers) % 3:
        raise DataError(f"{what}: keypoints {str(keypoints)[:80]} is not a flat list of numbers x1, y1, v1, x2, ...")
    triples = np.array(numbers, np.float32).reshape(-1, 3)
    labelled = triples[triples[:, 2] > 0, :2]
    check_points(labelled, canvas, f"{what}: keypoints")
    return labelled


def _segment_rle(segmentation: object, canvas: tuple[int, int], what: str) -> dict | None:
    """An annotation's ``segmentation`` — polygons ``[[x1, y1, x2, y2, ...], ...]``, an uncompressed RLE
    ``{"size": [H, W], "counts": [int, ...]}`` or a compressed one (``counts`` a string) — as one compressed RLE of
    the image of ``canvas = (H, W)``; None for an empty list (how labelling tools write box-only annotations)."""
    h, w = canvas
    if isinstance(segmentation, list):
        for j, polygon in enumerate(segmentation):
            numbers = [_as_float(v) for v in polygon] if isinstance(polygon, list) else [None]
            if None in numbers or len(numbers) < 6 or len(numbers) % 2:
                raise DataError(f"{what}: segmentation polygon {j} is {str(polygon)[:80]}; expected at least 3 points "
                                "as a flat list of numbers x1, y1, x2, y2, ...")
        return mask_utils.merge(mask_utils.frPyObjects(segmentation, h, w)) if segmentation else None
    if not isinstance(segmentation, dict):
        raise DataError(f"{what}: segmentation is a {type(segmentation).__name__}; expected polygons (a list of "
                        "lists of numbers) or an RLE (an object with 'size' and 'counts')")
    size, counts = segmentation.get("size"), segmentation.get("counts")
    if size != [h, w]:
        raise DataError(f"{what}: segmentation RLE size {size!r} is not the image's [height, width] = [{h}, {w}]")
    if isinstance(counts, str):
        try:  # checked here: pycocotools would decode a corrupt string beyond the mask's end
            runs = rle_counts(counts)
        except ValueError as e:
            raise DataError(f"{what}: corrupt compressed segmentation RLE: {e}") from e
        if min(runs, default=0) < 0 or sum(runs) != h * w:
            raise DataError(f"{what}: compressed segmentation RLE covers {sum(runs)} pixels; expected the image's "
                            f"height × width = {h * w}")
        return {"size": [h, w], "counts": counts.encode("ascii")}
    if not isinstance(counts, list) or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0
                                               for c in counts) or sum(counts) != h * w:
        raise DataError(f"{what}: segmentation RLE counts are not a string or non-negative integers summing to "
                        f"height × width = {h * w}")
    return mask_utils.frPyObjects(segmentation, h, w)


def rle_counts(counts: str) -> list[int]:
    """The run lengths of a compressed COCO RLE string (pycocotools' ``rleFrString``), read in Python so that a
    corrupt string is refused before pycocotools decodes it; ValueError where the string ends inside a number."""
    runs: list[int] = []
    p = 0
    while p < len(counts):
        x, k, more = 0, 0, True
        while more:
            if p == len(counts):
                raise ValueError("the string ends inside a run length")
            c = ord(counts[p]) - 48
            if not 0 <= c < 64:
                raise ValueError(f"{counts[p]!r} is not a character of a compressed RLE ('0' to 'o')")
            x |= (c & 0x1F) << 5 * k
            more = bool(c & 0x20)
            p, k = p + 1, k + 1
            if not more and c & 0x10:
                x |= -1 << 5 * k
        runs.append(x + runs[-2] if len(runs) > 2 else x)
    return runs


class COCO2014(AnnotatedDataset):
    """MS COCO 2014 (80 classes). See the module docstring for ``crowd``, ``include_unannotated``, ``holdout`` and
    layouts."""

    def __init__(self, root: str | os.PathLike, split: str = "train", *, crowd: str = "label",
                 include_unannotated: bool = False, annotation_file: str | os.PathLike | None = None,
                 image_dir: str | os.PathLike | None = None, box_policy: str = "drop", holdout: int | float = 0,
                 holdout_seed: int = 0, **options) -> None:
        if split not in (*COCO_SPLITS, HOLDOUT_SPLIT) and (annotation_file is None or image_dir is None):
            raise UsageError(f"unknown COCO split {split!r}; expected one of {', '.join(COCO_SPLITS)} or "
                             f"{HOLDOUT_SPLIT} (COCO 2014 publishes no test annotations; or give annotation_file= "
                             "and image_dir=)")
        if crowd not in CROWD_POLICIES:
            raise ValueError(f"unknown crowd policy {crowd!r}; expected one of {', '.join(CROWD_POLICIES)}")
        check_holdout(holdout)  # before the (large) annotation file is read
        require_int("holdout_seed", holdout_seed, 0)
        if split == HOLDOUT_SPLIT and not holdout:
            raise UsageError(f"COCO split {HOLDOUT_SPLIT!r} is the held-out part of train2014: set the dataset option "
                             "holdout (data.options.holdout: a number of images or a fraction of them)")
        part = "train" if split == HOLDOUT_SPLIT else split  # the release's files the split is read from
        root = require_dir(root, "COCO 2014")
        ann_path = require_file(annotation_file or root / "annotations" / f"instances_{part}2014.json",
                                "COCO annotation file")
        image_root = require_dir(image_dir or root / f"{part}2014", "COCO image")
        coco = load_coco(ann_path)
        cat_ids = sorted(coco.getCatIds())
        index = index_coco(coco, ann_path, cat_ids, crowd, include_unannotated, box_policy)
        del coco
        if holdout and split in ("train", HOLDOUT_SPLIT):
            index = index.held_out(holdout, holdout_seed, split == HOLDOUT_SPLIT)
        self.annotation_path = ann_path
        super().__init__(index.records(), index.classes, name="coco2014", split=split, image_root=image_root,
                         box_policy=box_policy, **options)

    def annotation_file(self, index: int) -> str:
        return f"{self.annotation_path} (image {self.records.ids[index]})"
