"""Localisation evaluation over *every* ground-truth class of every image.

Training guides one sampled class per image; evaluation scores all of them: each (image, class) pair with ``labels[i, k]
= 1`` and a non-empty region gets its own attribution map for class ``k`` and its own mask ``M_k``, the image's region
of class ``k`` (:func:`rightreasons.regions.class_regions`: its boxes, segmentation or points, as ``regions`` chooses) —
the same pixels the guidance loss trains on — and, where the region was taken from a segmentation, its void pixels,
which the metrics leave out (:func:`rightreasons.regions.region_masks`). :func:`localization_pairs` yields these pairs
in batches (one attribution call per batch, one target class per row); :func:`evaluate_localization` feeds them to
metrics such as :class:`~rightreasons.metrics.EnergyPointingGame` and :class:`~rightreasons.metrics.IoU`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torchmetrics import Metric

from ..regions import POINT_RADIUS, region_masks
from .attribution_fn import AttributionFn, run_attribution

__all__ = ["LocalizationPairs", "Regions", "evaluate_localization", "localization_pairs"]


@dataclass
class LocalizationPairs:
    """A batch of ``P`` (image, ground-truth class) pairs.

    Attributes:
        attributions: ``[P, H, W]`` detached maps for ``classes`` on ``images[image_index]``.
        masks: ``[P, H, W]`` bool region of that class in that image.
        classes: ``[P]`` the class of each pair.
        image_index: ``[P]`` the row of each pair's image in the ``images`` given.
        object_masks: ``[P, H, W]`` bool ``segmentations[image_index] == classes`` when segmentations were given.
        void: ``[P, H, W]`` bool pixels counted neither inside nor outside the region (a segmentation's void), or
            ``None`` when no pair of the batch has any.
    """

    attributions: Tensor
    masks: Tensor
    classes: Tensor
    image_index: Tensor
    object_masks: Tensor | None = None
    void: Tensor | None = None


@dataclass
class Regions:
    """What an (image, class) pair's region is made of: the choice (:data:`rightreasons.regions.REGIONS`), the
    batch's ``mask`` (``[N, H, W]`` or a list with ``None``; VOC convention), its ``points [P_n, 2]`` and
    ``point_labels [P_n]`` per image, and the radius of a point's disc."""

    regions: str = "boxes"
    mask: Tensor | Sequence[Tensor | None] | None = None
    points: Sequence[Tensor] | None = None
    point_labels: Sequence[Tensor] | None = None
    point_radius: float = POINT_RADIUS


def _pairs(labels: Tensor, boxes: Sequence[Tensor], box_labels: Sequence[Tensor], size: tuple[int, int],
           regions: Regions) -> tuple[list[tuple[int, int]], Tensor, Tensor | None]:
    """The (image, class) pairs of every positive label with a non-empty region, their regions and their void pixels
    ``[P, H, W]`` (``None``: none)."""
    candidates = labels.nonzero().tolist()
    rows = [i for i, _ in candidates]

    def of(values: Sequence | None) -> list | None:
        return None if values is None else [values[i] for i in rows]

    masks, void = region_masks(regions.regions, [k for _, k in candidates], size, of(boxes), of(box_labels),
                               of(regions.mask), of(regions.points), of(regions.point_labels), regions.point_radius)
    kept = masks.flatten(1).any(1)
    return [pair for pair, keep in zip(candidates, kept.tolist()) if keep], masks[kept], \
        None if void is None else void[kept]


def localization_pairs(model: nn.Module, images: Tensor, labels: Tensor, boxes: Sequence[Tensor],
                       box_labels: Sequence[Tensor], attribution: AttributionFn, batch_size: int = 32,
                       segmentations: Tensor | None = None, regions: Regions | None = None
                       ) -> Iterator[LocalizationPairs]:
    """Yield the (image, ground-truth class) pairs of a batch of images, with attributions and masks.

    Args:
        model: the classifier (put it in eval mode first; the attribution function runs its forward pass).
        images: ``[N, C, H, W]`` model inputs.
        labels: ``[N, K]`` multi-hot ground truth; every positive class is evaluated.
        boxes: per image a ``[B_i, 4]`` XYXY tensor in pixels of ``images`` (e.g. ``tv_tensors.BoundingBoxes``).
        box_labels: per image the class ``[B_i]`` of each box.
        attribution: an :data:`~rightreasons.metrics.AttributionFn` returning maps at the input resolution.
        batch_size: pairs per attribution call (an image with several classes appears once per class).
        segmentations: optional ``[N, H, W]`` integer maps holding the class index (label space, ``0..K-1``) of
            each object pixel and any other value elsewhere; gives ``object_masks`` for the on-object ratio.
        regions: what a class's region is made of (:class:`Regions`; default: the boxes).

    A positive label whose region in that image is empty is skipped (there is nothing to localise against). No pairs, no
    batches. ``labels``, ``boxes`` and ``box_labels`` decide the pairs and their masks on the host: given there, as the
    loader gives them, they cost no wait for the device (tensors on a device are copied to the host first); the pairs'
    maps, masks and indices are on the images' device.
    """
    _, _, height, width = _check_inputs(images, labels, boxes, box_labels, segmentations)
    if batch_size < 1:
        raise ValueError(f"localization_pairs: batch_size must be >= 1, got {batch_size}")
    pairs, regions_of_pairs, void = _pairs(labels.cpu(), boxes, box_labels, (height, width), regions or Regions())
    has_void = [False] * len(pairs) if void is None else void.flatten(1).any(1).tolist()  # which chunks carry one
    device = images.device
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        index = torch.tensor([i for i, _ in chunk]).to(device, non_blocking=True)
        classes = torch.tensor([k for _, k in chunk]).to(device, non_blocking=True)
        masks = regions_of_pairs[start:start + batch_size].to(device, non_blocking=True)
        chunk_void = void[start:start + batch_size].to(device, non_blocking=True) \
            if any(has_void[start:start + batch_size]) else None
        maps = run_attribution(attribution, model, images[index], classes)
        objects = None
        if segmentations is not None:
            objects = segmentations[index.to(segmentations.device)].to(images.device) == classes[:, None, None]
        yield LocalizationPairs(maps, masks, classes, index, objects, chunk_void)


def _check_inputs(images: Tensor, labels: Tensor, boxes: Sequence[Tensor], box_labels: Sequence[Tensor],
                  segmentations: Tensor | None) -> tuple[int, int, int, int]:
    where = "localization_pairs"
    if images.dim() != 4:
        raise ValueError(f"{where}: images must be [N, C, H, W], got shape {tuple(images.shape)}")
    n, c, h, w = images.shape
    if labels.dim() != 2 or labels.shape[0] != n:
        raise ValueError(f"{where}: labels must be multi-hot [N={n}, K], got shape {tuple(labels.shape)}")
    if len(boxes) != n or len(box_labels) != n:
        raise ValueError(f"{where}: need one boxes and one box_labels entry per image ({n}), "
                         f"got {len(boxes)} and {len(box_labels)}")
    for i, (b, bl) in enumerate(zip(boxes, box_labels)):
        if len(b) != len(bl):
            raise ValueError(f"{where}: image {i} has {len(b)} boxes but {len(bl)} box labels")
    if segmentations is not None and tuple(segmentations.shape) != (n, h, w):
        raise ValueError(f"{where}: segmentations must be [N, H, W] = {[n, h, w]}, "
                         f"got shape {tuple(segmentations.shape)}")
    return n, c, h, w


def evaluate_localization(model: nn.Module, images: Tensor, labels: Tensor, boxes: Sequence[Tensor],
                          box_labels: Sequence[Tensor], attribution: AttributionFn, metrics: Iterable[Metric],
                          batch_size: int = 32, regions: Regions | None = None) -> int:
    """Update every metric with ``metric.update(attributions, masks)`` — ``metric.update(attributions, masks, void)``
    for the chunks of pairs with void pixels (the metric must take them: EPG, IoU) — for all (image, ground-truth
    class) pairs of the batch (see :func:`localization_pairs`); returns the number of pairs evaluated.

    For the on-object ratio, iterate :func:`localization_pairs` with ``segmentations`` and call
    ``OnObjectRatio.update(p.attributions, p.object_masks, p.masks)``.
    """
    metrics = list(metrics)
    count = 0
    for batch in localization_pairs(model, images, labels, boxes, box_labels, attribution, batch_size,
                                    regions=regions):
        for metric in metrics:
            if batch.void is None:
                metric.update(batch.attributions, batch.masks)
            else:
                metric.update(batch.attributions, batch.masks, batch.void)
        count += batch.classes.numel()
    return count
