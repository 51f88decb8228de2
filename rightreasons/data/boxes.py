"""Box utilities: validation with a repair policy, coarse (dilated) boxes, complements and box → mask rasterisation.

Boxes are ``[B, 4]`` in XYXY pixel coordinates of their image ("canvas") of size ``(H, W)``: a box covers the pixels
whose *centres* ``(j + 0.5, i + 0.5)`` satisfy ``x1 <= j + 0.5 < x2`` and ``y1 <= i + 0.5 < y2``. With integer
coordinates that is exactly ``mask[y1:y2, x1:x2]``, and the same rule rasterises a box at any other resolution.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor
from torchvision import tv_tensors

from .errors import BoxWarning, DataError

__all__ = ["BOX_POLICIES", "boxes_to_masks", "check_boxes", "class_masks", "complement_boxes", "dilate_boxes"]

#: ``error``: any invalid box is a :class:`DataError`; ``clip``: boxes reaching outside the image are clipped with a
#: :class:`BoxWarning`, degenerate boxes (x2 <= x1 or y2 <= y1) are errors; ``drop``: like ``clip``, and degenerate
#: boxes are dropped with a warning (real COCO holds a few of them).
BOX_POLICIES = ("error", "clip", "drop")


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


def _canvas(boxes: Tensor, canvas_size: tuple[int, int] | None) -> tuple[int, int]:
    if canvas_size is not None:
        return int(canvas_size[0]), int(canvas_size[1])
    if isinstance(boxes, tv_tensors.BoundingBoxes):
        return boxes.canvas_size
    raise ValueError("plain box tensors need canvas_size=(H, W); tv_tensors.BoundingBoxes carry their own")


def dilate_boxes(boxes: Tensor, fraction: float, canvas_size: tuple[int, int] | None = None) -> Tensor:
    """Coarse boxes: move every side of each box ``[B, 4]`` outwards by ``fraction`` of the box's width (left,
    right) or height (top, bottom), clipped to the image — the Model-Guidance release's convention, so ``0.5``
    doubles the width of a box far from the border. Keeps the ``BoundingBoxes`` type."""
    if fraction < 0:
        raise ValueError(f"box dilation must be >= 0, got {fraction}")
    h, w = _canvas(boxes, canvas_size)
    plain = boxes.as_subclass(Tensor).float()
    size = torch.cat([plain[:, 2:] - plain[:, :2]] * 2, dim=1)
    sign = plain.new_tensor([-1.0, -1.0, 1.0, 1.0])
    out = plain + fraction * sign * size
    out = torch.minimum(out.clamp(min=0), out.new_tensor([w, h, w, h]))
    return tv_tensors.wrap(out, like=boxes) if isinstance(boxes, tv_tensors.BoundingBoxes) else out


def complement_boxes(box: Tensor, canvas_size: tuple[int, int]) -> Tensor:
    """Up to four non-overlapping boxes ``[B', 4]`` whose union is the image minus ``box [4]`` (left and right full-
    height strips, top and bottom strips between them). Under the pixel-centre rule their union rasterises to
    exactly the complement of the box's mask at every resolution, and crops/flips keep that true: this is how the
    "outside the box" mask of the reversed Waterbirds task travels through box-aware augmentation."""
    h, w = canvas_size
    x1, y1, x2, y2 = (float(v) for v in box)
    strips = torch.tensor([[0, 0, x1, h], [x2, 0, w, h], [x1, 0, x2, y1], [x1, y2, x2, h]], dtype=torch.float32)
    return strips[(strips[:, 2] > strips[:, 0]) & (strips[:, 3] > strips[:, 1])]


def boxes_to_masks(boxes: Tensor, box_labels: Tensor, classes: int | Sequence[int] | Tensor,
                   size: tuple[int, int] | None = None, canvas_size: tuple[int, int] | None = None) -> Tensor:
    """Binary masks ``M_k`` = union of the boxes of class ``k``, rasterised at ``size = (h, w)`` (default: the canvas).

    ``boxes [B, 4]`` XYXY on a canvas ``(H, W)`` (taken from ``tv_tensors.BoundingBoxes`` or given), ``box_labels [B]``.
    ``classes`` an int → ``[h, w]``; a sequence/tensor of T classes → ``[T, h, w]``. Output dtype ``torch.bool``.
    """
    ch, cw = _canvas(boxes, canvas_size)
    h, w = size if size is not None else (ch, cw)
    single = isinstance(classes, int) or (isinstance(classes, Tensor) and classes.dim() == 0)
    wanted = torch.as_tensor(classes, dtype=torch.long).reshape(-1)
    plain = boxes.as_subclass(Tensor).float().reshape(-1, 4)
    labels = torch.as_tensor(box_labels).reshape(-1).to(plain.device)
    if len(labels) != len(plain):
        raise ValueError(f"got {len(plain)} boxes but {len(labels)} box labels")
    xs = (torch.arange(w, device=plain.device) + 0.5) * (cw / w)
    ys = (torch.arange(h, device=plain.device) + 0.5) * (ch / h)
    in_x = (xs >= plain[:, 0:1]) & (xs < plain[:, 2:3])  # [B, w]
    in_y = (ys >= plain[:, 1:2]) & (ys < plain[:, 3:4])  # [B, h]
    per_box = in_y[:, :, None] & in_x[:, None, :]  # [B, h, w]
    select = labels[None, :] == wanted.to(plain.device)[:, None]  # [T, B]
    masks = (select[:, :, None, None] & per_box[None]).any(dim=1)  # [T, h, w]
    return masks[0] if single else masks


def class_masks(boxes: Sequence[Tensor], box_labels: Sequence[Tensor], targets: Tensor,
                size: tuple[int, int], canvas_size: tuple[int, int] | None = None) -> Tensor:
    """Batch form of :func:`boxes_to_masks`: ``[N, h, w]`` masks of class ``targets[n]`` for image n of a collated
    batch (boxes and labels as lists of length N)."""
    if not len(boxes) == len(box_labels) == len(targets):
        raise ValueError(f"got {len(boxes)} box lists, {len(box_labels)} label lists and {len(targets)} targets")
    return torch.stack([boxes_to_masks(b, lab, int(t), size, canvas_size)
                        for b, lab, t in zip(boxes, box_labels, targets)])
