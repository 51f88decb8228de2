"""A sample's region for a class — where guidance pushes the evidence and what EPG and IoU score against: the union of
the class's boxes, its segmentation mask and its points, as the setting ``regions`` chooses (:data:`REGIONS`).

* ``boxes``: the union of the class's boxes (:func:`rightreasons.boxes.class_masks`, the pixel rule);
* ``masks``: the pixels of the sample's ``mask [H, W]`` equal to ``k + 1`` for class k (VOC convention: 0
  background, 255 void, which belongs to no class);
* ``points``: a disc of ``radius`` pixels around each of the class's points (:func:`rightreasons.boxes.point_masks`);
* ``masks-else-boxes``: the mask's region where it holds the class, else the boxes;
* ``union``: boxes, mask and points together.

**Void.** A segmentation's void pixels (255: VOC's object boundaries, COCO's crowd regions) are not known to be inside
or outside any object. As in VOC's own segmentation evaluation, which leaves them out of both the intersection and the
union of IoU, they count neither as inside nor as outside: :func:`region_masks` returns them beside the region as
``void`` wherever the region was taken from the mask (``masks``, the mask tier of ``masks-else-boxes``, ``union``),
less the pixels a box or point of ``union`` puts inside; EPG, IoU and the localisation losses leave them out. Regions
made of boxes or points alone have no void, so box scores never depend on a segmentation.

All sources are in pixels of the image the regions are rasterised for (``size = (H, W)``). An (image, class) whose
chosen sources give no pixel has no region: guidance skips it (the image gets only the classification loss) and the
localisation metrics do not score it. So one run can mix images with masks, with boxes and with nothing.

This module imports nothing of rightreasons but :mod:`rightreasons.boxes` and :mod:`rightreasons.choices`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

import torch
from torch import Tensor

from .boxes import class_masks, point_masks
from .choices import REGION_NAMES

__all__ = ["POINT_RADIUS", "REGIONS", "VOID", "RegionMasks", "RegionsName", "batch_regions", "class_regions",
           "region_masks", "require_regions", "segmentation_masks"]

REGIONS: dict[str, tuple[tuple[str, ...], ...]] = dict(zip(REGION_NAMES, (
    (("boxes",),),                          # boxes
    (("masks",),),                          # masks
    (("points",),),                         # points
    (("masks",), ("boxes",)),               # masks-else-boxes
    (("boxes", "masks", "points"),),        # union
)))
"""Each choice (:data:`rightreasons.choices.REGION_NAMES`, the names the command line offers) as tiers of sources: a
class's region is the union of the first tier whose sources give it a pixel."""
RegionsName = Literal[tuple(REGIONS)]  # type: ignore[valid-type]
"""The type of a config field naming a choice of :data:`REGIONS`."""

VOID = 255
"""The value of a void pixel in a segmentation (VOC convention): it belongs to no class and is left out of scores."""

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


class RegionMasks(NamedTuple):
    """A batch's regions: ``inside [N, H, W]`` bool, the region of each (image, class), and ``void [N, H, W]`` bool,
    the pixels counted neither inside nor outside (module docstring; never inside), ``None`` where no region was
    taken from a segmentation (boxes and points have no void: nothing to build on the host for them)."""

    inside: Tensor
    void: Tensor | None


def region_masks(regions: str, targets: Tensor | Sequence[int], size: tuple[int, int], boxes: Sequence[Tensor],
                 box_labels: Sequence[Tensor], segmentations: Tensor | Sequence[Tensor | None] | None = None,
                 points: Sequence[Tensor] | None = None, point_labels: Sequence[Tensor] | None = None,
                 radius: float = POINT_RADIUS) -> RegionMasks:
    """Image ``n``'s region for class ``targets[n]`` under ``regions`` and its void pixels, both ``[N, H, W]`` bool on
    the host.

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

    out: Tensor | None = None
    from_mask: Tensor | None = None  # the images whose region was taken from a tier that reads the mask
    for tier in tiers:
        region = source(tier[0]) if len(tier) == 1 else torch.stack([source(name) for name in tier]).any(0)
        if out is None:  # the first tier gives every image its region
            out, chosen = region, None
        else:            # a later one only the images still without one
            chosen = ~out.flatten(1).any(1) & region.flatten(1).any(1)
            out = torch.where(chosen[:, None, None], region, out)
        if "masks" in tier:
            taken = region.flatten(1).any(1) if chosen is None else chosen
            from_mask = taken if from_mask is None else from_mask | taken
    void = None
    if segmentations is not None and from_mask is not None and bool(from_mask.any()):
        void = torch.zeros_like(out)
        for n in from_mask.nonzero()[:, 0].tolist():
            if segmentations[n] is not None:
                void[n] = (torch.as_tensor(segmentations[n]).as_subclass(Tensor).cpu() == VOID) & ~out[n]
    return RegionMasks(out, void)


def class_regions(regions: str, targets: Tensor | Sequence[int], size: tuple[int, int], boxes: Sequence[Tensor],
                  box_labels: Sequence[Tensor], segmentations: Tensor | Sequence[Tensor | None] | None = None,
                  points: Sequence[Tensor] | None = None, point_labels: Sequence[Tensor] | None = None,
                  radius: float = POINT_RADIUS) -> Tensor:
    """``[N, H, W]`` bool on the host: image ``n``'s region for class ``targets[n]`` under ``regions``
    (:func:`region_masks` without the void)."""
    return region_masks(regions, targets, size, boxes, box_labels, segmentations, points, point_labels, radius).inside


def batch_regions(regions: str, batch: Mapping[str, Any], targets: Tensor | Sequence[int],
                  radius: float = POINT_RADIUS) -> RegionMasks:
    """:func:`region_masks` of a collated batch for one class per image ``targets [N]``: its ``boxes`` and
    ``box_labels``, and where present its ``mask``, ``points`` and ``point_labels``, at the size of its
    ``image [N, C, H, W]`` (what the viewer and ``judge`` score against; evaluation builds its pairs by
    :func:`region_masks` too)."""
    size = tuple(batch["image"].shape[-2:])
    return region_masks(regions, targets, size, batch["boxes"], batch["box_labels"], batch.get("mask"),
                        batch.get("points"), batch.get("point_labels"), radius)
