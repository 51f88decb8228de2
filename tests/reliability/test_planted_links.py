"""Symbolic links planted where a command writes: never written through.

A hostile or careless user can plant a link at a path a command is about to write (``metrics.jsonl`` → someone's
thesis, ``tensorboard/`` → another run); the command must not write the link's target. The harness plants a link to
a victim file (or an empty victim folder) at every path that ``guide``, ``cache``, ``explain``, ``data synth`` and
``evaluate`` write, runs the command through the real command line and checks that it ends in one ``error:`` line
naming the path and saying it is a symbolic link, and that the victim is untouched. Temporary files have unique,
unpredictable names (a link planted at the name a staged file once had is never written through), and the mechanism
itself (:mod:`rightreasons.fileio`) refuses a link planted after a command's start checks.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from rightreasons import create_model, save_model
from rightreasons.errors import UsageError
from rightreasons.fileio import DirectoryLock, atomic_write_all, open_no_follow, write_text_atomic
from cli_outcomes import error_line
from run_configs import tiny_guided_config

PRECIOUS = "precious data of someone else\n"


def victim_of(tmp_path: Path, directory: bool) -> Path:
    """What a planted link points to: a file holding :data:`PRECIOUS` or an empty folder."""
    victim = tmp_path / "elsewhere" / ("folder" if directory else "file.txt")
    victim.parent.mkdir(exist_ok=True)
    if directory:
        victim.mkdir()
    else:
        victim.write_text(PRECIOUS)
    return victim


def plant(link: Path, victim: Path) -> None:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim, target_is_directory=victim.is_dir())


def untouched(victim: Path) -> bool:
    return not any(victim.iterdir()) if victim.is_dir() else victim.read_text() == PRECIOUS


def refused_for_the_link(done: subprocess.CompletedProcess, link: Path) -> None:
    """One ``error:`` line, exit code 2, naming ``link`` and saying that it is a symbolic link."""
    line = error_line(done)
    assert str(link) in line and "symbolic link" in line, line


# ------------------------------------------------------------------------------------------------------- commands
@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    """A two-class B-cos ResNet-18 of width 4 as the teacher of ``cache``."""
    path = tmp_path_factory.mktemp("teacher") / "teacher.safetensors"
    save_model(create_model("bcos_resnet18", num_classes=2, inplanes=4), path)
    return path


def guide_argv(tmp_path: Path, out: Path, teacher: Path) -> list[str]:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_guided_config(log_with=["tensorboard"])))
    return ["guide", "--config", str(config), f"output_dir={out}"]


def cache_argv(tmp_path: Path, out: Path, teacher: Path) -> list[str]:
    config = tiny_guided_config(**{"teacher": {"checkpoint": str(teacher)}, "distill": {"explanation_weight": 1.0}})
    del config["guidance"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return ["cache", "--config", str(tmp_path / "config.yaml"), "--out", str(out), "--shard-size", "4"]


def explain_argv(tmp_path: Path, out: Path, teacher: Path) -> list[str]:
    from PIL import Image

    image = tmp_path / "images" / "bird.png"
    image.parent.mkdir(exist_ok=True)
    Image.new("RGB", (32, 32), (200, 120, 40)).save(image)
    return ["explain", "--model", "bcos_resnet18", "--random-weights", "--num-classes", "2", str(image), "--out",
            str(out), "--size", "32"]


def synth_argv(tmp_path: Path, out: Path, teacher: Path) -> list[str]:
    return ["data", "synth", "--out", str(out), "--task", "synthetic-birds", "--size", "32", "--n-train", "2",
            "--n-val", "1", "--n-test", "1"]


def evaluate_argv(tmp_path: Path, out: Path, teacher: Path) -> list[str]:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(tiny_guided_config(**{"model.kwargs": {"inplanes": 4}})))
    return ["evaluate", "--config", str(config), "--checkpoint", str(teacher), "--split", "test", "--out",
            str(out / "test.json")]


#: command -> (its argv for (tmp_path, out, teacher), the paths it writes relative to ``out``, the folders among them)
COMMANDS: dict[str, tuple[Callable[[Path, Path, Path], list[str]], tuple[str, ...], tuple[str, ...]]] = {
    "guide": (guide_argv, (".lock", "metrics.jsonl", "summary.json", "model.safetensors", "tensorboard"),
              ("tensorboard",)),
    "cache": (cache_argv, (".lock", ".writers", "manifest.json", "shard-00000.safetensors"), ()),
    "explain": (explain_argv, ("bird_input.png", "bird_explanation.png", "bird_contributions.png", "bird_figure.png"),
                ()),
    "synth": (synth_argv, ("synthetic-birds/index.json", "synthetic-birds/train/images/000000.png",
                           "synthetic-birds/train/masks/000001.png", "synthetic-birds/val/images"),
              ("synthetic-birds/val/images",)),
    "evaluate": (evaluate_argv, ("test.json",), ()),
}
CASES = [(command, path) for command, (_, paths, _) in COMMANDS.items() for path in paths]


@pytest.mark.parametrize("command, path", CASES, ids=[f"{c}:{p}" for c, p in CASES])
def test_a_link_planted_where_a_command_writes_is_refused_and_its_target_untouched(tmp_path, run_cli, teacher,
                                                                                   command, path):
    argv, _, folders = COMMANDS[command]
    out = tmp_path / "out"
    victim = victim_of(tmp_path, path in folders)
    plant(out / path, victim)
    done = run_cli(*argv(tmp_path, out, teacher))
    refused_for_the_link(done, out / path)
    assert untouched(victim)


@pytest.mark.parametrize("name", [".summary.json.staged", ".model.safetensors.staged"])
def test_a_link_at_a_former_fixed_temporary_name_is_never_written(tmp_path, run_cli, name):
    """The staged files of a run's export had fixed names; a link planted there had the summary written through it.
    Temporary names are unique now: the run ends as usual and the link's target is untouched."""
    out = tmp_path / "out"
    victim = victim_of(tmp_path, False)
    plant(out / name, victim)
    done = run_cli(*guide_argv(tmp_path, out, tmp_path / "unused"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert untouched(victim) and (out / "summary.json").is_file()


# ------------------------------------------------------------------------------------------------- the mechanism
WRITERS: dict[str, Callable[[Path], object]] = {
    "atomic write": lambda path: write_text_atomic(path, "new"),
    "atomic write of several files": lambda path: atomic_write_all([(path, lambda tmp: tmp.write_text("new"))]),
    "append": lambda path: open_no_follow(path, "a").close(),
    "truncate": lambda path: open_no_follow(path, "r+b").close(),
    "create": lambda path: open_no_follow(path, "wb").close(),
    "lock": lambda path: DirectoryLock(path.parent).acquire() if path.name == ".lock" else None,
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_of_fileio_refuses_a_link_planted_after_the_start_checks(tmp_path, writer):
    link = tmp_path / "run" / (".lock" if writer == "lock" else "file.txt")
    victim = victim_of(tmp_path, False)
    plant(link, victim)
    with pytest.raises(UsageError, match=re.escape(f"{link} is a symbolic link")):
        WRITERS[writer](link)
    assert untouched(victim) and link.is_symlink()
