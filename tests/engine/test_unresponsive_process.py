"""No wait for another process is unbounded: a rank stopped with SIGSTOP in the middle of a two-process ``torchrun``
run makes the other stop after ``RIGHTREASONS_PROCESS_TIMEOUT`` seconds (and a roll call of at most as long) with
one ``error:`` line naming the rank that did not answer. Before: it waited, silent, for the process group's 30-minute default."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rightreasons.engine import launch
from rightreasons.engine.launch import DEFAULT_TIMEOUT_S, TIMEOUT_VARIABLE, process_timeout
from rightreasons.errors import UsageError
from rightreasons.fileio import LOCK_FILE
from guards import GUARD_S

CONFIG = """
seed: 3
log_every: 1
model: {name: bcos_resnet18, kwargs: {inplanes: 4}}
data: {name: synthetic-birds, image_size: 32, batch_size: 4, eval_batch_size: 8, options: {n: 16, size: 32}}
optim: {epochs: 1000}
eval: {num_images: 0}
"""


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a process that exited and awaits its parent's ``wait`` is a zombie: not alive)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds the launcher's processes in /proc")
def test_a_stopped_rank_ends_the_run_with_an_error_naming_it(tmp_path):
    (tmp_path / "config.yaml").write_text(CONFIG)
    run = tmp_path / "run"
    launcher = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "rightreasons",
         "train", "--config", str(tmp_path / "config.yaml"), f"output_dir={run}"],
        env={**os.environ, "PYTHONUNBUFFERED": "1", TIMEOUT_VARIABLE: "20"}, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    stopped = None
    try:
        deadline = time.monotonic() + GUARD_S
        while not ((run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").stat().st_size):  # training
            assert launcher.poll() is None and time.monotonic() < deadline, "the run did not start training"
            time.sleep(0.2)
        main = json.loads((run / LOCK_FILE).read_text())["pid"]
        stopped, = [pid for pid in _children(launcher.pid) if pid != main]
        os.kill(stopped, signal.SIGSTOP)
        while _alive(main):      # until process 0 gives up; then the stopped rank may go on, so that the launcher's
            assert time.monotonic() < deadline, "process 0 did not stop"   # SIGTERM ends it at once (a stopped
            time.sleep(0.2)      # process takes no signal but SIGKILL, which torchrun sends only after 30 s)
        os.kill(stopped, signal.SIGCONT)
        _, stderr = launcher.communicate(timeout=GUARD_S)
    finally:
        if stopped is not None and launcher.poll() is None:  # the launcher ends its workers when it exits
            os.kill(stopped, signal.SIGCONT)
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    assert launcher.returncode != 0
    errors = [line for line in stderr.splitlines() if "error: " in line]
    assert any(re.search(r"error: process 0 of 2 waited for the others beyond 20 s \(RIGHTREASONS_PROCESS_TIMEOUT\) "
                         r"and stopped; process\(es\) that did not answer: 1\.", line) for line in errors), \
        stderr[-4000:]


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan", "inf", "1e9"])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv(TIMEOUT_VARIABLE, value)
    with pytest.raises(UsageError, match=rf"RIGHTREASONS_PROCESS_TIMEOUT='{re.escape(value)}': expected the seconds a "
                                         r"process waits for the others, a number in \(0, 604800\]"):
        process_timeout()


def test_the_timeout_is_the_variable_or_the_default(monkeypatch):
    monkeypatch.delenv(TIMEOUT_VARIABLE, raising=False)
    assert process_timeout().total_seconds() == DEFAULT_TIMEOUT_S < 30 * 60
    monkeypatch.setenv(TIMEOUT_VARIABLE, "12.5")
    assert process_timeout().total_seconds() == 12.5


def _raised_in(filename: str, message: str) -> RuntimeError:
    """The RuntimeError ``message`` raised by code whose file is ``filename`` (as torch's own code raises it)."""
    namespace: dict = {}
    exec(compile(f"def collective():\n    raise RuntimeError({message!r})\n", filename, "exec"), namespace)
    try:
        namespace["collective"]()
    except RuntimeError as e:
        return e
    raise AssertionError("not raised")


@pytest.mark.parametrize("filename, message, expected", [
    # DDP's buffer broadcast when the other rank stopped answering (it names no gloo: seen in the suite under load)
    (os.path.join("torch", "nn", "parallel", "distributed.py"), "Application timeout caused pair closure", True),
    (os.path.join("torch", "distributed", "distributed_c10d.py"), "Connection closed by peer [127.0.0.1]:1234", True),
    ("anywhere.py", "[gloo/transport/tcp/pair.cc:534] Read error", True),
    (os.path.join("rightreasons", "engine", "trainer.py"), "shape mismatch", False),
])
def test_an_error_of_a_collective_is_told_from_other_errors(filename, message, expected):
    """Which errors :func:`unanswered` turns into the one line naming the processes that did not answer."""
    assert launch._collective(_raised_in(filename, message)) is expected
