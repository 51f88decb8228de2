"""Fixtures of the crash and corruption tests: ``run_outcome(out)``, what a finished run leaves in ``out`` — the
final weights, the summary without wall-clock time, provenance and output directory, and the metrics log — so that a
killed-and-resumed run can be compared with an uninterrupted one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from safetensors.torch import load_file


def _outcome(out: Path) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    for key in ("seconds", "provenance"):
        summary.pop(key)
    summary["config"].pop("output_dir")
    weights = load_file(str(out / "model.safetensors"))
    return {"weights": {k: v.tolist() for k, v in weights.items()}, "summary": summary,
            "metrics": (out / "metrics.jsonl").read_text().splitlines()}


@pytest.fixture(scope="session")
def run_outcome() -> Callable[[Path], dict]:
    return _outcome
