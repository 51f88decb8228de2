"""How rightreasons talks to a person on the console: the logging setup and the thread count of the command line,
and what to tell them when a thread or process cannot start (:func:`cannot_start`).

Status messages (what a run is doing, where it wrote its files) go through :mod:`logging`, to loggers named after
their modules (``logging.getLogger(__name__)``, or accelerate's ``get_logger(__name__)`` under multi-process
training), so they all sit below the ``rightreasons`` logger. :func:`configure_logging` is the one place that decides
how much of that reaches the terminal: the command line calls it with its ``--quiet`` / ``--verbose`` switch. The
results of a command (tables, JSON, file lists) are not status: commands print those to stdout, where a pipe or a
redirect gets them unmixed.

Warnings (:mod:`warnings`: a box clipped to its image, a logit bias that differs from a file's) join the same channel:
:func:`configure_logging` routes them through :mod:`logging` (``logging.captureWarnings``) to the same handler, so a
command has one status stream on stderr, and ``--quiet`` leaves only warnings and errors in it. Progress bars
(``tqdm``) show only on a terminal.

A library user who never calls :func:`configure_logging` keeps Python's defaults (warnings and errors on stderr);
``logging.getLogger("rightreasons").setLevel(logging.INFO)`` plus a handler shows the status messages in a notebook.

Text for a terminal is plain: :func:`plain_text` turns the reStructuredText and Markdown markup of our docstrings
(roles such as ``:func:`~rightreasons.create_model```, literals in double backquotes, Markdown code spans and
cross-reference links) into what a person would type; the command line's help formatter applies it to every
description and help string.

This module imports nothing of rightreasons and nothing heavy, so the command line can set itself up before torch
is loaded.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import sys

__all__ = ["LOGGER_NAME", "VERBOSITY_LEVELS", "WARNINGS_LOGGER", "cannot_start", "configure_logging",
           "console_loggers", "count", "plain_text", "set_threads"]

LOGGER_NAME = "rightreasons"
"""The root of the package's logger hierarchy."""
WARNINGS_LOGGER = "py.warnings"
"""The logger :func:`logging.captureWarnings` sends warnings to."""

VERBOSITY_LEVELS = {-1: logging.WARNING, 0: logging.INFO, 1: logging.DEBUG}
"""``--quiet`` (-1): warnings and errors only; default (0): status messages; ``--verbose`` (1): debugging detail."""

_FORMATS = {logging.DEBUG: "%(asctime)s %(levelname)s %(name)s: %(message)s"}
_DEFAULT_FORMAT = "%(message)s"



class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (tests and notebooks replace it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


_handler: logging.Handler | None = None


def configure_logging(verbosity: int = 0) -> logging.Logger:
    """Send the ``rightreasons`` loggers' messages of the level chosen by ``verbosity`` (a key of
    :data:`VERBOSITY_LEVELS`) to stderr, and return the ``rightreasons`` logger.

    Calling it again replaces the handler of the previous call, so messages are never doubled. The logger still
    propagates, so handlers a user installed on the root logger (and pytest's ``caplog``) see the records too.
    """
    global _handler
    if verbosity not in VERBOSITY_LEVELS:
        raise ValueError(f"verbosity must be one of {sorted(VERBOSITY_LEVELS)}, got {verbosity!r}")
    level = VERBOSITY_LEVELS[verbosity]
    logger, warnings_logger = logging.getLogger(LOGGER_NAME), logging.getLogger(WARNINGS_LOGGER)
    if _handler is not None:
        logger.removeHandler(_handler)
        warnings_logger.removeHandler(_handler)
    _handler = _StderrHandler()
    _handler.setFormatter(logging.Formatter(_FORMATS.get(level, _DEFAULT_FORMAT), datefmt="%H:%M:%S"))
    logger.addHandler(_handler)
    logger.setLevel(level)
    warnings_logger.addHandler(_handler)
    logging.captureWarnings(True)
    return logger


def console_loggers() -> list[logging.Logger]:
    """The loggers whose messages :func:`configure_logging` sends to stderr (none before it was called): those a
    progress bar on the terminal prints above itself instead of letting them run through it."""
    return [] if _handler is None else [logging.getLogger(LOGGER_NAME), logging.getLogger(WARNINGS_LOGGER)]


def set_threads(threads: int) -> None:
    """Use ``threads`` CPU threads for torch's intra-op work (and, where it can still be set, inter-op work).

    Also exported as ``OMP_NUM_THREADS`` / ``MKL_NUM_THREADS``, so processes started from this one (the runs of a
    sweep, data-loader workers) use the same number. On a shared or busy machine one or two threads are often much
    faster than torch's default of one per core, which oversubscribes the cores (see ``docs/cli.md``).
    """
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    for variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[variable] = str(threads)
    import torch  # only here: the rest of the command line must start without loading torch

    torch.set_num_threads(threads)
    if torch.get_num_interop_threads() != threads:
        try:
            torch.set_num_interop_threads(threads)
        except RuntimeError:  # inter-op work has started already (a second call in one process): keep it
            logging.getLogger(__name__).debug("inter-op threads stay at %d", torch.get_num_interop_threads())


_MARKUP = (
    (re.compile(r":[a-z]+(?::[a-z]+)?:`([^`<]*?)\s*<[^`>]*>`"), r"\1"),  # :role:`text <target>` -> text
    (re.compile(r":[a-z]+(?::[a-z]+)?:`~(?:[\w.]*\.)?([^`.]+)`"), r"\1"),  # :func:`~a.b.c` -> c
    (re.compile(r":[a-z]+(?::[a-z]+)?:`([^`]+)`"), r"\1"),  # :mod:`a.b` -> a.b
    (re.compile(r"``(.+?)``"), r"\1"),  # ``literal`` -> literal
    (re.compile(r"\[`?([^\]`]+)`?\]\[[^\]]*\]"), r"\1"),  # [`name`][target] -> name
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),  # [text](url) -> text
    (re.compile(r"`([^`]+)`"), r"\1"),  # `code` -> code
)


def plain_text(text: str) -> str:
    """``text`` without reStructuredText roles and literals or Markdown code spans and links (their text stays)."""
    for pattern, replacement in _MARKUP:
        text = pattern.sub(replacement, text)
    return text


def count(n: int, noun: str) -> str:
    """``n`` and ``noun`` in the number that reads right: ``count(1, "image")`` is "1 image", ``count(3, "epoch")``
    "3 epochs" (thousands separated)."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def cannot_start(error: BaseException) -> str | None:
    """What to tell the user when ``error`` says that a thread or process could not start — ``fork``/``clone``
    answering ``EAGAIN`` (``BlockingIOError``) or threading's "can't start new thread" — else ``None``. The cause is
    the machine's process table or the user's process limit, never the disk, so a write that failed this way must not
    be reported as a full disk."""
    if isinstance(error, OSError) and error.errno == errno.EAGAIN or \
            isinstance(error, RuntimeError) and "can't start new thread" in str(error):
        return (f"a thread or process could not start ({type(error).__name__}: {error}): the machine's process "
                "table or this user's process limit (ulimit -u) is exhausted; end processes or threads elsewhere, or "
                "ask for fewer (--threads, data.num_workers)")
    return None
