"""Any COCO-format dataset (``coco-json``): one COCO instances JSON per split and a folder of images, as CVAT, Label
Studio and Roboflow export them.

``files`` maps each split to its JSON file, relative to ``root`` (default ``<split>.json``); the ``file_name`` of an
image is relative to ``image_dir`` (relative to ``root``), by default the folder of the split's JSON file::

    Roboflow      train/_annotations.coco.json, train/<image>    files: {train: train/_annotations.coco.json, ...}
    CVAT          annotations/instances_default.json, images/<image>    files: {...}, image_dir: images
    Label Studio  result.json, images/<image> (file_name "images/<image>")    files: {train: result.json}

* Classes are the file's categories in increasing id order (0- or 1-based, with gaps or not), named by ``name``
  (unique). A category that no annotation uses and whose name is the ``supercategory`` of other categories groups
  them and is not a class (Roboflow's category 0).
* ``labels [K]`` multi-hot: the classes of the image's annotations. Crowd annotations (``iscrowd: 1``) follow ``crowd``
  as in :mod:`.coco` (``"label"``: label, no box; ``"ignore"``; ``"box"``: a box like any other — CVAT writes mask
  annotations as crowd RLEs). Images without annotations are negatives (no label) unless
  ``include_unannotated=False`` drops them.
* Boxes ``[x, y, w, h]`` (floats allowed; ``area`` is not read) become XYXY pixels; under the default
  ``box_policy="error"`` a box reaching outside the image is an error naming the file, annotation and image.
* ``mask [H, W]`` uint8 from the ``segmentation`` polygons and RLEs: 0 background, ``k + 1`` on an object of class k
  (later annotations paint over earlier ones), 255 on crowd regions under ``crowd="label"``. An empty
  ``segmentation`` (a box-only annotation) adds nothing; an image none of whose annotations has one gets no mask.
* Splits: one file per split, or ``holdout`` (a number of images, or a fraction in (0, 1)) held out of the train file
  with ``holdout_seed`` as split ``val`` (``files`` then names no ``val`` file).
* Ids are the image paths relative to ``root`` (labelling tools restart image ids in every file), so two splits that
  hold the same image file are refused as leakage.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from pycocotools import mask as mask_utils
from pycocotools.coco import COCO
from torch import Tensor

from ..errors import UsageError
from .base import AnnotatedDataset
from .box_policy import require_box_policy
from .coco import CROWD_POLICIES, check_holdout, index_coco, load_coco
from .errors import DataError
from .io import require_dir, require_file
from .options import require_int

__all__ = ["COCO_JSON_SPLITS", "CocoJson", "class_categories"]

COCO_JSON_SPLITS = ("train", "val", "test")
"""The splits of the default ``files`` (``train.json``, ``val.json``, ``test.json``)."""


def class_categories(coco: COCO) -> list[int]:
    """The category ids of ``coco`` that are classes, in increasing order: all but those that no annotation uses and
    whose name is the ``supercategory`` of another category."""
    used = {ann["category_id"] for ann in coco.anns.values()}
    parents = {(cat.get("supercategory"), cid) for cid, cat in coco.cats.items()}
    return sorted(cid for cid, cat in coco.cats.items()
                  if cid in used or not any(name == cat.get("name") and child != cid for name, child in parents))


def _split_files(files: object, holdout: int | float) -> dict[str, str]:
    """The ``files`` option checked: split → JSON file; the default ``<split>.json`` for :data:`COCO_JSON_SPLITS`."""
    if files is None:
        return {split: f"{split}.json" for split in COCO_JSON_SPLITS if not (holdout and split == "val")}
    if not isinstance(files, dict) or not files or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                                           for k, v in files.items()):
        raise UsageError(f"dataset option 'files' must map split names to COCO JSON files (e.g. {{train: train.json, "
                         f"val: val.json}}), got {files!r}")
    if holdout and "val" in files:
        raise UsageError("dataset option 'holdout' makes split 'val' of the train file; 'files' may not name a val "
                         "file as well")
    return files


class CocoJson(AnnotatedDataset):
    """A COCO-format dataset of one's own; see the module docstring for the options and the layouts of the labelling
    tools."""

    def __init__(self, root: str | os.PathLike, split: str = "train", *, files: dict[str, str] | None = None,
                 image_dir: str | None = None, crowd: str = "label", include_unannotated: bool = True,
                 holdout: int | float = 0, holdout_seed: int = 0, box_policy: str = "error", **options) -> None:
        check_holdout(holdout)
        require_int("holdout_seed", holdout_seed, 0)
        require_box_policy(box_policy)
        files = _split_files(files, holdout)
        part = "train" if holdout and split == "val" else split
        if part not in files:
            raise UsageError(f"unknown coco-json split {split!r}; expected one of {', '.join(files)}"
                             f"{', val (held out of train)' if holdout else ''} (dataset option 'files')")
        if crowd not in CROWD_POLICIES:
            raise UsageError(f"dataset option 'crowd' must be one of {', '.join(CROWD_POLICIES)}, got {crowd!r}")
        if not isinstance(include_unannotated, bool):
            raise UsageError(f"dataset option 'include_unannotated' must be true or false, got {include_unannotated!r}")
        if image_dir is not None and not (isinstance(image_dir, str) and image_dir.strip()):
            raise UsageError(f"dataset option 'image_dir' must be a folder relative to the root, got {image_dir!r}")
        root = require_dir(root, "coco-json dataset")
        ann_path = require_file(root / files[part], "COCO annotation file")
        image_root = require_dir(root / image_dir if image_dir else ann_path.parent, "image")
        coco = load_coco(ann_path)
        index = index_coco(coco, ann_path, class_categories(coco), crowd, include_unannotated, box_policy, masks=True)
        del coco
        paths = [Path(os.path.relpath(image_root / name, root)).as_posix() for name in index.files]
        first: dict[str, str] = {}
        for path, image_id in zip(paths, index.ids):
            if path in first:
                raise DataError(f"{ann_path}: images {first[path]} and {image_id} both name the file {path}; expected "
                                "every image once")
            first[path] = image_id
        index.ids = paths
        if holdout and part == "train":
            index = index.held_out(holdout, holdout_seed, split == "val")
        self.annotation_path = ann_path
        counts = [rle["counts"] for image in index.segments for _, rle in image]
        self._segment_offsets = np.cumsum([0, *map(len, index.segments)])
        self._segment_values = np.array([value for image in index.segments for value, _ in image], np.uint8)
        self._count_offsets = np.cumsum([0, *map(len, counts)])
        self._counts = np.frombuffer(b"".join(counts), np.uint8)
        super().__init__(index.records(), index.classes, name="coco-json", split=split, image_root=image_root,
                         box_policy=box_policy, **options)

    def annotation_file(self, index: int) -> str:
        return f"{self.annotation_path} (image {self.records.files[index]})"

    def load_mask(self, index: int) -> Tensor | None:
        """uint8 ``[H, W]`` mask of sample ``index`` painted from its segmentations, or None without any."""
        lo, hi = self._segment_offsets[index], self._segment_offsets[index + 1]
        if lo == hi:
            return None
        h, w = (int(v) for v in self.records.sizes[index])
        mask = np.zeros((h, w), np.uint8)
        for s in range(lo, hi):
            counts = self._counts[self._count_offsets[s]:self._count_offsets[s + 1]].tobytes()
            mask[mask_utils.decode({"size": [h, w], "counts": counts}) > 0] = self._segment_values[s]
        return torch.from_numpy(mask)
