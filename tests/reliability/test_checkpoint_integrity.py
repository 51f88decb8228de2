"""Checkpoints are verified before use: every corruption of the newest one is detected and the run falls back to the
newest intact one (ending exactly like an uninterrupted run); a full disk is refused up front or ends in a named
error; SIGTERM checkpoints and stops with exit code 75, and one command line serves the first start and every
requeue."""

from __future__ import annotations

import errno
import json
import shutil
import signal
import subprocess
import sys
import time
from collections import namedtuple
from pathlib import Path

import pytest
import yaml

from rightreasons.config import from_dict
from rightreasons.engine import run
from rightreasons.engine.checkpointing import MANIFEST, STATE_FILE, CheckpointManager
from rightreasons.engine.trainer import EXIT_PREEMPTED
from rightreasons.errors import CheckpointError, TrainingError
from rightreasons.guidance import GuideConfig
from run_configs import tiny_guided_config
from guards import GUARD_S


def _config(out: Path, **changes) -> dict:
    return tiny_guided_config(output_dir=str(out), **{"optim.epochs": 2, "checkpoint.keep_last": 2,
                                                       "checkpoint.every_steps": 2, **changes})


@pytest.fixture(scope="module")
def finished(tmp_path_factory, run_outcome):
    """A finished run (checkpoints after steps 4 and 6 among those kept) and what it ended with."""
    out = tmp_path_factory.mktemp("finished") / "run"
    run(from_dict(GuideConfig, _config(out)))
    return out, run_outcome(out)


def _flip_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _older_weights(path: Path) -> None:
    shutil.copy(path.parent.parent / "step-000004" / path.name, path)


def _change_a_digit(path: Path) -> None:
    state = json.loads(path.read_text())
    state["step"] += 1
    path.write_text(json.dumps(state))


Corruption = namedtuple("Corruption", "file damage defect")
CORRUPTIONS = [
    Corruption("model.safetensors", _flip_bit, "does not match its SHA-256"),
    Corruption("optimizer.bin", _flip_bit, "does not match its SHA-256"),
    Corruption("model.safetensors", _older_weights, "does not match its SHA-256"),
    Corruption(STATE_FILE, _change_a_digit, "has .* bytes|does not match"),
    Corruption("model.safetensors", _truncate, "truncated or replaced"),
    Corruption(STATE_FILE, _truncate, "truncated or replaced"),
    Corruption(STATE_FILE, Path.unlink, "trainer_state.json is missing"),
    Corruption("optimizer.bin", Path.unlink, "optimizer.bin is missing"),
    Corruption(MANIFEST, lambda p: p.write_text("{not json"), "unreadable manifest.json"),
    Corruption(MANIFEST, Path.unlink, "no manifest.json"),
]


@pytest.mark.parametrize("corruption", CORRUPTIONS, ids=lambda c: f"{c.damage.__name__}-{c.file}")
def test_a_corrupted_newest_checkpoint_is_detected_and_the_run_falls_back(finished, run_outcome, tmp_path, corruption):
    reference, expected = finished
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    (out / "summary.json").unlink()
    corruption.damage(out / "checkpoints" / "step-000006" / corruption.file)
    with pytest.warns(UserWarning, match=f"resuming from step-000004.*step-000006: .*({corruption.defect})"):
        run(from_dict(GuideConfig, _config(out)), resume=True)
    assert run_outcome(out) == expected


def test_when_no_checkpoint_is_intact_every_defect_is_listed(finished, tmp_path):
    reference, _ = finished
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    (out / "summary.json").unlink()  # an interrupted run: a finished one is not resumed
    checkpoints = sorted((out / "checkpoints").glob("step-*"))
    assert len(checkpoints) >= 2
    for path in checkpoints:
        _flip_bit(path / "model.safetensors")
    with pytest.raises(CheckpointError, match="no intact checkpoint") as error:
        run(from_dict(GuideConfig, _config(out)), resume=True)
    assert all(path.name in str(error.value) for path in checkpoints)


def test_a_complete_checkpoint_left_unrenamed_is_promoted_not_deleted(finished, run_outcome, tmp_path):
    reference, expected = finished
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    (out / "summary.json").unlink()
    newest = out / "checkpoints" / "step-000006"
    newest.rename(newest.with_name(".tmp-step-000006"))  # killed between writing the manifest and the rename
    run(from_dict(GuideConfig, _config(out)), resume=True)
    assert newest.is_dir() and not newest.with_name(".tmp-step-000006").exists()
    assert run_outcome(out) == expected


def test_a_half_deleted_checkpoint_never_counts_as_complete(finished, run_outcome, tmp_path):
    reference, _ = finished
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    half = out / "checkpoints" / "step-000004"
    (half / MANIFEST).unlink()  # deletion removes the manifest first
    (half / "model.safetensors").unlink()
    manager = CheckpointManager.__new__(CheckpointManager)
    manager.root = out / "checkpoints"
    assert half not in manager.complete()


def test_the_disk_preflight_counts_the_pareto_front_and_the_best_checkpoint(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 10**5, 10**5))
    with pytest.raises(TrainingError, match=r"up to \d+ of them .*keep_last = 2, the best one, up to \d+ on the "
                                            "Pareto front"):
        run(from_dict(GuideConfig, _config(tmp_path / "run")))


def test_a_full_disk_while_checkpointing_says_nothing_was_lost_and_how_to_resume(tmp_path, monkeypatch):
    from accelerate import Accelerator

    original, calls = Accelerator.save_state, []

    def save_state(self, output_dir=None, **kwargs):
        calls.append(output_dir)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, output_dir, **kwargs)

    monkeypatch.setattr(Accelerator, "save_state", save_state)
    with pytest.raises(TrainingError, match="could not write checkpoint .*No space left.*Nothing was lost: the newest "
                                            "complete checkpoint is step-000002.*--resume"):
        run(from_dict(GuideConfig, _config(tmp_path / "run")))
    assert not list((tmp_path / "run" / "checkpoints").glob(".tmp-*"))


def test_resume_on_the_first_start_starts_fresh(tmp_path):
    out = tmp_path / "run"
    with pytest.warns(UserWarning, match="no checkpoint .* yet: starting the run from the beginning"):
        summary = run(from_dict(GuideConfig, _config(out, **{"optim.epochs": 1})), resume=True)
    assert summary["steps"] == 3


@pytest.mark.slow
def test_sigterm_checkpoints_stops_with_75_and_resumes_to_the_same_result(finished, run_outcome, run_cli, tmp_path):
    _, expected = finished
    out = tmp_path / "run"
    config = _config(out, **{"checkpoint.every_steps": None})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "rightreasons", "guide", "--config", str(path), "--resume"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + GUARD_S
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=GUARD_S)
    assert process.returncode == EXIT_PREEMPTED, stderr[-2000:]
    assert "stopped by SIGTERM: checkpoint" in stderr and "--resume" in stderr
    assert list((out / "checkpoints").glob("step-*")), "no checkpoint was written"
    done = run_cli(*command[3:])  # the resume needs no process of its own
    assert done.returncode == 0, done.stderr[-2000:]
    result = run_outcome(out)
    assert result["weights"] == expected["weights"] and result["metrics"] == expected["metrics"]
