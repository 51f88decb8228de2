"""A sample's region for a class — where guidance pushes the evidence and what EPG and IoU score against: the union of
the class's boxes, its segmentation mask and its points, as the setting ``regions`` chooses (:data:`REGIONS`).

* ``boxes``: the union of the class's boxes (:func:`rightreasons.boxes.class_masks`, the pixel rule);
* ``masks``: the pixels of the sample's ``mask [H, W]`` equal to ``k + 1`` for class k (VOC convention: 0
  background, 255 void, which belongs to no class);
* ``points``: a disc of ``radius`` pixels around each of the class's points (:func:`rightreasons.boxes.point_masks`);
* ``masks-else-boxes``: the mask's region where it holds the class, else the boxes;
* ``union``: boxes, mask and points together.

All sources are in pixels of the image the regions are rasterised for (``size = (H, W)``). An (image, class) whose
chosen sources give no pixel has no region: guidance skips it (the image gets only the classification loss) and the
localisation metrics do not score it. So one run can mix images with masks, with boxes and with nothing.

This module imports nothing of rightreasons but :mod:`rightreasons.boxes`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from .boxes import class_masks, point_masks

__all__ = ["POINT_RADIUS", "REGIONS", "RegionsName", "class_regions", "require_regions", "segmentation_masks"]

REGIONS: dict[str, tuple[tuple[str, ...], ...]] = {
    "boxes": (("boxes",),),
    "masks": (("masks",),),
    "points": (("points",),),
    "masks-else-boxes": (("masks",), ("boxes",)),
    "union": (("boxes", "masks", "points"),),
}
"""Each choice as tiers of sources: a class's region is the union of the first tier whose sources give it a pixel."""
RegionsName = Literal[tuple(REGIONS)]  # type: ignore[valid-type]
"""The type of a config field naming a choice of :data:`REGIONS`."""

POINT_RADIUS = 15.0
"""Default radius (pixels of the model input) of the disc a point becomes: the pointing game's tolerance (TorchRay's
15 px at 224 px), so evidence inside the disc is what the pointing game counts as a hit (docs/guide/guidance.md)."""


def require_regions(regions: object, key: str = "regions") -> str:
    """``regions`` if it names a choice of :data:`REGIONS`, else a ``ValueError`` naming ``key`` and the value."""
    if not isinstance(regions, str) or regions not in REGIONS:
        raise ValueError(f"{key} must be one of {', '.join(REGIONS)}, got {regions!r}")
    return regions


def segmentation_masks(segmentations: Tensor | Sequence[Tensor | None] | None, targets: Tensor,
                       size: tuple[int, int]) -> Tensor:
    """``[N, H, W]`` bool: ``segmentations[n] == targets[n] + 1`` (VOC convention), empty where image ``n`` has no
    segmentation (``None``, or no segmentations at all). Each segmentation must be ``[H, W] = size``."""
    out = torch.zeros(len(targets), *size, dtype=torch.bool)
    if segmentations is None:
        return out
    if len(segmentations) != len(targets):
        raise ValueError(f"got {len(segmentations)} segmentations for {len(targets)} targets")
    for n, (seg, k) in enumerate(zip(segmentations, targets.tolist())):
        if seg is None:
            continue
        if tuple(seg.shape) != tuple(size):
            raise ValueError(f"image {n}: segmentation of shape {tuple(seg.shape)}; expected the image's {tuple(size)}")
        out[n] = torch.as_tensor(seg).as_subclass(Tensor).cpu() == k + 1
    return out


def class_regions(regions: str, targets: Tensor | Sequence[int], size: tuple[int, int], boxes: Sequence[Tensor],
                  box_labels: Sequence[Tensor], segmentations: Tensor | Sequence[Tensor | None] | None = None,
                  points: Sequence[Tensor] | None = None, point_labels: Sequence[Tensor] | None = None,
                  radius: float = POINT_RADIUS) -> Tensor:
    """``[N, H, W]`` bool on the host: image ``n``'s region for class ``targets[n]`` under ``regions``.

    Per image (lists of length N, as in a collated batch): ``boxes [B_n, 4]`` XYXY and ``box_labels [B_n]``;
    ``segmentations`` ``[N, H, W]`` or a list with ``None`` for images without one; ``points [P_n, 2]`` XY and
    ``point_labels [P_n]``, or ``None`` for no points. Everything is in pixels of the ``size = (H, W)`` images.
    """
    tiers = REGIONS[require_regions(regions)]
    targets = torch.as_tensor(targets).long().cpu().reshape(-1)
    made: dict[str, Tensor] = {}

    def source(name: str) -> Tensor:
        if name not in made:
            if name == "boxes":
                made[name] = class_masks([torch.as_tensor(b).cpu() for b in boxes],
                                         [torch.as_tensor(lab).cpu() for lab in box_labels], targets, size, size)
            elif name == "masks":
                made[name] = segmentation_masks(segmentations, targets, size)
            elif points is None:
                made[name] = torch.zeros(len(targets), *size, dtype=torch.bool)
            else:
                made[name] = point_masks(points, point_labels if point_labels is not None else [], targets, size,
                                         radius, size)
        return made[name]

    out = torch.zeros(len(targets), *size, dtype=torch.bool)
    for tier in tiers:
        region = torch.stack([source(name) for name in tier]).any(0)
        out = torch.where(out.flatten(1).any(1)[:, None, None], out, region)
    return out
