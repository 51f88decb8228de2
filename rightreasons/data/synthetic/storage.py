"""The synthetic benchmark on disk and in memory.

On-disk format (:func:`write_synthetic`, ``rightreasons data synth --out DIR``; read by :func:`load_synthetic`
through the same file-loading path as the real datasets)::

    DIR/index.json
    DIR/<split>/images/<k:06d>.png     RGB, uint8
    DIR/<split>/masks/<k:06d>.png      greyscale, 0 background, class + 1 on object pixels

``index.json`` = ``{"format": "rightreasons-synthetic", "version": 2, "name": "synthetic-birds", "classes": [...],
"config": {size, correlation, difficulty, seed, max_objects, sizes}, "splits": {"train": [record, ...], ...}}`` with
``record = {"id": "train-000000", "image": "train/images/000000.png", "mask": "train/masks/000000.png",
"labels": [class, ...], "boxes": [[x1, y1, x2, y2], ...], "box_labels": [class, ...], "points": [[x, y], ...],
"point_labels": [class, ...], "group": g}`` (boxes XYXY in pixels; points XY in pixels, one click per object
(:func:`~.draw.click_points`), the pixel ``(⌊x⌋, ⌊y⌋)`` on the object; ``group`` the Waterbirds group or the
multi-label context). ``index.json`` is written last and atomically, so a directory with an index is complete.

Versions: 2 added ``points`` and ``point_labels`` (required in every record); an index of version 1, written before
the generator drew points, is still read, as a dataset without points (guidance with ``regions: points`` then has
nothing to guide with; write the data again for points).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image
from torch import Tensor

from ...choices import SYNTHETIC_NAMES as NAMES
from ..base import AnnotatedDataset, Records
from ...errors import ConfigError, UsageError
from ...fileio import open_no_follow, refuse_links, require_free_space, writable_directory, write_json_atomic
from ..errors import DataError
from ..io import read_text, relative_path, require_file
from ..waterbirds import GROUP_NAMES
from .generate import CONTEXTS, DEFAULT_SIZES, SPLITS, SyntheticConfig, SyntheticData, generate

__all__ = ["FORMAT", "GROUPS", "NAMES", "READABLE", "VERSION", "SyntheticDataset", "load_synthetic", "write_synthetic"]

FORMAT, VERSION = "rightreasons-synthetic", 2
READABLE = (1, 2)
"""The index versions :func:`load_synthetic` reads (version 1: no points)."""
#: what ``sample["group"]`` means per task: the Waterbirds groups, or the context background
GROUPS = {"birds": GROUP_NAMES, "multilabel": CONTEXTS}


class SyntheticDataset(AnnotatedDataset):
    """A generated split served from memory (images are kept as one uint8 tensor)."""

    def __init__(self, name: str, split: str, data: SyntheticData, **options) -> None:
        self.images, self.masks = data.images, data.masks
        super().__init__(data.records, data.classes, name=name, split=split, group_names=GROUPS[_task_of(name)],
                         **options)

    def source(self, index: int) -> str:
        return f"{self.name}[{self.split}] image {index}"

    def load_image(self, index: int) -> Tensor:
        return self.images[index]

    def load_mask(self, index: int) -> Tensor:
        return self.masks[index]


def _task_of(name: str) -> str:
    if name not in NAMES:
        raise ValueError(f"unknown synthetic dataset {name!r}; expected one of {', '.join(NAMES)}")
    return NAMES[name]


def write_synthetic(out: str | os.PathLike, name: str, config: SyntheticConfig | None = None,
                    splits: Sequence[str] = SPLITS) -> Path:
    """Generate ``splits`` of dataset ``name`` and write them in the on-disk format; returns ``out/index.json``.

    The index of an earlier dataset in ``out`` is removed first, and a disk with less free space than the raw pixels
    (4 bytes each) is refused before any work; a write that fails all the same (a full disk, a file size limit) is a
    :class:`UsageError` naming ``out`` and the cause. Either way ``out`` then holds no ``index.json``, so no
    half-written dataset is ever loaded."""
    config = config or SyntheticConfig()
    task = _task_of(name)
    out = writable_directory(out)
    refuse_links(out, ["index.json", *(f"{split}/{folder}" for split in splits for folder in ("images", "masks"))])
    pixels = sum(config.sizes.get(split, DEFAULT_SIZES[split]) for split in splits) * config.size ** 2
    require_free_space(out, 4 * pixels, f"the synthetic dataset {name} (images and masks)")
    (out / "index.json").unlink(missing_ok=True)
    try:
        return _write_splits(out, name, task, config, splits)
    except OSError as e:
        raise UsageError(f"{out}: cannot write the synthetic dataset {name}: {e}; the folder holds no index.json, so "
                         "nothing half-written will be loaded (free space, then run the command again)") from e


def _write_splits(out: Path, name: str, task: str, config: SyntheticConfig, splits: Sequence[str]) -> Path:
    index: dict[str, Any] = {"format": FORMAT, "version": VERSION, "name": name, "classes": None,
                             "config": {**asdict(config), "correlation": config.correlation_for(task)},
                             "splits": {}}
    for split in splits:
        data = generate(task, split, config=config)
        index["classes"] = list(data.classes)
        (out / split / "images").mkdir(parents=True, exist_ok=True)
        (out / split / "masks").mkdir(parents=True, exist_ok=True)
        entries = []
        for i in range(len(data.records)):
            image_file, mask_file = f"{split}/images/{i:06d}.png", f"{split}/masks/{i:06d}.png"
            for file, pixels in ((image_file, data.images[i].permute(1, 2, 0)), (mask_file, data.masks[i])):
                with open_no_follow(out / file, "wb") as f:  # never through a link planted at an image's name
                    Image.fromarray(pixels.numpy()).save(f, format="PNG")
            boxes, box_labels = data.records.boxes_of(i)
            points, point_labels = data.records.points_of(i)
            entry = {"id": str(data.records.ids[i]), "image": image_file, "mask": mask_file,
                     "labels": np.flatnonzero(data.records.labels[i]).tolist(), "boxes": boxes.tolist(),
                     "box_labels": box_labels.tolist(), "points": points.tolist(),
                     "point_labels": point_labels.tolist()}
            if data.records.groups is not None:
                entry["group"] = int(data.records.groups[i])
            entries.append(entry)
        index["splits"][split] = entries
    return write_json_atomic(out / "index.json", index)  # last: a dataset without its index is not one


def _records_from_index(path: Path, index: dict[str, Any], split: str, num_classes: int,
                        with_points: bool) -> Records:
    entries = index["splits"].get(split)
    if entries is None:
        raise DataError(f"{path}: no split {split!r}; the file has {', '.join(index['splits']) or 'none'}")
    if not isinstance(entries, list):
        raise DataError(f"{path}: splits.{split} is {type(entries).__name__}, expected a list of records")
    ids, files, masks, labels, boxes, box_labels, points, point_labels, groups = [], [], [], [], [], [], [], [], []
    for k, entry in enumerate(entries):
        record = f"splits.{split}[{k}]"
        try:
            classes = np.asarray(entry["labels"], dtype=np.int64).reshape(-1)
            b = np.asarray(entry["boxes"], dtype=np.float32).reshape(-1, 4)
            bl = np.asarray(entry["box_labels"], dtype=np.int64).reshape(-1)
            if len(b) != len(bl) or not all(((c >= 0) & (c < num_classes)).all() for c in (classes, bl)):
                raise ValueError(f"labels {classes.tolist()}, {len(b)} boxes and box_labels {bl.tolist()} do not fit "
                                 f"{num_classes} classes")
            if with_points:
                p = np.asarray(entry["points"], dtype=np.float32).reshape(-1, 2)
                pl = np.asarray(entry["point_labels"], dtype=np.int64).reshape(-1)
                if len(p) != len(pl) or not ((pl >= 0) & (pl < num_classes)).all() or not np.isfinite(p).all():
                    raise ValueError(f"{len(p)} points and point_labels {pl.tolist()} do not fit {num_classes} "
                                     "classes (or a point is not finite)")
                points.append(p)
                point_labels.append(pl)
            lab = np.zeros(num_classes, dtype=bool)
            lab[classes] = True
            ids.append(str(entry["id"]))
            image, mask = entry["image"], entry.get("mask", "")
            groups.append(int(entry.get("group", -1)))
        except (KeyError, TypeError, ValueError, IndexError, OverflowError) as e:
            raise DataError(f"{path}: {record}: malformed record ({type(e).__name__}: {e})") from e
        files.append(relative_path(image, f"{path}: {record}"))
        masks.append(relative_path(mask, f"{path}: {record}") if mask != "" else "")
        labels.append(lab)
        boxes.append(b)
        box_labels.append(bl)
    if len(set(ids)) != len(ids):
        raise DataError(f"{path}: splits.{split}: record id {next(i for i in ids if ids.count(i) > 1)!r} is repeated")
    has_groups = [g >= 0 for g in groups]
    if any(has_groups) and not all(has_groups):
        raise DataError(f"{path}: splits.{split}[{has_groups.index(False)}]: no 'group' while other records have one")
    return Records.build(ids, files, np.array(labels, bool).reshape(-1, num_classes), boxes, box_labels,
                         groups=groups if any(has_groups) else None, mask_files=masks,
                         **({"points": points, "point_labels": point_labels} if with_points else {}))


def load_synthetic(name: str, root: str | os.PathLike | None, split: str = "train", *, n: int | None = None,
                   size: int | None = None, correlation: float | None = None, difficulty: float | None = None,
                   seed: int | None = None, max_objects: int | None = None, **options) -> AnnotatedDataset:
    """Dataset ``name`` (``synthetic-birds`` / ``synthetic-multilabel``), split ``split``.

    ``root=None``: generated in memory with the given parameters (unset ones take :class:`SyntheticConfig`'s
    defaults; ``n`` images, by default ``DEFAULT_SIZES[split]``). ``root`` a directory written by
    :func:`write_synthetic` (``root/index.json`` or ``root/<name>/index.json``): read from disk through the
    file-loading path; the generation parameters are then those stored in the index and may not be given.
    ``options`` go to :class:`AnnotatedDataset`.
    """
    task = _task_of(name)
    generation = {k: v for k, v in (("size", size), ("correlation", correlation), ("difficulty", difficulty),
                                    ("seed", seed), ("max_objects", max_objects)) if v is not None}
    if root is None:
        return SyntheticDataset(name, split, generate(task, split, n, SyntheticConfig(**generation)), **options)
    if generation or n is not None:
        given = sorted([*generation, *(["n"] if n is not None else [])])
        raise ConfigError(f"{name} from {root}: the generation options {given} (config: data.options) cannot be set "
                          "when the dataset is read from disk, they are fixed by its index.json; remove them (e.g. "
                          "data.options={}) or drop data.root to generate the data in memory")
    root = Path(root)
    if not (root / "index.json").is_file() and (root / name / "index.json").is_file():
        root = root / name
    path = require_file(root / "index.json", f"{name} index (write one with `rightreasons data synth --out DIR`)")
    try:
        index = json.loads(read_text(path, f"{name} index"))
    except (json.JSONDecodeError, RecursionError) as e:
        raise DataError(f"{path}: malformed JSON: {e}") from e
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise DataError(f"{path}: not a {FORMAT} index")
    if isinstance(index.get("version"), bool) or index.get("version") not in READABLE:
        raise DataError(f"{path}: a {FORMAT} index of version {index.get('version')!r}; this version of rightreasons "
                        f"reads versions {', '.join(map(str, READABLE))} (write the data again with `rightreasons "
                        "data synth --out DIR`)")
    if index.get("name") != name:
        raise DataError(f"{path}: holds {index.get('name')!r}, not {name!r}")
    classes = index.get("classes")
    if not isinstance(classes, list) or not isinstance(index.get("splits"), dict):
        raise DataError(f"{path}: missing 'classes' list or 'splits' object")
    records = _records_from_index(path, index, split, len(classes), with_points=index["version"] >= 2)
    return AnnotatedDataset(records, classes, name=name, split=split, image_root=root, group_names=GROUPS[task],
                            **options)
