"""The one sample format shared by every dataset, and the collate function for it.

A sample is a dict:

* ``image``: ``tv_tensors.Image`` float ``[3, H, W]`` in [0, 1] (before the model's encoding; after a transform preset
  it is ``[6, H, W]`` for B-cos models or normalised ``[3, H, W]``). A dataset hands a transform that takes them
  (:func:`rightreasons.data.transforms.takes_uint8`: the training preset without explanations) the decoded uint8
  ``[3, H, W]`` instead, which the preset converts to float after its crop
  (:class:`rightreasons.data.transforms.ToFloat`).
* ``labels``: float ``[K]`` multi-hot class labels (binary tasks use K = 2 with one-hot labels).
* ``boxes``: ``tv_tensors.BoundingBoxes`` ``[B, 4]`` in XYXY pixels of the image (empty when ``has_boxes`` is False).
* ``box_labels``: long ``[B]`` class of every box.
* ``has_boxes``: bool, False for images whose annotations are withheld (limited annotations) or that have no positive
  label; they still train the classifier, and their boxes and points are empty.
* ``mask`` (optional): :class:`~rightreasons.data.geometry.SegmentationMask` uint8 ``[H, W]`` segmentation: 0
  background, ``k + 1`` for class k, 255 void / ignore (VOC convention); resampled at pixel centres, so it stays on
  the image's pixels.
* ``points`` (optional, datasets whose annotations hold points): :class:`~rightreasons.data.geometry.Points`
  ``[P, 2]`` XY pixels of the image (one click per object), with ``point_labels`` long ``[P]``; empty when
  ``has_boxes`` is False.
* ``group`` (optional): int, the Waterbirds group (see :mod:`rightreasons.data.waterbirds`) or the context of
  a synthetic multi-label image.
* ``explanation`` (optional): :class:`rightreasons.data.transforms.ExplanationMap` float ``[C, H, W]``, a cached teacher
  explanation attached by :class:`rightreasons.data.transforms.AttachExplanations`.
* ``id``: str, unique within the dataset.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import get_worker_info
from torchvision import tv_tensors

from .geometry import Points, SegmentationMask

__all__ = ["collate", "make_sample", "to_float"]


def to_float(image: Tensor) -> Tensor:
    """uint8 ``[3, H, W]`` → float32 ``v / 255`` in [0, 1], in contiguous colour planes whatever the input's layout
    (the channels-last view :func:`~rightreasons.data.io.read_image` gives included: torchvision's antialiased resize
    of a whole image takes 1.6× as long on channels-last floats). Converted and divided in place in one new buffer: a
    second large allocation costs more in page faults than the division itself."""
    return torch.empty(image.shape, dtype=torch.float32).copy_(image).div_(255.0)


def make_sample(image: Tensor, labels: Tensor, boxes: Tensor, box_labels: Tensor, *, has_boxes: bool, id: str,
                mask: Tensor | None = None, group: int | None = None, keep_uint8: bool = False,
                points: tuple[Tensor, Tensor] | None = None) -> dict[str, Any]:
    """Assemble a sample from plain tensors: ``image`` uint8 or float ``[3, H, W]``, ``labels [K]``, ``boxes [B, 4]``
    XYXY, ``box_labels [B]``, optional ``mask [H, W]``, ``group`` and ``points`` = (``[P, 2]`` XY, labels ``[P]``).

    A uint8 image becomes float (:func:`to_float`) unless ``keep_uint8`` (for a transform that takes uint8 images,
    :func:`rightreasons.data.transforms.takes_uint8`)."""
    if not image.is_floating_point() and not keep_uint8:
        image = to_float(image)
    h, w = image.shape[-2:]
    sample: dict[str, Any] = {
        "image": tv_tensors.Image(image),
        "labels": torch.as_tensor(labels, dtype=torch.float32),
        "boxes": tv_tensors.BoundingBoxes(torch.as_tensor(boxes, dtype=torch.float32).reshape(-1, 4), format="XYXY",
                                          canvas_size=(h, w)),
        "box_labels": torch.as_tensor(box_labels, dtype=torch.long).reshape(-1),
        "has_boxes": bool(has_boxes),
        "id": id,
    }
    if mask is not None:
        sample["mask"] = SegmentationMask(torch.as_tensor(mask, dtype=torch.uint8))
    if group is not None:
        sample["group"] = int(group)
    if points is not None:
        sample["points"] = Points(torch.as_tensor(points[0], dtype=torch.float32).reshape(-1, 2), canvas_size=(h, w))
        sample["point_labels"] = torch.as_tensor(points[1], dtype=torch.long).reshape(-1)
    return sample


def _stack(samples: Sequence[dict[str, Any]], key: str) -> Tensor:
    """``samples[i][key]`` stacked ``[N, *shape]``. In a DataLoader worker the batch is stacked straight into shared
    memory, as torch's ``default_collate`` does: it travels to the main process there, and a batch in private memory
    would be copied into shared memory when it is sent (38 MB a batch of 32 B-cos images at 224 px)."""
    shapes = {tuple(s[key].shape) for s in samples}
    if len(shapes) > 1:
        ids = ", ".join(f"{s['id']}: {tuple(s[key].shape)}" for s in samples[:8])
        raise ValueError(f"cannot batch '{key}' tensors of different shapes ({ids}); use a transform preset "
                         "(rightreasons.data.train_transform / eval_transform) to bring images to one size")
    tensors = [s[key].as_subclass(Tensor) for s in samples]
    out = None
    if get_worker_info() is not None:
        first = tensors[0]
        storage = first._typed_storage()._new_shared(len(tensors) * first.numel(), device=first.device)
        out = first.new(storage).resize_(len(tensors), *first.shape)
    return torch.stack(tensors, out=out)


def collate(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Batch samples: ``image [N, C, H, W]``, ``labels [N, K]``, ``has_boxes [N]`` bool, ``group [N]`` long and
    ``explanation [N, C, H, W]`` are stacked; ``boxes`` (``BoundingBoxes``), ``box_labels``, ``points``,
    ``point_labels`` and ``id`` stay lists of length N (counts vary; a sample without points gets none); ``mask`` is
    stacked ``[N, H, W]`` when every sample has one, else a list with None for the samples without (VOC has
    segmentations for few images)."""
    if not samples:
        raise ValueError("cannot collate an empty batch")
    batch: dict[str, Any] = {
        "image": _stack(samples, "image"),
        "labels": _stack(samples, "labels"),
        "boxes": [s["boxes"] for s in samples],
        "box_labels": [s["box_labels"] for s in samples],
        "has_boxes": torch.tensor([bool(s["has_boxes"]) for s in samples]),
        "id": [s["id"] for s in samples],
    }
    if any("points" in s for s in samples):
        batch["points"] = [s["points"] if "points" in s else torch.zeros(0, 2) for s in samples]
        batch["point_labels"] = [s["point_labels"] if "points" in s else torch.zeros(0, dtype=torch.long)
                                 for s in samples]
    for key in ("group", "explanation", "mask"):
        present = [key in s for s in samples]
        if not any(present):
            continue
        if key == "group":
            if not all(present):
                raise ValueError("some samples of the batch have a 'group' and others do not")
            batch[key] = torch.tensor([int(s[key]) for s in samples], dtype=torch.long)
        elif all(present):
            batch[key] = _stack(samples, key)
        elif key == "mask":
            batch[key] = [s.get(key) for s in samples]
        else:
            missing = [s["id"] for s in samples if key not in s]
            raise ValueError(f"samples {missing[:8]} have no '{key}' while others of the batch do")
    return batch
