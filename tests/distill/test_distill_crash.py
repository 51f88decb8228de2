"""Crash safety of frozen e²KD: SIGKILL while writing the teacher cache and while training from it, then resume. The
killed commands run in a fresh interpreter each; the others in the test's process (``run_cli``)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest
from safetensors.torch import load_file

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "distill" / "synthetic.yaml"
OVERRIDES = ["max_steps=6", "data.options.n=48", "checkpoint.every_steps=2", "checkpoint.keep_last=4"]


def _killed(args: list[str], cwd: Path, prelude: str) -> subprocess.CompletedProcess:
    """``rightreasons ARGS`` in a fresh interpreter, after ``prelude`` (which plants a SIGKILL)."""
    code = (textwrap.dedent(prelude)
            + "\nimport sys\nfrom rightreasons.apps.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def rightreasons(run_cli) -> Callable[[list[str], Path], subprocess.CompletedProcess]:
    """``rightreasons(args, cwd)``: the command in this process, which must succeed."""
    def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
        done = run_cli(*args, cwd=cwd)
        assert done.returncode == 0, f"{args} failed ({done.returncode}):\n{done.stderr[-3000:]}"
        return done

    return run


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.safetensors"))}


KILL_IN_SECOND_SHARD = """
import os, signal
from rightreasons.distill import cache
original = cache._write_shard
def dying_write(root, index, *args, **kwargs):
    if index == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(root, index, *args, **kwargs)
cache._write_shard = dying_write
"""

KILL_IN_STEP_FIVE = """
import os, signal
from rightreasons.engine import trainer
original = trainer.Trainer.train_step
def dying_step(self, batch):
    if self.position.step == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(self, batch)
trainer.Trainer.train_step = dying_step
"""


@pytest.fixture(scope="module")
def cache_and_reference(tmp_path_factory, rightreasons) -> Path:
    """A complete cache written in one go and a frozen run trained from it without interruption."""
    folder = tmp_path_factory.mktemp("frozen")
    cache = ["cache", "--config", str(CONFIG), "--out", "cache", "--shard-size", "16", *OVERRIDES]
    rightreasons(cache, folder)
    rightreasons(["distill", "--config", str(CONFIG), "--frozen", "cache", "output_dir=run", *OVERRIDES], folder)
    return folder


@pytest.mark.exhaustive  # test_kill_points kills cache writing at every boundary
def test_cache_writing_killed_mid_way_resumes_to_identical_shards(cache_and_reference, tmp_path, run_cli,
                                                                 rightreasons):
    cache = ["cache", "--config", str(CONFIG), "--out", "cache", "--shard-size", "16", *OVERRIDES]
    killed = _killed(cache, tmp_path, KILL_IN_SECOND_SHARD)
    assert killed.returncode == -9, killed.stderr[-2000:]
    # a half-written cache is never used
    refused = run_cli("distill", "--config", CONFIG, "--frozen", "cache", "output_dir=run", *OVERRIDES, cwd=tmp_path)
    assert refused.returncode == 2 and re.search("incomplete|missing", refused.stderr), refused.stderr[-2000:]
    rightreasons(cache, tmp_path)
    assert _digests(tmp_path / "cache") == _digests(cache_and_reference / "cache")
    assert len(_digests(tmp_path / "cache")) == 3


def test_frozen_distillation_killed_in_a_step_resumes_to_the_same_weights(cache_and_reference, tmp_path,
                                                                          rightreasons):
    (tmp_path / "cache").symlink_to(cache_and_reference / "cache")
    distill = ["distill", "--config", str(CONFIG), "--frozen", "cache", "output_dir=run", *OVERRIDES]
    killed = _killed(distill, tmp_path, KILL_IN_STEP_FIVE)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (tmp_path / "run" / "model.safetensors").exists()
    rightreasons([*distill, "--resume"], tmp_path)
    ours = load_file(tmp_path / "run" / "model.safetensors")
    reference = load_file(cache_and_reference / "run" / "model.safetensors")
    assert max((ours[k] - reference[k]).abs().max().item() for k in reference) <= 1e-6
