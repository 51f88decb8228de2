"""``make gpu-check`` (``scripts/gpu_check.py``): without CUDA it says so and exits 0, writing nothing; rehearsed on
the CPU (``--rehearse``: the tier on ``meta``, the counts, the throughput at tiny sizes) it writes its JSON and its
table with every part filled in — so the script is known to run before a GPU is there."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from guards import GUARD_S

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_check.py"


def test_without_cuda_it_says_so_and_exits_0(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=GUARD_S)
    assert done.returncode == 0, done.stderr
    assert "no CUDA device" in done.stdout and "measures nothing here" in done.stdout
    assert not (tmp_path / "out").exists()


def test_the_rehearsal_writes_every_part(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--rehearse", "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=GUARD_S)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert report["tier"]["passed"] and "passed" in report["tier"]["summary"]
    assert {c["step"]["syncs"] for c in report["host_syncs"].values()} == {0}
    assert {c["logged step"]["syncs"] for c in report["host_syncs"].values()} == {1}
    steps = {r["section"] for r in report["throughput"]}
    assert {"gpu-throughput: bcos_resnet18 standard, batch 2, eager",
            "gpu-throughput: bcos_resnet18 guided at input, batch 2, eager"} <= steps
    table = (tmp_path / "gpu-check.md").read_text()
    assert table.startswith("# make gpu-check") and "| guide (Energy, B-cos at the input) | 0 / 1 |" in table
    assert table in done.stdout
    # where a step's time goes (on the CPU: the operations the profiler records): the guided step explains, so it
    # runs more of them
    operations = {r["section"].split(": ")[1]: int(re.search(r"(\d+) profiled operations", r["setup"]).group(1))
                  for r in report["throughput"]}
    assert operations["bcos_resnet18 guided at input, batch 2, eager"] > \
        operations["bcos_resnet18 standard, batch 2, eager"] > 0
    assert re.search(r"\| bcos_resnet18 guided at input, batch 2, eager \| [\d.]+ \| [\d.]+ \| \d+ MiB \| "
                     r"\d+ \([\d.]+ ms\) \| — \|", table), table
    assert "Longest kernels of one step" in table and "- bcos_resnet18 guided at input, batch 2, eager: " in table
