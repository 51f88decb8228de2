"""``coco-json``: COCO-format files of one's own, written as CVAT, Label Studio and Roboflow export them (their quirks:
0- or 1-based and non-contiguous category ids, Roboflow's grouping category 0, float boxes, no ``area``, empty
``segmentation`` lists, CVAT's masks as crowd RLEs, image ids that restart in every file), on 32 px images."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from pycocotools import mask as mask_utils

from rightreasons.apps.cli import main
from rightreasons.data import DataError, eval_transform, load_dataset
from rightreasons.data.verify import check_training_splits
from rightreasons.errors import UsageError


def write_split(root: Path, json_file: str, categories: list[dict], images: list[dict], annotations: list[dict],
                image_dir: str | None = None) -> Path:
    """``root/json_file`` and a JPEG of every image (in ``image_dir``, default the JSON's folder); returns ``root``."""
    path = root / json_file
    path.parent.mkdir(parents=True, exist_ok=True)
    folder = root / image_dir if image_dir else path.parent
    for img in images:
        (folder / img["file_name"]).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.full((img["height"], img["width"], 3), 90, np.uint8)).save(folder / img["file_name"])
    path.write_text(json.dumps({"info": {}, "licenses": [], "categories": categories, "images": images,
                                "annotations": annotations}))
    return root


# Roboflow: category 0 groups the classes; image ids restart at 0 in every split's file; float boxes, no masks
ROBOFLOW_CATEGORIES = [{"id": 0, "name": "pets", "supercategory": "none"},
                       {"id": 1, "name": "cat", "supercategory": "pets"},
                       {"id": 2, "name": "dog", "supercategory": "pets"}]


def roboflow(root: Path) -> Path:
    for folder, names in (("train", ["a_jpg.rf.1.jpg", "b_jpg.rf.2.jpg"]), ("valid", ["c_jpg.rf.3.jpg"])):
        images = [{"id": i, "license": 1, "file_name": name, "height": 32, "width": 32,
                   "date_captured": "2024-01-01T00:00:00+00:00"} for i, name in enumerate(names)]
        annotations = [{"id": 0, "image_id": 0, "category_id": 2, "bbox": [1.5, 2.25, 10.5, 8.0], "area": 84.0,
                        "segmentation": [], "iscrowd": 0},
                       {"id": 1, "image_id": 0, "category_id": 1, "bbox": [20, 20, 12, 12], "area": 144,
                        "segmentation": [], "iscrowd": 0}]
        write_split(root, f"{folder}/_annotations.coco.json", ROBOFLOW_CATEGORIES, images,
                    annotations if folder == "train" else annotations[1:])
    return root


ROBOFLOW_FILES = {"train": "train/_annotations.coco.json", "val": "valid/_annotations.coco.json"}


def test_roboflow_export_classes_from_the_file_float_boxes_and_restarting_image_ids(tmp_path):
    root = roboflow(tmp_path)
    train = load_dataset("coco-json", root, "train", files=ROBOFLOW_FILES)
    val = load_dataset("coco-json", root, "val", files=ROBOFLOW_FILES)
    assert train.classes == ("cat", "dog")  # the grouping category 0 is no class
    assert train.ids == ["train/a_jpg.rf.1.jpg", "train/b_jpg.rf.2.jpg"] and val.ids == ["valid/c_jpg.rf.3.jpg"]
    check_training_splits(train, val)  # image id 0 in both files, but different images: no leakage
    s = train[0]
    assert s["image"].shape == (3, 32, 32) and s["labels"].tolist() == [1.0, 1.0] and "mask" not in s
    assert s["boxes"].tolist() == [[1.5, 2.25, 12.0, 10.25], [20, 20, 32, 32]] and s["box_labels"].tolist() == [1, 0]
    assert train[1]["labels"].tolist() == [0.0, 0.0] and len(train[1]["boxes"]) == 0  # no annotation: a negative
    assert len(load_dataset("coco-json", root, "train", files=ROBOFLOW_FILES, include_unannotated=False)) == 1
    # boxes stay in pixels of the transformed image: a 32 px image seen at 16 px halves them
    t = load_dataset("coco-json", root, "train", files=ROBOFLOW_FILES,
                     transform=eval_transform(16, encoding="none", crop_fraction=1.0))[0]
    assert t["image"].shape == (3, 16, 16) and t["boxes"].tolist() == [[0.75, 1.125, 6.0, 5.125], [10, 10, 16, 16]]


# CVAT: 1-based, non-contiguous category ids; annotations/ beside images/; polygons, and masks as crowd RLEs
CVAT_CATEGORIES = [{"id": 1, "name": "car", "supercategory": ""}, {"id": 3, "name": "person", "supercategory": ""},
                   {"id": 7, "name": "tree", "supercategory": ""}]
CROWD_RLE = {"counts": [32 * 20, 32 * 4, 32 * 8], "size": [32, 32]}  # runs down the columns: columns 20-23


def cvat(root: Path) -> Path:
    images = [{"id": 1, "width": 32, "height": 32, "file_name": "frame_000000.png", "license": 0, "flickr_url": "",
               "coco_url": "", "date_captured": 0},
              {"id": 2, "width": 32, "height": 32, "file_name": "frame_000001.png", "license": 0, "flickr_url": "",
               "coco_url": "", "date_captured": 0}]
    annotations = [{"id": 1, "image_id": 1, "category_id": 3, "segmentation": [[2.0, 2.0, 10.0, 2.0, 10.0, 12.0,
                                                                                2.0, 12.0]],
                    "area": 80.0, "bbox": [2.0, 2.0, 8.0, 10.0], "iscrowd": 0, "attributes": {"occluded": False}},
                   {"id": 2, "image_id": 1, "category_id": 7, "segmentation": CROWD_RLE, "area": 128.0,
                    "bbox": [20.0, 0.0, 4.0, 32.0], "iscrowd": 1, "attributes": {"occluded": False}}]
    return write_split(root, "annotations/instances_default.json", CVAT_CATEGORIES, images, annotations, "images")


CVAT_OPTIONS = {"files": {"train": "annotations/instances_default.json"}, "image_dir": "images"}


def test_cvat_export_polygons_and_rle_masks_in_the_sample_mask(tmp_path):
    root = cvat(tmp_path)
    ds = load_dataset("coco-json", root, "train", **CVAT_OPTIONS)
    assert ds.classes == ("car", "person", "tree") and ds.ids == ["images/frame_000000.png", "images/frame_000001.png"]
    s = ds[0]
    assert s["labels"].tolist() == [0, 1, 1] and s["boxes"].tolist() == [[2, 2, 10, 12]]  # the crowd: no box
    mask = s["mask"]
    assert mask.shape == (32, 32) and mask.dtype.is_floating_point is False
    assert (mask[2:12, 2:10] == 2).all() and int((mask == 2).sum()) == 80  # person, class 1: value 2
    # COCO RLEs run down the columns: columns 20-23 are the crowd, void (255) under crowd="label"
    assert (mask[:, 20:24] == 255).all() and int((mask == 255).sum()) == 128
    assert "mask" not in ds[1] and ds[1]["labels"].tolist() == [0, 0, 0]
    boxed = load_dataset("coco-json", root, "train", crowd="box", **CVAT_OPTIONS)[0]
    assert (boxed["mask"][:, 20:24] == 3).all() and boxed["box_labels"].tolist() == [1, 2]
    ignored = load_dataset("coco-json", root, "train", crowd="ignore", **CVAT_OPTIONS)[0]
    assert ignored["labels"].tolist() == [0, 1, 0] and int((ignored["mask"] == 255).sum()) == 0


def test_compressed_rle_is_read_and_a_corrupt_one_refused(tmp_path):
    pixels = np.zeros((32, 32), np.uint8, order="F")
    pixels[5:9, 3:30] = 1
    rle = mask_utils.encode(np.asfortranarray(pixels))
    images = [{"id": 1, "file_name": "x.jpg", "height": 32, "width": 32}]
    annotation = {"id": 4, "image_id": 1, "category_id": 1, "bbox": [3, 5, 27, 4], "iscrowd": 0,
                  "segmentation": {"size": [32, 32], "counts": rle["counts"].decode()}}
    write_split(tmp_path, "train.json", [{"id": 1, "name": "bar"}], images, [annotation])
    assert (load_dataset("coco-json", tmp_path, "train")[0]["mask"].numpy() == pixels).all()
    for counts, message in (("0", "covers 0 pixels"), ("P", "ends inside a run length"),
                            ("~~", "not a character of a compressed RLE")):
        write_split(tmp_path, "train.json", [{"id": 1, "name": "bar"}], images,
                    [{**annotation, "segmentation": {"size": [32, 32], "counts": counts}}])
        with pytest.raises(DataError, match=f"train.json: annotation 4 of image 1: .*{message}"):
            load_dataset("coco-json", tmp_path, "train")


# Label Studio: 0-based category ids, file names under images/, no `area`, box-only annotations with empty polygons
def label_studio(root: Path) -> Path:
    categories = [{"id": 0, "name": "Airplane"}, {"id": 1, "name": "Car"}]
    images = [{"width": 32, "height": 24, "id": i, "file_name": f"images/{name}.jpg"}
              for i, name in enumerate(["2f1a", "9c3e", "77bd", "e510", "0d4c"])]
    annotations = [{"id": i, "image_id": i, "category_id": i % 2, "segmentation": [], "bbox": [4.2, 3.7, 11.1, 9.9],
                    "ignore": 0, "iscrowd": 0} for i in range(5)]
    return write_split(root, "result.json", categories, images, annotations)


def test_label_studio_export_and_a_seeded_held_out_validation_split(tmp_path):
    root = label_studio(tmp_path)
    files = {"train": "result.json"}
    ds = load_dataset("coco-json", root, "train", files=files)
    assert ds.classes == ("Airplane", "Car") and len(ds) == 5
    assert ds[0]["labels"].tolist() == [1, 0] and ds[0]["boxes"][0].tolist() == pytest.approx([4.2, 3.7, 15.3, 13.6])
    train = load_dataset("coco-json", root, "train", files=files, holdout=2, holdout_seed=3)
    val = load_dataset("coco-json", root, "val", files=files, holdout=2, holdout_seed=3)
    assert len(train) == 3 and len(val) == 2 and sorted(train.ids + val.ids) == sorted(ds.ids)
    check_training_splits(train, val)
    assert load_dataset("coco-json", root, "val", files=files, holdout=2, holdout_seed=3).ids == val.ids
    with pytest.raises(UsageError, match="'files' may not name a val file"):
        load_dataset("coco-json", root, "val", files={**files, "val": "result.json"}, holdout=2)


def _refused(root: Path, annotations: list[dict], message: str, images: list[dict] | None = None,
             categories: list[dict] | None = None, **options) -> None:
    images = images or [{"id": 1, "file_name": "x.jpg", "height": 32, "width": 32}]
    write_split(root, "train.json", categories or [{"id": 1, "name": "bar"}], images, annotations)
    with pytest.raises(DataError, match=message):
        load_dataset("coco-json", root, "train", **options)[0]


def test_bad_input_names_the_file_the_annotation_and_what_was_expected(tmp_path):
    box = {"id": 9, "image_id": 1, "category_id": 1, "bbox": [20, 20, 16, 4], "iscrowd": 0, "segmentation": []}
    _refused(tmp_path, [box], r"train\.json: x\.jpg: annotation 9 of image 1: box \[20\.0, 20\.0, 36\.0, 24\.0\] "
                              r"reaches outside the image of size \(H=32, W=32\)")
    _refused(tmp_path, [{**box, "category_id": 5}], r"train\.json: annotations\[0\] \(id 9\): category_id 5 is not "
                                                    r"the id of any category of the file")
    _refused(tmp_path, [{**box, "bbox": [1, 1, 4, 4], "segmentation": [[1, 1, 5, 1]]}],
             r"train\.json: annotation 9 of image 1: segmentation polygon 0 is \[1, 1, 5, 1\]; expected at least 3 "
             "points")
    _refused(tmp_path, [{**box, "bbox": [1, 1, 4, 4], "segmentation": {"size": [24, 32], "counts": [768]}}],
             r"annotation 9 of image 1: segmentation RLE size \[24, 32\] is not the image's \[height, width\] = "
             r"\[32, 32\]")
    _refused(tmp_path, [], r"train\.json: images 1 and 2 both name the file x\.jpg",
             images=[{"id": i, "file_name": "x.jpg", "height": 32, "width": 32} for i in (1, 2)])
    _refused(tmp_path, [], r"categories: the name\(s\) 'bar' are used by more than one category id",
             categories=[{"id": 1, "name": "bar"}, {"id": 2, "name": "bar"}])
    _refused(tmp_path, [], r"train\.json: images: 1 repeated id",
             images=[{"id": 1, "file_name": f"{n}.jpg", "height": 32, "width": 32} for n in "ab"])
    write_split(tmp_path, "train.json", [{"id": 1, "name": "bar"}],
                [{"id": 1, "file_name": "gone.jpg", "height": 32, "width": 32}], [])
    (tmp_path / "gone.jpg").unlink()
    with pytest.raises(DataError, match=r"gone\.jpg: image file not found"):
        load_dataset("coco-json", tmp_path, "train")[0]
    with pytest.raises(DataError, match=r"test\.json: COCO annotation file not found"):
        load_dataset("coco-json", tmp_path, "test")
    for options, message in (({"files": ["train.json"]}, "'files' must map split names"),
                             ({"crowd": "maybe"}, "'crowd' must be one of label, ignore, box"),
                             ({"include_unannotated": "yes"}, "'include_unannotated' must be true or false"),
                             ({"holdout": -1}, "'holdout' must be a number of images"),
                             ({"box_policy": "fix"}, "'box_policy' must be one of error, clip, drop")):
        with pytest.raises(UsageError, match=message):
            load_dataset("coco-json", tmp_path, "train", **options)
    with pytest.raises(UsageError, match="unknown coco-json split 'dev'; expected one of train, val, test"):
        load_dataset("coco-json", tmp_path, "dev")


CONFIG = """\
output_dir: run
cpu: true
model: {name: bcos_resnet18, kwargs: {inplanes: 4}}
data: {name: coco-json, root: ROOT, image_size: 32, batch_size: 2, eval_batch_size: 2,
       options: {files: {train: train/_annotations.coco.json, val: valid/_annotations.coco.json}}}
optim: {epochs: 1}
eval: {num_images: 0}
checkpoint: {keep_last: 1}
"""


def test_a_config_checks_and_guides_on_a_roboflow_export(tmp_path, monkeypatch, capsys):
    """``rightreasons prepare config`` checks the splits a config names, as training reads them; ``guide`` trains."""
    root = roboflow(tmp_path / "pets")
    (tmp_path / "config.yaml").write_text(CONFIG.replace("ROOT", str(root)))
    monkeypatch.chdir(tmp_path)
    assert main(["prepare", "config", "--config", "config.yaml", "--workers", "0"]) == 0
    out = capsys.readouterr().out
    assert "train: 2 images (1 without labels), 2 boxes, 2 classes" in out and "val: 1 images" in out, out
    assert main(["guide", "--config", "config.yaml"]) == 0
    assert (tmp_path / "run" / "model.safetensors").is_file()
    (root / "valid" / "c_jpg.rf.3.jpg").unlink()
    assert main(["prepare", "config", "--config", "config.yaml", "--workers", "0"]) == 1
    assert "1 image(s) of split 'val' refused by the loader" in capsys.readouterr().out
