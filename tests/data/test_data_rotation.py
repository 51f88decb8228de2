"""Rotation (``data.rotation``): image, segmentation mask, points and boxes turn by the same angle. A square is drawn
into an image whose other channels hold each pixel's position; after flip and rotation the output→source map is fitted
from those channels (crop and resize, which the other geometry tests check, are left out: torchvision's antialiased
resize is linear only to about 0.05 px), and the mask must cover exactly the pixels whose source lies on the square,
the point land where the map sends the square's centre, and the box be the tight box of the square's four rotated
corners."""

import pytest
import torch

from rightreasons.boxes import boxes_to_masks
from rightreasons.config import from_dict
from rightreasons.data import train_transform
from rightreasons.data.transforms import random_rotation
from rightreasons.engine import TrainConfig
from rightreasons.errors import ConfigError

from drawn_samples import drawn_sample

SIZE = 48


def drawn(trial: int) -> tuple[dict, tuple[int, int, int, int]]:
    """:func:`drawn_samples.drawn_sample` of ``SIZE``² with a random square; and the square ``(x1, y1, x2, y2)``.
    The crop then keeps the whole image and resizes nothing: what is checked is the rotation (and flip)."""
    g = torch.Generator().manual_seed(trial)
    y1, x1 = (int(torch.randint(SIZE // 8, SIZE // 2, (1,), generator=g)) for _ in range(2))
    y2, x2 = (start + int(torch.randint(4, SIZE // 3, (1,), generator=g)) for start in (y1, x1))
    return drawn_sample(trial, (SIZE, SIZE), (x1, y1, x2, y2)), (x1, y1, x2, y2)


def fitted_map(out: dict, source: tuple[int, int]) -> torch.Tensor:
    """``A [3, 2]``: source ``(x, y) = (c_x, c_y, 1) @ A`` for an output point ``c``, fitted by least squares on the
    output pixels whose sampled position the image's channels hold, dropping in turn the pixels the fit explains
    worse than a shrinking tolerance (those the rotation blends with its fill)."""
    h, w = source
    rows, cols = torch.meshgrid(torch.arange(SIZE) + 0.5, torch.arange(SIZE) + 0.5, indexing="ij")
    design = torch.stack([cols, rows, torch.ones_like(cols)], -1).reshape(-1, 3).double()
    target = torch.stack([out["image"][1] * w, out["image"][2] * h], -1).reshape(-1, 2).double()
    keep = (target[:, 0] > 1) & (target[:, 1] > 1)
    for tolerance in (30.0, 10.0, 3.0, 1.0, 0.1, 1e-3):
        fit = torch.linalg.lstsq(design[keep], target[keep]).solution
        keep = keep & ((design @ fit - target).abs().amax(1) < tolerance)
    assert keep.sum() > SIZE * SIZE // 3
    return fit


@pytest.mark.parametrize("trial", range(24))
def test_rotation_keeps_mask_point_and_box_on_the_drawn_square(trial):
    sample, (x1, y1, x2, y2) = drawn(trial)
    source = tuple(sample["image"].shape[-2:])
    torch.manual_seed(trial)
    out = train_transform(SIZE, scale=(1.0, 1.0), ratio=(1.0, 1.0), encoding="none", rotation=40.0)(sample)
    fit = fitted_map(out, source)
    assert abs(fit[0, 1]) > 1e-3 or abs(fit[1, 0]) > 1e-3 or trial == 0  # rotated, not only scaled
    rows, cols = torch.meshgrid(torch.arange(SIZE) + 0.5, torch.arange(SIZE) + 0.5, indexing="ij")
    u = fit[0, 0] * cols + fit[1, 0] * rows + fit[2, 0]
    v = fit[0, 1] * cols + fit[1, 1] * rows + fit[2, 1]
    inside_source = (u > 0.01) & (u < source[1] - 0.01) & (v > 0.01) & (v < source[0] - 0.01)
    on_square = (u >= x1) & (u < x2) & (v >= y1) & (v < y2) & inside_source
    tie = torch.stack([(u - x1).abs(), (u - x2).abs(), (v - y1).abs(), (v - y2).abs()]).amin(0) < 1e-3
    mask = out["mask"] > 0
    assert not ((mask != on_square) & ~tie).any()  # pixel for pixel, brought-in corners background
    to_output = torch.linalg.inv(torch.cat([fit, torch.tensor([[0.0], [0.0], [1.0]], dtype=fit.dtype)], 1))[:, :2]
    centre = torch.tensor([(x1 + x2) / 2, (y1 + y2) / 2, 1.0], dtype=fit.dtype) @ to_output
    assert torch.allclose(out["points"][0].double(), centre, atol=0.01)
    corners = torch.tensor([[x1, y1, 1.0], [x2, y1, 1.0], [x2, y2, 1.0], [x1, y2, 1.0]], dtype=fit.dtype) @ to_output
    tight = torch.cat([corners.amin(0), corners.amax(0)]).clamp(0, SIZE)
    if len(out["boxes"]):
        assert torch.allclose(out["boxes"][0].double(), tight, atol=0.01), (out["boxes"], tight)
        assert torch.equal(boxes_to_masks(out["boxes"], out["box_labels"], 0) & mask, mask)  # the box holds it
    else:
        assert not mask.any()


def test_rotation_is_a_checked_data_key_off_by_default():
    assert from_dict(TrainConfig, {}).data.rotation == 0.0
    assert from_dict(TrainConfig, {"data": {"rotation": 15}}).data.rotation == 15
    with pytest.raises(ConfigError, match="rotation"):
        from_dict(TrainConfig, {"data": {"rotation": -5}})
    with pytest.raises(ValueError, match="rotation must be in"):
        random_rotation(200)
    steps = [type(t).__name__ for t in train_transform(32, rotation=10).transforms]
    assert "RandomRotation" in steps and "RandomRotation" not in [type(t).__name__ for t in
                                                                 train_transform(32).transforms]
