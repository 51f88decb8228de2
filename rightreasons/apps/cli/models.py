"""`rightreasons models [PATTERN]`: list the registered architectures (name and family, one per line on stdout).

A pattern that matches nothing is an error (exit code 2) that suggests close names, rather than an empty list that
looks like success."""

from __future__ import annotations

import argparse

from ...errors import UsageError
from .arguments import examples


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("models", help="list registered model names",
                              epilog=examples("rightreasons models 'bcos_resnet*'", "rightreasons models --bcos"))
    p.add_argument("pattern", nargs="?", default="*", help="shell-style filter, e.g. 'bcos_resnet*'")
    p.add_argument("--bcos", action="store_true", help="only B-cos models")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ...models import get_model_spec, list_models  # builds the zoo: only when the command runs
    from ...models.registry import name_hint

    names = list_models(args.pattern, bcos=True if args.bcos else None)
    if not names:
        kind = "B-cos model" if args.bcos else "model"
        raise UsageError(f"no registered {kind} matches {args.pattern!r}{name_hint(args.pattern.strip('*?'))}")
    for name in names:
        print(f"{name:32s} {get_model_spec(name).family}")
    return 0
