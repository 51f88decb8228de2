"""Kills at every boundary of the code that writes state (:mod:`rightreasons.faults`), then ``--resume``.

For each scenario an uninterrupted reference run lists the boundaries it passes (``RIGHTREASONS_FAULT_TRACE``); then,
for every boundary, at its first and at its last occurrence, a fresh run is killed there with ``SIGKILL`` and resumed
with the same command line: the resumed run must end with the same weights, the same ``summary.json`` (but its
wall-clock seconds and provenance) and the same ``metrics.jsonl`` as the reference — nothing lost, nothing logged
twice. The cache scenario must end with byte-identical shards. Runs are forked from one process that imported
rightreasons once (``fault_runner.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import rightreasons
from rightreasons.faults import KILL_VARIABLE, TRACE_VARIABLE
from guards import GUARD_S

RUNNER = Path(__file__).with_name("fault_runner.py")


class Runner:
    """A ``fault_runner.py`` process; ``runner(kind, config, ...)`` runs one job and returns its exit code."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.process = subprocess.Popen([sys.executable, str(RUNNER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        text=True, env=env)

    def __call__(self, kind: str, config: dict, *, resume: bool = False, env: dict | None = None,
                 out: Path | None = None, shard_size: int | None = None) -> int:
        job = {"kind": kind, "config": config, "resume": resume, "env": env or {}, "out": str(out) if out else None,
               "shard_size": shard_size}
        self.process.stdin.write(json.dumps(job) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())["exit"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=GUARD_S)


@pytest.fixture(scope="module")
def runner():
    r = Runner()
    yield r
    r.close()


def _train_config(out: Path, keep_last: int, **guidance) -> dict:
    """A guided run of 2 epochs × 2 steps: checkpoints inside an epoch (every step), at its end and at the end of the
    run, validation with localisation (so the Pareto front and the best model are kept too)."""
    return {"output_dir": str(out), "seed": 0, "cpu": True, "log_every": 1,
            "model": {"name": "bcos_resnet18", "kwargs": {"inplanes": 4}},
            "data": {"name": "synthetic-birds", "image_size": 32, "batch_size": 4, "eval_batch_size": 8,
                     "annotated_fraction": 0.5, "options": {"n": 8, "size": 32}},
            "optim": {"name": "adam", "lr": 1e-3, "epochs": 2},
            "guidance": {"weight": 1.0, **guidance},
            "eval": {"num_images": 0},
            "checkpoint": {"keep_last": keep_last, "every_steps": 1}}


def _distill_config(out: Path, teacher: Path, cache: Path) -> dict:
    return {"output_dir": str(out), "seed": 1, "cpu": True, "log_every": 1,
            "model": {"name": "bcos_resnet18", "kwargs": {"inplanes": 4}},
            "teacher": {"checkpoint": str(teacher)},
            "data": {"name": "synthetic-birds", "image_size": 32, "batch_size": 4, "eval_batch_size": 8,
                     "options": {"n": 12, "size": 32}},
            "optim": {"name": "adam", "lr": 1e-3, "epochs": 2},
            "eval": {"num_images": 0, "localization": False},
            "checkpoint": {"keep_last": 1, "every_steps": 2},
            "distill": {"explanation_weight": 5.0, "frozen": str(cache), "test_split": "test"}}


def _cache_outcome(out: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix in (".safetensors", ".json")}


def _boundaries(trace: Path) -> list[tuple[str, int]]:
    """Every boundary of a traced run, at its first and at its last occurrence."""
    counts = Counter(trace.read_text().splitlines())
    return sorted({(name, k) for name, count in counts.items() for k in {1, count}})


def _kill_everywhere(runner, tmp_path: Path, kind: str, make_config, outcome, job) -> int:
    """Reference run, then a killed and a resumed run per boundary; returns how many kill points were checked."""
    reference = tmp_path / "reference"
    trace = tmp_path / "trace.txt"
    assert runner(kind, make_config(reference), env={TRACE_VARIABLE: str(trace)}, **job(reference)) == 0
    expected = outcome(reference)
    points = _boundaries(trace)
    assert len(points) >= 5, points
    for name, k in points:
        run = tmp_path / "killed"
        shutil.rmtree(run, ignore_errors=True)
        code = runner(kind, make_config(run), env={KILL_VARIABLE: f"{name}:{k}"}, **job(run))
        assert code == -9, f"the run was not killed at {name!r} #{k} (exit {code})"
        assert runner(kind, make_config(run), resume=True, **job(run)) == 0, f"resume after a kill at {name!r} #{k}"
        assert outcome(run) == expected, f"a kill at {name!r} #{k} changed the result"
    return len(points)


@pytest.mark.slow
@pytest.mark.parametrize("keep_last", [1, pytest.param(2, marks=pytest.mark.exhaustive)])
def test_guide_survives_a_kill_at_every_boundary(runner, run_outcome, tmp_path, keep_last):
    checked = _kill_everywhere(runner, tmp_path, "train", lambda out: _train_config(out, keep_last), run_outcome,
                               job=lambda out: {})
    assert checked >= 10


def test_batches_with_k_annotated_images_resume_mid_epoch_to_the_same_result(runner, run_outcome, tmp_path):
    """``guidance.annotated_per_batch``: killed right after the first (mid-epoch) checkpoint, the resumed run draws the
    same composed batches as the uninterrupted one."""
    def config(out: Path) -> dict:
        return _train_config(out, 1, annotated_per_batch=1)

    reference, killed = tmp_path / "reference", tmp_path / "killed"
    assert runner("train", config(reference)) == 0
    assert runner("train", config(killed), env={KILL_VARIABLE: "checkpoint: renamed into place:1"}) == -9
    assert runner("train", config(killed), resume=True) == 0
    assert run_outcome(killed) == run_outcome(reference)


@pytest.mark.exhaustive
def test_distill_frozen_survives_a_kill_at_every_boundary(runner, run_outcome, tmp_path):
    teacher = tmp_path / "teacher.safetensors"
    rightreasons.save_model(rightreasons.create_model("bcos_resnet18", num_classes=2, inplanes=4), teacher)
    cache = tmp_path / "cache"
    config = _distill_config(tmp_path / "unused", teacher, cache)
    assert runner("cache", config, out=cache, shard_size=4) == 0
    checked = _kill_everywhere(runner, tmp_path, "distill", lambda out: _distill_config(out, teacher, cache),
                               run_outcome, job=lambda out: {})
    assert checked >= 10


@pytest.mark.slow
def test_cache_writing_survives_a_kill_at_every_boundary(runner, tmp_path):
    teacher = tmp_path / "teacher.safetensors"
    rightreasons.save_model(rightreasons.create_model("bcos_resnet18", num_classes=2, inplanes=4), teacher)
    config = _distill_config(tmp_path / "unused", teacher, tmp_path / "unused-cache")
    checked = _kill_everywhere(runner, tmp_path, "cache", lambda out: config, _cache_outcome,
                               job=lambda out: {"out": out, "shard_size": 4})  # three shards
    assert checked >= 4
