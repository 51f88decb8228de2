"""``rightreasons data synth --out DIR``: write the synthetic benchmark in its documented on-disk format."""

from __future__ import annotations

import argparse
from pathlib import Path

from ...choices import SYNTHETIC_NAMES, SYNTHETIC_SIZES, SYNTHETIC_SPLITS
from .arguments import examples, non_negative_int, positive_int, unit_float

SYNTH_EXAMPLE = "rightreasons data synth --out data/synthetic --size 64"
"""The example of ``data`` and ``data synth``."""


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("data", help="dataset utilities", epilog=examples(SYNTH_EXAMPLE))
    sub = p.add_subparsers(dest="data_command", required=True, metavar="DATA_COMMAND")
    s = sub.add_parser("synth", help="generate the synthetic benchmark (PNG images + index.json)",
                       description="Writes DIR/<name>/index.json and PNGs for each synthetic dataset; load them "
                                   "with rightreasons.data.load_dataset(name, DIR, split).",
                       epilog=examples(SYNTH_EXAMPLE, "rightreasons data synth --out data/synthetic --task "
                                                      "synthetic-birds --correlation 0.95"))
    s.add_argument("--out", required=True, type=Path, help="output directory")
    s.add_argument("--task", choices=[*SYNTHETIC_NAMES, "all"], default="all", help="which dataset(s) to write")
    s.add_argument("--size", type=positive_int, default=64, help="image side in pixels (default 64)")
    for split in SYNTHETIC_SPLITS:
        s.add_argument(f"--n-{split}", type=non_negative_int, default=SYNTHETIC_SIZES[split],
                       help=f"images in the {split} split (default {SYNTHETIC_SIZES[split]})")
    s.add_argument("--correlation", type=unit_float, default=None,
                   help="class/background agreement in train and val (default: birds 1.0, multi-label 0.8)")
    s.add_argument("--difficulty", type=unit_float, default=0.5, help="0 (large, crisp objects) … 1 (small, faint)")
    s.add_argument("--max-objects", type=int, choices=range(1, 5), default=3,
                   help="objects per multi-label image, at most (1-4)")
    s.add_argument("--seed", type=non_negative_int, default=0)
    s.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ...data.synthetic import SyntheticConfig, write_synthetic

    config = SyntheticConfig(size=args.size, correlation=args.correlation, difficulty=args.difficulty,
                             seed=args.seed, max_objects=args.max_objects,
                             sizes={split: getattr(args, f"n_{split}") for split in SYNTHETIC_SPLITS})
    names = list(SYNTHETIC_NAMES) if args.task == "all" else [args.task]
    for name in names:
        path = write_synthetic(args.out / name, name, config)
        counts = ", ".join(f"{split} {config.sizes[split]}" for split in SYNTHETIC_SPLITS)
        print(f"{name}: {counts} images of {args.size}x{args.size} -> {path}")
    return 0
