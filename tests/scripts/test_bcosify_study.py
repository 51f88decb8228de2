"""``scripts/bcosify_study.py --quick`` runs end to end (smoke: no result is asserted, only its shape)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from guards import GUARD_S

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bcosify_study.py"


@pytest.mark.exhaustive
def test_quick_study_writes_results_report_and_figure(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--out", str(tmp_path)], capture_output=True,
                            text=True, timeout=GUARD_S)
    assert result.returncode == 0, result.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert list(results["runs"]) == ["seed-0"]
    run = results["runs"]["seed-0"]
    assert len(run["curves"]["bcosified"]["accuracy"]) == results["settings"]["finetune_epochs"]
    assert len(run["curves"]["scratch"]["epg"]) == results["settings"]["scratch_epochs"]
    assert set(run["test"]) == {"standard", "bcosified", "scratch"}
    assert all(math.isfinite(run["test"][m]["accuracy"]) for m in run["test"])
    assert set(run["guidance"]) == {"bcosified_baseline", "bcosified_energy"}
    assert set(results["step_seconds"]) == {"standard", "bcosified", "scratch"}
    assert {"epochs", "wall_time", "wall_time_with_standard"} <= set(results["speed_up"])
    assert (tmp_path / "curves.png").stat().st_size > 0
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# B-cosification study") and "Worst-group gain of Energy guidance" in report
