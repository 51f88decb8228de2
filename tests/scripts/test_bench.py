"""``scripts/bench.py --quick`` runs end to end (a smoke test: no timing is asserted)."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench.py"


def test_quick_benchmark_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--device", "cpu", "--json", str(out)],
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    assert "| section | ours (s) | reference (s) | ratio | target | pass/fail |" in result.stdout
    sections = [row["section"] for row in json.loads(out.read_text())["results"]]
    assert {"bcos-forward-backward", "explain-batched", "e2kd-frozen-step", "e2kd-cache-loader",
            "bcosify-speedup", "sync-bn-step"} <= set(sections)
    for name in sections:
        assert f"| {name} |" in result.stdout
