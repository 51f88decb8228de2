"""Waterbirds-100 loader on a metadata.csv (the release's columns), images, a box file and CUB-style masks written by
the shared ``write_waterbirds`` fixture."""

import pytest
import torch

from rightreasons.boxes import boxes_to_masks
from rightreasons.apps.cli import main
from rightreasons.data import GROUP_NAMES, DataError, load_dataset
from rightreasons.errors import UsageError
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




def test_groups_splits_and_conventional_task(tmp_path, write_waterbirds):
    root = write_waterbirds(tmp_path, ROWS)
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


def test_reversed_task_guides_outside_the_bird_box(tmp_path, write_waterbirds):
    root = write_waterbirds(tmp_path, ROWS)
    ds = load_dataset("waterbirds100", root, "test", task="reversed")
    assert ds.classes == ("land", "water")
    s = ds[0]  # waterbird on land: label "land"
    assert s["labels"].tolist() == [1, 0] and set(s["box_labels"].tolist()) == {0}
    outside = boxes_to_masks(s["boxes"], s["box_labels"], 0)
    bird = torch.zeros(24, 32, dtype=torch.bool)
    bird[6:24, 10:32] = True
    assert torch.equal(outside, ~bird)


def test_no_box_file_and_limited_boxes(tmp_path, write_waterbirds):
    root = write_waterbirds(tmp_path, ROWS)
    plain = load_dataset("waterbirds100", root, "test", box_file=None)
    assert [plain[i]["has_boxes"] for i in range(2)] == [False, False] and len(plain[0]["boxes"]) == 0
    with pytest.raises(UsageError, match="needs a box file") as refused:  # a RightReasonsError: one CLI error line
        load_dataset("waterbirds100", root, "test", box_file=None, annotated_fraction=0.5)
    message = str(refused.value)  # the command-line forms, not Python's box_file=None
    assert "data.options.box_file=null" in message and "data.annotated_fraction=0" in message
    assert "box_file=None" not in message and f"rightreasons prepare waterbirds100 --root {root}" in message
    half = load_dataset("waterbirds100", root, "test", annotated_fraction=0.5, annotation_seed=1)
    assert sorted(half[i]["has_boxes"] for i in range(2)) == [False, True]


def test_bad_files_are_named(tmp_path, write_waterbirds):
    with pytest.raises(DataError, match=r"nothing: Waterbirds-100 directory not found"):
        load_dataset("waterbirds100", tmp_path / "nothing", "train")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"metadata\.csv: Waterbirds metadata\.csv not found"):
        load_dataset("waterbirds100", tmp_path / "empty", "train")
    root = write_waterbirds(tmp_path / "b", ROWS, header=("img_id", "img_filename", "y", "split"))
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
    root = write_waterbirds(tmp_path / "e", ROWS)
    lines = (root / "boxes.csv").read_text().splitlines()
    (root / "boxes.csv").write_text("\n".join(lines[:2]) + "\n")
    with pytest.raises(DataError, match=r"boxes\.csv: no box for 1 image\(s\) of split 'train', e\.g\. 002"):
        load_dataset("waterbirds100", root, "train")
    (root / "boxes.csv").unlink()
    with pytest.raises(DataError, match="box file not found") as missing:
        load_dataset("waterbirds100", root, "train")
    message = str(missing.value)  # every way out, in the forms a user types
    assert "CUB-200-2011" in message and "segmentations/" in message
    assert f"rightreasons prepare waterbirds100 --root {root} --segmentations" in message
    assert "data.options.box_file=null data.annotated_fraction=0" in message and "box_file=None" not in message


def test_prepare_builds_the_box_file_from_segmentations(tmp_path, write_waterbirds, capsys):
    seg = tmp_path / "segmentations"
    root = write_waterbirds(tmp_path / "wb", ROWS, box_file=False, segmentations=seg)  # masks: half the image size
    assert main(["prepare", "waterbirds100", "--root", str(root)]) == 1
    assert "box file missing" in capsys.readouterr().out
    assert prepare_waterbirds.check(root).exit_code == 1
    assert main(["prepare", "waterbirds", "--root", str(root), "--segmentations", str(seg)]) == 0  # the alias
    out = capsys.readouterr().out
    assert "wrote 6 boxes" in out and "train: G1 landbird/land 1, G2 landbird/water 0" in out
    ds = load_dataset("waterbirds100", root, "test")
    assert ds[0]["boxes"].tolist() == [[10, 6, 32, 24]]
