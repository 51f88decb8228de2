"""The command line as a terminal program: plain, fast help; --version; a closed pipe; --quiet/--verbose; --threads."""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys

import pytest

from rightreasons.apps import cli
from rightreasons.console import configure_logging, plain_text
from rightreasons.version import __version__
from guards import GUARD_S

MARKUP = re.compile(r":[a-z]+:`|``|`|\]\[")


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=GUARD_S)


def _parsers(parser: argparse.ArgumentParser, name: str = "rightreasons"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_help_is_plain_text_for_every_command():
    """Issue 14, item 10: `--help` printed raw Sphinx markup (``:data:`COMMANDS```)."""
    parsers = list(_parsers(cli.build_parser()))
    assert len(parsers) >= len(cli.COMMANDS) + 1
    for name, parser in parsers:
        text = parser.format_help()
        assert not MARKUP.search(text), (name, [line for line in text.splitlines() if MARKUP.search(line)])


def test_plain_text_keeps_the_words_of_the_markup():
    assert plain_text(":func:`~rightreasons.create_model` and :mod:`rightreasons.data`") == \
        "create_model and rightreasons.data"
    assert plain_text("``load_dataset(name, ROOT)``, [`main`][rightreasons.apps.cli.main], [docs](https://x.y)") == \
        "load_dataset(name, ROOT), main, docs"


HEAVY = ("torch", "torchvision", "timm", "accelerate")
"""What `--help` and `--version` must not import: the libraries that make up most of the start-up time."""


@pytest.mark.parametrize("argv", [["--help"], ["--version"], *([name, "--help"] for name in cli.COMMANDS)],
                         ids=" ".join)
def test_help_and_version_do_not_load_torch(argv):
    """Issue 14, item 10: `--help` took ~4.6 s, most of it importing torch and the model zoo for nothing; after the
    first fix `data`, `prepare`, `bcosify`, `distill`, `cache`, `analyze`, `sweep` and `demo` still took 4-5 s each.
    One process per command: what one command's module imports must not hide what another's does."""
    done = _run(f"import sys\nfrom rightreasons.apps.cli import main\ntry:\n    main({argv!r})\n"
                f"except SystemExit as e:\n    assert e.code == 0, e.code\n"
                f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    assert done.returncode == 0, done.stderr
    *printed, loaded = done.stdout.strip().splitlines()
    assert loaded == "[]"
    if argv[-1] == "--help":
        assert printed[0].split()[:len(argv) + 1] == ["usage:", "rightreasons", *argv[:-1]], printed[0]


def test_version():
    done = subprocess.run([sys.executable, "-m", "rightreasons", "--version"], capture_output=True, text=True,
                          timeout=GUARD_S)
    assert done.returncode == 0 and done.stdout.strip() == f"rightreasons {__version__}"


def test_the_overview_lists_each_command_with_its_modules_own_help():
    """The one-line helps of `rightreasons --help` come from COMMANDS without importing the command modules; each
    must be the line its module registers."""
    full = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    registered = {choice.dest: choice.help for choice in full._choices_actions}
    assert registered == {name: help_text for name, (_, help_text) in cli.COMMANDS.items()}
    overview = cli.build_parser([]).format_help()
    for name, (_, help_text) in cli.COMMANDS.items():
        assert re.search(rf"^\s+{name}\s", overview, re.MULTILINE), name


def test_only_the_named_command_is_built(monkeypatch):
    built = []
    real = cli.importlib.import_module
    monkeypatch.setattr(cli.importlib, "import_module", lambda name: built.append(name) or real(name))
    cli.build_parser(["--quiet", "evaluate", "--help"])
    assert built == ["rightreasons.apps.cli.train"]


def test_a_closed_pipe_ends_quietly():
    """Issue 14, item 10: `rightreasons models | head` ended in a BrokenPipeError traceback."""
    process = subprocess.Popen([sys.executable, "-m", "rightreasons", "models"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    process.stdout.close()  # the reader is gone before the first line is written
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=GUARD_S) == cli.EXIT_BROKEN_PIPE
    assert stderr == ""


@pytest.mark.parametrize("flag, level", [(["--quiet"], logging.WARNING), ([], logging.INFO),
                                         (["--verbose"], logging.DEBUG), (["-v"], logging.DEBUG)])
def test_quiet_and_verbose_set_the_level_of_the_package_loggers(flag, level, capsys):
    assert cli.main([*flag, "models", "bcos_resnet18"]) == 0
    logger = logging.getLogger("rightreasons")
    assert logger.getEffectiveLevel() == level
    child = logging.getLogger("rightreasons.engine.trainer")
    child.info("validation: accuracy 0.9")
    child.debug("batch 3 of 7")
    child.warning("a warning")
    err = capsys.readouterr().err
    assert ("validation: accuracy 0.9" in err) == (level <= logging.INFO)
    assert ("batch 3 of 7" in err) == (level <= logging.DEBUG)
    assert err.count("a warning") == 1  # repeated calls replace the handler: nothing is doubled
    configure_logging(0)


def test_quiet_and_verbose_exclude_each_other(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--quiet", "--verbose", "models"])
    assert info.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_threads_sets_torch_and_the_environment_of_child_processes():
    done = _run("import os, torch\nfrom rightreasons.apps.cli import main\nassert main(['--threads', '3', 'models', "
                "'bcos_resnet18']) == 0\nprint(torch.get_num_threads(), torch.get_num_interop_threads(), "
                "os.environ['OMP_NUM_THREADS'])")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-3:] == ["3", "3", "3"]  # after the one model line


def test_threads_must_be_positive(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--threads", "0", "models"])
    assert info.value.code == 2 and "expected a positive integer" in capsys.readouterr().err
