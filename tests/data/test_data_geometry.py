"""Geometry that never drifts: image, boxes, segmentation mask and points go through the presets' random resized crop,
flip and resize together, checked against the image itself; EXIF-oriented images and the annotations drawn on them
agree."""

import numpy as np
import pytest
import torch
from PIL import ExifTags, Image
from torchvision import tv_tensors

from rightreasons.boxes import boxes_to_masks
from rightreasons.data import DataError, eval_transform, load_dataset, train_transform
from rightreasons.data.geometry import SegmentationMask
from rightreasons.data.io import read_mask

from drawn_samples import drawn_sample


def drawn_square_sample(trial: int, mask_type: type = SegmentationMask) -> tuple[dict, tuple[int, int, int, int]]:
    """:func:`drawn_samples.drawn_sample` of a random size with a random square; and the square ``(x1, y1, x2, y2)``."""
    g = torch.Generator().manual_seed(trial)
    h, w = torch.randint(40, 200, (2,), generator=g).tolist()
    y1, x1 = int(torch.randint(0, h // 2, (1,), generator=g)), int(torch.randint(0, w // 2, (1,), generator=g))
    y2 = y1 + int(torch.randint(3, h // 2, (1,), generator=g))
    x2 = x1 + int(torch.randint(3, w // 2, (1,), generator=g))
    return drawn_sample(trial, (h, w), (x1, y1, x2, y2), mask_type), (x1, y1, x2, y2)


def where_from(out: dict, size: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """The source x and y ``[h, w]`` of every transformed pixel's centre, read from the image's channels 1 and 2."""
    h, w = size
    return out["image"][1] * w, out["image"][2] * h


def affine_fit(coordinate: torch.Tensor, axis: int) -> tuple[float, float]:
    """``(a, b)`` with source coordinate ``a + b · c`` at output coordinate ``c``, fitted on interior pixels."""
    inner = coordinate[2:-2, 2:-2].double()
    along = (torch.arange(coordinate.shape[axis], dtype=torch.float64) + 0.5)[2:-2]
    values = inner.mean(0 if axis == 1 else 1)
    b = float(((along - along.mean()) * (values - values.mean())).sum() / (along - along.mean()).square().sum())
    return float(values.mean() - b * along.mean()), b


def check_coincide(out: dict, source: tuple[int, int], square: tuple[int, int, int, int]) -> None:
    """Mask pixel for pixel where the image says the square is; box and point where the image's geometry maps them."""
    x1, y1, x2, y2 = square
    u, v = where_from(out, source)
    on_square = (u >= x1) & (u < x2) & (v >= y1) & (v < y2)
    mask = out["mask"] > 0
    distance = torch.stack([(u - x1).abs(), (u - x2).abs(), (v - y1).abs(), (v - y2).abs()]).amin(0)
    differ = mask != on_square
    assert not (differ & (distance > 1e-3))[1:-1, 1:-1].any()  # but for centres on an edge (a tie)
    assert not (differ & (distance > 0.25)).any()  # the border ring's positions are smoothed by the resampling
    assert not (mask & (out["image"][0] == 0)).any() and not (~mask & (out["image"][0] == 1)).any()
    (ax, bx), (ay, by) = affine_fit(u, 1), affine_fit(v, 0)
    to_out = torch.tensor([[(x1 - ax) / bx, (y1 - ay) / by], [(x2 - ax) / bx, (y2 - ay) / by]])
    expected = torch.cat([to_out.amin(0), to_out.amax(0)])
    size = out["image"].shape[-1]
    expected = expected.clamp(0, size)
    if len(out["boxes"]):
        assert torch.allclose(out["boxes"][0], expected.float(), atol=0.01), (out["boxes"], expected)
        rows, cols = mask.any(1).nonzero().flatten(), mask.any(0).nonzero().flatten()
        tight = torch.tensor([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1], dtype=torch.float32)
        assert (out["boxes"][0] - tight).abs().max() <= 1.0  # the box within one pixel of the mask's extent
        assert torch.equal(boxes_to_masks(out["boxes"], out["box_labels"], 0) & mask, mask)
    else:
        assert not ((expected[2] > expected[0] + 0.01) & (expected[3] > expected[1] + 0.01))
    centre = torch.tensor([((x1 + x2) / 2 - ax) / bx, ((y1 + y2) / 2 - ay) / by], dtype=torch.float64)
    if ((centre >= 0) & (centre <= size)).all():  # outside, the fit's error grows with the distance
        assert torch.allclose(out["points"][0].double(), centre, atol=0.01)
    else:
        assert not ((out["points"][0] >= 0) & (out["points"][0] <= size)).all()


@pytest.mark.parametrize("trial", range(40))
def test_random_resized_crop_and_flip_keep_mask_box_and_point_on_the_drawn_square(trial):
    sample, square = drawn_square_sample(trial)
    torch.manual_seed(trial)
    out = train_transform(48, scale=(0.25, 1.0), encoding="none")(sample)
    check_coincide(out, tuple(sample["image"].shape[-2:]), square)


@pytest.mark.parametrize("trial", range(10))
def test_the_evaluation_resize_and_centre_crop_keep_them_on_the_square(trial):
    sample, square = drawn_square_sample(trial)
    out = eval_transform(40, encoding="none")(sample)
    check_coincide(out, tuple(sample["image"].shape[-2:]), square)


def test_torchvisions_own_mask_resampling_drifts_and_ours_does_not():
    drifted = 0
    for trial in range(40):
        sample, square = drawn_square_sample(trial, tv_tensors.Mask)
        torch.manual_seed(trial)
        out = train_transform(48, encoding="none")(sample)
        try:
            check_coincide(out, tuple(sample["image"].shape[-2:]), square)
        except AssertionError:
            drifted += 1
    assert drifted >= 20  # NEAREST, floor(i · s): up to half an input pixel off, on most crops


def test_masks_resample_at_pixel_centres_with_torchvision_versions_whose_resize_mask_takes_no_mode(monkeypatch):
    """torchvision 0.26's ``resize_mask(mask, size, max_size=None)`` has no interpolation argument (the GPU machine's
    torchvision; every training step failed there): the resampling must not depend on it."""
    from torchvision.transforms.v2 import functional as F

    def resize_mask_0_26(mask, size, max_size=None):
        raise AssertionError("SegmentationMask must not go through resize_mask")

    monkeypatch.setattr(F, "resize_mask", resize_mask_0_26)
    mask = torch.arange(5 * 7, dtype=torch.uint8).reshape(5, 7)
    for size in ([3, 4], [11, 16], [5, 7]):
        out = F.resize(SegmentationMask(mask), size)
        rows = ((torch.arange(size[0]) + 0.5) * 5 / size[0]).floor().long()    # the input pixel holding each centre
        cols = ((torch.arange(size[1]) + 0.5) * 7 / size[1]).floor().long()
        assert isinstance(out, SegmentationMask) and torch.equal(out.as_subclass(torch.Tensor), mask[rows][:, cols])
    cropped = F.resized_crop(SegmentationMask(mask[None]), 1, 2, 4, 4, [8, 8])
    doubled = mask[1:5, 2:6].repeat_interleave(2, 0).repeat_interleave(2, 1)   # 4 × 4 crop to 8 × 8: each pixel twice
    assert torch.equal(cropped.as_subclass(torch.Tensor)[0], doubled)


@pytest.mark.parametrize("trial", range(10))
def test_the_uint8_preset_moves_the_mask_with_the_colour(trial):
    sample, (x1, y1, x2, y2) = drawn_square_sample(trial)
    sample["image"] = tv_tensors.Image((sample["image"] * 255).round().to(torch.uint8))
    torch.manual_seed(trial)
    out = train_transform(48, encoding="none")(sample)
    assert not out["image"].dtype == torch.uint8
    mask = out["mask"] > 0
    assert not (mask & (out["image"][0] == 0)).any() and not (~mask & (out["image"][0] == 1)).any()


ROTATED = 6
"""EXIF orientation "rotate 90° clockwise to display": what a phone held upright writes."""


def test_an_exif_rotated_jpeg_with_a_box_and_a_mask_drawn_on_the_displayed_image_agree(tmp_path):
    """The camera stores 60 × 40 pixels (W × H) and tags them to be shown turned: 40 × 60. The person labelling sees
    the turned image and draws the red square's box and mask (a PNG, without EXIF) on it."""
    shown = np.zeros((60, 40, 3), np.uint8)  # H × W as displayed
    shown[10:30, 5:25] = (255, 0, 0)
    stored = np.rot90(shown, 1).copy()  # turned back: tag 6 turns it 90° clockwise for display
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = ROTATED
    (tmp_path / "cat").mkdir()
    Image.fromarray(stored).save(tmp_path / "cat" / "a.jpg", exif=exif, quality=100, subsampling=0)
    mask = np.zeros((60, 40), np.uint8)
    mask[10:30, 5:25] = 255
    Image.fromarray(mask, "L").save(tmp_path / "a_mask.png")
    (tmp_path / "labels.csv").write_text("image,class\ncat/a.jpg,cat\n")
    (tmp_path / "boxes.csv").write_text("image,class,x1,y1,x2,y2,mask\ncat/a.jpg,cat,5,10,25,30,a_mask.png\n")
    sample = load_dataset("folder", tmp_path, "train", labels="labels.csv", annotations="boxes.csv")[0]
    red = (sample["image"][0] > 0.5) & (sample["image"][1] < 0.5)
    assert sample["image"].shape == (3, 60, 40)
    assert torch.equal(sample["mask"] > 0, red)
    assert torch.equal(boxes_to_masks(sample["boxes"], sample["box_labels"], 0), red)


def test_a_mask_drawn_on_the_stored_pixels_of_a_turned_image_is_refused_naming_the_turn(tmp_path):
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = ROTATED
    (tmp_path / "cat").mkdir()
    Image.fromarray(np.zeros((40, 60, 3), np.uint8)).save(tmp_path / "cat" / "a.jpg", exif=exif)
    Image.fromarray(np.full((40, 60), 255, np.uint8), "L").save(tmp_path / "a_mask.png")  # the stored frame
    (tmp_path / "labels.csv").write_text("image,class\ncat/a.jpg,cat\n")
    (tmp_path / "masks.csv").write_text("image,class,mask\ncat/a.jpg,cat,a_mask.png\n")
    dataset = load_dataset("folder", tmp_path, "train", labels="labels.csv", annotations="masks.csv")
    with pytest.raises(DataError, match=r"a\.jpg.*mask of size \(40, 60\) does not match the image size \(60, 40\); "
                                        r"it is the image's size turned by 90°"):
        dataset[0]


def test_a_mask_file_with_an_exif_orientation_is_turned_like_an_image(tmp_path):
    stored = np.zeros((40, 60), np.uint8)
    stored[:, :10] = 255  # the stored left strip is the displayed top strip under orientation 6 (90° clockwise)
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = ROTATED
    Image.fromarray(stored, "L").save(tmp_path / "m.png", exif=exif)
    mask = read_mask(tmp_path / "m.png")
    assert mask.shape == (60, 40) and mask[:10].all() and not mask[10:].any()
