"""ImageNet loader on a tiny class-per-folder tree written by the test (train/val, PNG and JPEG images, stray files,
a synset mapping), and a one-step distillation run on it from a config file."""

import json

import numpy as np
import pytest
import torch
import yaml
from PIL import Image

from rightreasons.config import load_config
from rightreasons.data import DataError, ImageNet, eval_transform, load_dataset
from rightreasons.distill import DistillConfig
from rightreasons.engine import run

TENCH, GOLDFISH, SHARK = "n01440764", "n01443537", "n01484850"
SYNSETS = [f"{TENCH} tench, Tinca tinca", f"{GOLDFISH} goldfish, Carassius auratus",
           f"{SHARK} great white shark, white shark, man-eater, man-eating shark, Carcharodon carcharias",
           "n01491361 tiger shark, Galeocerdo cuvieri"]  # a class not in the tree: the full mapping has 1000 lines
# split/wnid/file; the train split has every class, val lacks the goldfish
IMAGES = [f"train/{TENCH}/{TENCH}_10026.JPEG", f"train/{TENCH}/{TENCH}_9.png",
          f"train/{GOLDFISH}/{GOLDFISH}_1.jpg", f"train/{GOLDFISH}/{GOLDFISH}_2.JPEG",
          f"train/{SHARK}/{SHARK}_7.PNG",
          f"val/{TENCH}/ILSVRC2012_val_00000293.JPEG", f"val/{SHARK}/ILSVRC2012_val_00000001.png"]


def write_imagenet(root, images=IMAGES, synsets=SYNSETS):
    for i, name in enumerate(images):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = np.full((20 + i, 24, 3), 40 * i, np.uint8)
        image = Image.fromarray(pixels[..., 0] if name.endswith("_9.png") else pixels)  # one greyscale image
        image.save(path, format="PNG" if name.lower().endswith(".png") else "JPEG")
    (root / "README.txt").write_text("not part of the layout\n")
    split, wnid = images[0].split("/")[:2]
    (root / split / "README.txt").write_text("a stray file next to the class folders\n")
    (root / split / wnid / "notes.txt").write_text("not an image\n")
    (root / split / wnid / ".hidden.JPEG").write_bytes(b"")  # hidden: ignored, although it is no JPEG
    (root / split / ".cache").mkdir()  # a hidden folder is no class
    (root / "LOC_synset_mapping.txt").write_text("".join(f"{line}\n" for line in synsets))
    return root


def test_classes_labels_and_ids_share_the_train_index(tmp_path):
    root = write_imagenet(tmp_path)
    train = load_dataset("imagenet", root, "train")
    assert isinstance(train, ImageNet) and train.wnids == (TENCH, GOLDFISH, SHARK)
    assert train.classes == ("tench", "goldfish", "great white shark")
    assert train.ids == [f"train/{TENCH}/{TENCH}_10026.JPEG", f"train/{TENCH}/{TENCH}_9.png",
                         f"train/{GOLDFISH}/{GOLDFISH}_1.jpg", f"train/{GOLDFISH}/{GOLDFISH}_2.JPEG",
                         f"train/{SHARK}/{SHARK}_7.PNG"]
    assert train.labels.tolist() == [[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0], [0, 0, 1]]
    assert train.groups is None and train.group_names is None
    assert not train.annotated.any()  # no boxes, whatever annotated_fraction (default 1) asks

    val = load_dataset("imagenet", root, "val", annotated_fraction=1.0)
    assert val.classes == train.classes and val.num_classes == 3  # the goldfish has no val images
    assert val.ids == [f"val/{TENCH}/ILSVRC2012_val_00000293.JPEG", f"val/{SHARK}/ILSVRC2012_val_00000001.png"]
    assert val.labels.tolist() == [[1, 0, 0], [0, 0, 1]]  # the shark keeps index 2 of the train index
    s = val[1]
    assert s["labels"].tolist() == [0, 0, 1] and s["id"] == val.ids[1] and not s["has_boxes"]
    assert s["boxes"].shape == (0, 4) and s["box_labels"].shape == (0,) and "group" not in s


def test_images_through_load_dataset_and_eval_transform(tmp_path):
    root = write_imagenet(tmp_path)
    train = load_dataset("imagenet", root, "train")
    grey = train[1]  # a greyscale PNG becomes RGB
    assert grey["image"].shape == (3, 21, 24) and grey["image"].dtype == torch.float32
    assert train.source(0) == str(root / IMAGES[0])
    s = load_dataset("imagenet", root, "train", transform=eval_transform(16, crop_fraction=1.0))[0]
    assert s["image"].shape == (6, 16, 16) and s["image"].dtype == torch.float32  # B-cos encoding: [r, g, b, 1 - ...]
    assert s["labels"].tolist() == [1, 0, 0] and s["id"] == IMAGES[0]


def test_class_names_are_wnids_without_a_synset_file_or_from_a_given_one(tmp_path):
    root = write_imagenet(tmp_path)
    (root / "LOC_synset_mapping.txt").rename(root / "words.txt")
    assert load_dataset("imagenet", root, "val").classes == (TENCH, GOLDFISH, SHARK)
    named = load_dataset("imagenet", root, "val", synset_file="words.txt")  # relative to root
    assert named.classes == ("tench", "goldfish", "great white shark")
    assert load_dataset("imagenet", root, "val", synset_file=root / "words.txt").classes == named.classes


def test_a_split_without_train_folder_indexes_its_own_classes(tmp_path):
    root = write_imagenet(tmp_path, [name for name in IMAGES if name.startswith("val/")])
    val = load_dataset("imagenet", root, "val")
    assert val.wnids == (TENCH, SHARK) and val.labels.tolist() == [[1, 0], [0, 1]]


def test_bad_layouts_are_named(tmp_path):
    with pytest.raises(DataError, match=r"nothing: ImageNet root directory not found; expected .*/train/<wnid>/"):
        load_dataset("imagenet", tmp_path / "nothing", "val")
    root = write_imagenet(tmp_path / "a")
    with pytest.raises(DataError, match=r"a/test: ImageNet split folder 'test' not found; expected .*valprep\.sh"):
        load_dataset("imagenet", root, "test")
    (root / "val" / "n09999999").mkdir()
    with pytest.raises(DataError, match=r"a/val/n09999999: class folder 'n09999999' is not one of the 3 classes of "
                                        r".*a/train \(1 unknown folder\(s\)"):
        load_dataset("imagenet", root, "val")

    root = write_imagenet(tmp_path / "b")
    for name in IMAGES[5:]:  # the val images lie flat in val/, as in the ILSVRC-2012 archive
        (root / name).rename(root / "val" / (root / name).name)
    with pytest.raises(DataError, match=r"b/val: no image files \(.jpeg, .jpg, .png\) in any class folder; 2 image "
                                        r"file\(s\) lie directly in .*valprep\.sh"):
        load_dataset("imagenet", root, "val")


def test_bad_synset_files_are_named(tmp_path):
    root = write_imagenet(tmp_path / "a", synsets=[SYNSETS[0], SYNSETS[1], SHARK])
    with pytest.raises(DataError, match=rf"LOC_synset_mapping\.txt: line 3: '{SHARK}' is not '<wnid> <name>"):
        load_dataset("imagenet", root, "train")
    root = write_imagenet(tmp_path / "b", synsets=[SYNSETS[0], SYNSETS[1], SYNSETS[0]])
    with pytest.raises(DataError, match=rf"LOC_synset_mapping\.txt: line 3: wnid '{TENCH}' is listed a second time"):
        load_dataset("imagenet", root, "train")
    root = write_imagenet(tmp_path / "c", synsets=SYNSETS[:2])
    with pytest.raises(DataError, match=rf"c/LOC_synset_mapping\.txt: no line for class folder '{SHARK}' \(1 of the 3"):
        load_dataset("imagenet", root, "train")
    with pytest.raises(DataError, match=r"c/missing\.txt: ImageNet synset file not found"):
        load_dataset("imagenet", root, "train", synset_file="missing.txt")


def test_one_distillation_step_on_imagenet_from_a_config_file(tmp_path):
    root = write_imagenet(tmp_path / "imagenet")
    path = tmp_path / "imagenet.yaml"
    path.write_text(yaml.safe_dump({
        "output_dir": str(tmp_path / "run"), "cpu": True, "max_steps": 1, "log_every": 1,
        "model": {"name": "bcos_cifar10_resnet20"},
        "teacher": {"name": "bcos_cifar10_resnet20", "kwargs": {"num_classes": 3}},
        "data": {"name": "imagenet", "root": str(root), "train_split": "train", "val_split": "val",
                 "image_size": 32, "batch_size": 2},
        "optim": {"epochs": 1}, "eval": {"num_images": 0, "localization": False},
        "distill": {"shots": 1, "test_split": None}}))
    config = load_config(DistillConfig, path)
    assert config.data.name == "imagenet" and config.distill.test_split is None
    summary = run(config)
    assert summary["steps"] == 1
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert len(train) == 1 and np.isfinite(train[0]["kd"])
    assert (tmp_path / "run" / "model.safetensors").is_file()
