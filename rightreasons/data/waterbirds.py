"""Waterbirds-100 with bird boxes (docs/science.md, model guidance).

Layout (the release of Petryk et al., "waterbird_1.0_forest2water2")::

    root/metadata.csv       columns img_filename, y (0 landbird, 1 waterbird), place (0 land, 1 water),
                            split (0 train, 1 val, 2 test); other columns are ignored
    root/<img_filename>     the images
    root/boxes.csv          the bird boxes (our format), built from the CUB-200-2011 bird masks (``segmentations/``)
                            by ``rightreasons prepare waterbirds100 --root ROOT --segmentations DIR``

Box file format: CSV with header ``img_filename,x1,y1,x2,y2`` and one row per image; XYXY in pixels of that image,
0-based with exclusive ``x2, y2`` (the box covers pixel columns ``x1 … x2 − 1``), e.g.
``001.Black_footed_Albatross/Black_Footed_Albatross_0046_18.jpg,31,40,420,297``.
``box_file=None`` (in a config: ``data.options.box_file=null``, with ``data.annotated_fraction=0``) loads without
boxes: every image has ``has_boxes=False``, training works without guidance and reports no localisation metrics.

Groups (``sample["group"]``, :data:`GROUP_NAMES`): ``group = 2·y + place`` — 0 = G1 landbird/land, 1 = G2
landbird/water, 2 = G3 waterbird/land (the worst group), 3 = G4 waterbird/water.

Tasks: ``"conventional"`` — classes (landbird, waterbird), the guidance mask is the bird box; ``"reversed"`` —
classes (land, water), the mask is everything *outside* the bird box, given as up to four boxes whose union is that
region (:func:`rightreasons.boxes.complement_boxes`), so it moves correctly with crops and flips.

Validation: by default the ``val`` split keeps only G1 and G4, i.e. it is drawn like the (100 % correlated) training
split, so that model selection does not see the test distribution; ``train_like_val=False`` keeps all groups.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from .base import AnnotatedDataset, Records
from ..boxes import complement_boxes
from .box_policy import check_boxes
from ..errors import UsageError
from .errors import DataError
from .io import csv_rows, relative_path, require_dir, require_file

__all__ = ["GROUP_NAMES", "WATERBIRDS_SPLITS", "WATERBIRDS_TASKS", "Waterbirds100", "read_box_file",
           "read_metadata"]

GROUP_NAMES = ("G1 landbird/land", "G2 landbird/water", "G3 waterbird/land", "G4 waterbird/water")
WATERBIRDS_TASKS = {"conventional": ("landbird", "waterbird"), "reversed": ("land", "water")}
SPLIT_CODES = {"train": 0, "val": 1, "test": 2}
WATERBIRDS_SPLITS = tuple(SPLIT_CODES)
BOX_COLUMNS = ("img_filename", "x1", "y1", "x2", "y2")


def _int(row: dict[str, str], key: str, allowed: tuple[int, ...], path: Path, line: int) -> int:
    value = (row.get(key) or "").strip()
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not number.is_integer():  # also nan and inf
        raise DataError(f"{path}: line {line}: {key}={value!r} is not an integer")
    number = int(number)
    if number not in allowed:
        raise DataError(f"{path}: line {line}: {key}={number}; expected one of {allowed}")
    return number


def read_metadata(path: Path) -> list[tuple[str, int, int, int]]:
    """``(img_filename, y, place, split)`` for every row of ``metadata.csv``."""
    out, seen = [], set()
    for line, row in csv_rows(path, ("img_filename", "y", "place", "split")):
        name = (row["img_filename"] or "").strip()
        if not name or name in seen:
            raise DataError(f"{path}: line {line}: {'empty' if not name else 'repeated'} img_filename {name!r}")
        relative_path(name, f"{path}: line {line}")
        seen.add(name)
        out.append((name, _int(row, "y", (0, 1), path, line), _int(row, "place", (0, 1), path, line),
                    _int(row, "split", (0, 1, 2), path, line)))
    return out


def read_box_file(path: Path) -> dict[str, np.ndarray]:
    """``img_filename → box [4]`` from a box file (format in the module docstring)."""
    boxes: dict[str, np.ndarray] = {}
    for line, row in csv_rows(path, BOX_COLUMNS):
        name = (row["img_filename"] or "").strip()
        try:
            box = np.array([float(row[c]) for c in BOX_COLUMNS[1:]], dtype=np.float32)
        except (TypeError, ValueError):
            raise DataError(f"{path}: line {line} ({name}): box {[row.get(c) for c in BOX_COLUMNS[1:]]} "
                            "is not four numbers") from None
        if name in boxes:
            raise DataError(f"{path}: line {line}: second box for {name!r} (one bird box per image expected)")
        check_boxes(box[None], np.zeros(1), None, "error", f"{path}: line {line} ({name})")
        boxes[name] = box
    return boxes


class Waterbirds100(AnnotatedDataset):
    """Waterbirds-100 with bird boxes; ``task`` ∈ :data:`WATERBIRDS_TASKS`. See the module docstring."""

    def __init__(self, root: str | os.PathLike, split: str = "train", *, task: str = "conventional",
                 box_file: str | os.PathLike | None = "boxes.csv", train_like_val: bool = True,
                 **options) -> None:
        if split not in SPLIT_CODES:
            raise UsageError(f"unknown Waterbirds split {split!r}; expected one of {', '.join(SPLIT_CODES)}")
        if task not in WATERBIRDS_TASKS:
            raise UsageError(f"unknown Waterbirds task {task!r} (data.options.task); expected one of "
                             f"{', '.join(WATERBIRDS_TASKS)}")
        root = require_dir(root, "Waterbirds-100")
        meta_path = require_file(root / "metadata.csv", "Waterbirds metadata.csv")
        rows = [r for r in read_metadata(meta_path) if r[3] == SPLIT_CODES[split]]
        if split == "val" and train_like_val:
            rows = [r for r in rows if r[1] == r[2]]
        if box_file is None:
            if options.get("annotated_fraction", 0.0):
                raise UsageError(f"annotated_fraction={options['annotated_fraction']} needs a box file, but "
                                 "data.options.box_file=null loads no boxes: add data.annotated_fraction=0 to train "
                                 "without boxes, or build the box file from the CUB-200-2011 bird masks with "
                                 f"`rightreasons prepare waterbirds100 --root {root} --segmentations "
                                 "DIR/segmentations`")
            options["annotated_fraction"] = 0.0
            box_table = {}
        else:
            box_path = Path(box_file) if Path(box_file).is_absolute() else root / box_file
            if not box_path.is_file():
                raise DataError(f"{box_path}: Waterbirds box file not found; build it from the CUB-200-2011 bird "
                                f"masks (segmentations.tgz, which unpacks to segmentations/) with `rightreasons "
                                f"prepare waterbirds100 --root {root} --segmentations DIR/segmentations`, or train "
                                "without boxes (no guidance, no localisation metrics) with the overrides "
                                "data.options.box_file=null data.annotated_fraction=0")
            box_table = read_box_file(box_path)
            missing = [r[0] for r in rows if r[0] not in box_table]
            if missing:
                raise DataError(f"{box_path}: no box for {len(missing)} image(s) of split {split!r}, "
                                f"e.g. {', '.join(missing[:3])}")
        self.task = task
        target = (lambda r: r[1]) if task == "conventional" else (lambda r: r[2])
        labels = np.zeros((len(rows), 2), dtype=bool)
        labels[np.arange(len(rows)), [target(r) for r in rows]] = True
        boxes = [box_table[r[0]][None] if r[0] in box_table else np.zeros((0, 4), np.float32) for r in rows]
        box_labels = [np.full(len(b), target(r), dtype=np.int64) for b, r in zip(boxes, rows)]
        records = Records.build([r[0] for r in rows], [r[0] for r in rows], labels, boxes, box_labels,
                                groups=[2 * r[1] + r[2] for r in rows])
        super().__init__(records, WATERBIRDS_TASKS[task], name="waterbirds100", split=split, image_root=root,
                         group_names=GROUP_NAMES, **options)

    def guidance_boxes(self, index: int, boxes: np.ndarray, box_labels: np.ndarray,
                       canvas_size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """Conventional task: the bird box; reversed task: boxes tiling the image outside the bird box."""
        if self.task == "conventional" or len(boxes) == 0:
            return boxes, box_labels
        strips = complement_boxes(boxes[0], canvas_size).numpy()
        return strips, np.full(len(strips), box_labels[0], dtype=np.int64)
