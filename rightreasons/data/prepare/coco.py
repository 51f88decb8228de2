"""Check an MS COCO 2014 download for ``rightreasons.data.load_dataset("coco2014", ROOT, split)``.

    rightreasons prepare coco2014 --root ROOT [--checksums FILE] [--allow-partial]

ROOT holds ``annotations/instances_{train,val}2014.json`` and the image folders ``train2014/``, ``val2014/``.
Checks that both annotation files parse (through pycocotools), that every image they list exists, the official
image counts (unless ``--allow-partial``), and with ``--checksums`` a ``md5sum``-style file of
``<md5>  <path relative to ROOT>`` lines (e.g. for the downloaded zip files). Prints exactly what is missing; exit
code 1 if anything is. The COCO loader reads the official files directly, so no index file needs to be written.
"""

from __future__ import annotations

from pathlib import Path

from .checks import Report, read_checksum_file, verify_checksums
from ..coco import COCO_SPLITS, load_coco
from ...errors import DataError

OFFICIAL_COUNTS = {"train": 82783, "val": 40504}


def check(root: Path, checksums: Path | None = None, allow_partial: bool = False) -> Report:
    report = Report(f"MS COCO 2014 at {root}")
    for split in COCO_SPLITS:
        ann = root / "annotations" / f"instances_{split}2014.json"
        images = root / f"{split}2014"
        if not ann.is_file():
            report.problem(f"annotation file of split '{split}' missing", [str(ann)])
            continue
        if not images.is_dir():
            report.problem(f"image folder of split '{split}' missing", [str(images)])
            continue
        try:
            coco = load_coco(ann)
        except DataError as e:
            report.problem(str(e))
            continue
        names = [img.get("file_name", "") for img in coco.imgs.values()]
        crowd = sum(bool(a.get("iscrowd", 0)) for a in coco.anns.values())
        unannotated = sum(1 for i in coco.imgs if not coco.imgToAnns.get(i))
        report.note(f"{split}: {len(names)} images, {len(coco.anns)} annotations ({crowd} crowd), "
                    f"{len(coco.cats)} categories, {unannotated} images without annotations")
        if not allow_partial and len(names) != OFFICIAL_COUNTS[split]:
            report.problem(f"{ann}: {len(names)} images, the official release has {OFFICIAL_COUNTS[split]} "
                           "(--allow-partial to accept)")
        present = {p.name for p in images.iterdir()}
        missing = [str(images / n) for n in names if n not in present]
        if missing:
            report.problem(f"{len(missing)} image(s) of split '{split}' missing", missing)
    if checksums is not None:
        verify_checksums(read_checksum_file(checksums), root, report)
    report.note("no index files needed: the loader reads the annotation files directly")
    return report
