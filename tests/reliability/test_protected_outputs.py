"""What a command's output never replaces or re-reads, through the real command line.

* **A run's own files** — no command but training writes over a run's exported model, summary, metrics log, lock,
  checkpoints or TensorBoard logs: ``evaluate --out RUN/model.safetensors`` replaced the trained model with a metrics
  JSON (and a later ``--resume`` died with a traceback); ``bcosify --out`` could do the same. Each is refused with one
  ``error:`` line naming the file, the run is untouched and resumes as a finished run does.
* **explain's own outputs** — ``explain DIR --out DIR`` explained the PNGs it had written there on its next run; an
  output folder that is one of the input folders is refused.
* **Temporary files** — ``evaluate`` killed before its rename left ``.test.json.<unique>.tmp`` for good; the next
  write of the same file removes it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from PIL import Image

from rightreasons.faults import KILL_VARIABLE
from rightreasons.fileio import atomic_write, write_text_atomic
from cli_outcomes import clear_error
from run_configs import tiny_guided_config
from guards import GUARD_S

CONFIG = tiny_guided_config(**{"checkpoint.every_steps": 2})


@pytest.fixture(scope="module")
def finished(tmp_path_factory, run_cli) -> Path:
    """A finished one-epoch guided run with checkpoints, TensorBoard logs and its config beside it."""
    folder = tmp_path_factory.mktemp("finished")
    (folder / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    done = run_cli("guide", "--config", str(folder / "config.yaml"), f"output_dir={folder / 'run'}")
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "run"


def snapshot(run: Path) -> dict[str, bytes]:
    """Every file of the run but its lock (which only describes the last holder), by relative path."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != ".lock"}


def protected(run: Path) -> list[str]:
    checkpoint = sorted((run / "checkpoints").glob("step-*"))[-1]
    event = next((run / "tensorboard").rglob("events.out.tfevents*"))
    return ["model.safetensors", "summary.json", "metrics.jsonl", ".lock", str(checkpoint.relative_to(run)),
            str((checkpoint / "model.safetensors").relative_to(run)), str(event.relative_to(run))]


OUTPUTS: dict[str, Callable[[Path, Path], list[str]]] = {
    "evaluate": lambda run, out: ["evaluate", "--checkpoint", str(run / "model.safetensors"), "--out", str(out)],
    "bcosify": lambda run, out: ["bcosify", "--model", "resnet18", "--num-classes", "2", "--out", str(out)],
}


@pytest.mark.parametrize("command", sorted(OUTPUTS))
@pytest.mark.parametrize("index", range(7), ids=["model", "summary", "metrics", "lock", "checkpoint-directory",
                                                 "checkpoint-weights", "tensorboard-events"])
def test_no_command_writes_over_a_runs_own_files(finished, run_cli, command, index):
    target = finished / protected(finished)[index]
    before = snapshot(finished)
    done = run_cli(*OUTPUTS[command](finished, target))
    clear_error(done, rf"{re.escape(str(target))}.* belongs to the training run {re.escape(str(finished))}")
    assert snapshot(finished) == before
    resumed = run_cli("guide", "--config", str(finished.parent / "config.yaml"), f"output_dir={finished}",
                      "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert snapshot(finished) == before


def test_evaluate_may_write_beside_a_runs_files(finished, run_cli):
    """The documented use: the metrics of a split next to the run's model."""
    done = run_cli(*OUTPUTS["evaluate"](finished, finished / "test.json"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert (finished / "test.json").is_file()


def test_explain_refuses_an_output_folder_that_is_an_input_folder(tmp_path, run_cli):
    """Why refuse rather than skip the outputs: a user's own image may be named like an output (``cat_input.png``),
    and a folder that is both what is read and what is written changes under the command; the refusal is one line
    and the fix (another ``--out``) obvious."""
    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (32, 32), (200, 120, 40)).save(images / "bird.png")
    argv = ["explain", "--model", "bcos_resnet18", "--random-weights", "--num-classes", "2", "--size", "32"]
    (tmp_path / "alias").symlink_to(images)
    for out in (images, tmp_path / "alias"):
        clear_error(run_cli(*argv, str(images), "--out", str(out)),
                    rf"--out {re.escape(str(out))} is the input folder {re.escape(str(images))}")
    assert sorted(p.name for p in images.iterdir()) == ["bird.png"]
    assert run_cli(*argv, str(images), "--out", str(images / "explained")).returncode == 0


def test_a_temporary_file_left_by_a_killed_evaluate_is_removed_by_the_next(finished, tmp_path):
    out = tmp_path / "test.json"
    argv = [sys.executable, "-m", "rightreasons", *OUTPUTS["evaluate"](finished, out)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed = subprocess.run(argv, capture_output=True, text=True, timeout=GUARD_S,
                            env={**env, KILL_VARIABLE: "atomic-write test.json: written, not renamed:1"})
    assert killed.returncode == -9, killed.stderr[-3000:]
    (left,) = [p.name for p in tmp_path.iterdir()]
    assert re.fullmatch(r"\.test\.json\.[0-9a-f]{12}\.tmp", left)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=GUARD_S, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [p.name for p in tmp_path.iterdir()] == ["test.json"]


def test_a_live_writers_temporary_file_is_never_taken_for_a_stale_one(tmp_path):
    """The next write of a file removes only the temporaries no process holds: one written meanwhile (here by the
    same process, through another open file description, as another process would) is kept and renamed as usual."""
    path = tmp_path / "result.json"

    def write(tmp: Path) -> None:
        tmp.write_text("outer")
        write_text_atomic(path, "inner")  # cleans the stale temporaries of path while this one is being written
        assert tmp.read_text() == "outer"

    atomic_write(path, write)
    assert path.read_text() == "outer" and [p.name for p in tmp_path.iterdir()] == ["result.json"]
