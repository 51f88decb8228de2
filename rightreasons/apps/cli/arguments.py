"""Arguments shared by the command-line parsers: numbers checked for their range while the command line is parsed,
the ``--resume [CHECKPOINT]``, ``--overwrite`` and ``--print-config`` options of the training commands, the
``--regions`` of the commands that score localisation, and the examples at the end of every command's ``--help``.

argparse calls a type with the argument's text; an :class:`argparse.ArgumentTypeError` becomes the usual one-line
``error: argument --NAME: ...`` with exit code 2, before any work starts. Without these, an out-of-range number either
ended in a traceback from deep inside (``--batch-size 0``) or, where the command treats a falsy value as "not given",
silently became the default (``--image-size 0``).

``--resume`` takes an optional checkpoint, so argparse gives it the next word of the command line: in ``rightreasons
train --config C --resume optim.lr=1e-4`` that is a config override. :func:`resume_and_overrides` gives such a word
(it holds ``=`` and names no file) back to the overrides.

Imports nothing of rightreasons at import time but :mod:`rightreasons.choices` (which imports nothing), so that
every command module can use it without loading torch.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ...choices import REGION_NAMES

__all__ = ["add_overwrite", "add_print_config", "add_regions", "add_resume", "examples", "max_threads",
           "non_negative_int", "positive_int", "print_config", "resume_and_overrides", "thread_count", "torch_device",
           "unit_float"]


def examples(*commands: str) -> str:
    """The ``epilog`` of a command's ``--help``: ``Example:`` or ``Examples:`` and the command lines, as written."""
    return ("Example:" if len(commands) == 1 else "Examples:") + "".join(f"\n  {c}" for c in commands)


def add_resume(parser: argparse.ArgumentParser) -> None:
    """Add ``--resume [CHECKPOINT]`` (``args.resume``: False, True for the newest checkpoint, or the one given)."""
    parser.add_argument("--resume", nargs="?", const=True, default=False, metavar="CHECKPOINT",
                        help="continue from the newest intact checkpoint of output_dir (or the one given); starts "
                             "from the beginning when there is none yet, so one command line serves the first start "
                             "and every requeue")


def add_regions(parser: argparse.ArgumentParser, default: str | None) -> None:
    """Add ``--regions`` (``args.regions``: a choice of :data:`rightreasons.choices.REGION_NAMES`, else ``default``;
    ``None`` reads as the config's ``eval.regions``): what EPG, IoU and the other localisation metrics score against."""
    parser.add_argument("--regions", choices=REGION_NAMES, default=default,
                        help="what the localisation metrics score against: boxes, masks (the segmentation, its void "
                             "pixels left out by EPG and IoU), points (discs of 15 px), masks-else-boxes or union "
                             "(boxes, mask and discs) (default: " +
                             ("the config's eval.regions, boxes unless set)" if default is None else f"{default})"))


def add_overwrite(parser: argparse.ArgumentParser) -> None:
    """Add ``--overwrite`` (``args.overwrite``): the one way to replace a finished run in ``output_dir``."""
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the run in output_dir (its summary.json, model.safetensors and checkpoints) "
                             "and start from the beginning; without it a finished run is never overwritten")


def add_print_config(parser: argparse.ArgumentParser) -> None:
    """Add ``--print-config`` (``args.print_config``): print the resolved config and exit (:func:`print_config`)."""
    parser.add_argument("--print-config", action="store_true",
                        help="print the resolved config (the file with the overrides and every default) as YAML and "
                             "exit without running; that YAML given as --config resolves to the same config")


def print_config(config: object) -> int:
    """Print ``config`` (a config dataclass) as YAML that ``--config`` reads back to the same config; exit code 0."""
    from ...config import to_dict, yaml_document

    print(yaml_document(to_dict(config)), end="")
    return 0


def resume_and_overrides(args: argparse.Namespace) -> tuple[bool | str, list[str]]:
    """``args.resume`` and ``args.overrides``, with a config override that argparse took for ``--resume``'s
    CHECKPOINT given back to the overrides (first: it followed ``--resume``)."""
    resume, overrides = args.resume, list(args.overrides)
    if isinstance(resume, str) and "=" in resume and not Path(resume).exists():
        return True, [resume, *overrides]
    return resume, overrides


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1 (counts, sizes, batch sizes)."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


THREADS_PER_CPU = 4
"""``--threads`` may ask for at most this many threads per CPU this process may run on: more only oversubscribes the
cores, and ``--threads 100000`` spawned 10,772 threads before failing, exhausting the machine's process table."""


def max_threads() -> int:
    """The largest ``--threads``: :data:`THREADS_PER_CPU` times the CPUs this process may run on."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return THREADS_PER_CPU * cpus


def thread_count(text: str) -> int:
    """An integer from 1 to :func:`max_threads` (``--threads``)."""
    value = positive_int(text)
    if value > max_threads():
        raise argparse.ArgumentTypeError(f"expected at most {max_threads()} threads ({THREADS_PER_CPU} per CPU of "
                                         f"this machine), got {text}")
    return value


def non_negative_int(text: str) -> int:
    """An integer >= 0 (seeds, shifts, split sizes that may be empty)."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text}")
    return value


def torch_device(text: str) -> str:
    """A torch device this machine has (``cpu``, ``cuda``, ``cuda:1``, ...); imports torch only when the option is
    given, so ``--help`` stays fast."""
    import torch

    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a torch device such as cpu or cuda:0, got {text!r}") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (device.index is not None and device.index >= count):
            raise argparse.ArgumentTypeError(f"{text}: this machine has {count} CUDA device(s)")
    return text


def unit_float(text: str) -> float:
    """A number in [0, 1] (fractions, correlations, thresholds); ``nan`` is refused."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:  # also refuses nan, which compares false
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text}")
    return value
