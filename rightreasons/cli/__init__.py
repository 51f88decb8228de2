"""The ``rightreasons`` command line: one sub-command per module listed in :data:`COMMANDS`.

Each command module exposes ``register(subparsers)``, which adds its parser and sets ``func`` (called with the parsed
arguments, returning an exit code). Errors caused by the user's input (:class:`~rightreasons.errors.RightReasonsError`)
end in one ``error:`` line and exit code 2; a training stopped by ``SIGTERM``/``SIGUSR1`` after writing its checkpoint
exits with code 75 (:data:`~rightreasons.engine.trainer.EXIT_PREEMPTED`); any other exception is a bug and keeps its
traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from ..engine.trainer import EXIT_PREEMPTED, Preempted
from ..errors import RightReasonsError

__all__ = ["COMMANDS", "main"]

COMMANDS = [
    "rightreasons.cli.models",
    "rightreasons.cli.data",
    "rightreasons.cli.prepare",
    "rightreasons.cli.explain",
    "rightreasons.cli.train",
    "rightreasons.cli.distill",
    "rightreasons.cli.sweep",
    "rightreasons.cli.demo",
]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every registered sub-command."""
    parser = argparse.ArgumentParser(prog="rightreasons", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rightreasons`` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except RightReasonsError as e:
        print(f"rightreasons {args.command}: error: {e}", file=sys.stderr)
        return 2
    except Preempted as e:
        print(f"rightreasons {args.command}: {e}", file=sys.stderr)
        return EXIT_PREEMPTED


if __name__ == "__main__":
    sys.exit(main())
