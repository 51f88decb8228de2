"""A sample whose pixels say where they came from, for the geometry tests (crop, flip, resize, rotation)."""

from __future__ import annotations

import torch

from rightreasons.data import make_sample
from rightreasons.data.geometry import Points, SegmentationMask


def drawn_sample(trial: int, size: tuple[int, int], square: tuple[int, int, int, int],
                 mask_type: type = SegmentationMask) -> dict:
    """A float image ``[3, H, W]`` (``size = (H, W)``) with the ``square`` ``(x1, y1, x2, y2)`` drawn in channel 0 and,
    in channels 1 and 2, the x and y of each pixel's centre over the width and height (so every transformed pixel
    says where it came from); the square's mask (class 0, as ``mask_type``), box and centre point."""
    h, w = size
    x1, y1, x2, y2 = square
    image = torch.zeros(3, h, w)
    image[0, y1:y2, x1:x2] = 1
    image[1] = ((torch.arange(w) + 0.5) / w)[None]
    image[2] = ((torch.arange(h) + 0.5) / h)[:, None]
    mask = torch.zeros(h, w, dtype=torch.uint8)
    mask[y1:y2, x1:x2] = 1
    sample = make_sample(image, torch.tensor([1.0]), torch.tensor([[x1, y1, x2, y2]]), torch.tensor([0]),
                         has_boxes=True, id=str(trial), mask=mask)
    sample["mask"] = mask_type(sample["mask"])
    sample["points"] = Points([[(x1 + x2) / 2, (y1 + y2) / 2]], canvas_size=(h, w))
    return sample
