"""MS COCO 2014 loader on a small instances JSON written by the test (crowd annotation, unannotated image)."""

import json

import numpy as np
import pytest
from PIL import Image

from rightreasons.cli import main
from rightreasons.data import BoxWarning, DataError, load_dataset
from rightreasons.data.prepare import coco as prepare_coco

CATEGORIES = [{"id": 1, "name": "person"}, {"id": 3, "name": "car"}, {"id": 18, "name": "dog"}]
IMAGES = [{"id": 42, "file_name": "COCO_val2014_000000000042.jpg", "height": 30, "width": 40},
          {"id": 7, "file_name": "COCO_val2014_000000000007.jpg", "height": 20, "width": 20},
          {"id": 99, "file_name": "COCO_val2014_000000000099.jpg", "height": 24, "width": 32}]
ANNOTATIONS = [
    {"id": 1, "image_id": 42, "category_id": 18, "bbox": [2.0, 3.0, 10.0, 12.5], "iscrowd": 0, "area": 1.0},
    {"id": 2, "image_id": 42, "category_id": 1, "bbox": [20.0, 0.0, 15.0, 30.0], "iscrowd": 1, "area": 1.0},
    {"id": 3, "image_id": 7, "category_id": 3, "bbox": [0.0, 0.0, 5.0, 5.0], "iscrowd": 0, "area": 1.0},
    {"id": 4, "image_id": 7, "category_id": 3, "bbox": [10.0, 10.0, 4.0, 6.0], "iscrowd": 0, "area": 1.0},
]  # image 99 has no annotation


def write_coco(root, annotations=ANNOTATIONS, images=IMAGES, text=None):
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "val2014").mkdir(exist_ok=True)
    for img in images:
        pixels = np.full((img["height"], img["width"], 3), 128, np.uint8)
        Image.fromarray(pixels).save(root / "val2014" / img["file_name"])
    content = {"images": images, "annotations": annotations, "categories": CATEGORIES}
    (root / "annotations" / "instances_val2014.json").write_text(text if text is not None else json.dumps(content))
    return root


def test_contiguous_classes_boxes_and_crowd_as_label_only(tmp_path):
    ds = load_dataset("coco2014", write_coco(tmp_path), "val")
    assert ds.classes == ("person", "car", "dog") and ds.ids == ["7", "42"]  # image 99 excluded, sorted ids
    s = ds[1]
    assert s["image"].shape == (3, 30, 40)
    assert s["labels"].tolist() == [1.0, 0.0, 1.0]  # the crowd of people counts for the label ...
    assert s["boxes"].tolist() == [[2.0, 3.0, 12.0, 15.5]] and s["box_labels"].tolist() == [2]  # ... not as a box
    assert ds[0]["boxes"].tolist() == [[0, 0, 5, 5], [10, 10, 14, 16]] and ds[0]["box_labels"].tolist() == [1, 1]
    assert not hasattr(ds, "coco")  # the parsed JSON is released after indexing


def test_crowd_policies_and_unannotated_images(tmp_path):
    root = write_coco(tmp_path)
    ignore = load_dataset("coco2014", root, "val", crowd="ignore")
    assert ignore.labels[1].tolist() == [0, 0, 1]
    box = load_dataset("coco2014", root, "val", crowd="box")
    assert box[1]["box_labels"].tolist() == [2, 0] and box[1]["boxes"][1].tolist() == [20, 0, 35, 30]
    every = load_dataset("coco2014", root, "val", include_unannotated=True)
    assert every.ids == ["7", "42", "99"] and every.labels[2].sum() == 0 and len(every[2]["boxes"]) == 0
    with pytest.raises(ValueError, match="unknown crowd policy"):
        load_dataset("coco2014", root, "val", crowd="skip")


def test_bad_files_and_records_are_named(tmp_path):
    with pytest.raises(DataError, match=r"instances_val2014\.json: COCO annotation file not found"):
        load_dataset("coco2014", tmp_path, "val")
    write_coco(tmp_path, text='{"images": [')
    with pytest.raises(DataError, match=r"instances_val2014\.json: malformed JSON"):
        load_dataset("coco2014", tmp_path, "val")
    write_coco(tmp_path, text='{"images": [], "annotations": []}')
    with pytest.raises(DataError, match="missing top-level key.*categories"):
        load_dataset("coco2014", tmp_path, "val")
    bad = ANNOTATIONS + [{"id": 5, "image_id": 7, "category_id": 77, "bbox": [0, 0, 1, 1], "iscrowd": 0}]
    write_coco(tmp_path, bad)
    with pytest.raises(DataError, match=r"annotation 5 of image 7: unknown category_id 77"):
        load_dataset("coco2014", tmp_path, "val")
    bad = ANNOTATIONS + [{"id": 6, "image_id": 7, "category_id": 3, "bbox": [4, 4, 0, 3], "iscrowd": 0}]
    write_coco(tmp_path, bad)
    with pytest.raises(DataError, match=r"COCO_val2014_000000000007\.jpg: annotation 6 of image 7: .*degenerate"):
        load_dataset("coco2014", tmp_path, "val", box_policy="clip")
    with pytest.warns(BoxWarning, match="annotation 6 of image 7"):
        ds = load_dataset("coco2014", tmp_path, "val")  # default policy "drop": COCO has a few such boxes
    assert len(ds[0]["boxes"]) == 2
    (tmp_path / "val2014" / "COCO_val2014_000000000042.jpg").unlink()
    with pytest.raises(DataError, match=r"COCO_val2014_000000000042\.jpg: image file not found"):
        ds[1]


def test_prepare_checks_images_and_checksums(tmp_path, capsys):
    root = write_coco(tmp_path)
    (root / "sums.md5").write_text(f"{'0' * 32}  annotations/instances_val2014.json\n")
    assert main(["prepare", "coco", str(root), "--allow-partial", "--checksums", str(root / "sums.md5")]) == 1
    out = capsys.readouterr().out
    assert "val: 3 images, 4 annotations (1 crowd), 3 categories, 1 images without annotations" in out
    assert "instances_train2014.json" in out and "instances_val2014.json: md5" in out
    (root / "val2014" / "COCO_val2014_000000000099.jpg").unlink()
    main(["prepare", "coco", str(root), "--allow-partial"])
    assert "1 image(s) of split 'val' missing" in capsys.readouterr().out
    report = prepare_coco.check(root, allow_partial=True)
    assert report.exit_code == 1 and any("1 image(s) of split 'val' missing" in p for p in report.problems)
