"""MS COCO 2014 loader on a small instances JSON written by the test (polygons, a crowd with an RLE segmentation, an
unannotated image; the writer is the shared ``write_coco`` fixture)."""

import pytest

from rightreasons.apps.cli import main
from rightreasons.data import BoxWarning, DataError, load_dataset
from rightreasons.data.prepare import coco as prepare_coco
from rightreasons.errors import UsageError

CATEGORIES = [{"id": 1, "name": "person", "supercategory": "person"},
              {"id": 3, "name": "car", "supercategory": "vehicle"},
              {"id": 18, "name": "dog", "supercategory": "animal"}]
IMAGES = [{"id": 42, "file_name": "COCO_val2014_000000000042.jpg", "height": 30, "width": 40},
          {"id": 7, "file_name": "COCO_val2014_000000000007.jpg", "height": 20, "width": 20},
          {"id": 99, "file_name": "COCO_val2014_000000000099.jpg", "height": 24, "width": 32}]
ANNOTATIONS = [  # polygon segmentations; annotation 2 is a crowd with an uncompressed RLE of its 30 × 40 image
    {"id": 1, "image_id": 42, "category_id": 18, "bbox": [2.0, 3.0, 10.0, 12.5], "iscrowd": 0, "area": 125.0,
     "segmentation": [[2.0, 3.0, 12.0, 3.0, 12.0, 15.5, 2.0, 15.5]]},
    {"id": 2, "image_id": 42, "category_id": 1, "bbox": [20.0, 0.0, 15.0, 30.0], "iscrowd": 1, "area": 450.0,
     "segmentation": {"counts": [600, 450, 150], "size": [30, 40]}},
    {"id": 3, "image_id": 7, "category_id": 3, "bbox": [0.0, 0.0, 5.0, 5.0], "iscrowd": 0, "area": 25.0,
     "segmentation": [[0.0, 0.0, 5.0, 0.0, 5.0, 5.0, 0.0, 5.0]]},
    {"id": 4, "image_id": 7, "category_id": 3, "bbox": [10.0, 10.0, 4.0, 6.0], "iscrowd": 0, "area": 24.0,
     "segmentation": [[10.0, 10.0, 14.0, 10.0, 14.0, 16.0, 10.0, 16.0]]},
]  # image 99 has no annotation


@pytest.fixture
def coco(tmp_path, write_coco):
    """``coco(annotations=ANNOTATIONS, text=None)``: the val split of a COCO root in ``tmp_path``."""
    return lambda annotations=ANNOTATIONS, text=None: write_coco(tmp_path, CATEGORIES, IMAGES, annotations, text=text)


def test_contiguous_classes_boxes_and_crowd_as_label_only(coco):
    ds = load_dataset("coco2014", coco(), "val")
    assert ds.classes == ("person", "car", "dog") and ds.ids == ["7", "42"]  # image 99 excluded, sorted ids
    s = ds[1]
    assert s["image"].shape == (3, 30, 40)
    assert s["labels"].tolist() == [1.0, 0.0, 1.0]  # the crowd of people counts for the label ...
    assert s["boxes"].tolist() == [[2.0, 3.0, 12.0, 15.5]] and s["box_labels"].tolist() == [2]  # ... not as a box
    assert ds[0]["boxes"].tolist() == [[0, 0, 5, 5], [10, 10, 14, 16]] and ds[0]["box_labels"].tolist() == [1, 1]
    assert not hasattr(ds, "coco")  # the parsed JSON is released after indexing


def test_crowd_policies_and_unannotated_images(coco):
    root = coco()
    ignore = load_dataset("coco2014", root, "val", crowd="ignore")
    assert ignore.labels[1].tolist() == [0, 0, 1]
    box = load_dataset("coco2014", root, "val", crowd="box")
    assert box[1]["box_labels"].tolist() == [2, 0] and box[1]["boxes"][1].tolist() == [20, 0, 35, 30]
    every = load_dataset("coco2014", root, "val", include_unannotated=True)
    assert every.ids == ["7", "42", "99"] and every.labels[2].sum() == 0 and len(every[2]["boxes"]) == 0
    with pytest.raises(ValueError, match="unknown crowd policy"):
        load_dataset("coco2014", root, "val", crowd="skip")


def test_bad_files_and_records_are_named(tmp_path, coco):
    with pytest.raises(DataError, match=r"instances_val2014\.json: COCO annotation file not found"):
        load_dataset("coco2014", tmp_path, "val")
    coco(text='{"images": [')
    with pytest.raises(DataError, match=r"instances_val2014\.json: malformed JSON"):
        load_dataset("coco2014", tmp_path, "val")
    coco(text='{"images": [], "annotations": []}')
    with pytest.raises(DataError, match="missing top-level key.*categories"):
        load_dataset("coco2014", tmp_path, "val")
    bad = ANNOTATIONS + [{"id": 5, "image_id": 7, "category_id": 77, "bbox": [0, 0, 1, 1], "iscrowd": 0}]
    coco(bad)
    with pytest.raises(DataError, match=r"annotations\[4\] \(id 5\): category_id 77 is not the id of any category"):
        load_dataset("coco2014", tmp_path, "val")
    bad = ANNOTATIONS + [{"id": 6, "image_id": 7, "category_id": 3, "bbox": [4, 4, 0, 3], "iscrowd": 0}]
    coco(bad)
    with pytest.raises(DataError, match=r"COCO_val2014_000000000007\.jpg: annotation 6 of image 7: .*degenerate"):
        load_dataset("coco2014", tmp_path, "val", box_policy="clip")
    with pytest.warns(BoxWarning, match="annotation 6 of image 7"):
        ds = load_dataset("coco2014", tmp_path, "val")  # default policy "drop": COCO has a few such boxes
    assert len(ds[0]["boxes"]) == 2
    (tmp_path / "val2014" / "COCO_val2014_000000000042.jpg").unlink()
    with pytest.raises(DataError, match=r"COCO_val2014_000000000042\.jpg: image file not found"):
        ds[1]


def test_prepare_checks_images_and_checksums(coco, capsys):
    root = coco()
    (root / "sums.md5").write_text(f"{'0' * 32}  annotations/instances_val2014.json\n")
    assert main(["prepare", "coco2014", "--root", str(root), "--allow-partial", "--checksums",
                 str(root / "sums.md5")]) == 1
    out = capsys.readouterr().out
    assert "val: 3 images (1 without annotations), 3 boxes, 3 categories" in out
    assert "instances_train2014.json" in out and "instances_val2014.json: md5" in out
    (root / "val2014" / "COCO_val2014_000000000099.jpg").unlink()
    main(["prepare", "coco", "--root", str(root), "--allow-partial"])
    assert "1 image(s) of split 'val' refused by the loader" in capsys.readouterr().out
    report = prepare_coco.check(root, allow_partial=True)
    assert report.exit_code == 1 and any("1 image(s) of split 'val' refused" in p and
                                         "COCO_val2014_000000000099.jpg: image file not found" in p
                                         for p in report.problems)


def test_a_held_out_part_of_train2014_validates_and_never_shares_an_image_with_training(tmp_path, write_coco,
                                                                                        capsys):
    """COCO 2014 has no test labels: ``holdout`` takes a seeded part of train2014 as split ``holdout`` (selection),
    leaving val2014 as the test split. The two parts of train2014 cover it exactly, fixed by ``holdout_seed`` alone."""
    images = [{"id": i, "file_name": f"COCO_train2014_{i:012d}.jpg", "height": 16, "width": 16} for i in range(1, 22)]
    annotations = [{"id": i, "image_id": i, "category_id": 3, "bbox": [1.0, 1.0, 8.0, 8.0], "iscrowd": 0,
                    "area": 64.0, "segmentation": [[1.0, 1.0, 9.0, 1.0, 9.0, 9.0, 1.0, 9.0]]} for i in range(1, 21)]
    root = write_coco(tmp_path, CATEGORIES, images, annotations, split="train")  # image 21: no annotation
    write_coco(tmp_path, CATEGORIES, IMAGES, ANNOTATIONS, split="val")
    every = set(load_dataset("coco2014", root, "train").ids)
    assert len(every) == 20

    def split(name: str, **options) -> list[str]:
        return load_dataset("coco2014", root, name, **options).ids

    for holdout, count in ((0.25, 5), (0.01, 1), (7, 7)):
        held, train = split("holdout", holdout=holdout), split("train", holdout=holdout, annotated_fraction=0.5)
        assert len(held) == count and not set(held) & set(train) and set(held) | set(train) == every
        assert split("holdout", holdout=holdout) == held  # fixed: drawn with holdout_seed, not the run's seed
    assert split("holdout", holdout=5, holdout_seed=1) != split("holdout", holdout=5)
    assert split("val", holdout=5) == split("val") == ["7", "42"]  # val2014 is untouched: the test split
    for bad, message in ((1.0, "a fraction of them in \\(0, 1\\), got 1.0"), (True, "got True"), ("0.1", "got '0.1'"),
                         (-1, "got -1"), (20, "holds out 20 of the 20 images of the split, leaving none")):
        with pytest.raises(UsageError, match=f"dataset option 'holdout' .*{message}"):
            split("train", holdout=bad)
    with pytest.raises(UsageError, match="split 'holdout' is the held-out part of train2014: set the dataset option "
                                         "holdout"):
        split("holdout")
    # through the command line: a config validating on the held-out split without holding any out is one error line
    (tmp_path / "config.yaml").write_text(f"cpu: true\nmodel: {{name: bcos_resnet18, kwargs: {{inplanes: 4}}}}\n"
                                          f"data: {{name: coco2014, root: {root}, val_split: holdout}}\n")
    assert main(["train", "--config", str(tmp_path / "config.yaml"), f"output_dir={tmp_path / 'run'}"]) == 2
    assert "split 'holdout' is the held-out part of train2014" in capsys.readouterr().err
