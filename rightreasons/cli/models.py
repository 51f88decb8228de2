"""`rightreasons models [PATTERN]`: list the registered architectures (name and family, one per line on stdout)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("models", help="list registered model names")
    p.add_argument("pattern", nargs="?", default="*", help="shell-style filter, e.g. 'bcos_resnet*'")
    p.add_argument("--bcos", action="store_true", help="only B-cos models")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..hub import get_model_spec, list_models  # builds the zoo: only when the command runs

    for name in list_models(args.pattern, bcos=True if args.bcos else None):
        print(f"{name:32s} {get_model_spec(name).family}")
    return 0
