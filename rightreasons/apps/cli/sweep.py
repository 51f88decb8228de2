"""``rightreasons sweep GRID...``: run a grid of trainings and write the Pareto report (see
:mod:`rightreasons.apps.sweep`)."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ...console import count
from ...errors import UsageError
from .arguments import examples


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("sweep", help="run a grid of trainings and write the Pareto report",
                              description="Expand grid files into runs (every config validated first), run them one "
                                          "after another (skipping finished runs, resuming interrupted ones) and "
                                          "write pareto.md, pareto.csv and pareto.png: seeds averaged, each group's "
                                          "representative chosen on validation and scored once on the test split.",
                              epilog=examples("rightreasons sweep configs/guidance/grids/waterbirds.yaml --dry-run",
                                              "rightreasons sweep configs/guidance/grids/waterbirds.yaml --set "
                                              "data.root=/scratch/waterbirds"))
    p.add_argument("grids", nargs="+", type=Path, help="grid files (configs/guidance/grids/*.yaml)")
    p.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    p.add_argument("--collect-only", action="store_true", help="do not train; only write the Pareto report")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="extra",
                   help="config override for every run, after the grid's own (repeatable), e.g. data.root=/scratch")
    p.add_argument("--only", action="append", default=[], metavar="TEXT",
                   help="keep the runs whose name contains TEXT (repeatable: any of them)")
    p.add_argument("--launcher", default=None, metavar="CMD",
                   help="what runs `-m rightreasons ...`, e.g. 'accelerate launch --num_processes 8' "
                        "(default: this Python)")
    p.add_argument("--report", type=Path, default=None, help="report folder (default: runs/reports/<grid names>)")
    p.add_argument("--test-split", default=None, metavar="SPLIT",
                   help="the split each group's representative is scored on (default: the dataset's test split)")
    p.add_argument("--no-test", action="store_true",
                   help="do not score the representatives on the test split (validation only)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ...fileio import writable_directory
    from ..sweep import execute, load_grid, report_runs

    runs = [r for grid in args.grids for r in load_grid(grid, args.extra)]
    if args.only:
        runs = [r for r in runs if any(text in r.name for text in args.only)]
        if not runs:
            raise UsageError(f"no run of {', '.join(map(str, args.grids))} has a name containing "
                             f"{' or '.join(map(repr, args.only))}")
    report = args.report or Path("runs") / "reports" / "+".join(g.stem for g in args.grids)
    writable_directory(report, "report folder", create=False)  # before hours of training, not after
    launcher = shlex.split(args.launcher) if args.launcher else [sys.executable]
    if args.dry_run:
        for r in runs:
            print(shlex.join(r.argv(launcher, resume=r.status() == "partial")))
        return 0
    failed = [] if args.collect_only else execute(runs, launcher)
    paths, points, missing = report_runs(runs, report, f"Pareto report: {', '.join(g.stem for g in args.grids)}",
                                         args.test_split, test=not args.no_test)
    if paths:
        print(f"report: {paths['markdown']} ({count(points, 'validation')}, {count(len(missing), 'run')} without "
              "a summary)")
    else:
        print(f"no run of {len(runs)} has a summary with score, EPG and IoU yet; no report written")
    if failed:
        print(f"{len(failed)} run(s) failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0
