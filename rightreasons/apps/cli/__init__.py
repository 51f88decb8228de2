"""The `rightreasons` command line: one sub-command per entry of [`COMMANDS`][rightreasons.apps.cli.COMMANDS].

Each command module exposes `register(subparsers)`, which adds its parser(s) and sets `func` (called with the parsed
arguments, returning an exit code). Errors caused by the user's input
([`RightReasonsError`][rightreasons.errors.RightReasonsError]) end in one `error:` line and exit code 2; a training
stopped by `SIGTERM`/`SIGUSR1` after writing its checkpoint exits with code 75
(`EXIT_PREEMPTED` of `rightreasons.engine.trainer`); a closed output pipe (`rightreasons models | head`)
ends quietly with code 141, as a process killed by `SIGPIPE` does; a thread or process that cannot start (the process
table exhausted, [`cannot_start`][rightreasons.console.cannot_start]) is one `error:` line naming that cause, exit code
2; any other exception is a bug and keeps its
traceback.

Starting fast: [`build_parser`][rightreasons.apps.cli.build_parser] imports only the module of the command on the
command line (`rightreasons --help` imports none), and the command modules load torch and the rest of the package only
when a command runs, so `--help` and `--version` answer without loading torch.

Global options (before the command): `--version`, `--quiet` / `--verbose` (how much status the
`rightreasons` loggers print, see [`rightreasons.console`][rightreasons.console]) and `--threads N`.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from ...console import cannot_start, configure_logging, plain_text, set_threads
from ...errors import RightReasonsError
from ...version import __version__
from .arguments import thread_count

__all__ = ["COMMANDS", "EXIT_BROKEN_PIPE", "Parser", "PlainHelpFormatter", "build_parser", "main"]

COMMANDS: dict[str, tuple[str, str]] = {
    "models": ("rightreasons.apps.cli.models", "list registered model names"),
    "data": ("rightreasons.apps.cli.data", "dataset utilities"),
    "prepare": ("rightreasons.apps.cli.prepare",
                "check a dataset download (VOC, COCO, Waterbirds), build derived files"),
    "explain": ("rightreasons.apps.cli.explain", "write B-cos explanations of images as PNGs"),
    "view": ("rightreasons.apps.cli.view", "write one HTML page comparing runs' explanations image by image"),
    "judge": ("rightreasons.apps.cli.judge",
              "score models x explanation methods with the explanation-quality metrics: table and figure"),
    "bcosify": ("rightreasons.apps.cli.bcosify", "convert a standard model into a B-cos model file"),
    "export": ("rightreasons.apps.cli.export", "write a run's model as a Hub-style model directory with a model card"),
    "train": ("rightreasons.apps.cli.train", "fine-tune a classifier (no localisation term)"),
    "guide": ("rightreasons.apps.cli.train", "fine-tune with a localisation loss on bounding boxes"),
    "robust": ("rightreasons.apps.cli.train", "train a classifier with a group-robustness objective (reweighting, "
                                              "subsampling, GroupDRO, JTT's up-weighting)"),
    "evaluate": ("rightreasons.apps.cli.train", "evaluate a trained model on a split and write all metrics as JSON"),
    "distill": ("rightreasons.apps.cli.distill", "distil a teacher into a student (KD, e²KD, frozen e²KD, AT)"),
    "cache": ("rightreasons.apps.cli.distill", "compute a teacher's logits and explanations once per training image"),
    "analyze": ("rightreasons.apps.cli.distill", "analyses of trained models"),
    "sweep": ("rightreasons.apps.cli.sweep", "run a grid of trainings and write the Pareto report"),
    "study": ("rightreasons.apps.cli.study", "run a robustness study (guidance over a grid of data variants, or beside "
                                        "the group-robustness methods)"),
    "demo": ("rightreasons.apps.cli.demo", "guide B-cos models on the synthetic Waterbirds-like benchmark and write a "
                                      "report (results.json, report.md, figures)"),
    "completion": ("rightreasons.apps.cli.completion", "print a shell completion script (bash or zsh)"),
}
"""Command → (the module that registers it, its one-line help in `rightreasons --help`). The help is written here
so that the overview needs no command module; each module registers the same line (a test checks that they agree)."""

EXIT_BROKEN_PIPE = 141
"""Exit code when the reader of stdout went away (128 + SIGPIPE, what `yes | head` gives `yes`)."""

DESCRIPTION = ("Make image classifiers right for the right reasons: B-cos networks, model guidance with bounding "
               "boxes, explanation-enhanced distillation (e2KD). Global options go before COMMAND; "
               "'rightreasons COMMAND --help' describes a command.")


class PlainHelpFormatter(argparse.HelpFormatter):
    """Help in plain text: descriptions and help strings lose their docstring markup
    ([`plain_text`][rightreasons.console.plain_text]), wherever a command module took them from. A line indented by
    two spaces (an example command, `arguments.examples`) is kept as written."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain_text(text))

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        blocks: list[str] = []
        prose: list[str] = []
        for line in [*text.splitlines(), "  "]:  # the last line ends the last paragraph
            if not line.startswith("  "):
                prose.append(line)
                continue
            if prose:
                blocks.append(super()._fill_text(" ".join(prose), width, indent))
                prose = []
            blocks.append(indent + line.rstrip() if line.strip() else "")
        return "\n".join(blocks).rstrip("\n")

    def _expand_help(self, action: argparse.Action) -> str:
        return plain_text(super()._expand_help(action))


class Parser(argparse.ArgumentParser):
    """The parser of the command line and of every sub-command (sub-parsers inherit the class), with
    [`PlainHelpFormatter`][rightreasons.apps.cli.PlainHelpFormatter]."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", PlainHelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser, with the real parser of the command named in `argv` (its first word that is a key of
    [`COMMANDS`][rightreasons.apps.cli.COMMANDS]); every other command gets a placeholder with its one-line help, which
    is all that `rightreasons --help` and argparse's list of choices need. `argv=None` registers every command."""
    parser = Parser(prog="rightreasons", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"rightreasons {__version__}")
    verbosity = parser.add_mutually_exclusive_group()
    verbosity.add_argument("-q", "--quiet", action="store_true", help="print warnings and errors only, no status")
    verbosity.add_argument("-v", "--verbose", action="store_true", help="print debugging detail as well")
    parser.add_argument("--threads", type=thread_count, metavar="N",
                        help="CPU threads for torch (default: torch's choice, one per core; at most 4 per core); also "
                             "passed on to the processes a command starts")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((word for word in argv if word in COMMANDS), None) if argv is not None else None
    registered: set[str] = set()
    for name, (module, help_text) in COMMANDS.items():
        if argv is not None and (chosen is None or COMMANDS[chosen][0] != module):
            subparsers.add_parser(name, help=help_text, add_help=False)
        elif module not in registered:
            importlib.import_module(module).register(subparsers)
            registered.add(module)
    return parser


def _preempted_exit_code(error: Exception) -> int | None:
    """75 when `error` is the trainer's pre-emption stop. Only a loaded trainer can raise it, so the trainer (and
    torch with it) is never imported just to ask."""
    trainer = sys.modules.get("rightreasons.engine.trainer")
    if trainer is not None and isinstance(error, trainer.Preempted):
        return trainer.EXIT_PREEMPTED
    return None


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (captured in tests): nothing is flushed at exit
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `rightreasons` console script; returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(argv).parse_args(argv)
    configure_logging(-1 if args.quiet else 1 if args.verbose else 0)
    try:
        if args.threads is not None:
            set_threads(args.threads)
        code = int(args.func(args) or 0)
        sys.stdout.flush()
        return code
    except RightReasonsError as e:
        print(f"rightreasons {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as e:
        exhausted = cannot_start(e)
        if exhausted:
            print(f"rightreasons {args.command}: error: {exhausted}", file=sys.stderr)
            return 2
        code = _preempted_exit_code(e)
        if code is None:
            raise
        print(f"rightreasons {args.command}: {e}", file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
