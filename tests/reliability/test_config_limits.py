"""Configs and options that were accepted but should not be (issue 36), through the real command line: each is refused
before any work with one ``error:`` line (exit code 2) naming the file, key or option and what was expected.

* a key given twice in one mapping (YAML's last-wins would silently train with the second value);
* an empty or ``null`` config file (it started the default 10-epoch run);
* a seed beyond what numpy and torch accept, a model whose construction fails or is absurdly large
  (``model.kwargs.inplanes=100000``), ``--threads 100000`` (it spawned 10,772 threads);
* a thread or process that cannot start (``EAGAIN``) is named as such, not as a full disk;
* an ``eval.select`` that validation never reports (it was refused only after the first epoch).
"""

from __future__ import annotations

import errno
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from run_configs import tiny_guided_config


from cli_outcomes import error_line

def refused(done: subprocess.CompletedProcess, *expected: str) -> str:
    """The one ``error:`` line of a command that was refused (:func:`error_line`), holding every ``expected`` text."""
    line = error_line(done)
    for text in expected:
        assert text in line, (text, line)
    return line


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_a_key_given_twice_is_refused_naming_the_file_the_key_and_both_lines(tmp_path, run_cli):
    text = yaml.safe_dump(tiny_guided_config(), sort_keys=False).replace("  lr: 0.001\n",
                                                                          "  lr: 0.001\n  lr: 0.1\n")
    path = write_config(tmp_path, text)
    lines = [i + 1 for i, line in enumerate(text.splitlines()) if line.strip().startswith("lr:")]
    done = run_cli("guide", "--config", path, f"output_dir={tmp_path / 'run'}")
    line = refused(done, str(path), "'lr'", f"line {lines[0]}", f"line {lines[1]}")
    assert "given twice" in line, line
    assert not (tmp_path / "run").exists()


def test_a_top_level_key_given_twice_is_refused_too(tmp_path, run_cli):
    path = write_config(tmp_path, yaml.safe_dump(tiny_guided_config()) + "seed: 3\n")
    refused(run_cli("guide", "--config", path, f"output_dir={tmp_path / 'run'}"), str(path), "'seed'")


def test_a_merge_key_may_still_override_what_it_merges(tmp_path):
    from rightreasons.config import read_yaml

    assert read_yaml("base: &b {lr: 1, wd: 2}\nopt:\n  <<: *b\n  lr: 3\n")["opt"] == {"lr": 3, "wd": 2}


@pytest.mark.parametrize("text", ["", "null\n", "~\n", "# only a comment\n", "{}\n"])
def test_an_empty_or_null_config_file_is_refused(tmp_path, run_cli, text):
    path = write_config(tmp_path, text)
    line = refused(run_cli("train", "--config", path, "max_steps=1", cwd=tmp_path), str(path))
    assert "no keys" in line, line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("seed", [10 ** 30, 2 ** 32, 2 ** 64])
def test_a_seed_beyond_what_numpy_and_torch_take_is_refused(tmp_path, run_cli, seed):
    path = write_config(tmp_path, yaml.safe_dump(tiny_guided_config(seed=seed)))
    refused(run_cli("guide", "--config", path, f"output_dir={tmp_path / 'run'}"), str(path), "seed:",
            str(2 ** 32 - 1))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("kwargs, expected", [
    ({"inplanes": 100000}, "parameters"),
    ({"inplanes": -3}, "cannot build"),
])
def test_a_model_that_cannot_be_built_or_is_absurdly_large_is_refused_naming_model_kwargs(tmp_path, run_cli, kwargs,
                                                                                          expected):
    path = write_config(tmp_path, yaml.safe_dump(tiny_guided_config(**{"model.kwargs": kwargs})))
    refused(run_cli("guide", "--config", path, f"output_dir={tmp_path / 'run'}"), str(path), "model.kwargs",
            expected)
    assert not (tmp_path / "run").exists()


def test_the_same_model_override_on_the_command_line_is_refused(tmp_path, run_cli):
    path = write_config(tmp_path, yaml.safe_dump(tiny_guided_config()))
    refused(run_cli("guide", "--config", path, f"output_dir={tmp_path / 'run'}", "model.kwargs.inplanes=100000"),
            "model.kwargs")


def test_threads_beyond_a_sane_maximum_are_refused_by_the_parser(run_cli):
    done = run_cli("--threads", "100000", "models")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert re.search(r"--threads: .*at most \d+", done.stderr), done.stderr


def test_threads_within_the_maximum_still_work(run_cli):
    assert run_cli("--threads", "2", "models", "bcos_resnet18").returncode == 0


EXHAUSTED = [BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable"), RuntimeError("can't start new thread")]


@pytest.mark.parametrize("error", EXHAUSTED)
def test_a_thread_or_process_that_cannot_start_while_writing_is_named_not_a_full_disk(tmp_path, run_cli, monkeypatch,
                                                                                       error):
    """The run's metrics writer is where the process-table exhaustion surfaced (a tracker's writer thread); a refused
    ``fork`` or thread start there must say so, not tell the user to free disk space."""
    import rightreasons.engine.trainer as trainer

    def log(self, record):
        with self._writing("the metrics"):
            raise error

    monkeypatch.setattr(trainer.Trainer, "log", log)
    path = write_config(tmp_path, yaml.safe_dump(tiny_guided_config()))
    line = refused(run_cli("guide", "--config", path, f"output_dir={tmp_path / 'run'}"), "thread or process")
    assert "disk space" not in line, line


@pytest.mark.parametrize("error", EXHAUSTED)
def test_data_loading_workers_that_cannot_start_are_one_error_line(tmp_path, run_cli, monkeypatch, error):
    import multiprocessing.process

    def start(self):
        raise error

    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", start)
    path = write_config(tmp_path, yaml.safe_dump(tiny_guided_config(**{"data.num_workers": 2})))
    refused(run_cli("guide", "--config", path, f"output_dir={tmp_path / 'run'}"), "thread or process",
            "--threads")


def test_an_unknown_eval_select_is_refused_before_any_work(tmp_path, run_cli):
    """It was refused only after the first epoch's validation."""
    path = write_config(tmp_path, yaml.safe_dump(tiny_guided_config(**{"eval.select": "acuracy"})))
    line = refused(run_cli("guide", "--config", path, f"output_dir={tmp_path / 'run'}"), "eval.select='acuracy'",
                   "'accuracy'", "'epg'")
    assert "before training" in line, line
    assert not (tmp_path / "run" / "metrics.jsonl").exists() and not list(tmp_path.glob("run/checkpoints/*"))


@pytest.mark.parametrize("select", ["worst_group_accuracy", "accuracy/G4 waterbird/water", "epg"])
def test_a_metric_validation_reports_may_be_selected(tmp_path, run_cli, select):
    path = write_config(tmp_path, yaml.safe_dump(tiny_guided_config(**{"eval.select": select})))
    done = run_cli("guide", "--config", path, f"output_dir={tmp_path / 'run'}")
    assert done.returncode == 0, done.stderr[-3000:]
