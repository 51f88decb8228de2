"""The common dataset machinery: a compact record table and the map-style dataset every loader builds on.

Loaders (VOC, COCO, Waterbirds, the synthetic benchmark) only parse their annotation files into :class:`Records`;
images are decoded lazily in ``__getitem__``. Records live in a few numpy arrays (no per-image Python objects), so
memory does not grow with the number of DataLoader workers (no copy-on-read of reference counts after ``fork``).

Errors: anything that goes wrong while reading sample ``i`` is raised as :class:`DataError` naming the file and the
record; ``DataLoader`` re-raises it in the main process with the same type and message.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from .annotations import select_annotated
from ..boxes import dilate_boxes
from .box_policy import check_boxes, require_box_policy
from .errors import DataError, where
from .io import MAX_PIXELS, inside_root, read_image, read_mask
from .options import require_int, require_number
from .sample import make_sample
from .transforms import takes_uint8

__all__ = ["AnnotatedDataset", "Records", "check_points"]


@dataclass(frozen=True)
class Records:
    """Annotations of N images with M boxes in total.

    ``ids [N]`` str, ``files [N]`` str (image paths relative to the dataset's image root), ``labels [N, K]`` bool,
    ``box_offsets [N + 1]`` (boxes of image i are rows ``box_offsets[i]:box_offsets[i + 1]``), ``boxes [M, 4]``
    float32 XYXY pixels, ``box_labels [M]`` int64, optional ``groups [N]`` int64, ``mask_files [N]`` str
    (``""`` where an image has no segmentation) and ``sizes [N, 2]`` int64, the ``(H, W)`` an annotation file declares
    for each image (VOC's ``<size>``, COCO's ``height``/``width``), which its boxes were checked against; optional
    ``point_offsets [N + 1]``, ``points [P, 2]`` float32 XY pixels and ``point_labels [P]`` int64 (one click per
    object), for datasets whose annotations hold points.
    """

    ids: np.ndarray
    files: np.ndarray
    labels: np.ndarray
    box_offsets: np.ndarray
    boxes: np.ndarray
    box_labels: np.ndarray
    groups: np.ndarray | None = None
    mask_files: np.ndarray | None = None
    sizes: np.ndarray | None = None
    point_offsets: np.ndarray | None = None
    points: np.ndarray | None = None
    point_labels: np.ndarray | None = None

    @classmethod
    def build(cls, ids: Sequence[str], files: Sequence[str], labels: np.ndarray, boxes: Sequence[np.ndarray],
              box_labels: Sequence[np.ndarray], groups: Sequence[int] | None = None,
              mask_files: Sequence[str] | None = None, sizes: Sequence[tuple[int, int]] | None = None,
              points: Sequence[np.ndarray] | None = None, point_labels: Sequence[np.ndarray] | None = None) -> Records:
        """From per-image lists: ``boxes[i] [B_i, 4]`` and ``box_labels[i] [B_i]``; ``points[i] [P_i, 2]`` and
        ``point_labels[i] [P_i]`` or None for a dataset without points."""
        counts = np.array([len(b) for b in boxes], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        flat_boxes = np.concatenate([np.asarray(b, np.float32).reshape(-1, 4) for b in boxes]) if len(boxes) \
            else np.zeros((0, 4), np.float32)
        flat_labels = np.concatenate([np.asarray(b, np.int64).reshape(-1) for b in box_labels]) if len(boxes) \
            else np.zeros(0, np.int64)
        records = cls(ids=np.array(ids, dtype=str), files=np.array(files, dtype=str),
                      labels=np.asarray(labels, dtype=bool), box_offsets=offsets, boxes=flat_boxes,
                      box_labels=flat_labels,
                      groups=None if groups is None else np.asarray(groups, dtype=np.int64),
                      mask_files=None if mask_files is None else np.array(mask_files, dtype=str),
                      sizes=None if sizes is None else np.asarray(sizes, dtype=np.int64).reshape(-1, 2),
                      **({} if points is None else _flat_points(points, point_labels)))
        unique, counts = np.unique(records.ids, return_counts=True)
        if (counts > 1).any():
            raise ValueError(f"record ids must be unique; {unique[counts > 1][0]!r} occurs {counts.max()} times")
        return records

    def __len__(self) -> int:
        return len(self.ids)

    def boxes_of(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """``boxes [B, 4]`` and ``box_labels [B]`` of image i."""
        lo, hi = self.box_offsets[i], self.box_offsets[i + 1]
        return self.boxes[lo:hi], self.box_labels[lo:hi]

    def points_of(self, i: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``points [P, 2]`` and ``point_labels [P]`` of image i, or None for a dataset without points."""
        if self.points is None:
            return None
        lo, hi = self.point_offsets[i], self.point_offsets[i + 1]
        return self.points[lo:hi], self.point_labels[lo:hi]


def _flat_points(points: Sequence[np.ndarray], labels: Sequence[np.ndarray] | None) -> dict[str, np.ndarray]:
    """The ``point_offsets``, ``points`` and ``point_labels`` columns of :class:`Records` from per-image lists."""
    if labels is None or len(labels) != len(points):
        raise ValueError(f"got {len(points)} point lists but {None if labels is None else len(labels)} label lists")
    return {"point_offsets": np.concatenate([[0], np.cumsum([len(p) for p in points])]).astype(np.int64),
            "points": np.concatenate([np.zeros((0, 2), np.float32),
                                      *(np.asarray(p, np.float32).reshape(-1, 2) for p in points)]),
            "point_labels": np.concatenate([np.zeros(0, np.int64),
                                            *(np.asarray(lab, np.int64).reshape(-1) for lab in labels)])}


def check_points(points: np.ndarray, canvas_size: tuple[int, int], source: str) -> None:
    """Refuse a point ``[P, 2]`` XY outside the image ``[0, W] × [0, H]`` with a :class:`DataError` naming ``source``
    and the point."""
    h, w = canvas_size
    outside = ~((points[:, 0] >= 0) & (points[:, 0] <= w) & (points[:, 1] >= 0) & (points[:, 1] <= h))
    if outside.any():
        x, y = (float(v) for v in points[outside][0])
        raise DataError(f"{source}: point ({x:g}, {y:g}) lies outside the image of {w} × {h} pixels (W × H); points "
                        "are XY pixels of the image as viewers show it (EXIF orientation applied)")


class AnnotatedDataset(Dataset):
    """Map-style dataset of samples in the common format (:mod:`rightreasons.data.sample`).

    Options shared by every dataset:

    * ``transform``: a callable on the sample dict (e.g. :func:`rightreasons.data.train_transform`).
    * ``annotated_fraction`` / ``annotation_seed``: keep boxes on exactly that fraction of the images, chosen by the
      seed (limited annotations, docs/science.md, model guidance); the others, and images without a positive label
      (nothing to localise), get ``has_boxes=False`` and no boxes.
    * ``box_dilation``: coarse boxes — every side moves out by this fraction of the box size, clipped to the image.
    * ``box_policy``: ``"error"``, ``"clip"`` or ``"drop"`` for invalid boxes (see :data:`BOX_POLICIES`).
    * ``max_pixels``: images with more pixels are refused before decoding (:data:`~rightreasons.data.io.MAX_PIXELS`);
      ``None`` lifts the limit.

    ``group_names`` (set by the loader, not an option) name the values of ``records.groups`` (e.g. Waterbirds' G1–G4).
    """

    def __init__(self, records: Records, classes: Sequence[str], *, name: str, split: str,
                 image_root: str | os.PathLike | None = None, transform: Callable[[dict], dict] | None = None,
                 annotated_fraction: float = 1.0, annotation_seed: int = 0, box_dilation: float = 0.0,
                 box_policy: str = "clip", max_pixels: int | None = MAX_PIXELS,
                 group_names: Sequence[str] | None = None) -> None:
        require_box_policy(box_policy)
        require_number("box_dilation", box_dilation, 0.0)
        if max_pixels is not None:
            require_int("max_pixels", max_pixels, 1)
        if records.labels.shape[1:] != (len(classes),):
            raise ValueError(f"labels of shape {records.labels.shape} do not match {len(classes)} classes")
        if records.groups is not None and group_names is not None and len(records.groups) \
                and not 0 <= records.groups.min() <= records.groups.max() < len(group_names):
            raise ValueError(f"group indices {records.groups.min()}..{records.groups.max()} do not match the "
                             f"{len(group_names)} group names {list(group_names)}")
        self.records = records
        self.classes = tuple(classes)
        self._group_names = None if group_names is None else tuple(group_names)
        self.name = name
        self.split = split
        self.image_root = None if image_root is None else Path(image_root)
        self.transform = transform
        self.box_policy = box_policy
        self.box_dilation = float(box_dilation)
        self.max_pixels = max_pixels
        self.annotated = select_annotated(len(records), annotated_fraction, annotation_seed)

    # ---- metadata ---------------------------------------------------------------------------------------------
    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def ids(self) -> list[str]:
        return self.records.ids.tolist()

    @property
    def labels(self) -> Tensor:
        """``[N, K]`` float multi-hot labels of all images (without decoding any image)."""
        return torch.from_numpy(self.records.labels.astype(np.float32))

    @property
    def positive_labels(self) -> Tensor:
        """``[N, K]`` bool: the classes of every image, sharing the records' memory (no float copy, which for
        ImageNet's 1.28 M × 1000 labels would take 5 GB)."""
        return torch.from_numpy(self.records.labels)

    @property
    def groups(self) -> Tensor | None:
        """``[N]`` long group index per image, or None for datasets without groups."""
        return None if self.records.groups is None else torch.from_numpy(self.records.groups.copy())

    @property
    def group_names(self) -> tuple[str, ...] | None:
        """The name of every group index (``"0"``, ``"1"``, … when the loader gave none), or None without groups."""
        if self.records.groups is None:
            return None
        if self._group_names is not None:
            return self._group_names
        count = int(self.records.groups.max()) + 1 if len(self.records.groups) else 0
        return tuple(str(g) for g in range(count))

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(name={self.name!r}, split={self.split!r}, n={len(self)}, "
                f"classes={self.num_classes}, annotated={int(self.annotated.sum())})")

    # ---- loading ----------------------------------------------------------------------------------------------
    def source(self, index: int) -> str:
        """The file that sample ``index`` is read from (used in error messages)."""
        if self.image_root is None:
            return f"{self.name}[{self.split}]"
        return str(self.image_root / self.records.files[index])

    def record(self, index: int) -> str:
        """Sample ``index`` in error messages: its id, which names it the same in every split that holds it."""
        return f"id {self.records.ids[index]}"

    def annotation_file(self, index: int) -> str:
        """The annotation file that declares the size of sample ``index``'s image (used in error messages)."""
        return f"the annotations of {self.name}"

    def load_image(self, index: int) -> Tensor:
        """uint8 or float ``[3, H, W]`` image of sample ``index`` (inside the image root, at most ``max_pixels``)."""
        path = inside_root(self.source(index), self.image_root, self.record(index))
        return read_image(path, self.max_pixels)

    def load_mask(self, index: int) -> Tensor | None:
        """uint8 ``[H, W]`` segmentation of sample ``index`` or None."""
        if self.records.mask_files is None or not self.records.mask_files[index]:
            return None
        path = self.image_root / self.records.mask_files[index]
        return read_mask(inside_root(path, self.image_root, self.record(index)),
                         self.max_pixels)

    def guidance_boxes(self, index: int, boxes: np.ndarray, box_labels: np.ndarray,
                       canvas_size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """Hook turning the annotated boxes into the boxes whose union is the guidance mask (identity here; the
        reversed Waterbirds task uses the complement of the bird box)."""
        return boxes, box_labels

    def load(self, index: int, *, keep_uint8: bool = False) -> dict[str, Any]:
        """Sample ``index`` before the transform; ``keep_uint8`` leaves a decoded uint8 image as it is, for a
        transform that takes it (:func:`~rightreasons.data.transforms.takes_uint8`), instead of converting it to
        float."""
        record = self.record(index)
        image = self.load_image(index)
        h, w = image.shape[-2:]
        if self.records.sizes is not None and tuple(self.records.sizes[index]) != (h, w):
            declared_h, declared_w = (int(v) for v in self.records.sizes[index])
            turned = ("; the declared size is the image's turned by 90°: images are read with their EXIF orientation "
                      "applied, as viewers show them, so an annotation of the stored, unturned pixels does not fit"
                      if (declared_h, declared_w) == (w, h) else "")
            raise DataError(f"{where(self.source(index), record)}: the image file is {w} × {h} pixels (W × H), but "
                            f"{self.annotation_file(index)} declares {declared_w} × {declared_h}; its boxes are in the "
                            f"declared size's pixels and would be misplaced (fix the annotation's size or the "
                            f"image){turned}")
        boxes, box_labels = self.records.boxes_of(index)
        boxes, box_labels = check_boxes(boxes, box_labels, (h, w), self.box_policy,
                                        where(self.source(index), record))
        boxes, box_labels = self.guidance_boxes(index, boxes, box_labels, (h, w))
        # an image without a positive label (a negative of one's own data) has nothing to localise
        has_boxes = bool(self.annotated[index]) and bool(self.records.labels[index].any())
        if not has_boxes:
            boxes, box_labels = boxes[:0], box_labels[:0]
        boxes = torch.from_numpy(np.ascontiguousarray(boxes, dtype=np.float32))
        if self.box_dilation:
            boxes = dilate_boxes(boxes, self.box_dilation, (h, w))
        mask = self.load_mask(index)
        if mask is not None and tuple(mask.shape) != (h, w):
            turned = ("; it is the image's size turned by 90°: the image is read with its EXIF orientation applied, "
                      "so its mask must be drawn on the image as viewers show it"
                      if tuple(mask.shape) == (w, h) else "")
            raise DataError(f"{where(self.source(index), record)}: segmentation mask of size {tuple(mask.shape)} "
                            f"does not match the image size {(h, w)}{turned}")
        group = None if self.records.groups is None else int(self.records.groups[index])
        points = self.records.points_of(index)
        if points is not None:
            check_points(points[0], (h, w), where(self.source(index), record))
            points = tuple(torch.from_numpy(np.array(p if has_boxes else p[:0])) for p in points)
        return make_sample(image, torch.from_numpy(self.records.labels[index].astype(np.float32)), boxes,
                           torch.from_numpy(np.asarray(box_labels, dtype=np.int64)),
                           has_boxes=has_boxes, id=str(self.records.ids[index]), mask=mask,
                           group=group, keep_uint8=keep_uint8, points=points)

    def load_checked(self, index: int, *, keep_uint8: bool = False) -> dict[str, Any]:
        """Sample ``index`` before the transform (:meth:`load`), anything that goes wrong raised as a
        :class:`DataError` naming the file and record: the one check of a sample, through which training reads
        every sample and ``rightreasons prepare`` checks them (:mod:`rightreasons.data.verify`)."""
        try:
            return self.load(index, keep_uint8=keep_uint8)
        except DataError:
            raise
        except Exception as e:  # give worker errors a file and a record; DataLoader re-raises DataError as is
            raise DataError(f"{where(self.source(index), self.record(index))}: {type(e).__name__}: {e}") from e

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {self!r}")
        index = index % len(self)
        sample = self.load_checked(index, keep_uint8=takes_uint8(self.transform))
        if self.transform is None:
            return sample
        try:
            return self.transform(sample)
        except Exception as e:
            raise DataError(f"{where(self.source(index), self.record(index))}: transform failed: "
                            f"{type(e).__name__}: {e}") from e
