"""Box-aware presets move image, boxes, mask and explanation together; limited/coarse annotations; batching."""

import numpy as np
import pytest
import torch
from torchvision import tv_tensors
from torchvision.transforms.v2 import functional as F

from rightreasons import create_model
from rightreasons.boxes import boxes_to_masks, dilate_boxes
from rightreasons.data import DataError, ExplanationMap, SanitizeBoxes, SyntheticConfig, annotated_count, collate, \
    eval_transform, load_dataset, select_annotated, train_transform, transforms_for, write_synthetic
from rightreasons.encoding import IMAGENET_MEAN, IMAGENET_STD


def marked_sample(size=64):
    """A synthetic bird whose image encodes the object pixels (channel 0) and the pixel position (channels 1, 2)."""
    s = load_dataset("synthetic-birds", None, "test", n=2, size=size, difficulty=0.0)[1]
    obj = (s["mask"] > 0).float()
    ramp = (torch.arange(size, dtype=torch.float32) + 0.5) / size
    s["image"] = tv_tensors.Image(torch.stack([obj, ramp.expand(size, size), ramp[:, None].expand(size, size)]))
    s["explanation"] = ExplanationMap(torch.stack([2 * obj, -obj]))
    return s


@pytest.mark.parametrize("seed", range(6))
def test_crop_and_flip_move_everything_pixel_exactly(seed):
    s = marked_sample()
    transform = train_transform(48, scale=(0.5625, 0.5625), ratio=(1.0, 1.0), hflip=1.0, encoding="none")
    torch.manual_seed(seed)
    out = transform(s)
    matches = [(t, l) for t in range(17) for l in range(17)
               if torch.equal(out["image"], s["image"][:, t:t + 48, l:l + 48].flip(-1))]
    assert len(matches) == 1  # a crop without resampling, then a flip
    t, l = matches[0]
    assert torch.equal(out["mask"], s["mask"][t:t + 48, l:l + 48].flip(-1))
    assert torch.equal(out["explanation"], s["explanation"][:, t:t + 48, l:l + 48].flip(-1))
    assert isinstance(out["explanation"], ExplanationMap)
    x1, y1, x2, y2 = s["boxes"][0].tolist()
    cx1, cy1, cx2, cy2 = min(max(x1 - l, 0), 48), min(max(y1 - t, 0), 48), min(max(x2 - l, 0), 48), \
        min(max(y2 - t, 0), 48)
    if cx2 > cx1 and cy2 > cy1:
        assert out["boxes"].tolist() == [[48 - cx2, cy1, 48 - cx1, cy2]] and out["boxes"].canvas_size == (48, 48)
        obj = out["mask"] > 0
        assert torch.equal(boxes_to_masks(out["boxes"], out["box_labels"], out["box_labels"][0].item()) & obj, obj)
        if (cx1, cy1, cx2, cy2) == (x1 - l, y1 - t, x2 - l, y2 - t):  # the whole object is inside the crop
            rows, cols = obj.any(1).nonzero().flatten(), obj.any(0).nonzero().flatten()
            assert out["boxes"].tolist() == [[cols.min(), rows.min(), cols.max() + 1, rows.max() + 1]]
    else:
        assert len(out["boxes"]) == 0 and len(out["box_labels"]) == 0


@pytest.mark.parametrize("seed", range(3))
def test_resized_crop_resamples_explanation_like_the_image(seed):
    s = marked_sample()
    field = torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(seed))
    field = torch.nn.functional.interpolate(field, size=(64, 64), mode="bilinear")[0, 0]
    s["image"][1] = field
    s["explanation"] = ExplanationMap(torch.stack([field, s["mask"].float()]))
    torch.manual_seed(seed)
    out = train_transform(40, scale=(0.3, 0.7), encoding="bcos")(s)
    assert out["image"].shape == (6, 40, 40) and torch.equal(out["image"][3:], 1 - out["image"][:3])
    assert torch.equal(out["explanation"][0], out["image"][1])  # same kernel, same parameters
    assert out["explanation"].shape == (2, 40, 40)
    obj = out["mask"] > 0  # nearest-neighbour; the box follows the same geometry
    if len(out["boxes"]) and obj.any():
        box = out["boxes"][0]
        grown = boxes_to_masks(box[None] + torch.tensor([-1.0, -1, 1, 1]), torch.tensor([0]), 0, canvas=(40, 40))
        assert not (obj & ~grown).any()
        if box[0] > 0 and box[1] > 0 and box[2] < 40 and box[3] < 40:  # not cut by the crop: still tight
            rows, cols = obj.any(1).nonzero().flatten(), obj.any(0).nonzero().flatten()
            tight = torch.tensor([cols.min(), rows.min(), cols.max() + 1, rows.max() + 1], dtype=torch.float32)
            assert (box - tight).abs().max() <= 1.0


def test_explanations_are_interpolated_not_nearest():
    ramp = torch.arange(16.0).reshape(1, 4, 4)
    up = F.resize(ExplanationMap(ramp), [8, 8])
    assert isinstance(up, ExplanationMap)
    assert torch.equal(up.as_subclass(torch.Tensor), F.resize(ramp, [8, 8]))
    assert up[0, 0, 1].item() == pytest.approx(0.25)  # nearest would repeat 0.0
    assert F.resize(tv_tensors.Mask(ramp), [8, 8])[0, 0, 1].item() == 0.0


def test_sanitize_drops_boxes_but_never_masks_or_explanations():
    s = {"image": tv_tensors.Image(torch.rand(3, 10, 10)),
         "boxes": tv_tensors.BoundingBoxes([[0, 0, 4, 4], [5, 5, 5, 9], [5, 5, 5.5, 9]], format="XYXY",
                                           canvas_size=(10, 10)),
         "box_labels": torch.tensor([3, 1, 2]), "labels": torch.tensor([0.0, 1, 1, 1]),
         "explanation": ExplanationMap(torch.rand(2, 10, 10)), "mask": tv_tensors.Mask(torch.zeros(2, 10, 10))}
    out = SanitizeBoxes()(s)  # only the box without area goes; one thinner than a pixel stays
    assert out["box_labels"].tolist() == [3, 2] and len(out["boxes"]) == 2
    assert out["explanation"].shape == (2, 10, 10) and out["mask"].shape == (2, 10, 10)
    assert torch.equal(out["labels"], s["labels"])


def test_eval_preset_scales_boxes_and_masks_exactly_and_normalises():
    s = load_dataset("synthetic-birds", None, "val", n=1, size=32)[0]
    out = eval_transform(64, crop_fraction=1.0, encoding="normalize")(s)
    assert out["boxes"].tolist() == [[2 * v for v in s["boxes"][0].tolist()]]
    assert torch.equal(out["mask"], s["mask"].repeat_interleave(2, 0).repeat_interleave(2, 1))
    restored = out["image"] * torch.tensor(IMAGENET_STD)[:, None, None] + torch.tensor(IMAGENET_MEAN)[:, None, None]
    assert torch.allclose(restored, F.resize(s["image"], [64, 64]), atol=1e-5)
    centre = eval_transform(24, encoding="none")(s)  # resize to round(24 / 0.875) = 27, centre-crop 24
    assert centre["image"].shape == (3, 24, 24) and centre["boxes"].canvas_size == (24, 24)


def test_transforms_for_ends_in_the_encoding_the_model_takes():
    s = load_dataset("synthetic-birds", None, "val", n=1, size=32)[0]
    bcos, standard = create_model("bcos_cifar10_resnet20", num_classes=2), create_model("resnet18", num_classes=2)
    for model, encoding in ((bcos, "bcos"), (standard, "normalize")):
        ours = transforms_for(model, 32, crop_fraction=1.0)(s)
        assert torch.equal(ours["image"], eval_transform(32, encoding=encoding, crop_fraction=1.0)(s)["image"])
    trained = transforms_for(bcos, 32, train=True, scale=(1.0, 1.0), ratio=(1.0, 1.0), hflip=0.0,
                             crop_fraction=1.0)(s)
    assert torch.allclose(trained["image"], eval_transform(32, encoding="bcos", crop_fraction=1.0)(s)["image"],
                          atol=1e-6)


def test_limited_annotations_are_exact_and_seeded():
    assert [annotated_count(1000, f) for f in (0.0, 0.01, 0.1, 1.0)] == [0, 10, 100, 1000]
    assert annotated_count(50, 0.01) == 1 and annotated_count(250, 0.01) == 3  # round half up, at least one
    a, b, c = select_annotated(1000, 0.1, 7), select_annotated(1000, 0.1, 7), select_annotated(1000, 0.1, 8)
    assert a.sum() == 100 and np.array_equal(a, b) and not np.array_equal(a, c)
    with pytest.raises(ValueError, match="annotated_fraction"):
        annotated_count(10, 1.5)
    ds = load_dataset("synthetic-multilabel", None, "train", n=60, size=32, annotated_fraction=0.1,
                      annotation_seed=3)
    flags = [ds[i]["has_boxes"] for i in range(60)]
    assert sum(flags) == 6 and np.array_equal(np.flatnonzero(flags), np.flatnonzero(select_annotated(60, 0.1, 3)))
    withheld = ds[flags.index(False)]
    assert len(withheld["boxes"]) == 0 and len(withheld["box_labels"]) == 0 and withheld["labels"].sum() >= 1


def test_coarse_boxes_are_dilated_and_clipped():
    plain = load_dataset("synthetic-multilabel", None, "val", n=5, size=32)
    coarse = load_dataset("synthetic-multilabel", None, "val", n=5, size=32, box_dilation=0.5)
    for i in range(5):
        expected = dilate_boxes(plain[i]["boxes"], 0.5)
        assert torch.equal(coarse[i]["boxes"].as_subclass(torch.Tensor), expected.as_subclass(torch.Tensor))
        assert coarse[i]["boxes"].max() <= 32 and coarse[i]["boxes"].min() >= 0


def test_collate_keeps_variable_boxes_as_lists():
    ds = load_dataset("synthetic-multilabel", None, "test", n=6, size=32, max_objects=4)
    batch = collate([ds[i] for i in range(6)])
    assert batch["image"].shape == (6, 3, 32, 32) and batch["labels"].shape == (6, 6)
    assert [len(b) for b in batch["boxes"]] == [len(ds[i]["boxes"]) for i in range(6)]
    assert batch["has_boxes"].dtype == torch.bool and batch["group"].dtype == torch.long
    assert batch["mask"].shape == (6, 32, 32)
    partial = [ds[0], {k: v for k, v in ds[1].items() if k != "mask"}]
    assert collate(partial)["mask"][1] is None
    with pytest.raises(ValueError, match="have no 'explanation'"):
        collate([{**ds[0], "explanation": ExplanationMap(torch.zeros(1, 32, 32))}, ds[1]])


def test_frozen_explanations_through_a_two_worker_loader(tmp_path):
    write_synthetic(tmp_path, "synthetic-birds", SyntheticConfig(size=32, sizes={"train": 12}), splits=("train",))
    base = load_dataset("synthetic-birds", tmp_path, "train")
    cache = {base.ids[i]: (base[i]["mask"] > 0).to(torch.float16)[None] for i in range(len(base))}
    ds = load_dataset("synthetic-birds", tmp_path, "train",
                      transform=train_transform(32, explanations=cache, crop_fraction=1.0))
    loader = torch.utils.data.DataLoader(ds, batch_size=4, num_workers=2, collate_fn=collate)
    batches = list(loader)
    assert len(batches) == 3 and sorted(sum((b["id"] for b in batches), [])) == sorted(base.ids)
    for b in batches:
        assert b["image"].shape == (4, 6, 32, 32) and b["explanation"].shape == (4, 1, 32, 32)
        assert b["explanation"].dtype == torch.float32
        inside = (b["explanation"][:, 0] > 0.5) == (b["mask"] > 0)
        assert inside.float().mean() > 0.97  # bilinear vs nearest resampling of the same object
    del cache[base.ids[5]]
    with pytest.raises(DataError, match=r"000005\.png: id \S+: transform failed: .*no cached explanation"):
        ds[5]


@pytest.mark.parametrize("preset", ["eval", "train"])
def test_one_pixel_boxes_of_large_images_survive_the_presets_at_32_px(tmp_path, write_voc, preset):
    """1-pixel boxes of 400 × 400 VOC images become 0.08 px at 32 px; torchvision's sanitiser (at least 1 px) dropped
    them, the image lost its boxes and guidance went off without a word. They now reach the guidance mask, as the
    pixel holding their centre (rightreasons.boxes)."""
    voc = write_voc(tmp_path, {"000001": (400, 400, [("dog", 101, 201, 101, 201, 0)])}, {"train": ["000001"]})
    transform = eval_transform(32, crop_fraction=1.0) if preset == "eval" else \
        train_transform(32, scale=(1.0, 1.0), ratio=(1.0, 1.0), hflip=0.0)
    sample = load_dataset("voc2007", voc, "train", transform=transform)[0]
    assert sample["boxes"][0].tolist() == pytest.approx([100 * 0.08, 200 * 0.08, 101 * 0.08, 201 * 0.08])
    mask = boxes_to_masks(sample["boxes"], sample["box_labels"], int(sample["box_labels"][0]))
    assert mask.sum() == 1 and mask[16, 8]
