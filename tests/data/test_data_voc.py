"""PASCAL VOC 2007 loader on a small VOCdevkit written by the test (JPEGs, XML, ImageSets, a segmentation; the
writers are the shared ``write_voc`` / ``voc_xml`` fixtures)."""

import re

import numpy as np
import pytest
import torch

from rightreasons.apps.cli import main
from rightreasons.data import VOC_CLASSES, BoxWarning, DataError, collate, load_dataset
from rightreasons.data.prepare import voc as prepare_voc

OBJECTS = {  # id: (H, W, [(name, xmin, ymin, xmax, ymax, difficult, truncated)])
    "000001": (40, 50, [("dog", 5, 6, 20, 30, 0, 1), ("person", 30, 2, 45, 38, 1, 0)]),
    "000002": (30, 30, [("cat", 1, 1, 30, 30, 0, 0)]),
    "000003": (36, 44, [("car", 10, 10, 20, 20, 0, 0), ("car", 22, 5, 40, 15, 0, 1), ("dog", 2, 2, 8, 8, 1, 0)]),
}
SPLITS = {"train": ["000001", "000002"], "val": ["000003"], "trainval": ["000001", "000002", "000003"], "test": []}


@pytest.fixture
def voc(tmp_path, write_voc):
    seg = np.zeros((40, 50), np.uint8)
    seg[5:30, 4:20] = VOC_CLASSES.index("dog") + 1
    seg[4, :] = 255
    return write_voc(tmp_path, OBJECTS, SPLITS, {"000001": seg})


def test_labels_boxes_and_segmentation(voc):
    ds = load_dataset("voc2007", voc.parent, "trainval")  # VOCdevkit/ is accepted as well
    assert len(ds) == 3 and ds.classes == VOC_CLASSES and ds.ids == ["000001", "000002", "000003"]
    s = ds[0]
    assert s["image"].shape == (3, 40, 50) and s["image"].dtype == torch.float32
    assert 0 <= s["image"].min() and s["image"].max() <= 1
    assert torch.nonzero(s["labels"]).flatten().tolist() == [VOC_CLASSES.index("dog"), VOC_CLASSES.index("person")]
    # 1-based inclusive VOC pixels → 0-based XYXY with exclusive x2, y2
    assert s["boxes"].tolist() == [[4, 5, 20, 30], [29, 1, 45, 38]] and s["boxes"].canvas_size == (40, 50)
    assert s["box_labels"].tolist() == [VOC_CLASSES.index("dog"), VOC_CLASSES.index("person")]
    assert s["has_boxes"] and s["id"] == "000001"
    assert s["mask"].shape == (40, 50) and s["mask"][10, 10] == 12 and s["mask"][4, 0] == 255
    assert "mask" not in ds[1]
    assert ds.labels.shape == (3, 20) and ds.labels[2, VOC_CLASSES.index("car")] == 1
    batch = collate([ds[1], ds[1]])
    assert batch["image"].shape == (2, 3, 30, 30) and len(batch["boxes"]) == 2 and "mask" not in batch
    with pytest.raises(ValueError, match="different shapes"):
        collate([ds[0], ds[1]])


def test_difficult_switch_and_splits(voc):
    keep = load_dataset("voc2007", voc, "val")
    drop = load_dataset("voc2007", voc, "val", use_difficult=False)
    dog = VOC_CLASSES.index("dog")
    assert len(keep[0]["boxes"]) == 3 and keep.labels[0, dog] == 1
    assert len(drop[0]["boxes"]) == 2 and drop.labels[0, dog] == 0
    assert len(load_dataset("voc2007", voc, "train")) == 2 and len(load_dataset("voc2007", voc, "test")) == 0
    seg = load_dataset("voc2007", voc, "trainval", segmentation_only=True)
    assert seg.ids == ["000001"]
    with pytest.raises(ValueError, match="unknown VOC split"):
        load_dataset("voc2007", voc, "training")


def test_missing_and_malformed_files_are_named(voc):
    with pytest.raises(DataError, match="nowhere.*not found"):
        load_dataset("voc2007", voc / "nowhere", "train")
    (voc / "ImageSets" / "Main" / "val.txt").unlink()
    with pytest.raises(DataError, match=r"val\.txt: VOC image set 'val' not found"):
        load_dataset("voc2007", voc, "val")
    (voc / "Annotations" / "000002.xml").write_text("<annotation><size><width>3</width>")
    with pytest.raises(DataError, match=r"000002\.xml: malformed XML"):
        load_dataset("voc2007", voc, "train")
    (voc / "Annotations" / "000002.xml").unlink()
    with pytest.raises(DataError, match=r"000002\.xml: annotation of image '000002' not found"):
        load_dataset("voc2007", voc, "train")


@pytest.mark.parametrize("obj, message", [
    (("kat", 1, 1, 5, 5, 0), r"000002\.xml: object 0: unknown class name 'kat'; expected one of aeroplane"),
    (("cat", 9, 1, 5, 5, 0), r"000002\.xml: object 0 \(cat\): box .* is degenerate"),
])
def test_bad_objects_are_errors(voc, voc_xml, obj, message):
    (voc / "Annotations" / "000002.xml").write_text(voc_xml("000002", 30, 30, [obj]))
    with pytest.raises(DataError, match=message):
        load_dataset("voc2007", voc, "train")


def test_out_of_range_boxes_clip_with_a_warning_or_fail_by_policy(voc, voc_xml):
    (voc / "Annotations" / "000002.xml").write_text(voc_xml("000002", 30, 30, [("cat", 1, 1, 35, 20, 0)]))
    with pytest.warns(BoxWarning, match=r"000002\.xml: object 0 \(cat\): .*outside the image"):
        ds = load_dataset("voc2007", voc, "train")
    assert ds[1]["boxes"].tolist() == [[0, 0, 30, 20]]
    with pytest.raises(DataError, match=r"000002\.xml: object 0 \(cat\)"):
        load_dataset("voc2007", voc, "train", box_policy="error")


def test_undecodable_image_in_a_worker_names_the_file(voc):
    (voc / "JPEGImages" / "000002.jpg").write_bytes(b"not a jpeg at all")
    ds = load_dataset("voc2007", voc, "train")
    iterator = iter(torch.utils.data.DataLoader(ds, batch_size=1, num_workers=2, collate_fn=collate))
    ids, errors = [], []
    while True:  # drained to the end: an iterator abandoned after a worker error takes 2 × 5 s to shut down
        try:
            ids += next(iterator)["id"]
        except StopIteration:
            break
        except DataError as e:
            errors.append(str(e))
    assert ids == ["000001"] and len(errors) == 1
    assert "worker process" in errors[0]  # re-raised in the main process, same type, with the worker's message
    assert re.search(r"JPEGImages/000002\.jpg: cannot decode image", errors[0])


def test_prepare_reports_exactly_what_is_missing(voc, voc_xml, capsys):
    assert main(["prepare", "voc2007", "--root", str(voc.parent.parent), "--allow-partial"]) == 0  # finds VOC2007
    out = capsys.readouterr().out
    assert "trainval: 3 images" in out and "SegmentationClass: 1 masks" in out and "== OK" in out
    assert prepare_voc.check(voc.parent.parent, allow_partial=True).exit_code == 0
    assert main(["prepare", "voc", "--root", str(voc)]) == 1  # not the official counts; "voc" is an alias
    assert "train.txt: 2 ids, the official release has 2501" in capsys.readouterr().out
    (voc / "JPEGImages" / "000003.jpg").unlink()
    (voc / "Annotations" / "000002.xml").write_text(voc_xml("000002", 30, 30, [("kat", 1, 1, 5, 5, 0)]))
    assert main(["prepare", "voc2007", "--root", str(voc), "--allow-partial", "--tars", str(voc)]) == 1
    out = capsys.readouterr().out
    assert "JPEGImages/000003.jpg" in out and "unknown class name 'kat'" in out
    assert "VOCtrainval_06-Nov-2007.tar: file to checksum not found" in out
