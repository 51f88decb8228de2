"""Fault injection on tiny, format-faithful VOC, COCO and Waterbirds copies: one or two random faults — image bytes
truncated, emptied, replaced by junk, by a 16-bit or a NaN float image or by an image of another size; annotation
fields (declared sizes, box corners, class names and ids, image and category ids) changed; split ids repeated — and
then every entry point reads the copy.

Property: either every split loads, every sample as training reads it with finite boxes inside its image of the
declared size, and ``prepare`` says OK; or loading refuses with a :class:`DataError` and ``prepare`` fails printing
that very message. Never another exception, a ``prepare`` that passes what loading refuses (or the reverse), or a
sample with boxes outside its image."""

from __future__ import annotations

import io
import json
import struct
import tempfile
import warnings
import zlib
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from PIL import Image

from rightreasons.data import BoxWarning, DataError, load_dataset
from rightreasons.data.prepare import coco as prepare_coco
from rightreasons.data.prepare import voc as prepare_voc
from rightreasons.data.prepare import waterbirds as prepare_waterbirds

FAULTS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                          HealthCheck.function_scoped_fixture])


def _encoded(array: np.ndarray, fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt)
    return buffer.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


#: a PNG whose header declares 20000 × 20000 RGB pixels (over the loaders' pixel limit), with no pixel data
HUGE = (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 20000, 8, 2, 0, 0, 0))
        + _png_chunk(b"IEND", b""))


@st.composite
def image_fault(draw, original: bytes, size: tuple[int, int]) -> bytes:
    """New bytes for an image file of ``size = (H, W)`` whose bytes are ``original``."""
    h, w = size
    kind = draw(st.sampled_from(["truncate", "empty", "junk", "huge", "16-bit", "nan float", "unit float",
                                 "resized"]))
    event(f"image: {kind}")
    if kind == "truncate":
        return original[:draw(st.integers(0, max(0, len(original) - 1)))]
    if kind == "empty":
        return b""
    if kind == "junk":
        return draw(st.binary(min_size=1, max_size=200))
    if kind == "huge":
        return HUGE
    if kind == "16-bit":
        return _encoded(np.full((h, w), draw(st.integers(0, 65535)), np.uint16), "PNG")
    if kind in ("nan float", "unit float"):
        values = np.full((h, w), 0.25, np.float32)
        values[0, 0] = np.nan if kind == "nan float" else 1.0
        return _encoded(values, "TIFF")
    return _encoded(np.zeros((h + draw(st.integers(1, 9)), w, 3), np.uint8), "PNG")


def outcomes(name: str, root: Path, splits: list[str]) -> dict[str, str | None]:
    """Per split: the message of the DataError loading it (every sample, as training reads it) raises, or None; a
    split that loads has finite boxes inside each image, of the size its annotation declares."""
    found: dict[str, str | None] = {}
    for split in splits:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", BoxWarning)
                dataset = load_dataset(name, root, split)
                for i in range(len(dataset)):
                    sample = dataset[i]
                    h, w = sample["image"].shape[-2:]
                    if dataset.records.sizes is not None:
                        assert tuple(dataset.records.sizes[i]) == (h, w)
                    boxes = sample["boxes"].numpy().reshape(-1, 4)
                    assert np.isfinite(boxes).all() and (boxes >= 0).all()
                    assert (boxes[:, [0, 2]] <= w).all() and (boxes[:, [1, 3]] <= h).all()
            found[split] = None
        except DataError as e:
            found[split] = str(e)
    return found


def agree(loaded: dict[str, str | None], report) -> bool:
    """``prepare``'s report fails with every message loading raised, and passes when loading raised none; returns
    whether they refused."""
    text = report.text()
    for split, message in loaded.items():
        if message is not None:
            assert message in text, f"split {split}: loading said\n{message}\nprepare said\n{text}"
    refused = any(message is not None for message in loaded.values())
    assert (report.exit_code == 1) == refused, text
    return refused


def scratch() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory()


# ------------------------------------------------------------------------------------------------------------- VOC
VOC_OBJECTS = {"000001": (40, 50, [("dog", 5, 6, 20, 30, 0)]), "000002": (30, 30, [("cat", 1, 1, 30, 30, 0)]),
               "000003": (36, 44, [("car", 10, 10, 20, 20, 0), ("dog", 2, 2, 8, 8, 1)]),
               "000004": (32, 32, [("cat", 2, 2, 16, 16, 0)])}
VOC_SPLITS = {"train": ["000001", "000002"], "val": ["000003"], "trainval": ["000001", "000002", "000003"],
              "test": ["000004"]}  # train, val and test disjoint: a shared id is leakage, which prepare refuses
XML_FIELDS = ["<width>", "<height>", "<xmin>", "<ymin>", "<xmax>", "<ymax>", "<name>"]


@st.composite
def voc_faults(draw) -> list[tuple]:
    faults = []
    for _ in range(draw(st.integers(1, 2))):
        image_id = draw(st.sampled_from(sorted(VOC_OBJECTS)))
        kind = draw(st.sampled_from(["image", "xml", "split"]))
        if kind == "image":
            faults.append(("image", image_id, draw(st.data())))
        elif kind == "xml":
            field = draw(st.sampled_from(XML_FIELDS))
            value = draw(st.one_of(st.integers(-5, 80).map(str), st.sampled_from(["kat", "nan", "", "1e9", "dog"])))
            faults.append(("xml", image_id, field, value))
        else:
            split = draw(st.sampled_from(sorted(VOC_SPLITS)))
            faults.append(("split", split, draw(st.sampled_from(VOC_SPLITS[split]))))
    return faults


@FAULTS
@given(faults=voc_faults())
def test_voc_faults_are_refused_alike_by_prepare_and_loading(faults, write_voc):
    with scratch() as folder:
        voc = write_voc(Path(folder), VOC_OBJECTS, VOC_SPLITS)
        for fault in faults:
            if fault[0] == "image":
                path = voc / "JPEGImages" / f"{fault[1]}.jpg"
                path.write_bytes(fault[2].draw(image_fault(path.read_bytes(), VOC_OBJECTS[fault[1]][:2])))
            elif fault[0] == "xml":
                _, image_id, field, value = fault
                event(f"xml: {field}")
                path = voc / "Annotations" / f"{image_id}.xml"
                text = path.read_text()
                start = text.index(field) + len(field)
                path.write_text(text[:start] + value + text[text.index("<", start):])
            else:
                event("split: repeated id")
                listing = voc / "ImageSets" / "Main" / f"{fault[1]}.txt"
                listing.write_text(listing.read_text() + f"{fault[2]}\n")
        loaded = outcomes("voc2007", voc, list(VOC_SPLITS))
        event("refused by both" if agree(loaded, prepare_voc.check(voc, allow_partial=True)) else "accepted by both")


# ------------------------------------------------------------------------------------------------------------ COCO
COCO_CATEGORIES = [{"id": 1, "name": "person", "supercategory": "person"},
                   {"id": 18, "name": "dog", "supercategory": "animal"}]
COCO_IMAGES = [{"id": 42, "file_name": "COCO_val2014_000000000042.jpg", "height": 30, "width": 40},
               {"id": 7, "file_name": "COCO_val2014_000000000007.jpg", "height": 20, "width": 20}]
COCO_ANNOTATIONS = [{"id": 1, "image_id": 42, "category_id": 18, "bbox": [2.0, 3.0, 10.0, 12.5], "iscrowd": 0},
                    {"id": 2, "image_id": 7, "category_id": 1, "bbox": [0.0, 0.0, 5.0, 5.0], "iscrowd": 0},
                    {"id": 3, "image_id": 7, "category_id": 18, "bbox": [10.0, 10.0, 4.0, 6.0], "iscrowd": 0}]
COCO_FIELDS = {"annotations": ["id", "image_id", "category_id", "bbox"], "images": ["height", "width"]}


@st.composite
def coco_faults(draw) -> list[tuple]:
    faults = []
    for _ in range(draw(st.integers(1, 2))):
        if draw(st.booleans()):
            faults.append(("image", draw(st.integers(0, len(COCO_IMAGES) - 1)), draw(st.data())))
            continue
        kind = draw(st.sampled_from(sorted(COCO_FIELDS)))
        index = draw(st.integers(0, len((COCO_ANNOTATIONS if kind == "annotations" else COCO_IMAGES)) - 1))
        key = draw(st.sampled_from(COCO_FIELDS[kind]))
        value = draw(st.lists(st.integers(-5, 45), min_size=4, max_size=4)) if key == "bbox" else \
            draw(st.sampled_from([1, 2, 3, 5, 7, 18, 42, 10, 25, 30]))
        faults.append(("json", kind, index, key, value))
    return faults


@FAULTS
@given(faults=coco_faults())
def test_coco_faults_are_refused_alike_by_prepare_and_loading(faults, write_coco):
    with scratch() as folder:
        images = [dict(image) for image in COCO_IMAGES]
        annotations = [dict(annotation) for annotation in COCO_ANNOTATIONS]
        root = write_coco(Path(folder), COCO_CATEGORIES, images, annotations)
        content = {"images": images, "annotations": annotations, "categories": COCO_CATEGORIES}
        for fault in faults:
            if fault[0] == "image":
                image = COCO_IMAGES[fault[1]]
                path = root / "val2014" / image["file_name"]
                path.write_bytes(fault[2].draw(image_fault(path.read_bytes(), (image["height"], image["width"]))))
            else:
                _, kind, index, key, value = fault
                event(f"json: {kind}.{key}")
                content[kind][index][key] = value
        (root / "annotations" / "instances_val2014.json").write_text(json.dumps(content))
        loaded = outcomes("coco2014", root, ["val"])
        report = prepare_coco.check(root, allow_partial=True)
        # this copy has no train split: prepare's one expected problem, the rest must agree with loading
        assert report.problems[0].startswith("annotation file of split 'train' missing")
        report.problems.pop(0)
        event("refused by both" if agree(loaded, report) else "accepted by both")


# ------------------------------------------------------------------------------------------------------ Waterbirds
WATERBIRDS_ROWS = [("a/land_0.jpg", 0, 0, 0, (2, 2, 20, 16)), ("a/water_0.jpg", 1, 1, 0, (4, 4, 20, 20)),
                   ("a/land_1.jpg", 0, 0, 1, (2, 2, 20, 16)), ("a/water_1.jpg", 1, 1, 1, (1, 3, 30, 22)),
                   ("a/land_2.jpg", 0, 1, 2, (5, 5, 9, 9))]
BOX_COLUMNS = ["x1", "y1", "x2", "y2"]


@st.composite
def waterbirds_faults(draw) -> list[tuple]:
    faults = []
    for _ in range(draw(st.integers(1, 2))):
        row = draw(st.integers(0, len(WATERBIRDS_ROWS) - 1))
        if draw(st.booleans()):
            faults.append(("image", row, draw(st.data())))
        else:
            faults.append(("box", row, draw(st.integers(0, 3)), draw(st.sampled_from(["-3", "40", "nan", "x", "12"]))))
    return faults


@FAULTS
@given(faults=waterbirds_faults())
def test_waterbirds_faults_are_refused_alike_by_prepare_and_loading(faults, write_waterbirds):
    with scratch() as folder:
        root = write_waterbirds(Path(folder) / "wb", WATERBIRDS_ROWS)
        lines = (root / "boxes.csv").read_text().splitlines()
        for fault in faults:
            name = WATERBIRDS_ROWS[fault[1]][0]
            if fault[0] == "image":
                (root / name).write_bytes(fault[2].draw(image_fault((root / name).read_bytes(), (24, 32))))
            else:
                event(f"box: {BOX_COLUMNS[fault[2]]}")
                cells = lines[fault[1] + 1].split(",")
                cells[1 + fault[2]] = fault[3]
                lines[fault[1] + 1] = ",".join(cells)
        (root / "boxes.csv").write_text("\n".join(lines) + "\n")
        loaded = outcomes("waterbirds100", root, ["train", "val", "test"])
        event("refused by both" if agree(loaded, prepare_waterbirds.check(root)) else "accepted by both")


def test_the_harness_sees_a_clean_copy_as_clean(tmp_path, write_voc, write_coco, write_waterbirds):
    voc = write_voc(tmp_path / "voc", VOC_OBJECTS, VOC_SPLITS)
    assert not agree(outcomes("voc2007", voc, list(VOC_SPLITS)), prepare_voc.check(voc, allow_partial=True))
    root = write_waterbirds(tmp_path / "wb", WATERBIRDS_ROWS)
    assert not agree(outcomes("waterbirds100", root, ["train", "val", "test"]), prepare_waterbirds.check(root))

