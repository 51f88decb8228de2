"""One dataset check for ``prepare`` and the loaders (issue 22): ``rightreasons prepare`` said ``== OK`` for data that
training then refused — truncated and zero-byte JPEGs, an id listed twice, an annotation whose declared image size is
not the image's, an unknown COCO ``category_id``, a 20000 × 20000 image, a symlinked ``JPEGImages`` folder — and the
loaders accepted COCO annotations of a missing image and repeated annotation ids.

For every case: loading the split (``load_dataset`` and every sample, as training reads them) raises a
:class:`DataError`, and ``prepare`` exits 1 printing that very message; training through the command line ends in an
``error:`` line with it. The datasets are tiny, format-faithful copies written by the ``write_*`` fixtures."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
import torch
from PIL import ExifTags, Image, ImageOps

from rightreasons.apps.cli import main
from rightreasons.data import DataError, load_dataset

VOC_OBJECTS = {  # id: (H, W, [(name, xmin, ymin, xmax, ymax, difficult)])
    "000001": (40, 50, [("dog", 5, 6, 20, 30, 0)]),
    "000002": (30, 30, [("cat", 1, 1, 30, 30, 0)]),
    "000003": (36, 44, [("car", 10, 10, 20, 20, 0)]),
    "000004": (32, 32, [("dog", 2, 2, 16, 16, 0)]),
    "000005": (32, 32, [("cat", 3, 3, 20, 20, 0)]),
}
VOC_SPLITS = {"train": ["000001", "000002"], "val": ["000003", "000004"],
              "trainval": ["000001", "000002", "000003", "000004"], "test": ["000005"]}
COCO_CATEGORIES = [{"id": 1, "name": "person", "supercategory": "person"},
                   {"id": 18, "name": "dog", "supercategory": "animal"}]
COCO_IMAGES = [{"id": 42, "file_name": "COCO_val2014_000000000042.jpg", "height": 30, "width": 40},
               {"id": 7, "file_name": "COCO_val2014_000000000007.jpg", "height": 20, "width": 20}]
COCO_ANNOTATIONS = [{"id": 1, "image_id": 42, "category_id": 18, "bbox": [2.0, 3.0, 10.0, 12.5], "iscrowd": 0},
                    {"id": 2, "image_id": 7, "category_id": 1, "bbox": [0.0, 0.0, 5.0, 5.0], "iscrowd": 0}]


def _bomb(path: Path) -> None:
    """A real 20000 × 20000 one-bit PNG (50 kB on disk), saved under a ``.jpg`` name."""
    Image.new("1", (20000, 20000)).save(path, format="PNG")


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _relink_images(voc: Path) -> None:
    """``JPEGImages`` moved out of the dataset and linked back in (the loaders refuse links out of the root)."""
    outside = voc.parent.parent / "elsewhere"
    shutil.move(voc / "JPEGImages", outside)
    (voc / "JPEGImages").symlink_to(outside, target_is_directory=True)


def _resize(path: Path, size: tuple[int, int]) -> None:
    Image.new("RGB", size, (90, 120, 30)).save(path)


ROTATED = 6
"""EXIF orientation "rotate 90° clockwise to display": what a phone held upright writes."""


def _exif_rotated(path: Path, stored: tuple[int, int]) -> Image.Image:
    """A JPEG of ``stored`` (W × H) pixels, red on its left half, with EXIF orientation :data:`ROTATED`, as a camera
    writes it; returns the image as viewers show it (turned, so ``stored`` swapped)."""
    w, h = stored
    pixels = np.zeros((h, w, 3), np.uint8)
    pixels[:, : w // 2, 0] = 255
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = ROTATED
    Image.fromarray(pixels).save(path, exif=exif, quality=95)
    with Image.open(path) as stored_image:
        return ImageOps.exif_transpose(stored_image).convert("RGB")


def _panorama(voc: Path) -> None:
    """000001 replaced by a 2 × 40,000 image (within the pixel limit) and its XML declaring that size, its box inside:
    resizing the shorter side to an input size makes the longer one 20,000 times as long."""
    Image.new("1", (2, 40000)).save(voc / "JPEGImages/000001.jpg", format="PNG")
    xml = voc / "Annotations/000001.xml"
    xml.write_text(xml.read_text().replace("<width>50</width><height>40</height>", "<width>2</width>"
                                           "<height>40000</height>").replace("<xmin>5</xmin>", "<xmin>1</xmin>")
                   .replace("<xmax>20</xmax>", "<xmax>2</xmax>"))


VOC_CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "truncated jpeg": (lambda voc: _truncate(voc / "JPEGImages/000002.jpg"), "000002.jpg: cannot decode image"),
    "zero-byte jpeg": (lambda voc: (voc / "JPEGImages/000001.jpg").write_bytes(b""),
                       "000001.jpg: cannot decode image"),
    "id listed twice": (lambda voc: (voc / "ImageSets/Main/train.txt").write_text("000001\n000002\n000001\n"),
                        "train.txt: image id '000001' is listed twice"),
    "declared size differs": (lambda voc: _resize(voc / "JPEGImages/000002.jpg", (60, 20)),
                              "the image file is 60 × 20 pixels (W × H), but "),
    "xml size pushes a box outside the image": (
        lambda voc: (voc / "Annotations/000001.xml").write_text(
            (voc / "Annotations/000001.xml").read_text().replace("<width>50</width><height>40</height>",
                                                                 "<width>90</width><height>80</height>")
            .replace("<xmax>20</xmax>", "<xmax>75</xmax>")),
        "000001.xml declares 90 × 80"),
    "20000 x 20000 image": (lambda voc: _bomb(voc / "JPEGImages/000001.jpg"),
                            "000001.jpg: cannot decode image: Image size (400000000 pixels) exceeds limit"),
    "symlinked JPEGImages": (_relink_images, "outside the dataset directory"),
    "exif orientation turns the image off its declared size": (
        lambda voc: _exif_rotated(voc / "JPEGImages/000001.jpg", (50, 40)),
        "the image file is 40 × 50 pixels (W × H), but "),
    "2 x 40000 image": (_panorama, "000001.jpg: the image is 2 × 40000 pixels (W × H), an aspect ratio of 20,000:1"),
}


@pytest.fixture
def voc(tmp_path, write_voc) -> Path:
    return write_voc(tmp_path / "data", VOC_OBJECTS, VOC_SPLITS)


def first_loading_error(name: str, root: Path, split: str) -> str:
    """The DataError that loading ``split`` and reading each of its samples (what training does) raises first."""
    with pytest.raises(DataError) as error:
        dataset = load_dataset(name, root, split)
        for i in range(len(dataset)):
            dataset[i]
    return str(error.value)


def prepare(*args: str, capsys) -> tuple[int, str]:
    code = main(["prepare", *args, "--workers", "0"])
    return code, capsys.readouterr().out


def test_a_clean_copy_passes_both(voc, capsys):
    assert prepare("voc2007", "--root", str(voc), "--allow-partial", capsys=capsys) == (0, prepare(
        "voc2007", "--root", str(voc), "--allow-partial", capsys=capsys)[1])
    for split in VOC_SPLITS:
        dataset = load_dataset("voc2007", voc, split)
        assert [dataset[i]["id"] for i in range(len(dataset))] == VOC_SPLITS[split]


@pytest.mark.parametrize("case", VOC_CASES)
def test_prepare_and_loading_refuse_a_bad_voc_copy_with_the_same_message(voc, capsys, case):
    damage, expected = VOC_CASES[case]
    damage(voc)
    message = first_loading_error("voc2007", voc, "train")
    assert expected in message
    code, out = prepare("voc2007", "--root", str(voc), "--allow-partial", capsys=capsys)
    assert code == 1 and message in out and "== OK" not in out, out


@pytest.fixture
def coco(tmp_path, write_coco) -> Callable[..., Path]:
    return lambda images=COCO_IMAGES, annotations=COCO_ANNOTATIONS: write_coco(tmp_path / "coco", COCO_CATEGORIES,
                                                                                images, annotations)


COCO_CASES = {
    "unknown category_id": ({"annotations": [*COCO_ANNOTATIONS[:1], {**COCO_ANNOTATIONS[1], "category_id": 5}]},
                            "annotations[1] (id 2): category_id 5 is not the id of any category of the file"),
    "missing image_id": ({"annotations": [*COCO_ANNOTATIONS, {**COCO_ANNOTATIONS[0], "id": 3, "image_id": 8}]},
                         "annotations[2] (id 3): image_id 8 is not the id of any image of the file"),
    "repeated annotation id": ({"annotations": [*COCO_ANNOTATIONS, {**COCO_ANNOTATIONS[1], "image_id": 42}]},
                               "annotations[2]: id 2 is used by annotations[1] as well; annotation ids must be unique"),
    "declared size differs": ({"images": [COCO_IMAGES[0], {**COCO_IMAGES[1], "height": 10}]},
                              "the image file is 20 × 20 pixels (W × H), but "),
}


@pytest.mark.parametrize("case", COCO_CASES)
def test_prepare_and_loading_refuse_a_bad_coco_copy_with_the_same_message(coco, capsys, case):
    changes, expected = COCO_CASES[case]
    if case == "declared size differs":  # the image files as declared first, then the JSON's record changed
        root = coco()
        text = (root / "annotations/instances_val2014.json").read_text()
        (root / "annotations/instances_val2014.json").write_text(text.replace('"height": 20', '"height": 10'))
    else:
        root = coco(**changes)
    message = first_loading_error("coco2014", root, "val")
    assert expected in message, message
    code, out = prepare("coco2014", "--root", str(root), "--allow-partial", capsys=capsys)
    assert code == 1 and message in out, out


def test_prepare_and_loading_refuse_a_zero_byte_waterbirds_image(tmp_path, write_waterbirds, capsys):
    rows = [("a/land_0.jpg", 0, 0, 0, (2, 2, 20, 16)), ("a/water_0.jpg", 1, 1, 0, (4, 4, 20, 20)),
            ("a/land_1.jpg", 0, 0, 1, (2, 2, 20, 16)), ("a/water_1.jpg", 1, 1, 2, (4, 4, 20, 20))]
    root = write_waterbirds(tmp_path / "wb", rows)
    (root / "a/water_0.jpg").write_bytes(b"")
    message = first_loading_error("waterbirds100", root, "train")
    assert "water_0.jpg: cannot decode image" in message
    code, out = prepare("waterbirds100", "--root", str(root), capsys=capsys)
    assert code == 1 and message in out, out


TRAIN_CONFIG = """\
output_dir: run
cpu: true
model: {name: bcos_resnet18, kwargs: {inplanes: 8}}
data: {name: voc2007, root: ROOT, image_size: 32, batch_size: 2, eval_batch_size: 2}
optim: {epochs: 1}
"""


@pytest.mark.parametrize("case", ["id listed twice", "truncated jpeg"])
def test_training_refuses_with_the_message_prepare_prints(voc, tmp_path, capsys, run_cli, case):
    damage, _ = VOC_CASES[case]
    damage(voc)
    code, out = prepare("voc2007", "--root", str(voc), "--allow-partial", capsys=capsys)
    (tmp_path / "config.yaml").write_text(TRAIN_CONFIG.replace("ROOT", str(voc)))
    done = run_cli("train", "--config", "config.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if "error:" in line]
    message = line.split("error: ", 1)[1]
    assert code == 1 and message in out, (message, out)


def test_an_exif_rotated_image_is_read_as_viewers_show_it_and_passes_when_annotated_so(voc, capsys):
    """A camera's JPEG stored 40 × 50 (W × H) with "rotate 90°": viewers show 50 × 40, the size the XML declares and
    the pixels its boxes were drawn on; loading reads those pixels, and ``prepare`` passes the copy."""
    shown = _exif_rotated(voc / "JPEGImages/000001.jpg", (40, 50))
    assert shown.size == (50, 40)
    sample = load_dataset("voc2007", voc, "train")[0]
    expected = torch.from_numpy(np.array(shown)).permute(2, 0, 1).float() / 255
    assert sample["image"].shape == (3, 40, 50)
    assert (sample["image"] - expected).abs().max() < 0.05
    code, out = prepare("voc2007", "--root", str(voc), "--allow-partial", capsys=capsys)
    assert code == 0, out


def test_an_exif_rotated_image_annotated_unturned_names_the_orientation(voc):
    _exif_rotated(voc / "JPEGImages/000001.jpg", (50, 40))
    assert "EXIF orientation" in first_loading_error("voc2007", voc, "train")


def test_an_exif_rotated_coco_image_is_checked_against_its_declared_size(coco):
    root = coco()
    _exif_rotated(root / "val2014" / COCO_IMAGES[0]["file_name"], (40, 30))  # declared 40 × 30, shown 30 × 40
    message = first_loading_error("coco2014", root, "val")
    assert "the image file is 30 × 40 pixels (W × H)" in message and "EXIF orientation" in message, message


LEAKS = {"train and val": ("val", "train"), "train and test": ("test", "train"), "val and test": ("test", "val")}


@pytest.mark.parametrize("case", LEAKS)
def test_prepare_refuses_an_image_in_two_of_train_val_and_test(voc, capsys, case):
    split, other = LEAKS[case]
    (voc / f"ImageSets/Main/{split}.txt").write_text("".join(f"{i}\n" for i in [*VOC_SPLITS[split], "000001"
                                                                                  if other == "train" else "000003"]))
    code, out = prepare("voc2007", "--root", str(voc), "--allow-partial", capsys=capsys)
    assert code == 1 and "share 1 image id(s)" in out and f"split '{other}'" in out and f"split '{split}'" in out, out


def train(voc: Path, tmp_path: Path, run_cli) -> str:
    """``rightreasons train`` on ``voc``: the one ``error:`` line it ends with, having trained nothing."""
    (tmp_path / "config.yaml").write_text(TRAIN_CONFIG.replace("ROOT", str(voc)))
    done = run_cli("train", "--config", "config.yaml", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not (tmp_path / "run" / "checkpoints").exists()
    (line,) = [line for line in done.stderr.splitlines() if "error:" in line]
    return line


def test_training_refuses_an_image_in_both_train_and_val_before_any_step(voc, tmp_path, run_cli):
    (voc / "ImageSets/Main/val.txt").write_text("000003\n000001\n")
    line = train(voc, tmp_path, run_cli)
    assert "split 'train' of voc2007 and split 'val' of voc2007 share 1 image id(s) ('000001')" in line, line


def test_training_refuses_an_empty_validation_split_before_any_step(voc, tmp_path, run_cli):
    (voc / "ImageSets/Main/val.txt").write_text("")
    line = train(voc, tmp_path, run_cli)
    assert "split 'val' of voc2007 holds no images" in line, line
