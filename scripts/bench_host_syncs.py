"""``make bench`` section ``host-syncs``: the host syncs of a training step of every step type of the engine, on one
process and under DDP (two CPU processes, gloo), counted by ``scripts/step_counts.py`` — 0 on a step that does not
log, 1 on a step that logs (the read of its losses). Deterministic: the counts do not depend on the machine's load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import step_counts
from benchlib import Row, Settings, section


def _rows(results: dict, processes: int) -> list[Row]:
    rows = []
    for name, counts in results.items():
        step, logged = counts["step"]["syncs"], counts["logged step"]["syncs"]
        cuda = counts["step"].get("cuda syncs")
        sites = "; ".join(counts["step"]["sites"] + counts["logged step"]["sites"][1:]) or "none"
        rows.append(Row(f"host-syncs: {name}, {processes} process{'es' if processes > 1 else ''}", step, 0, step,
                        "0 (logged: 1)", step == 0 and logged == 1,
                        f"syncs of a step that does not log (ours) and of one that logs: {logged}; "
                        f"{counts['step']['ops']:,} aten ops per step, {counts['step']['launches']:,} of which launch "
                        f"kernels; syncs beyond the logged read: {sites}"
                        + ("" if cuda is None else f"; reported by CUDA: {len(cuda)} ({'; '.join(cuda) or 'none'})"),
                        unit="syncs"))
    return rows


@section("host-syncs")
def host_syncs(settings: Settings) -> list[Row]:
    """Every step type on one process (here) and on two (``torchrun``, on the CPU)."""
    names = ["train", "guide (Energy, B-cos at the input)", "distill (live e²KD)"] if settings.quick else None
    rows = _rows(step_counts.count_all(names), 1)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "counts.json"
        only = [arg for name in names or [] for arg in ("--only", name)]
        done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                               str(Path(step_counts.__file__)), "--json", str(out), *only], capture_output=True,
                              text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"})
        if done.returncode != 0:
            raise SystemExit(f"host-syncs: the two-process count failed:\n{done.stderr[-3000:]}")
        rows += _rows(json.loads(out.read_text())["results"], 2)
    return rows
