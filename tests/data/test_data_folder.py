"""``folder``: class sub-folders (ImageFolder) or one folder plus a labels file, with boxes and masks from CSV or JSON
lines written by hand, on 32 px images."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rightreasons.data import DataError, eval_transform, load_dataset
from rightreasons.errors import UsageError


def image(path: Path, size: tuple[int, int] = (32, 32)) -> None:
    """A grey image of ``size = (H, W)`` at ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((*size, 3), 120, np.uint8)).save(path)


def test_class_sub_folders_are_single_label_and_an_annotation_file_adds_boxes(tmp_path):
    for name in ("train/cat/a.jpg", "train/dog/b.PNG", "train/dog/c.jpg", "val/cat/d.jpg", "test/bird/e.jpg"):
        image(tmp_path / name)
    (tmp_path / "train" / "cat" / "notes.txt").write_text("not an image")
    ds = load_dataset("folder", tmp_path, "train")
    assert ds.classes == ("bird", "cat", "dog")  # from every split's folders: the same classes in every split
    assert ds.ids == ["train/cat/a.jpg", "train/dog/b.PNG", "train/dog/c.jpg"]
    assert ds.labels.tolist() == [[0, 1, 0], [0, 0, 1], [0, 0, 1]] and len(ds[0]["boxes"]) == 0
    assert load_dataset("folder", tmp_path, "test").labels.tolist() == [[1, 0, 0]]
    (tmp_path / "boxes.csv").write_text("image,class,x1,y1,x2,y2\ntrain/dog/c.jpg,dog,4,6,20,30\n"
                                        "val/cat/d.jpg,cat,0,0,8,8\n")
    boxed = load_dataset("folder", tmp_path, "train", annotations="boxes.csv",
                         transform=eval_transform(16, encoding="none", crop_fraction=1.0))
    assert boxed[2]["boxes"].tolist() == [[2, 3, 10, 15]] and boxed[2]["box_labels"].tolist() == [2]
    (tmp_path / "boxes.csv").write_text("image,class,x1,y1,x2,y2\ntrain/dog/c.jpg,cat,4,6,20,30\n")
    with pytest.raises(DataError, match=r"boxes\.csv: line 2: class 'cat' is not a label of image "
                                        r"'train/dog/c\.jpg' \(its labels: dog\)"):
        load_dataset("folder", tmp_path, "train", annotations="boxes.csv")


def test_one_folder_and_a_labels_file_with_boxes_masks_splits_and_several_labels(tmp_path):
    for name in ("img/1.jpg", "img/2.jpg", "img/3.jpg"):
        image(tmp_path / name)
    mask = np.zeros((32, 32), np.uint8)
    mask[2:10, 3:12] = 1
    Image.fromarray(mask).save(tmp_path / "img" / "1_person.png")
    rows = [{"image": "img/1.jpg", "class": "person", "x1": 3, "y1": 2, "x2": 12, "y2": 10, "mask": "img/1_person.png"},
            {"image": "img/1.jpg", "class": "horse", "x1": 14.5, "y1": 0, "x2": 32, "y2": 20},
            {"image": "img/2.jpg", "class": "horse"},
            {"image": "img/3.jpg", "class": "person", "split": "val"}]
    (tmp_path / "labels.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    ds = load_dataset("folder", tmp_path, "train", labels="labels.jsonl")
    assert ds.classes == ("horse", "person") and ds.ids == ["img/1.jpg", "img/2.jpg"]
    s = ds[0]
    assert s["labels"].tolist() == [1, 1] and s["box_labels"].tolist() == [1, 0]
    assert s["boxes"].tolist() == [[3, 2, 12, 10], [14.5, 0, 32, 20]]
    assert int((s["mask"] == 2).sum()) == 72 and (s["mask"][2:10, 3:12] == 2).all() and "mask" not in ds[1]
    assert load_dataset("folder", tmp_path, "val", labels="labels.jsonl").ids == ["img/3.jpg"]
    # the same as CSV, without a split column: a seeded held-out part of train validates
    (tmp_path / "labels.csv").write_text("image,class\nimg/1.jpg,person\nimg/1.jpg,horse\nimg/2.jpg,horse\n"
                                         "img/3.jpg,person\n")
    train = load_dataset("folder", tmp_path, "train", labels="labels.csv", holdout=1, holdout_seed=2)
    val = load_dataset("folder", tmp_path, "val", labels="labels.csv", holdout=1, holdout_seed=2)
    assert len(train) == 2 and len(val) == 1 and sorted(train.ids + val.ids) == ["img/1.jpg", "img/2.jpg", "img/3.jpg"]
    with pytest.raises(UsageError, match="the dataset has a val split"):
        load_dataset("folder", tmp_path, "train", labels="labels.jsonl", holdout=1)


def test_bad_rows_name_the_file_the_line_and_what_was_expected(tmp_path):
    image(tmp_path / "a.jpg")
    for text, message in (
            ("image,class,u,v\na.jpg,cat,3,4\n", r"line 2: unknown field\(s\) u, v; expected image, class, x1"),
            ("image,class,x,y\na.jpg,cat,3,\n", r"line 2: point x, y = \['3', ''\] is not two numbers"),
            ("image,class,x1,y1,x2,y2\na.jpg,cat,3,4,2,9\n",
             r"line 2: class cat: box \[3\.0, 4\.0, 2\.0, 9\.0\] is degenerate"),
            ("image,class,x1,y1,x2,y2\na.jpg,cat,3,4,,9\n", r"line 2: box x1, y1, x2, y2 = \['3', '4', '', '9'\] is "
                                                            "not four numbers"),
            ("image,class,split\na.jpg,cat,dev\n", r"line 2: split 'dev'; expected one of train, val, test"),
            ("image,class\n../a.jpg,cat\n", r"line 2: file name '\.\./a\.jpg' escapes the dataset root"),
            ("image\na.jpg\n", r"labels\.csv: missing column\(s\) class")):
        (tmp_path / "labels.csv").write_text(text)
        with pytest.raises(DataError, match=message):
            load_dataset("folder", tmp_path, "train", labels="labels.csv")
    (tmp_path / "labels.csv").write_text("image,class,x1,y1,x2,y2\na.jpg,cat,3,4,40,9\nb.jpg,cat,,,,\n")
    ds = load_dataset("folder", tmp_path, "train", labels="labels.csv")
    with pytest.raises(DataError, match=r"a\.jpg: id a\.jpg: box 0: box \[3\.0, 4\.0, 40\.0, 9\.0\] reaches outside"):
        ds[0]
    with pytest.raises(DataError, match=r"b\.jpg: image file not found"):
        ds[1]
    with pytest.raises(DataError, match="no class sub-folders in train, val, test/"):
        load_dataset("folder", tmp_path, "train")
    with pytest.raises(UsageError, match="unknown folder split 'dev'"):
        load_dataset("folder", tmp_path, "dev", labels="labels.csv")
