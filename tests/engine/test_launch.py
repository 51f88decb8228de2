"""Launches that cannot collide (``rightreasons.engine.launch``): a second run into an output directory that a running
run writes is refused with a clear error, the lock of a killed run does not block its ``--resume``, and a
multi-process launch on a machine without CUDA uses the CPU by itself (the equality runs of ``test_distributed.py``
show that such a launch trains once)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from rightreasons.apps.cli import main
from rightreasons.classification import ClassificationConfig, ClassificationTask
from rightreasons.config import from_dict
from rightreasons.data.base import AnnotatedDataset
from rightreasons.engine import Trainer, run
from rightreasons.engine.launch import use_cpu
from rightreasons.engine.trainer import EXIT_PREEMPTED
from rightreasons.errors import TrainingError
from rightreasons.fileio import LOCK_FILE, DirectoryLock
from guards import GUARD_S

CONFIG = """
cpu: true
log_every: 1
model: {name: bcos_cifar10_resnet20}
data: {name: synthetic-birds, image_size: 32, batch_size: 8, options: {n: 16, seed: 1}}
optim: {epochs: 1000}
eval: {num_images: 0}
"""


def _holder(lock: Path) -> dict | None:
    try:
        return json.loads(lock.read_text())
    except (OSError, ValueError):
        return None


@pytest.mark.slow
def test_a_second_run_into_the_output_directory_of_a_running_one_is_refused(tmp_path, capsys):
    (tmp_path / "config.yaml").write_text(CONFIG)
    args = ["train", "--config", str(tmp_path / "config.yaml"), f"output_dir={tmp_path / 'run'}"]
    first = subprocess.Popen([sys.executable, "-m", "rightreasons", *args], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + GUARD_S
        while (_holder(tmp_path / "run" / LOCK_FILE) or {}).get("pid") != first.pid:
            assert first.poll() is None and time.monotonic() < deadline, "the first run did not start"
            time.sleep(0.2)
        assert main(args) == 2
        error = capsys.readouterr().err
        assert f"error: output directory {tmp_path / 'run'} is in use by another run (process {first.pid} on host" \
               in error and "choose another directory" in error
        assert first.poll() is None  # the first run goes on
        log = tmp_path / "run" / "metrics.jsonl"
        while not (log.is_file() and log.stat().st_size):  # training: SIGTERM now means pre-emption
            assert first.poll() is None and time.monotonic() < deadline, "the first run did not train"
            time.sleep(0.2)
    finally:
        first.send_signal(signal.SIGTERM)  # pre-empted: checkpoint, then exit 75
        _, stderr = first.communicate(timeout=GUARD_S)
    assert first.returncode == EXIT_PREEMPTED, stderr[-2000:]
    assert not (tmp_path / "run" / "summary.json").exists()


OTHER_PROCESS = """
import sys
from rightreasons.errors import TrainingError
from rightreasons.fileio import DirectoryLock
lock = DirectoryLock(sys.argv[1], error=TrainingError)
for line in sys.stdin:
    try:
        lock.acquire()
        print("locked", flush=True)
    except TrainingError as e:
        print(e, flush=True)
"""


def test_the_lock_is_exclusive_between_processes_reentrant_within_one_and_dies_with_its_process(tmp_path):
    """Another process is refused while this one holds the lock (twice: re-entrant), then takes it; this process is
    then refused by name; once the other is killed with SIGKILL, its stale lock file blocks nothing."""
    other = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS, str(tmp_path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)

    def other_tries() -> str:
        other.stdin.write("acquire\n")
        other.stdin.flush()
        return other.stdout.readline().strip()

    try:
        first, again = DirectoryLock(tmp_path, error=TrainingError), DirectoryLock(tmp_path, error=TrainingError)
        first.acquire()
        again.acquire()  # a run restarted in this process (e.g. after an exception) takes it again
        assert f"is in use by another run (process {os.getpid()} on host" in other_tries()
        first.release()
        assert "is in use by another run" in other_tries()  # still held by `again`
        again.release()
        assert other_tries() == "locked"
        with pytest.raises(TrainingError, match=rf"output directory {tmp_path} is in use by another run \(process "
                                                rf"{other.pid} on host .*\); two runs writing one directory would "
                                                r"corrupt what it holds: wait for that run to end"):
            DirectoryLock(tmp_path, error=TrainingError).acquire()
    finally:
        other.kill()
        other.wait()
    assert _holder(tmp_path / LOCK_FILE)["pid"] == other.pid  # the killed run's name is still in the file
    lock = DirectoryLock(tmp_path, error=TrainingError)
    lock.acquire()
    assert _holder(tmp_path / LOCK_FILE)["pid"] == os.getpid()
    lock.release()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the rule is about machines without CUDA")
def test_a_multi_process_launch_without_cuda_uses_the_cpu(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert use_cpu(False) is False and use_cpu(True) is True  # one process: accelerate's own choice
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert use_cpu(False) is True


def _tiny(out: Path, **data) -> ClassificationConfig:
    return from_dict(ClassificationConfig, {
        "output_dir": str(out), "cpu": True, "model": {"name": "bcos_resnet18", "kwargs": {"inplanes": 4}},
        "data": {"image_size": 32, "batch_size": 4, "eval_batch_size": 8, "options": {"n": 8, "size": 32}, **data},
        "optim": {"epochs": 1}, "eval": {"num_images": 0}})


def test_a_refused_start_leaves_no_lock_behind(tmp_path):
    """The start fails after the lock was taken (a batch larger than the data) while the error — and with it the
    trainer — is still alive: another process takes the lock at once. Before: it stayed held until the trainer was
    collected."""
    out = tmp_path / "run"
    with pytest.raises(TrainingError, match="larger than the training set") as error:
        Trainer(ClassificationTask(_tiny(out, batch_size=64)))
    other = subprocess.run([sys.executable, "-c", OTHER_PROCESS, str(out)], input="acquire\n", capture_output=True,
                           text=True, timeout=GUARD_S)
    assert other.stdout.strip() == "locked", (other.stdout, other.stderr[-2000:], error)


def test_a_killed_data_loading_worker_is_a_clear_error(tmp_path, monkeypatch):
    """A worker killed (as the kernel's out-of-memory killer does) ends the run with a TrainingError saying what to
    change and how to go on. Before: the loader's RuntimeError traceback."""
    getitem = AnnotatedDataset.__getitem__

    def killed_in_workers(self, index):
        if torch.utils.data.get_worker_info() is not None:
            os.kill(os.getpid(), signal.SIGKILL)
        return getitem(self, index)

    monkeypatch.setattr(AnnotatedDataset, "__getitem__", killed_in_workers)
    with pytest.raises(TrainingError, match=r"a data-loading worker died \(DataLoader worker \(pid\(s\)? ?\d+\)? "
                                            r".*lower data\.num_workers \(now 1\) or data\.batch_size, then run the "
                                            "same command with --resume"):
        run(_tiny(tmp_path / "run", num_workers=1))
