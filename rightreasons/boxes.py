"""Box and point geometry, one rule for everything: rasterise, dilate, clip, complement, union per class.

Boxes are ``[B, 4]`` in XYXY pixel coordinates of their image ("canvas") of size ``(H, W)``; pixel ``(i, j)`` (row,
column) is the square ``[j, j + 1) × [i, i + 1)``.

**The pixel rule.** A box covers the pixels whose *centres* ``(j + 0.5, i + 0.5)`` satisfy ``x1 <= j + 0.5 < x2`` and
``y1 <= i + 0.5 < y2``. With integer coordinates that is exactly ``mask[y1:y2, x1:x2]``; a fractional box covers a
pixel when it covers its centre (a centre exactly on the left or top edge is inside, on the right or bottom edge
outside, so two boxes sharing an edge never both take a pixel). The same rule rasterises a box at any other resolution
(``size`` ≠ canvas), so masks at a feature map's resolution agree with those at the image's.

**Tiny boxes never vanish.** A box thinner than a pixel of the mask may hold no pixel centre (a 1-pixel box of a
400 × 400 image rasterised at 32 × 32). When *all* the boxes of a class hold none, each of its boxes (with
``x1 < x2``, ``y1 < y2`` and its centre inside the image) covers the one mask pixel that contains its centre, so an
annotated class never gets an empty mask — which would silently switch guidance off for the image and score its EPG
0. A class with a box that holds a centre keeps exactly the pixel rule's mask (tiny boxes beside it add nothing), so
the complement strips of a box rasterise to the complement of its mask unless the box itself holds no pixel centre
(then the strips cover the whole image and the box its one pixel) or the whole outside is thinner than half a pixel.

**Points become discs.** A point ``(x, y)`` (a click on an object) of radius ``r`` covers the pixels whose centres
lie within ``r`` canvas pixels of it (``(j + 0.5 − x)² + (i + 0.5 − y)² <= r²``) and always the pixel that holds it,
so that no point is lost at any resolution; a point outside the canvas (cropped away) covers nothing
(:func:`point_masks`; why a disc and which radius: docs/guide/guidance.md).

Every consumer uses this module: the guidance losses' masks (:class:`~rightreasons.guidance.GuidanceObjective`), the
localisation metrics (EPG, IoU), the data pipeline (coarse boxes, the complement masks of the reversed Waterbirds
task) and the figures (:func:`outline`), so the training mask and the evaluation mask of a box are the same pixels.

This module imports nothing of rightreasons.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torchvision import tv_tensors

__all__ = ["boxes_to_masks", "canvas_size", "class_masks", "clip_boxes", "complement_boxes", "dilate_boxes",
           "outline", "point_masks"]


def canvas_size(boxes: Tensor, canvas: tuple[int, int] | None = None) -> tuple[int, int]:
    """``(H, W)`` of the boxes' image: ``canvas`` when given, else the one a ``tv_tensors.BoundingBoxes`` carries."""
    if canvas is not None:
        return int(canvas[0]), int(canvas[1])
    if isinstance(boxes, tv_tensors.BoundingBoxes):
        return boxes.canvas_size
    raise ValueError("plain box tensors need canvas=(H, W); tv_tensors.BoundingBoxes carry their own")


def _plain(boxes: Tensor) -> Tensor:
    """Boxes as a plain float tensor ``[B, 4]``; anything else (another shape, x2 < x1 or y2 < y1) is refused."""
    plain = torch.as_tensor(boxes).as_subclass(Tensor).float()
    if plain.numel() == 0:
        return plain.reshape(0, 4)
    if plain.dim() != 2 or plain.shape[1] != 4:
        raise ValueError(f"boxes must have shape [B, 4] (XYXY), got {tuple(plain.shape)}")
    if (plain[:, 2] < plain[:, 0]).any() or (plain[:, 3] < plain[:, 1]).any():
        bad = plain[(plain[:, 2] < plain[:, 0]) | (plain[:, 3] < plain[:, 1])][:3].tolist()
        raise ValueError(f"every box needs x2 >= x1 and y2 >= y1 (XYXY), got {bad}")
    return plain


def clip_boxes(boxes: Tensor, canvas: tuple[int, int] | None = None) -> Tensor:
    """Boxes ``[B, 4]`` clipped to the image ``[0, W] × [0, H]`` (keeps the ``BoundingBoxes`` type)."""
    h, w = canvas_size(boxes, canvas)
    plain = _plain(boxes)
    out = torch.minimum(plain.clamp(min=0), plain.new_tensor([w, h, w, h]))
    return tv_tensors.wrap(out, like=boxes) if isinstance(boxes, tv_tensors.BoundingBoxes) else out


def dilate_boxes(boxes: Tensor, fraction: float, canvas: tuple[int, int] | None = None) -> Tensor:
    """Coarse boxes: move every side of each box ``[B, 4]`` outwards by ``fraction`` of the box's width (left,
    right) or height (top, bottom), clipped to the image — the Model-Guidance release's convention, so ``0.5``
    doubles the width of a box far from the border. Keeps the ``BoundingBoxes`` type."""
    if fraction < 0:
        raise ValueError(f"box dilation must be >= 0, got {fraction}")
    plain = _plain(boxes)
    size = torch.cat([plain[:, 2:] - plain[:, :2]] * 2, dim=1)
    grown = plain + fraction * plain.new_tensor([-1.0, -1.0, 1.0, 1.0]) * size
    out = clip_boxes(grown, canvas_size(boxes, canvas))
    return tv_tensors.wrap(out, like=boxes) if isinstance(boxes, tv_tensors.BoundingBoxes) else out


def complement_boxes(box: Tensor, canvas: tuple[int, int]) -> Tensor:
    """Up to four non-overlapping boxes ``[B', 4]`` whose union is the image minus ``box [4]`` (left and right full-
    height strips, top and bottom strips between them). Under the pixel rule their union rasterises to the
    complement of the box's mask at every resolution (but for the tiny boxes of the module docstring), and crops/flips
    keep that true: this is how the "outside the box" mask of the reversed Waterbirds task travels through box-aware
    augmentation."""
    h, w = canvas
    x1, y1, x2, y2 = (float(v) for v in box)
    strips = torch.tensor([[0, 0, x1, h], [x2, 0, w, h], [x1, 0, x2, y1], [x1, y2, x2, h]], dtype=torch.float32)
    return strips[(strips[:, 2] > strips[:, 0]) & (strips[:, 3] > strips[:, 1])]


def boxes_to_masks(boxes: Tensor, box_labels: Tensor, classes: int | Sequence[int] | Tensor,
                   size: tuple[int, int] | None = None, canvas: tuple[int, int] | None = None) -> Tensor:
    """Bool masks ``M_k`` = the union of the boxes of class ``k``, rasterised at ``size = (h, w)`` (default: the
    canvas) with the pixel rule of the module docstring.

    ``boxes [B, 4]`` XYXY on a canvas ``(H, W)`` (taken from ``tv_tensors.BoundingBoxes`` or given), ``box_labels
    [B]``. ``classes`` an int → ``[h, w]``; a sequence/tensor of T classes → ``[T, h, w]``. No boxes of a class give
    an empty mask.
    """
    ch, cw = canvas_size(boxes, canvas)
    h, w = size if size is not None else (ch, cw)
    single = isinstance(classes, int) or (isinstance(classes, Tensor) and classes.dim() == 0)
    plain = _plain(boxes)
    wanted = torch.as_tensor(classes, dtype=torch.long).reshape(-1).to(plain.device)
    labels = torch.as_tensor(box_labels).as_subclass(Tensor).reshape(-1).to(plain.device)
    if len(labels) != len(plain):
        raise ValueError(f"got {len(plain)} boxes but {len(labels)} box labels")
    rows, members = (labels[None, :] == wanted[:, None]).nonzero(as_tuple=True)  # (class row, box) pairs
    masks = _rasterised(plain[members], rows, len(wanted), torch.tensor([[ch, cw]]).expand(len(members), 2), (h, w))
    return masks[0] if single else masks


def class_masks(boxes: Sequence[Tensor], box_labels: Sequence[Tensor], targets: Tensor | Sequence[int],
                size: tuple[int, int], canvas: tuple[int, int] | None = None) -> Tensor:
    """Batch form of :func:`boxes_to_masks`: ``[N, h, w]`` masks of class ``targets[n]`` for image ``n`` (boxes and
    labels as lists of length N, as in a collated batch; ``canvas`` for all, else each image's
    ``tv_tensors.BoundingBoxes``). One rasterisation for the whole batch, a few dozen operations whatever N."""
    if not len(boxes) == len(box_labels) == len(targets):
        raise ValueError(f"got {len(boxes)} box lists, {len(box_labels)} label lists and {len(targets)} targets")
    if not len(boxes):
        return torch.zeros(0, *size, dtype=torch.bool)
    counts = [len(b) for b in boxes]
    for i, (b, lab) in enumerate(zip(boxes, box_labels)):
        if len(torch.as_tensor(lab).reshape(-1)) != len(b):
            raise ValueError(f"image {i}: got {len(b)} boxes but {len(torch.as_tensor(lab).reshape(-1))} box labels")
    canvases = torch.tensor([canvas_size(b, canvas) for b in boxes]).repeat_interleave(torch.tensor(counts), 0)
    plain = _plain(torch.cat([_plain(b) for b in boxes]))
    labels = torch.cat([torch.as_tensor(lab).as_subclass(Tensor).reshape(-1).long() for lab in box_labels])
    owners = torch.repeat_interleave(torch.arange(len(boxes)), torch.tensor(counts))
    members = (labels == torch.as_tensor(targets).long().reshape(-1)[owners]).nonzero()[:, 0]
    return _rasterised(plain[members], owners[members], len(boxes), canvases[members], size)


def _rasterised(boxes: Tensor, rows: Tensor, count: int, canvases: Tensor, size: tuple[int, int]) -> Tensor:
    """``[count, h, w]`` bool: row ``r`` the union of the masks (pixel rule) of the boxes ``boxes [P, 4]`` with
    ``rows[p] == r``, each on its canvas ``canvases [P, 2] = (H, W)``; a row none of whose boxes holds a pixel centre
    gets the pixels of its boxes' centres instead (the tiny-box rule of the module docstring)."""
    xs, ys = _pixel_centres(canvases, size)
    in_x = (xs >= boxes[:, 0:1]) & (xs < boxes[:, 2:3])
    in_y = (ys >= boxes[:, 1:2]) & (ys < boxes[:, 3:4])
    per_box = in_y[:, :, None] & in_x[:, None, :]  # [P, h, w]
    centres = torch.stack([(boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2], 1)
    solid = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    masks = _union(per_box, rows, count)
    return torch.where(masks.flatten(1).any(1)[:, None, None], masks,
                       _union(_own_pixels(centres, canvases, size) & solid[:, None, None], rows, count))


def _pixel_centres(canvases: Tensor, size: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """The centres of the pixels of an ``(h, w)`` mask in canvas units, ``xs [P, w]`` and ``ys [P, h]``, on the
    canvases ``[P, 2] = (H, W)``; canvas units per mask pixel are rounded once to float32 (the arithmetic of one box
    at a time)."""
    h, w = size
    to_canvas = (canvases.double() / torch.tensor([h, w], dtype=torch.float64)).float()  # [P, 2]
    return (torch.arange(w) + 0.5)[None, :] * to_canvas[:, 1:], (torch.arange(h) + 0.5)[None, :] * to_canvas[:, :1]


def _own_pixels(xy: Tensor, canvases: Tensor, size: tuple[int, int]) -> Tensor:
    """``[P, h, w]`` bool: the mask pixel that holds each point ``xy [P, 2]`` (canvas units) inside its canvas
    ``[P, 2] = (H, W)``; nothing for a point outside."""
    h, w = size
    scale = (torch.tensor([h, w], dtype=torch.float64) / canvases.double()).float()
    inside = (xy[:, 0] >= 0) & (xy[:, 0] < canvases[:, 1]) & (xy[:, 1] >= 0) & (xy[:, 1] < canvases[:, 0])
    rows = (xy[:, 1] * scale[:, 0]).long().clamp(0, h - 1)
    cols = (xy[:, 0] * scale[:, 1]).long().clamp(0, w - 1)
    return ((torch.arange(h)[None, :] == rows[:, None])[:, :, None]
            & (torch.arange(w)[None, :] == cols[:, None])[:, None, :] & inside[:, None, None])


def _union(per: Tensor, rows: Tensor, count: int) -> Tensor:
    """``[count, h, w]`` bool: row ``r`` the union of the masks ``per [P, h, w]`` with ``rows[p] == r``."""
    h, w = per.shape[-2:]
    return torch.zeros(count, h * w).index_add_(0, rows, per.flatten(1).float()).view(count, h, w) > 0


def point_masks(points: Sequence[Tensor], point_labels: Sequence[Tensor], targets: Tensor | Sequence[int],
                size: tuple[int, int], radius: float, canvas: tuple[int, int]) -> Tensor:
    """``[N, h, w]`` bool: for image ``n`` the union of the discs of its points of class ``targets[n]`` (points as
    lists of length N of ``[P_n, 2]`` XY on the canvas ``(H, W)``, labels ``[P_n]``), with the point rule of the
    module docstring: the pixels whose centres lie within ``radius`` canvas pixels of a point, and always the pixel
    that holds it; a point outside the canvas covers nothing."""
    if not radius >= 0:
        raise ValueError(f"point radius must be >= 0 pixels, got {radius!r}")
    if not len(points) == len(point_labels) == len(targets):
        raise ValueError(f"got {len(points)} point lists, {len(point_labels)} label lists and {len(targets)} targets")
    plain = [torch.as_tensor(p).as_subclass(Tensor).float().reshape(-1, 2) for p in points]
    labels = [torch.as_tensor(lab).as_subclass(Tensor).long().reshape(-1) for lab in point_labels]
    for i, (p, lab) in enumerate(zip(plain, labels)):
        if len(p) != len(lab):
            raise ValueError(f"image {i}: got {len(p)} points but {len(lab)} point labels")
    if not len(plain):
        return torch.zeros(0, *size, dtype=torch.bool)
    counts = torch.tensor([len(p) for p in plain])
    owners = torch.repeat_interleave(torch.arange(len(plain)), counts)
    members = (torch.cat(labels) == torch.as_tensor(targets).long().reshape(-1)[owners]).nonzero()[:, 0]
    xy, rows = torch.cat(plain)[members], owners[members]
    canvases = torch.tensor([canvas]).expand(len(xy), 2)
    xs, ys = _pixel_centres(canvases, size)
    near = ((xs[:, None, :] - xy[:, 0, None, None]).square() + (ys[:, :, None] - xy[:, 1, None, None]).square()
            <= radius ** 2)
    inside = (xy[:, 0] >= 0) & (xy[:, 0] < canvas[1]) & (xy[:, 1] >= 0) & (xy[:, 1] < canvas[0])
    return _union((near & inside[:, None, None]) | _own_pixels(xy, canvases, size), rows, len(plain))


def outline(box: Sequence[float]) -> tuple[float, float, float, float]:
    """``(x, y, width, height)`` of the rectangle that outlines ``box`` in ``matplotlib.pyplot.imshow`` coordinates,
    where pixel ``(i, j)`` is centred at ``(j, i)``, so the drawn edge runs along the boundary of the covered pixels."""
    x1, y1, x2, y2 = (float(v) for v in box)
    return x1 - 0.5, y1 - 0.5, x2 - x1, y2 - y1
