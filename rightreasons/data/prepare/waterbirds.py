"""Check a Waterbirds-100 download and build its bird box file for ``load_dataset("waterbirds100", ROOT, split)``.

    rightreasons prepare waterbirds100 --root ROOT [--segmentations DIR] [--threshold 0.5] [--box-file boxes.csv]

ROOT holds ``metadata.csv`` and the images (``waterbird_1.0_forest2water2``). Checks that the metadata parses, that
every image exists, and prints the images per split and group (the training split of Waterbirds-100 has only G1
and G4). With ``--segmentations DIR`` (CUB-200-2011's ``segmentations/``, unpacked from ``segmentations.tgz``:
one ``<img_filename>.png`` per image, the bird mask the dataset was composed with) it writes the box file
``ROOT/boxes.csv``: the tight box of the mask pixels above ``threshold`` × 255, scaled to the image size when the
mask differs in size (format documented in :mod:`rightreasons.data.waterbirds`). Without it, it checks that the box
file covers every image. Prints exactly what is missing; exit code 1 if anything is.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image

from .checks import Report
from ...errors import DataError
from ...fileio import write_csv_atomic
from ..waterbirds import BOX_COLUMNS, GROUP_NAMES, SPLIT_CODES, read_box_file, read_metadata


def mask_box(mask_path: Path, image_size: tuple[int, int], threshold: float) -> list[float] | None:
    """XYXY box of the mask pixels above ``threshold`` in the coordinates of an image of ``(W, H)``; None if empty."""
    with Image.open(mask_path) as img:
        mask = np.asarray(img.convert("L"), dtype=np.float32) / 255.0
    ys, xs = np.nonzero(mask > threshold)
    if len(xs) == 0:
        return None
    sx, sy = image_size[0] / mask.shape[1], image_size[1] / mask.shape[0]
    return [xs.min() * sx, ys.min() * sy, (xs.max() + 1) * sx, (ys.max() + 1) * sy]


def write_boxes(root: Path, names: list[str], segmentations: Path, threshold: float, box_file: Path,
                report: Report) -> None:
    rows, missing, empty = [], [], []
    for name in names:
        mask_path = (segmentations / name).with_suffix(".png")
        if not mask_path.is_file():
            missing.append(str(mask_path))
            continue
        with Image.open(root / name) as img:
            size = img.size
        box = mask_box(mask_path, size, threshold)
        if box is None:
            empty.append(str(mask_path))
            continue
        rows.append([name] + [f"{v:.2f}" for v in box])
    if missing:
        report.problem(f"{len(missing)} segmentation mask(s) missing", missing)
    if empty:
        report.problem(f"{len(empty)} segmentation mask(s) with no pixel above the threshold", empty)
    write_csv_atomic(box_file, BOX_COLUMNS, rows)
    report.note(f"wrote {len(rows)} boxes to {box_file}")


def check(root: Path, segmentations: Path | None = None, threshold: float = 0.5,
          box_file: str = "boxes.csv") -> Report:
    report = Report(f"Waterbirds-100 at {root}")
    meta = root / "metadata.csv"
    if not meta.is_file():
        report.problem("metadata.csv missing", [str(meta)])
        return report
    try:
        rows = read_metadata(meta)
    except DataError as e:
        report.problem(str(e))
        return report
    counts = Counter((split, 2 * y + place) for _, y, place, split in rows)
    for split, code in SPLIT_CODES.items():
        report.note(f"{split}: " + ", ".join(f"{GROUP_NAMES[g]} {counts[(code, g)]}" for g in range(4)))
    if counts[(0, 1)] or counts[(0, 2)]:
        report.note("the training split holds G2/G3 images: this is not the 100 %-correlated Waterbirds-100")
    names = [r[0] for r in rows]
    missing = [str(root / n) for n in names if not (root / n).is_file()]
    if missing:
        report.problem(f"{len(missing)} image(s) missing", missing)
    box_path = root / box_file
    if segmentations is not None:
        write_boxes(root, [n for n in names if (root / n).is_file()], segmentations, threshold, box_path, report)
    elif not box_path.is_file():
        report.problem("box file missing; build it from the CUB-200-2011 bird masks with --segmentations "
                       "DIR/segmentations (segmentations.tgz unpacked)", [str(box_path)])
        return report
    try:
        boxes = read_box_file(box_path)
    except DataError as e:
        report.problem(str(e))
        return report
    uncovered = [n for n in names if n not in boxes]
    if uncovered:
        report.problem(f"{len(uncovered)} image(s) without a box in {box_path}", uncovered)
    return report
