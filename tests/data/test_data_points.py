"""Points (one click per object) from a folder dataset's ``x, y`` columns: in the sample, through the presets and the
batch, withheld with the other annotations, refused outside the image; and guiding with boxes and masks in one run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image

from rightreasons.data import DataError, collate, eval_transform, load_dataset
from rightreasons.data.geometry import Points
from rightreasons.guidance import GuidanceObjective


def write(root, rows: str) -> None:
    """Four grey 32 px images (``a``-``d``), all of class ``cat``, with the annotation ``rows`` in ``notes.csv``; a
    mask file ``m.png`` on the square [4, 20) × [6, 22)."""
    for name in "abcd":
        Image.fromarray(np.full((32, 32, 3), 120, np.uint8)).save(root / f"{name}.png")
    mask = np.zeros((32, 32), np.uint8)
    mask[6:22, 4:20] = 255
    Image.fromarray(mask, "L").save(root / "m.png")
    (root / "labels.csv").write_text("image,class\n" + "".join(f"{n}.png,cat\n" for n in "abcd"))
    (root / "notes.csv").write_text("image,class,x1,y1,x2,y2,x,y,mask\n" + rows)


ROWS = "a.png,cat,,,,,10.5,12,\nb.png,cat,2,3,12,14,,,\nc.png,cat,,,,,,,m.png\n"


def test_points_are_read_batched_and_withheld_with_the_other_annotations(tmp_path):
    write(tmp_path, ROWS)
    ds = load_dataset("folder", tmp_path, "train", labels="labels.csv", annotations="notes.csv")
    a, b = ds[0], ds[1]
    assert isinstance(a["points"], Points) and a["points"].tolist() == [[10.5, 12.0]]
    assert a["point_labels"].tolist() == [0] and a["points"].canvas_size == (32, 32)
    assert len(b["points"]) == 0 and b["point_labels"].dtype == torch.long
    out = eval_transform(64, crop_fraction=1.0, encoding="none")(a)
    assert out["points"].tolist() == [[21.0, 24.0]] and isinstance(out["points"], Points)
    batch = collate([eval_transform(32, crop_fraction=1.0, encoding="none")(ds[i]) for i in range(4)])
    assert [len(p) for p in batch["points"]] == [1, 0, 0, 0] and len(batch["point_labels"]) == 4
    withheld = load_dataset("folder", tmp_path, "train", labels="labels.csv", annotations="notes.csv",
                            annotated_fraction=0.0)[0]
    assert not withheld["has_boxes"] and len(withheld["points"]) == 0
    plain = load_dataset("folder", tmp_path, "train", labels="labels.csv")[0]
    assert "points" not in plain  # a dataset without points has no points field


def test_a_point_outside_the_image_is_refused_naming_the_file_and_the_point(tmp_path):
    write(tmp_path, "a.png,cat,,,,,40,3,\n")
    ds = load_dataset("folder", tmp_path, "train", labels="labels.csv", annotations="notes.csv")
    with pytest.raises(DataError, match=r"a\.png: id a\.png: point \(40, 3\) lies outside the image of 32 × 32"):
        ds[0]


def test_one_batch_guides_a_point_a_box_and_a_mask_and_leaves_the_unannotated_image_alone(tmp_path):
    write(tmp_path, ROWS)
    ds = load_dataset("folder", tmp_path, "train", labels="labels.csv", annotations="notes.csv")
    batch = collate([ds[i] for i in range(4)])
    objective = GuidanceObjective(regions="union", point_radius=2.0)
    masks = objective.masks(batch["boxes"], batch["box_labels"], torch.zeros(4, dtype=torch.long),
                            batch["has_boxes"], (32, 32), batch["mask"], batch["points"], batch["point_labels"])
    assert masks.flatten(1).sum(1).tolist() == [12, 10 * 11, 16 * 16, 0]  # a disc, the box, the mask, nothing
    assert masks[0, 12, 10] and masks[1, 3:14, 2:12].all() and masks[2, 6:22, 4:20].all()


def test_coco_keypoints_are_the_samples_points_and_bad_ones_are_refused(tmp_path):
    Image.fromarray(np.full((32, 40, 3), 90, np.uint8)).save(tmp_path / "a.jpg")
    Image.fromarray(np.full((32, 40, 3), 90, np.uint8)).save(tmp_path / "b.jpg")

    def write_json(keypoints) -> None:
        (tmp_path / "train.json").write_text(json.dumps({
            "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}],
            "images": [{"id": 1, "file_name": "a.jpg", "height": 32, "width": 40},
                       {"id": 2, "file_name": "b.jpg", "height": 32, "width": 40}],
            "annotations": [{"id": 1, "image_id": 1, "category_id": 2, "bbox": [1, 2, 10, 10], "iscrowd": 0,
                             "keypoints": keypoints},
                            {"id": 2, "image_id": 2, "category_id": 1, "bbox": [1, 2, 10, 10], "iscrowd": 0}]}))

    write_json([5.5, 6, 2, 0, 0, 0, 39, 31.5, 1])  # visible, not labelled, labelled but hidden
    ds = load_dataset("coco-json", tmp_path, "train", files={"train": "train.json"})
    a, b = ds[0], ds[1]
    assert a["points"].tolist() == [[5.5, 6.0], [39.0, 31.5]] and a["point_labels"].tolist() == [1, 1]
    assert len(b["points"]) == 0
    for keypoints, message in (([5, 6], r"annotation 1 of image 1: keypoints \[5, 6\] is not a flat list"),
                               ([41, 6, 2], r"annotation 1 of image 1: keypoints: point \(41, 6\) lies outside the "
                                            r"image of 40 × 32")):
        write_json(keypoints)
        with pytest.raises(DataError, match=message):
            load_dataset("coco-json", tmp_path, "train", files={"train": "train.json"})
