"""The synthetic benchmark's generation options have upper bounds, and ``data synth`` survives a full disk (issue 22):
``data.options.size=30000``, ``n=1e9`` and ``data synth --size 100000`` went on to allocate terabytes (a traceback or
a killed process); a write failure mid-way was a raw ``OSError`` traceback. Now each is one ``error:`` line with the
allowed range, or naming the output folder, and exit code 2."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from rightreasons.data import load_dataset
from rightreasons.errors import UsageError
from guards import GUARD_S

ROOT = Path(__file__).parents[2]
CONFIG = """\
output_dir: run
cpu: true
model: {name: bcos_resnet18, kwargs: {inplanes: 8}}
data: {name: synthetic-birds, image_size: 32, batch_size: 4, eval_batch_size: 4, options: {n: 4, size: 32}}
optim: {epochs: 1}
"""


def rightreasons_limited(*args: str, cwd: Path, file_size_limit: int) -> subprocess.CompletedProcess:
    """``python -m rightreasons ARGS`` in ``cwd`` in a process of its own that may write ``file_size_limit`` bytes per
    file (RLIMIT_FSIZE: a write beyond it fails with EFBIG, as one fails with ENOSPC on a full disk)."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "rightreasons", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=GUARD_S, env=env, preexec_fn=limit)


def error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if "error:" in line]
    return line


@pytest.mark.parametrize("options, message", [
    ({"size": 30000}, r"'size' must be an integer in 16\.\.512"),
    ({"size": 8}, r"'size' must be an integer in 16\.\.512"),
    ({"n": 10 ** 9}, r"'n' must be an integer in 0\.\.262144 .*64 × 64"),
    ({"n": 5000, "size": 512}, r"'n' must be an integer in 0\.\.4096 .*512 × 512"),
])
def test_generation_options_out_of_range_are_refused_with_the_allowed_range(options, message):
    with pytest.raises(UsageError, match=message):
        load_dataset("synthetic-birds", None, "train", **options)


def test_training_with_a_huge_synthetic_size_is_one_error_line(tmp_path, run_cli):
    (tmp_path / "config.yaml").write_text(CONFIG)
    line = error_line(run_cli("train", "--config", "config.yaml", "data.options.size=30000", cwd=tmp_path))
    assert "'size' must be an integer in 16..512" in line and "30000" in line


@pytest.mark.parametrize("args, message", [(["--size", "100000"], "'size' must be an integer in 16..512"),
                                           (["--n-train", "1000000000"], "'sizes.train' must be an integer in 0..")])
def test_data_synth_out_of_range_is_one_error_line(tmp_path, run_cli, args, message):
    assert message in error_line(run_cli("data", "synth", "--out", "out", *args, cwd=tmp_path))
    assert not (tmp_path / "out").exists()


def test_data_synth_on_a_full_disk_is_one_error_line_and_leaves_no_index(tmp_path):
    done = rightreasons_limited("data", "synth", "--out", "out", "--task", "synthetic-birds", "--size", "32",
                                "--n-train", "8", "--n-val", "4", "--n-test", "4", cwd=tmp_path, file_size_limit=600)
    line = error_line(done)
    assert "out" in line and "cannot write" in line and "File too large" in line, line
    assert not (tmp_path / "out" / "synthetic-birds" / "index.json").exists()
