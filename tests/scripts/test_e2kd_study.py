"""``scripts/e2kd_study.py --quick`` runs both studies end to end (smoke: no result is asserted, only its shape)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from guards import GUARD_S

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "e2kd_study.py"


@pytest.mark.parametrize("study, metrics, images", [
    ("limited-data", {"accuracy", "agreement", "explanation_similarity"}, 2 * 6),   # 2 shots x 6 shape classes
    pytest.param("unbiased-teacher", {"accuracy", "ood_accuracy", "agreement", "ood_agreement",
                                      "explanation_similarity"}, 48, marks=pytest.mark.exhaustive),
])
def test_quick_study_writes_results_and_report(tmp_path, study, metrics, images):
    result = subprocess.run([sys.executable, str(SCRIPT), study, "--quick", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=GUARD_S)
    assert result.returncode == 0, result.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["study"] == study and list(results["runs"]) == ["seed-0"]
    for mode in ("kd", "e2kd", "e2kd_frozen"):
        assert set(results["summary"][mode]) == metrics
        assert all(math.isfinite(v) for v in results["runs"]["seed-0"][mode].values())
    # the frozen students read one cache of the teacher, written for exactly their training images
    assert json.loads((tmp_path / "teacher-cache" / "manifest.json").read_text())["num_images"] == images
    report = (tmp_path / "report.md").read_text()
    assert f"# e²KD study `{study}`" in report and "| e²KD (frozen) |" in report


@pytest.mark.exhaustive
def test_quick_cache_format_study_trains_from_a_float16_and_a_compact_cache(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), "limited-data", "--quick", "--cache-formats", "--out",
                             str(tmp_path)], capture_output=True, text=True, timeout=GUARD_S)
    assert result.returncode == 0, result.stderr
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["summary"]) == {"frozen_float16", "frozen_compact"}
    for name in ("float16", "compact"):
        manifest = json.loads((tmp_path / f"teacher-cache-{name}" / "manifest.json").read_text())
        assert manifest["explanation_format"] == name and manifest["num_images"] == 2 * 6
        assert all(math.isfinite(v) for v in results["runs"]["seed-0"][f"frozen_{name}"].values())
    report = (tmp_path / "report.md").read_text()
    assert "| frozen e²KD, compact cache |" in report and "within one std" in report
