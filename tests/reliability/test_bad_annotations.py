"""Fuzzed annotation files: VOC XML, COCO JSON and Waterbirds CSV records with missing fields, wrong types, degenerate,
huge and non-finite boxes, unicode names, random bytes, truncations and empty files.

Property checked for every generated file: the loader either refuses it with a :class:`DataError` whose message names
the file, or returns records that are valid (finite boxes inside the image, x1 < x2, y1 < y2) and — unless a
:class:`BoxWarning` announced a repair under the loader's ``box_policy`` — exactly the boxes that the file holds.
Any other exception, a hang or a silent change of the data fails the test.
"""

from __future__ import annotations

import csv
import json
import re
import tempfile
import warnings
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rightreasons.data import BOX_POLICIES, VOC_CLASSES, BoxWarning, DataError, load_dataset
from rightreasons.data.voc import parse_voc_xml

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

#: a field left out of the record (an absent XML element, JSON key or CSV cell)
MISSING = "<missing>"
#: junk where a number is expected: nan, inf, huge and tiny floats, text, unicode digits, empty
BAD_NUMBER_TEXT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10 ** 9, 10 ** 9).map(str),
    st.sampled_from(["", "  ", "abc", "1e400", "-0", "0x10", "\u0661\u0662", "12.5", "3,5", "None"]),
    st.text(max_size=4),
)
#: junk JSON values where a number is expected
BAD_JSON = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-10 ** 9, 10 ** 9),
    st.sampled_from([10 ** 400, True, None, "12", [], {}, [1, 2]]),
    st.text(max_size=3),
)
GOOD_NAMES = st.from_regex(r"[a-z0-9_]{1,8}(/[a-z0-9_.]{1,8})?\.jpg", fullmatch=True)
#: junk file names: unicode text and names that try to leave the dataset root
BAD_NAMES = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["../x.jpg", "/etc/passwd", "a/../../b.jpg", "C:\\x.jpg", "..\\x.jpg", "a\x00b.jpg", ".", ""]),
)


def corrupt(draw, fields: dict[tuple, object], junk) -> dict[tuple, object]:
    """Replace up to two of the ``fields`` (a flat ``{path: value}`` record) by ``MISSING`` or by a value drawn
    from ``junk(path)``."""
    chosen = draw(st.lists(st.sampled_from(list(fields)), max_size=2, unique=True)) if fields else []
    for key in chosen:
        fields[key] = draw(st.one_of(st.just(MISSING), junk(key)))
    return fields


@contextmanager
def scratch() -> Iterator[Path]:
    """A fresh directory per hypothesis example (function-scoped fixtures are shared between examples)."""
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder)


def outcome(load, path: Path | list[Path]) -> tuple[object, list[warnings.WarningMessage]] | None:
    """Run ``load()``: its result and the BoxWarnings raised, or None when it raised a DataError naming ``path``
    (one of the paths when a list is given). Any other exception propagates and fails the test."""
    paths = [str(p) for p in (path if isinstance(path, list) else [path])]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = load()
        except DataError as e:
            assert any(p in str(e) for p in paths), f"message does not name the file: {e}"
            event("refused with DataError")
            return None
    repaired = [w for w in caught if issubclass(w.category, BoxWarning)]
    event("accepted after a BoxWarning" if repaired else "accepted unchanged")
    return result, repaired


def assert_valid_boxes(boxes: np.ndarray, canvas: tuple[int, int] | None) -> None:
    boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
    assert np.isfinite(boxes).all()
    assert (boxes[:, 2] > boxes[:, 0]).all() and (boxes[:, 3] > boxes[:, 1]).all()
    if canvas is not None:
        h, w = canvas
        assert (boxes >= 0).all() and (boxes[:, [0, 2]] <= w).all() and (boxes[:, [1, 3]] <= h).all()


# ---------------------------------------------------------------------------------------------------------- VOC XML
COORDINATES = ("xmin", "ymin", "xmax", "ymax")


@st.composite
def voc_annotations(draw) -> dict[tuple, object]:
    """A flat VOC record — ``("size", tag)``, ``(i, "name")``, ``(i, "bndbox")``, ``(i, coordinate)`` → text — with
    boxes that may be degenerate or reach outside the image, and up to two fields corrupted."""
    fields: dict[tuple, object] = {("size", "height"): str(draw(st.integers(20, 64))),
                                   ("size", "width"): str(draw(st.integers(20, 64)))}
    for i in range(draw(st.integers(0, 3))):
        fields[(i, "name")] = draw(st.sampled_from(VOC_CLASSES))
        fields[(i, "bndbox")] = "present"
        fields.update({(i, t): str(draw(st.integers(-5, 80))) for t in COORDINATES})

    def junk(key: tuple):
        if key[1] == "name":
            return st.text(max_size=8)
        return st.just(MISSING) if key[1] == "bndbox" else BAD_NUMBER_TEXT
    return corrupt(draw, fields, junk)


def write_voc_xml(path: Path, fields: dict[tuple, object]) -> None:
    root = ET.Element("annotation")
    size = ET.SubElement(root, "size")
    for tag in ("height", "width"):
        if fields[("size", tag)] != MISSING:
            ET.SubElement(size, tag).text = fields[("size", tag)]
    for i in sorted({k[0] for k in fields if k[0] != "size"}):
        node = ET.SubElement(root, "object")
        if fields[(i, "name")] != MISSING:
            ET.SubElement(node, "name").text = fields[(i, "name")]
        if fields[(i, "bndbox")] != MISSING:
            box = ET.SubElement(node, "bndbox")
            for tag in COORDINATES:
                if fields[(i, tag)] != MISSING:
                    ET.SubElement(box, tag).text = fields[(i, tag)]
    path.write_bytes(ET.tostring(root, encoding="utf-8"))


@FUZZ
@given(fields=voc_annotations(), policy=st.sampled_from(BOX_POLICIES))
def test_fuzzed_voc_records(fields, policy):
    with scratch() as folder:
        path = folder / "000001.xml"
        write_voc_xml(path, fields)
        result = outcome(lambda: parse_voc_xml(path, box_policy=policy), path)
    if result is None:
        return
    (boxes, box_labels, labels, size), repaired = result
    assert size == (int(float(fields[("size", "height")])), int(float(fields[("size", "width")])))
    assert_valid_boxes(boxes, size)
    assert labels.sum() == len(set(box_labels.tolist())) and labels[box_labels].all()
    if not repaired:  # nothing announced: the boxes are exactly those of the file (VOC's 1-based pixel indices)
        objects = sorted({k[0] for k in fields if k[0] != "size"})
        raw = [[float(fields[(i, t)]) for t in COORDINATES] for i in objects]
        expected = np.array(raw, np.float32).reshape(-1, 4) - np.array([1, 1, 0, 0], np.float32)
        assert np.array_equal(boxes, expected)
        assert box_labels.tolist() == [VOC_CLASSES.index(fields[(i, "name")]) for i in objects]


VALID_VOC = ("<annotation><size><width>40</width><height>30</height><depth>3</depth></size><object><name>dog</name>"
             "<difficult>0</difficult><bndbox><xmin>5</xmin><ymin>6</ymin><xmax>20</xmax><ymax>25</ymax></bndbox>"
             "</object></annotation>\n")


@FUZZ
@given(content=st.one_of(st.binary(max_size=300), st.text(max_size=200).map(str.encode),
                         st.integers(0, len(VALID_VOC) - 1).map(lambda cut: VALID_VOC[:cut].encode())))
def test_voc_garbage_truncated_and_empty_files(content):
    """Random bytes, random text, empty files and truncations of a valid file: refused, or (a cut in the trailing
    newline) the same annotation."""
    with scratch() as folder:
        good, path = folder / "good.xml", folder / "000002.xml"
        good.write_text(VALID_VOC)
        path.write_bytes(content)
        result = outcome(lambda: parse_voc_xml(path), path)
        if result is not None:
            for got, want in zip(result[0], parse_voc_xml(good)):
                assert np.array_equal(got, want)


PLAIN_ID = re.compile(r"[A-Za-z0-9_]+")


@FUZZ
@given(image_id=st.one_of(GOOD_NAMES, BAD_NAMES, st.from_regex(PLAIN_ID, fullmatch=True)))
def test_fuzzed_voc_image_set_ids(image_id):
    """Ids of ImageSets/Main/*.txt name the annotation and image files: an id that would leave the dataset root is
    refused naming the list file and line; other unusual ids fail naming the annotation file they lack."""
    with scratch() as folder:
        root = folder / "VOC2007"
        for sub in ("Annotations", "JPEGImages", "ImageSets/Main"):
            (root / sub).mkdir(parents=True)
        split = root / "ImageSets/Main/train.txt"
        split.write_text(f"{image_id}\n")
        if PLAIN_ID.fullmatch(image_id):  # only plain ids get an annotation file (never write where an id points)
            (root / "Annotations" / f"{image_id}.xml").write_text(VALID_VOC)
        result = outcome(lambda: load_dataset("voc2007", root, "train"), [split, root / "Annotations"])
    if result is not None:
        dataset, _ = result
        assert dataset.ids == [line.strip() for line in f"{image_id}\n".splitlines() if line.strip()]
        assert all(PLAIN_ID.fullmatch(i) for i in dataset.ids)


# ---------------------------------------------------------------------------------------------------------- COCO JSON
@st.composite
def coco_files(draw) -> dict:
    """An instances JSON of up to three images and four annotations (boxes possibly degenerate or outside the
    image, some crowd), with up to two fields dropped or replaced by junk."""
    n = draw(st.integers(0, 3))
    fields: dict[tuple, object] = {}
    for i in range(n):
        fields.update({("images", i, "id"): i, ("images", i, "file_name"): draw(GOOD_NAMES),
                       ("images", i, "height"): draw(st.integers(20, 64)),
                       ("images", i, "width"): draw(st.integers(20, 64))})
    for j in range(draw(st.integers(0, 4))):
        fields.update({("annotations", j, "id"): 100 + j, ("annotations", j, "image_id"): draw(st.integers(0, n)),
                       ("annotations", j, "category_id"): draw(st.sampled_from([1, 3])),
                       ("annotations", j, "bbox"): draw(st.lists(st.integers(-5, 70), min_size=4, max_size=4)),
                       ("annotations", j, "iscrowd"): draw(st.sampled_from([0, 0, 0, 1]))})

    def junk(key: tuple):
        if key[2] == "file_name":
            return st.one_of(BAD_NAMES, BAD_JSON)
        if key[2] == "bbox":
            return st.one_of(BAD_JSON, st.lists(st.integers(0, 9), max_size=5),
                             st.lists(st.one_of(st.integers(0, 9), BAD_JSON), min_size=4, max_size=4))
        return BAD_JSON
    fields = corrupt(draw, fields, junk)
    coco: dict = {"images": [], "annotations": [],
                  "categories": [{"id": 1, "name": "cat"}, {"id": 3, "name": draw(st.text(max_size=6))}]}
    for kind, index in sorted({k[:2] for k in fields}):
        coco[kind].append({k[2]: v for k, v in fields.items() if k[:2] == (kind, index) and v != MISSING})
    return coco


def write_coco(root: Path, content: bytes) -> Path:
    (root / "annotations").mkdir(parents=True)
    (root / "val2014").mkdir()
    path = root / "annotations" / "instances_val2014.json"
    path.write_bytes(content)
    return path


@FUZZ
@given(coco=coco_files(), policy=st.sampled_from(BOX_POLICIES))
def test_fuzzed_coco_records(coco, policy):
    with scratch() as root:
        path = write_coco(root, json.dumps(coco).encode())
        result = outcome(lambda: load_dataset("coco2014", root, "val", box_policy=policy), path)
    if result is None:
        return
    dataset, repaired = result
    images = {img["id"]: img for img in coco["images"]}
    for i, image_id in enumerate(dataset.ids):
        boxes, box_labels = dataset.records.boxes_of(i)
        img = images[int(image_id)]
        assert_valid_boxes(boxes, (img["height"], img["width"]))
        assert dataset.records.labels[i, box_labels].all() and dataset.records.labels[i].any()
    if not repaired:  # every non-crowd annotation of a kept image is a box, unchanged
        kept = {int(i) for i in dataset.ids}
        expected = sorted([a["image_id"], *a["bbox"][:2], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]]
                          for a in coco["annotations"] if a["image_id"] in kept and a.get("iscrowd", 0) == 0)
        got = sorted([int(image_id), *box] for i, image_id in enumerate(dataset.ids)
                     for box in dataset.records.boxes_of(i)[0].tolist())
        assert np.allclose(np.array(got, np.float32).reshape(-1, 5), np.array(expected, np.float32).reshape(-1, 5))


VALID_COCO = json.dumps({"images": [{"id": 7, "file_name": "a.jpg", "height": 20, "width": 30}],
                         "annotations": [{"id": 1, "image_id": 7, "category_id": 1, "bbox": [1, 2, 10, 8],
                                          "iscrowd": 0, "area": 80}],
                         "categories": [{"id": 1, "name": "cat"}]})


@FUZZ
@given(content=st.one_of(st.binary(max_size=300), st.text(max_size=200).map(str.encode),
                         st.integers(0, len(VALID_COCO) - 1).map(lambda cut: VALID_COCO[:cut].encode()),
                         st.just(b"[" * 100_000), st.just(b"\xef\xbb\xbf" + b"\xff" * 8)))
def test_coco_garbage_truncated_and_empty_files(content):
    """Random bytes and text, truncations, empty files, very deep nesting and non-UTF-8 bytes are refused."""
    with scratch() as root:
        path = write_coco(root, content)
        assert outcome(lambda: load_dataset("coco2014", root, "val"), path) is None


# ---------------------------------------------------------------------------------------------------------- Waterbirds
@st.composite
def waterbirds_files(draw) -> tuple[list[list[str]], list[list[str]]]:
    """metadata.csv rows (img_filename, y, place, split) and box-file rows (img_filename, x1, y1, x2, y2) of up to
    four images, with up to two cells emptied or replaced by junk."""
    names = draw(st.lists(GOOD_NAMES, min_size=1, max_size=4, unique=True))
    fields: dict[tuple, object] = {}
    for i, name in enumerate(names):
        x, y, w, h = (draw(st.integers(lo, 30)) for lo in (0, 0, 1, 1))
        fields.update({("meta", i, 0): name, ("meta", i, 1): draw(st.sampled_from("01")),
                       ("meta", i, 2): draw(st.sampled_from("01")), ("meta", i, 3): draw(st.sampled_from("012")),
                       ("box", i, 0): name, ("box", i, 1): str(x), ("box", i, 2): str(y), ("box", i, 3): str(x + w),
                       ("box", i, 4): str(y + h)})
    fields = corrupt(draw, fields, lambda key: BAD_NAMES if key[2] == 0 else BAD_NUMBER_TEXT)

    def rows(kind: str, width: int) -> list[list[str]]:
        return [["" if fields[(kind, i, c)] == MISSING else fields[(kind, i, c)] for c in range(width)]
                for i in range(len(names))]
    return rows("meta", 4), rows("box", 5)


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)


@FUZZ
@given(files=waterbirds_files(), split=st.sampled_from(["train", "val", "test"]))
def test_fuzzed_waterbirds_records(files, split):
    meta, boxes = files
    with scratch() as root:
        write_csv(root / "metadata.csv", ["img_filename", "y", "place", "split"], meta)
        write_csv(root / "boxes.csv", ["img_filename", "x1", "y1", "x2", "y2"], boxes)
        result = outcome(lambda: load_dataset("waterbirds100", root, split, train_like_val=False),
                         [root / "metadata.csv", root / "boxes.csv"])
    if result is None:
        return
    dataset, _ = result
    code = {"train": 0, "val": 1, "test": 2}[split]
    rows = [r for r in meta if int(float(r[3])) == code]
    assert dataset.ids == [r[0].strip() for r in rows]
    assert dataset.records.labels[:, 1].tolist() == [bool(int(float(r[1]))) for r in rows]
    table = {r[0].strip(): [float(v) for v in r[1:]] for r in boxes}
    for i, image_id in enumerate(dataset.ids):  # the boxes are exactly those of the box file
        box, _ = dataset.records.boxes_of(i)
        assert_valid_boxes(box, None)
        assert box.tolist() == [np.float32(table[image_id]).tolist()]


@FUZZ
@given(content=st.one_of(st.binary(max_size=300), st.text(max_size=200).map(str.encode)),
       target=st.sampled_from(["metadata.csv", "boxes.csv"]))
def test_waterbirds_garbage_and_empty_files(content, target):
    """Random bytes or text in either CSV: refused naming that file, or a dataset whose rows are well-formed."""
    with scratch() as root:
        write_csv(root / "metadata.csv", ["img_filename", "y", "place", "split"], [["a/b.jpg", "1", "0", "0"]])
        write_csv(root / "boxes.csv", ["img_filename", "x1", "y1", "x2", "y2"], [["a/b.jpg", "1", "2", "9", "8"]])
        (root / target).write_bytes(content)
        result = outcome(lambda: load_dataset("waterbirds100", root, "train"), root / target)
    if result is not None:
        assert result[0].ids == ["a/b.jpg"]


@pytest.mark.parametrize("policy, expected", [("error", DataError), ("clip", BoxWarning), ("drop", BoxWarning)])
def test_huge_voc_box_follows_the_box_policy(tmp_path, policy, expected):
    """A box far outside the image: an error, or a clip announced by a BoxWarning that names the file."""
    path = tmp_path / "000003.xml"
    write_voc_xml(path, {("size", "height"): "30", ("size", "width"): "40", (0, "name"): "dog", (0, "bndbox"): "",
                         (0, "xmin"): "5", (0, "ymin"): "6", (0, "xmax"): "1e30", (0, "ymax"): "25"})
    if expected is DataError:
        with pytest.raises(DataError, match=r"000003\.xml: object 0 \(dog\): .*reaches outside the image"):
            parse_voc_xml(path, box_policy=policy)
        return
    with pytest.warns(BoxWarning, match=r"000003\.xml: object 0 \(dog\): .*clipped 1 box"):
        boxes, *_ = parse_voc_xml(path, box_policy=policy)
    assert boxes.tolist() == [[4.0, 5.0, 40.0, 25.0]]
