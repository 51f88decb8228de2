"""``rightreasons study guidance GRID``: where box guidance helps — baseline and guided fine-tunings over a grid of
data variants, annotated fractions and seeds, chosen on validation and reported on test (see
:mod:`rightreasons.guidance.study`). ``rightreasons study robustness GRID``: box guidance beside ERM, reweighting,
subsampling, GroupDRO, JTT and DFR at their annotation cost (see :mod:`rightreasons.robustness.study`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...console import count
from .arguments import examples


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("study", help="run a robustness study (guidance over a grid of data variants, or beside "
                                            "the group-robustness methods)",
                              description="Train a baseline and guided fine-tunings of it (robustness: also the "
                                          "group-robustness methods and DFR) for every data variant, box "
                                          "fraction, method and seed of a study file; every training exports its "
                                          "best checkpoint on the group-balanced validation split, the test split "
                                          "is only reported. Finished runs are kept, so an interrupted study "
                                          "resumes. Writes study.md, study.csv, study.json and study.png.",
                              epilog=examples("rightreasons study guidance configs/studies/guidance.yaml --out "
                                              "runs/study --dry-run",
                                              "rightreasons study robustness configs/studies/robustness.yaml --out "
                                              "runs/robustness --set seeds=1"))
    p.add_argument("kind", choices=["guidance", "robustness"],
                   help="the study (guidance: synthetic-birds, box guidance; robustness: box guidance beside the "
                        "group-robustness methods)")
    p.add_argument("grid", type=Path, help="study file (e.g. configs/studies/guidance.yaml)")
    p.add_argument("--out", type=Path, required=True, help="folder for the runs and the tables")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                   help="override a key of the study file, one --set per key, e.g. --set seeds=1 "
                        "--set recipe.guided_epochs=2")
    p.add_argument("--dry-run", action="store_true", help="print what would be trained and exit")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ...config import load_config

    if args.kind == "robustness":
        from ...robustness.study import RobustnessStudy, run_study as run_robustness

        robustness = load_config(RobustnessStudy, args.grid, args.overrides)
        if args.dry_run:
            trainings, fits = robustness.dry_run()
            print(f"{count(len(trainings), 'training')} and {count(len(fits), 'DFR fit')}:")
            print("\n".join(f"  {line}" for line in [*trainings, *fits]))
            return 0
        results = run_robustness(robustness, args.out)
        print(f"wrote {args.out / 'study.md'} ({count(len(results['records']), 'result')})")
        return 0
    from ...guidance.study import GuidanceStudy, run_study

    study = load_config(GuidanceStudy, args.grid, args.overrides)
    if args.dry_run:
        print(f"{study.trainings} trainings: {len(study.variants)} data variant(s) × {study.seeds} seed(s) × "
              f"(baseline + {len(study.annotated_fraction)} fraction(s) × "
              f"{sum(len(study.settings(m)) for m in study.methods)} guided setting(s))")
        for variant in study.variants:
            print(f"  {variant.label}")
        return 0
    results = run_study(study, args.out)
    print(f"wrote {args.out / 'study.md'} ({count(len(results['records']), 'run')} scored)")
    return 0
