"""``rightreasons demo``: the main job — baseline, Energy- and L1-guided B-cos models on the synthetic Waterbirds-like
benchmark, evaluated on its balanced test split, with a report.

    rightreasons demo                     # 3 seeds, about 11 minutes on 2 CPU cores; writes runs/demo/report.md
    rightreasons demo --quick --out /tmp/demo   # 1 seed, fewer images and epochs, <= 2 minutes

The demo's models are tiny (width-8 ResNets at 32–64 px), so torch's intra-op threads cost more than they gain: on
the 2-core machine a guided run took 17 s on one thread and 128 s on two (``docs/cli.md``). It runs on one thread
unless ``--threads`` says otherwise.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .arguments import examples, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("demo", help="guide B-cos models on the synthetic Waterbirds-like benchmark and "
                                           "write a report (results.json, report.md, figures)",
                              epilog=examples("rightreasons demo --quick --out /tmp/demo",
                                              "rightreasons demo --seeds 3 --out runs/demo"))
    p.add_argument("--quick", action="store_true", help="1 seed, fewer images and epochs (a smoke run of every stage)")
    p.add_argument("--out", type=Path, default=Path("runs/demo"), help="output folder (default: runs/demo)")
    p.add_argument("--seeds", type=positive_int, default=None, help="training seeds (default: 3; with --quick: 1)")
    p.set_defaults(func=run_demo_command)


def run_demo_command(args: argparse.Namespace) -> int:
    from ...console import set_threads
    from ..demo import DemoSettings, run_demo

    if args.threads is None:
        set_threads(1)
    settings = DemoSettings.quick(args.seeds) if args.quick else DemoSettings.full(args.seeds)
    run_demo(args.out, settings)
    print(args.out / "report.md")
    return 0
