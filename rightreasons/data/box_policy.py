"""Validating the boxes read from annotation files, with a repair policy (error, clip or drop).

Geometry — rasterising, dilating, clipping — is :mod:`rightreasons.boxes`; this module decides what happens to boxes
that a dataset's files get wrong (non-finite, degenerate, reaching outside the image) and names the file and record.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from ..errors import DataError, UsageError
from .errors import BoxWarning

__all__ = ["BOX_POLICIES", "check_boxes", "require_box_policy"]

#: ``error``: any invalid box is a :class:`DataError`; ``clip``: boxes reaching outside the image are clipped with a
#: :class:`BoxWarning`, degenerate boxes (x2 <= x1 or y2 <= y1) are errors; ``drop``: like ``clip``, and degenerate
#: boxes are dropped with a warning (real COCO holds a few of them).
BOX_POLICIES = ("error", "clip", "drop")


def require_box_policy(policy: object) -> None:
    """Refuse a dataset option ``box_policy`` that is not one of :data:`BOX_POLICIES` (a :class:`UsageError`)."""
    if policy not in BOX_POLICIES:
        raise UsageError(f"dataset option 'box_policy' must be one of {', '.join(BOX_POLICIES)}, got {policy!r}")


def check_boxes(boxes: np.ndarray, labels: np.ndarray, canvas_size: tuple[int, int] | None, policy: str,
                source: str, names: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Validate ``boxes [B, 4]`` (XYXY) and their ``labels [B]`` for an image of ``canvas_size = (H, W)``.

    ``source`` names the file (and record) in messages, ``names[i]`` the i-th box (default ``box i``). Returns the
    possibly clipped boxes and the labels of the boxes kept, as float32 / int64 arrays.
    """
    if policy not in BOX_POLICIES:
        raise ValueError(f"unknown box_policy {policy!r}; expected one of {', '.join(BOX_POLICIES)}")
    boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    names = list(names) if names is not None else [f"box {i}" for i in range(len(boxes))]

    def describe(i: int) -> str:
        return f"{source}: {names[i]}: box {[round(float(v), 2) for v in boxes[i]]}"

    bad = ~np.isfinite(boxes).all(axis=1)
    if bad.any():
        raise DataError(f"{describe(int(np.flatnonzero(bad)[0]))} has a non-finite coordinate")
    keep = _valid(boxes)
    if not keep.all():
        i = int(np.flatnonzero(~keep)[0])
        if policy != "drop":
            raise DataError(f"{describe(i)} is degenerate (expected x1 < x2 and y1 < y2)")
        warnings.warn(f"{describe(i)} is degenerate; dropped {int((~keep).sum())} such box(es) "
                      "(box_policy='drop')", BoxWarning, stacklevel=2)
    boxes, labels, names = boxes[keep], labels[keep], [n for n, k in zip(names, keep) if k]
    if canvas_size is None or len(boxes) == 0:
        return boxes, labels
    h, w = canvas_size
    limit = np.array([w, h, w, h], dtype=np.float32)
    outside = ((boxes < 0) | (boxes > limit)).any(axis=1)
    if not outside.any():
        return boxes, labels
    i = int(np.flatnonzero(outside)[0])
    if policy == "error":
        raise DataError(f"{describe(i)} reaches outside the image of size (H={h}, W={w})")
    clipped = np.clip(boxes, 0, limit)
    inside = _valid(clipped)
    if not inside.all() and policy != "drop":
        j = int(np.flatnonzero(~inside)[0])
        raise DataError(f"{describe(j)} lies entirely outside the image of size (H={h}, W={w})")
    warnings.warn(f"{describe(i)} reaches outside the image of size (H={h}, W={w}); clipped "
                  f"{int(outside.sum())} box(es) (box_policy={policy!r})", BoxWarning, stacklevel=2)
    return clipped[inside], labels[inside]


def _valid(boxes: np.ndarray) -> np.ndarray:
    return (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
