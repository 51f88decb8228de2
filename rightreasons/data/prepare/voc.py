"""Check a PASCAL VOC 2007 download for ``rightreasons.data.load_dataset("voc2007", ROOT, split)``.

    rightreasons prepare voc2007 --root ROOT [--tars DIR] [--allow-partial] [--workers N]

ROOT is ``VOCdevkit/VOC2007`` (or a directory containing ``VOCdevkit/VOC2007`` or ``VOC2007``). Checks the layout,
then each split of ``ImageSets/Main/{train,val,trainval,test}.txt`` with the loader itself: its list, the annotation
of every id, and every image read as training reads it (:func:`~.checks.check_split`), so that what passes here
trains and what training refuses fails here with the same message. Also the image counts of the official release
(unless ``--allow-partial``), and with ``--tars`` the md5 of the two release tar files (sums from torchvision). Prints
exactly what is missing or wrong; exit code 1 if anything is. The VOC loader reads the release files directly, so no
index file needs to be written.
"""

from __future__ import annotations

from pathlib import Path

from torchvision.datasets.voc import DATASET_YEAR_DICT

from .checks import Report, check_disjoint, check_split, verify_checksums
from ...errors import DataError
from ..voc import VOC2007, VOC_SPLITS, voc_root

OFFICIAL_COUNTS = {"train": 2501, "val": 2510, "trainval": 5011, "test": 4952}


def check(root: Path, tars: Path | None = None, allow_partial: bool = False, workers: int = 0) -> Report:
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
    checked: set[str] = set()
    disjoint: list[VOC2007 | None] = []  # train, val and test (trainval is train and val together)
    for split in VOC_SPLITS:
        listing = root / "ImageSets" / "Main" / f"{split}.txt"
        if not listing.is_file():
            report.problem(f"image set '{split}' missing", [str(listing)])
            continue
        dataset = check_split(report, split, lambda: VOC2007(root, split), checked, workers)
        if split != "trainval":
            disjoint.append(dataset)
        if dataset is None:
            continue
        report.note(f"{split}: {len(dataset)} images")
        if not allow_partial and len(dataset) != OFFICIAL_COUNTS[split]:
            report.problem(f"{listing}: {len(dataset)} ids, the official release has {OFFICIAL_COUNTS[split]} "
                           "(--allow-partial to accept)")
    check_disjoint(report, disjoint)
    if tars is not None:
        verify_checksums({DATASET_YEAR_DICT[k]["filename"]: DATASET_YEAR_DICT[k]["md5"] for k in ("2007", "2007-test")},
                         tars, report)
    report.note("no index files needed: the loader reads ImageSets/ and Annotations/ directly")
    return report
