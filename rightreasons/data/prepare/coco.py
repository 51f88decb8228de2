"""Check an MS COCO 2014 download for ``rightreasons.data.load_dataset("coco2014", ROOT, split)``.

    rightreasons prepare coco2014 --root ROOT [--checksums FILE] [--allow-partial] [--workers N]

ROOT holds ``annotations/instances_{train,val}2014.json`` and the image folders ``train2014/``, ``val2014/``.
Checks each split with the loader itself (images without annotations included): the annotation file (parsed through
pycocotools; ids unique, every annotation on an image and a category of the file) and every image it lists, read as
training reads it (:func:`~.checks.check_split`), so that what passes here trains and what training refuses fails
here with the same message. Also the official image counts (unless ``--allow-partial``), and with ``--checksums`` a
``md5sum``-style file of ``<md5>  <path relative to ROOT>`` lines (e.g. for the downloaded zip files). Prints exactly
what is missing or wrong; exit code 1 if anything is. The COCO loader reads the official files directly, so no
index file needs to be written.
"""

from __future__ import annotations

from pathlib import Path

from .checks import Report, check_disjoint, check_split, read_checksum_file, verify_checksums
from ..coco import COCO_SPLITS, COCO2014

OFFICIAL_COUNTS = {"train": 82783, "val": 40504}


def check(root: Path, checksums: Path | None = None, allow_partial: bool = False, workers: int = 0) -> Report:
    report = Report(f"MS COCO 2014 at {root}")
    checked: set[str] = set()
    loaded = []
    for split in COCO_SPLITS:
        ann = root / "annotations" / f"instances_{split}2014.json"
        images = root / f"{split}2014"
        if not ann.is_file():
            report.problem(f"annotation file of split '{split}' missing", [str(ann)])
            continue
        if not images.is_dir():
            report.problem(f"image folder of split '{split}' missing", [str(images)])
            continue
        dataset = check_split(report, split, lambda: COCO2014(root, split, include_unannotated=True), checked,
                              workers)
        loaded.append(dataset)
        if dataset is None:
            continue
        unannotated = int((~dataset.records.labels.any(1)).sum())
        report.note(f"{split}: {len(dataset)} images ({unannotated} without annotations), "
                    f"{len(dataset.records.boxes)} boxes, {dataset.num_classes} categories")
        if not allow_partial and len(dataset) != OFFICIAL_COUNTS[split]:
            report.problem(f"{ann}: {len(dataset)} images, the official release has {OFFICIAL_COUNTS[split]} "
                           "(--allow-partial to accept)")
    check_disjoint(report, loaded)
    if checksums is not None:
        verify_checksums(read_checksum_file(checksums), root, report)
    report.note("no index files needed: the loader reads the annotation files directly")
    return report
