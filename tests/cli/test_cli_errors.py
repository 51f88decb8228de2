"""The command line reports the user's errors as one ``error:`` line (exit code 2) and lets bugs keep their
traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rightreasons import cli
from rightreasons.errors import ConfigError, RightReasonsError


def test_user_errors_become_one_line_and_exit_code_2(tmp_path, capsys):
    assert cli.main(["train", "--config", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rightreasons train: error: config file not found") and err.count("\n") == 1


def test_a_bug_keeps_its_traceback(monkeypatch):
    def broken(args):
        raise TypeError("a bug, not the user's fault")

    monkeypatch.setattr("rightreasons.cli.models.run", broken)
    with pytest.raises(TypeError, match="a bug"):
        cli.main(["models"])


def test_every_error_class_of_the_package_is_a_user_error():
    import rightreasons.errors as errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), RightReasonsError), name
    assert issubclass(ConfigError, ValueError)


def test_unknown_names_through_the_console_script(tmp_path):
    done = subprocess.run([sys.executable, "-m", "rightreasons", "explain", "--model", "bcos_resnet81", "x.png",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "did you mean bcos_resnet18" in done.stderr and "Traceback" not in done.stderr


def test_generation_options_on_a_synthetic_dataset_read_from_disk_are_one_error_line(tmp_path, capsys):
    """The shipped distill config generates its data in memory (``data.options: {n: 32, size: 32}``); pointed at a
    dataset written by ``data synth`` it used to end in a raw ValueError traceback from the loader."""
    assert cli.main(["data", "synth", "--out", str(tmp_path / "data"), "--task", "synthetic-birds", "--size", "32",
                     "--n-train", "8", "--n-val", "4", "--n-test", "4"]) == 0
    capsys.readouterr()
    assert cli.main(["cache", "--config", "configs/distill/synthetic.yaml", "--out", str(tmp_path / "cache"),
                     f"data.root={tmp_path / 'data'}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rightreasons cache: error: ") and err.count("\n") == 1
    assert "data.options" in err and "'n', 'size'" in err and "index.json" in err
    assert not (tmp_path / "cache").exists()
