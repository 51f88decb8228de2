"""``rightreasons prepare voc2007|coco2014|waterbirds100 --root DIR``: check a dataset download and build what is
derived from it; ``rightreasons prepare config --config FILE``: check the dataset a training config names (one's own
``coco-json`` or ``folder`` data, a registered dataset).

Each prints what it found and exactly what is missing or wrong; exit code 1 if anything is (see
:mod:`rightreasons.data.prepare`). The checks are the loaders' own: every split is built and every image read as
training reads it, so a dataset that passes trains, and one that training refuses fails here with the same message.
``--root`` defaults to the ``data.root`` of the shipped configs (:data:`DEFAULT_ROOTS`), so that a download put there
is found by ``configs/guidance/*.yaml`` without overrides.
The short names ``voc``, ``coco`` and ``waterbirds`` are accepted too.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from .arguments import examples, non_negative_int, unit_float

if TYPE_CHECKING:  # the check modules import the data package (torch) when the command runs
    from ...data.prepare import Report

__all__ = ["DEFAULT_ROOTS", "register", "run_coco", "run_config", "run_voc", "run_waterbirds"]

#: dataset → the ``data.root`` of its configs in ``configs/guidance/``
DEFAULT_ROOTS = {"voc2007": "data/VOCdevkit/VOC2007", "coco2014": "data/coco",
                 "waterbirds100": "data/waterbird_1.0_forest2water2"}


PREPARE = "rightreasons prepare"
"""The start of the examples of ``prepare`` and its datasets."""


def _root(parser: argparse.ArgumentParser, dataset: str, what: str) -> None:
    """The options of every dataset: ``--root`` and ``--workers``."""
    parser.add_argument("--root", type=Path, default=Path(DEFAULT_ROOTS[dataset]),
                        help=f"{what} (default {DEFAULT_ROOTS[dataset]}, the data.root of the shipped configs)")
    parser.add_argument("--workers", type=non_negative_int, default=min(8, os.cpu_count() or 1),
                        help="processes that read the images (0: this one; default: the CPUs, at most 8)")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("prepare", help="check a dataset download (VOC, COCO, Waterbirds), build derived files",
                              epilog=examples(f"{PREPARE} voc2007 --root data/VOCdevkit/VOC2007",
                                              f"{PREPARE} config --config configs/guidance/voc2007.yaml"))
    datasets = p.add_subparsers(dest="dataset", required=True, metavar="DATASET")

    s = datasets.add_parser("voc2007", aliases=["voc"], help="PASCAL VOC 2007",
                            description="Check a PASCAL VOC 2007 download for load_dataset('voc2007', ROOT, split): "
                                        "the layout, every split read by the loader as training reads it (lists, "
                                        "annotations, every image), the official image counts and, with --tars, the "
                                        "md5 of the release tar files.",
                            epilog=examples(f"{PREPARE} voc2007 --root data/VOCdevkit/VOC2007 --tars downloads"))
    _root(s, "voc2007", "VOCdevkit/VOC2007 (or a folder holding it)")
    s.add_argument("--tars", type=Path, help="folder with the two release tar files, to check their md5")
    s.add_argument("--allow-partial", action="store_true", help="do not compare with the official image counts")
    s.set_defaults(func=run_voc)

    s = datasets.add_parser("coco2014", aliases=["coco"], help="MS COCO 2014",
                            description="Check an MS COCO 2014 download for load_dataset('coco2014', ROOT, split): "
                                        "both instances files and every image they list, read by the loader as "
                                        "training reads them, the official image counts and, with --checksums, an "
                                        "md5sum-style file.",
                            epilog=examples(f"{PREPARE} coco2014 --root data/coco"))
    _root(s, "coco2014", "the COCO root (annotations/, train2014/, val2014/)")
    s.add_argument("--checksums", type=Path, help="md5sum-style file of paths relative to ROOT")
    s.add_argument("--allow-partial", action="store_true", help="do not compare with the official counts")
    s.set_defaults(func=run_coco)

    s = datasets.add_parser("waterbirds100", aliases=["waterbirds"],
                            help="Waterbirds-100 (builds the bird boxes from the CUB masks)",
                            description="Check a Waterbirds-100 download for load_dataset('waterbirds100', ROOT, "
                                        "split) and print its images per split and group; with --segmentations, "
                                        "build the bird box file from the CUB masks, else check that it covers "
                                        "every image.",
                            epilog=examples(f"{PREPARE} waterbirds100 --root data/waterbird_1.0_forest2water2 "
                                            "--segmentations CUB_200_2011/segmentations"))
    _root(s, "waterbirds100", "the folder holding metadata.csv and the images")
    s.add_argument("--segmentations", type=Path,
                   help="CUB-200-2011's segmentations/ directory (from segmentations.tgz): builds ROOT/boxes.csv")
    s.add_argument("--threshold", type=unit_float, default=0.5, help="mask threshold in [0, 1] (default 0.5)")
    s.add_argument("--box-file", default="boxes.csv", help="box file name inside ROOT (default boxes.csv)")
    s.set_defaults(func=run_waterbirds)

    s = datasets.add_parser("config", help="the dataset of a training config (coco-json, folder, a registered one...)",
                            description="Check the dataset that a training config's data section names: its "
                                        "training and validation splits built with data.options, every image "
                                        "read as training reads it, and no image in two splits.",
                            epilog=examples(f"{PREPARE} config --config my_data.yaml data.root=/scratch/my_data"))
    s.add_argument("--config", type=Path, required=True, help="the training config (YAML)")
    s.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="config overrides, as for guide and train")
    s.add_argument("--workers", type=non_negative_int, default=min(8, os.cpu_count() or 1),
                   help="processes that read the images (0: this one; default: the CPUs, at most 8)")
    s.set_defaults(func=run_config)


def run_voc(args: argparse.Namespace) -> int:
    from ...data.prepare import voc

    return _report(voc.check(args.root, args.tars, args.allow_partial, args.workers))


def run_coco(args: argparse.Namespace) -> int:
    from ...data.prepare import coco

    return _report(coco.check(args.root, args.checksums, args.allow_partial, args.workers))


def run_waterbirds(args: argparse.Namespace) -> int:
    from ...data.prepare import waterbirds

    return _report(waterbirds.check(args.root, args.segmentations, args.threshold, args.box_file, args.workers))


def run_config(args: argparse.Namespace) -> int:
    from ...config import from_dict, read_config
    from ...data.prepare import config
    from ...engine.config import DataConfig

    data = from_dict(DataConfig, read_config(args.config, args.overrides).get("data"), "data")
    return _report(config.check(data.name, data.root, [data.train_split, data.val_split], data.options_for,
                                        args.workers))


def _report(report: Report) -> int:
    """Print a dataset check's report (the command's result) and return its exit code."""
    print(report.text())
    return report.exit_code
