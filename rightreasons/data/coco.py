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
from pathlib import Path

import numpy as np
from pycocotools.coco import COCO

from .annotations import random_subset
from .base import AnnotatedDataset, Records
from .box_policy import check_boxes
from ..errors import UsageError
from .errors import DataError
from .io import read_text, relative_path, require_dir, require_file
from .options import require_int

__all__ = ["COCO2014", "COCO_SPLITS", "CROWD_POLICIES", "HOLDOUT_SPLIT", "holdout_count", "load_coco"]

CROWD_POLICIES = ("label", "ignore", "box")
COCO_SPLITS = ("train", "val")
"""The splits of the release: ``annotations/instances_<split>2014.json`` and the folder ``<split>2014/``."""
HOLDOUT_SPLIT = "holdout"
"""The held-out part of train2014 (option ``holdout``): the validation split when val2014 is the test split."""


def _check_holdout(holdout: object) -> None:
    fraction = isinstance(holdout, float) and 0 < holdout < 1
    if not (fraction or isinstance(holdout, int) and not isinstance(holdout, bool) and holdout >= 0):
        raise UsageError(f"dataset option 'holdout' must be a number of images (an integer >= 0) or a fraction of "
                         f"them in (0, 1), got {holdout!r}")


def holdout_count(n: int, holdout: int | float) -> int:
    """How many of ``n`` images ``holdout`` holds out: ``holdout`` itself (an integer; 0: none), or the fraction
    ``holdout`` in (0, 1) of them, rounded half up and at least one. Never all of them (nothing would be left to
    train on)."""
    _check_holdout(holdout)
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
        _check_holdout(holdout)  # before the (large) annotation file is read
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
        contiguous = {cid: i for i, cid in enumerate(cat_ids)}
        classes = [str(_field(coco.cats[c], "name", ann_path, f"category {c}")) for c in cat_ids]
        ids, files, labels, boxes, box_labels, sizes = [], [], [], [], [], []
        for img_id in sorted(coco.getImgIds()):
            img = coco.imgs[img_id]
            what = f"image {img_id}"
            file_name = relative_path(_field(img, "file_name", ann_path, what), f"{ann_path}: {what}")
            canvas = (_dimension(img, "height", ann_path, what), _dimension(img, "width", ann_path, what))
            label = np.zeros(len(cat_ids), dtype=bool)
            b, bl, names = [], [], []
            for ann in coco.imgToAnns.get(img_id, []):
                ann_what = f"annotation {ann.get('id')} of image {img_id}"
                cat = ann["category_id"]  # an id of a category: load_coco checked
                if ann.get("iscrowd", 0) not in (0, 1):
                    raise DataError(f"{ann_path}: {ann_what}: iscrowd is {ann['iscrowd']!r}, expected 0 or 1")
                is_crowd = bool(ann.get("iscrowd", 0))
                if is_crowd and crowd == "ignore":
                    continue
                label[contiguous[cat]] = True
                if is_crowd and crowd == "label":
                    continue
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
            ids.append(str(img_id))
            files.append(file_name)
            labels.append(label)
            boxes.append(b_arr)
            box_labels.append(bl_arr)
            sizes.append(canvas)
        del coco
        if holdout and split in ("train", HOLDOUT_SPLIT):
            held = random_subset(len(ids), holdout_count(len(ids), holdout), holdout_seed)
            kept = [k for k in range(len(ids)) if held[k] == (split == HOLDOUT_SPLIT)]
            ids, files, labels, boxes, box_labels, sizes = ([column[k] for k in kept] for column in (
                ids, files, labels, boxes, box_labels, sizes))
        records = Records.build(ids, files, np.array(labels, bool).reshape(-1, len(cat_ids)), boxes, box_labels,
                                sizes=sizes)
        self.annotation_path = ann_path
        super().__init__(records, classes, name="coco2014", split=split, image_root=image_root,
                         box_policy=box_policy, **options)

    def annotation_file(self, index: int) -> str:
        return f"{self.annotation_path} (image {self.records.ids[index]})"
