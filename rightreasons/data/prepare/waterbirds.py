"""Check a Waterbirds-100 download and build its bird box file for ``load_dataset("waterbirds100", ROOT, split)``.

    rightreasons prepare waterbirds100 --root ROOT [--segmentations DIR] [--threshold 0.5] [--box-file boxes.csv]
                                       [--workers N]

ROOT holds ``metadata.csv`` and the images (``waterbird_1.0_forest2water2``). Checks that the metadata parses, then
each split with the loader itself (the box file covering it, every image read as training reads it:
:func:`~.checks.check_split`), and prints the images per split and group (the training split of Waterbirds-100 has
only G1 and G4). With ``--segmentations DIR`` (CUB-200-2011's ``segmentations/``, unpacked from ``segmentations.tgz``:
one ``<img_filename>.png`` per image, the bird mask the dataset was composed with) it writes the box file
``ROOT/boxes.csv``: the tight box of the mask pixels above ``threshold`` × 255, scaled to the image size when the
mask differs in size (format documented in :mod:`rightreasons.data.waterbirds`). Without it, it checks that the box
file covers every image. Prints exactly what is missing or wrong; exit code 1 if anything is.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from .checks import Report, check_disjoint, check_split
from ...errors import DataError
from ...fileio import write_csv_atomic
from ..io import open_image
from ..waterbirds import BOX_COLUMNS, GROUP_NAMES, SPLIT_CODES, Waterbirds100, read_metadata


def mask_box(mask_path: Path, image_size: tuple[int, int], threshold: float) -> list[float] | None:
    """XYXY box of the mask pixels above ``threshold`` in the coordinates of an image of ``(W, H)``; None if empty."""
    mask = np.asarray(open_image(mask_path, mode="L"), dtype=np.float32) / 255.0
    ys, xs = np.nonzero(mask > threshold)
    if len(xs) == 0:
        return None
    sx, sy = image_size[0] / mask.shape[1], image_size[1] / mask.shape[0]
    return [xs.min() * sx, ys.min() * sy, (xs.max() + 1) * sx, (ys.max() + 1) * sy]


def write_boxes(root: Path, names: list[str], segmentations: Path, threshold: float, box_file: Path,
                report: Report) -> None:
    rows, missing, empty, broken = [], [], [], []
    for name in names:
        mask_path = (segmentations / name).with_suffix(".png")
        if not mask_path.is_file():
            missing.append(str(mask_path))
            continue
        try:
            size = open_image(root / name).size
        except DataError:
            continue  # the image's problem is reported by the loader's check of its split
        try:
            box = mask_box(mask_path, size, threshold)
        except DataError as e:
            broken.append(str(e))
            continue
        if box is None:
            empty.append(str(mask_path))
            continue
        rows.append([name] + [f"{v:.2f}" for v in box])
    if missing:
        report.problem(f"{len(missing)} segmentation mask(s) missing", missing)
    if empty:
        report.problem(f"{len(empty)} segmentation mask(s) with no pixel above the threshold", empty)
    if broken:
        report.problem(f"{len(broken)} segmentation mask(s) unreadable", broken)
    write_csv_atomic(box_file, BOX_COLUMNS, rows)
    report.note(f"wrote {len(rows)} boxes to {box_file}")


def check(root: Path, segmentations: Path | None = None, threshold: float = 0.5,
          box_file: str = "boxes.csv", workers: int = 0) -> Report:
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
    box_path = root / box_file
    if segmentations is not None:
        write_boxes(root, [n for n in names if (root / n).is_file()], segmentations, threshold, box_path, report)
    elif not box_path.is_file():
        report.problem("box file missing; build it from the CUB-200-2011 bird masks with --segmentations "
                       "DIR/segmentations (segmentations.tgz unpacked)", [str(box_path)])
        return report
    checked: set[str] = set()
    check_disjoint(report, [check_split(report, split, lambda: Waterbirds100(root, split, box_file=box_file,
                                                                             train_like_val=False), checked, workers)
                            for split in SPLIT_CODES])
    return report
