"""Waterbirds-100 loader on a metadata.csv, images and a box file written by the test."""

import csv

import numpy as np
import pytest
import torch
from PIL import Image

from rightreasons.boxes import boxes_to_masks
from rightreasons.cli import main
from rightreasons.data import GROUP_NAMES, DataError, load_dataset
from rightreasons.data.prepare import waterbirds as prepare_waterbirds

# (img_filename, y, place, split, box)
ROWS = [
    ("001.Albatross/a1.jpg", 1, 1, 0, (4, 5, 20, 18)),   # G4 train
    ("002.Sparrow/s1.jpg", 0, 0, 0, (0, 0, 10, 10)),     # G1 train
    ("002.Sparrow/s2.jpg", 0, 0, 1, (8, 2, 30, 24)),     # G1 val
    ("001.Albatross/a2.jpg", 1, 0, 1, (1, 1, 5, 5)),     # G3 val: dropped from the train-like validation
    ("001.Albatross/a3.jpg", 1, 0, 2, (10, 6, 32, 24)),  # G3 test
    ("002.Sparrow/s3.jpg", 0, 1, 2, (3, 3, 9, 12)),      # G2 test
]


def write_waterbirds(root, rows=ROWS, header=("img_id", "img_filename", "y", "split", "place", "place_filename")):
    root.mkdir(parents=True, exist_ok=True)
    with (root / "metadata.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        for i, (name, y, place, split, _) in enumerate(rows):
            w.writerow([i + 1, name, y, split, place, "/b/bamboo_forest/00000001.jpg"][:len(header)])
    with (root / "boxes.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["img_filename", "x1", "y1", "x2", "y2"])
        w.writerows([name, *box] for name, *_, box in rows)
    for name, *_ in rows:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.zeros((24, 32, 3), np.uint8)).save(root / name)
    return root


def test_groups_splits_and_conventional_task(tmp_path):
    root = write_waterbirds(tmp_path)
    train = load_dataset("waterbirds100", root, "train")
    assert train.classes == ("landbird", "waterbird") and len(train) == 2
    s = train[0]
    assert s["group"] == 3 and GROUP_NAMES[3] == "G4 waterbird/water"
    assert s["labels"].tolist() == [0, 1] and s["box_labels"].tolist() == [1]
    assert s["boxes"].tolist() == [[4, 5, 20, 18]]
    assert train.groups.tolist() == [3, 0]
    val = load_dataset("waterbirds100", root, "val")
    assert val.ids == ["002.Sparrow/s2.jpg"] and val.groups.tolist() == [0]  # drawn like training: G1/G4 only
    assert load_dataset("waterbirds100", root, "val", train_like_val=False).groups.tolist() == [0, 2]
    test = load_dataset("waterbirds100", root, "test")
    assert test.groups.tolist() == [2, 1]  # G3 = waterbird on land, G2 = landbird on water


def test_reversed_task_guides_outside_the_bird_box(tmp_path):
    root = write_waterbirds(tmp_path)
    ds = load_dataset("waterbirds100", root, "test", task="reversed")
    assert ds.classes == ("land", "water")
    s = ds[0]  # waterbird on land: label "land"
    assert s["labels"].tolist() == [1, 0] and set(s["box_labels"].tolist()) == {0}
    outside = boxes_to_masks(s["boxes"], s["box_labels"], 0)
    bird = torch.zeros(24, 32, dtype=torch.bool)
    bird[6:24, 10:32] = True
    assert torch.equal(outside, ~bird)


def test_no_box_file_and_limited_boxes(tmp_path):
    root = write_waterbirds(tmp_path)
    plain = load_dataset("waterbirds100", root, "test", box_file=None)
    assert [plain[i]["has_boxes"] for i in range(2)] == [False, False] and len(plain[0]["boxes"]) == 0
    with pytest.raises(ValueError, match="needs a box file"):
        load_dataset("waterbirds100", root, "test", box_file=None, annotated_fraction=0.5)
    half = load_dataset("waterbirds100", root, "test", annotated_fraction=0.5, annotation_seed=1)
    assert sorted(half[i]["has_boxes"] for i in range(2)) == [False, True]


def test_bad_files_are_named(tmp_path):
    with pytest.raises(DataError, match=r"nothing: Waterbirds-100 directory not found"):
        load_dataset("waterbirds100", tmp_path / "nothing", "train")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"metadata\.csv: Waterbirds metadata\.csv not found"):
        load_dataset("waterbirds100", tmp_path / "empty", "train")
    root = write_waterbirds(tmp_path / "b", header=("img_id", "img_filename", "y", "split"))
    with pytest.raises(DataError, match=r"metadata\.csv: missing column\(s\) place"):
        load_dataset("waterbirds100", root, "train")
    rows = [ROWS[0], ("002.Sparrow/s1.jpg", 3, 0, 0, (0, 0, 10, 10))]
    root = write_waterbirds(tmp_path / "c", rows)
    with pytest.raises(DataError, match=r"metadata\.csv: line 3: y=3; expected one of \(0, 1\)"):
        load_dataset("waterbirds100", root, "train")
    rows = [ROWS[0], ("002.Sparrow/s1.jpg", 0, 0, 0, (12, 0, 10, 10))]
    root = write_waterbirds(tmp_path / "d", rows)
    with pytest.raises(DataError, match=r"boxes\.csv: line 3 \(002\.Sparrow/s1\.jpg\): .*degenerate"):
        load_dataset("waterbirds100", root, "train")
    root = write_waterbirds(tmp_path / "e")
    lines = (root / "boxes.csv").read_text().splitlines()
    (root / "boxes.csv").write_text("\n".join(lines[:2]) + "\n")
    with pytest.raises(DataError, match=r"boxes\.csv: no box for 1 image\(s\) of split 'train', e\.g\. 002"):
        load_dataset("waterbirds100", root, "train")
    (root / "boxes.csv").unlink()
    with pytest.raises(DataError, match="box file not found; build it with `rightreasons prepare waterbirds ROOT"):
        load_dataset("waterbirds100", root, "train")


def test_prepare_builds_the_box_file_from_segmentations(tmp_path, capsys):
    root = write_waterbirds(tmp_path / "wb")
    (root / "boxes.csv").unlink()
    seg = tmp_path / "segmentations"
    for name, *_, (x1, y1, x2, y2) in ROWS:
        mask = np.zeros((12, 16), np.uint8)  # half the image size: boxes are scaled back up
        mask[y1 // 2:(y2 + 1) // 2, x1 // 2:(x2 + 1) // 2] = 255
        (seg / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(mask).save((seg / name).with_suffix(".png"))
    assert main(["prepare", "waterbirds", str(root)]) == 1
    assert "box file missing" in capsys.readouterr().out
    assert prepare_waterbirds.check(root).exit_code == 1
    assert main(["prepare", "waterbirds", str(root), "--segmentations", str(seg)]) == 0
    out = capsys.readouterr().out
    assert "wrote 6 boxes" in out and "train: G1 landbird/land 1, G2 landbird/water 0" in out
    ds = load_dataset("waterbirds100", root, "test")
    assert ds[0]["boxes"].tolist() == [[10, 6, 32, 24]]
