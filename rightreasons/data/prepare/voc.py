"""Check a PASCAL VOC 2007 download for ``rightreasons.data.load_dataset("voc2007", ROOT, split)``.

    rightreasons prepare voc2007 --root ROOT [--tars DIR] [--allow-partial]

ROOT is ``VOCdevkit/VOC2007`` (or a directory containing ``VOCdevkit/VOC2007`` or ``VOC2007``). Checks the layout,
that every id of ``ImageSets/Main/{train,val,trainval,test}.txt`` has its JPEG and a parseable annotation, the
image counts of the official release (unless ``--allow-partial``), and with ``--tars`` the md5 of the two release
tar files (sums from torchvision). Prints exactly what is missing; exit code 1 if anything is. The VOC loader
reads the release files directly, so no index file needs to be written.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from torchvision.datasets.voc import DATASET_YEAR_DICT

from .checks import Report, verify_checksums
from ...errors import DataError
from ..voc import VOC_SPLITS, parse_voc_xml, voc_root

OFFICIAL_COUNTS = {"train": 2501, "val": 2510, "trainval": 5011, "test": 4952}


def check(root: Path, tars: Path | None = None, allow_partial: bool = False) -> Report:
    report = Report(f"PASCAL VOC 2007 at {root}")
    try:
        root = voc_root(root)
    except DataError as e:
        report.problem(str(e))
        return report
    missing_dirs = [d for d in ("JPEGImages", "Annotations", "ImageSets/Main") if not (root / d).is_dir()]
    if missing_dirs:
        report.problem("directories missing (expected the VOCdevkit/VOC2007 layout)",
                       [str(root / d) for d in missing_dirs])
        return report
    seg = root / "SegmentationClass"
    report.note(f"SegmentationClass: {len(list(seg.glob('*.png'))) if seg.is_dir() else 'absent'} masks "
                "(optional, for the on-object metric)")
    for split in VOC_SPLITS:
        listing = root / "ImageSets" / "Main" / f"{split}.txt"
        if not listing.is_file():
            report.problem(f"image set '{split}' missing", [str(listing)])
            continue
        ids = [line.strip() for line in listing.read_text().splitlines() if line.strip()]
        report.note(f"{split}: {len(ids)} images")
        if not allow_partial and len(ids) != OFFICIAL_COUNTS[split]:
            report.problem(f"{listing}: {len(ids)} ids, the official release has {OFFICIAL_COUNTS[split]} "
                           "(--allow-partial to accept)")
        report_missing(report, root, ids)
    if tars is not None:
        verify_checksums({DATASET_YEAR_DICT[k]["filename"]: DATASET_YEAR_DICT[k]["md5"] for k in ("2007", "2007-test")},
                         tars, report)
    report.note("no index files needed: the loader reads ImageSets/ and Annotations/ directly")
    return report


def report_missing(report: Report, root: Path, ids: list[str]) -> None:
    jpegs = [str(root / "JPEGImages" / f"{i}.jpg") for i in ids if not (root / "JPEGImages" / f"{i}.jpg").is_file()]
    if jpegs:
        report.problem(f"{len(jpegs)} image(s) missing", jpegs)
    broken, clipped = [], 0
    for i in ids:
        xml = root / "Annotations" / f"{i}.xml"
        if not xml.is_file():
            broken.append(f"{xml}: not found")
            continue
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                parse_voc_xml(xml)
            except DataError as e:
                broken.append(str(e))
        clipped += len(caught)
    if broken:
        report.problem(f"{len(broken)} annotation(s) missing or invalid", broken)
    if clipped:
        report.note(f"{clipped} annotation(s) hold boxes outside the image (the loader clips them with a warning)")
