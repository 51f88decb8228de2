"""No step of the engine waits for the device: a step that does not log makes no host sync, a step that logs makes
exactly one (the read of its losses and skip flags), for every step type — plain, guided (B-cos and GradCAM), e²KD
live and frozen, the robustness objectives — on one process and under DDP (two processes, gloo). Counted with
``rightreasons.measure.StepCounter`` by ``scripts/step_counts.py`` (``make bench``, section ``host-syncs``): the
counts are deterministic, and a failure names the line of each sync."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from guards import GUARD_S

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "step_counts.py"


def _step_counts():
    spec = importlib.util.spec_from_file_location("step_counts", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _assert_no_waits(results: dict) -> None:
    for name, counts in results.items():
        assert counts["step"]["syncs"] == 0, f"{name}: a step that does not log waits for the device: " \
                                             f"{counts['step']['sites']}"
        assert counts["logged step"]["syncs"] == 1, f"{name}: a logged step: {counts['logged step']['sites']}"
        assert counts["logged step"]["sites"][0].startswith("tolist at step_guard.py")


def test_no_step_type_waits_for_the_device_on_one_process():
    module = _step_counts()
    results = module.count_all()
    assert set(results) == set(module.STEP_TYPES)
    _assert_no_waits(results)


def test_no_step_type_waits_for_the_device_under_ddp(tmp_path):
    out = tmp_path / "counts.json"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(SCRIPT), "--json", str(out)], capture_output=True, text=True, timeout=GUARD_S)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = json.loads(out.read_text())
    assert counts["processes"] == 2
    _assert_no_waits(counts["results"])


def test_a_read_in_the_step_is_caught_and_named(monkeypatch):
    """The meter is not blind: a task that reads its loss every step (what the engine used to do) is one sync more
    per step, named by its line."""
    from rightreasons.guidance import GuidanceTask

    module, name = _step_counts(), "guide (Energy, B-cos at the input)"
    losses = GuidanceTask.losses

    def reading(self, model, batch, step):
        terms, total = losses(self, model, batch, step)
        total.item()
        return terms, total

    monkeypatch.setattr(GuidanceTask, "losses", reading)
    counts = module.count_all([name])[name]
    assert counts["step"]["syncs"] == 1 and counts["logged step"]["syncs"] == 2
    assert counts["step"]["sites"] == [f"_local_scalar_dense at test_host_syncs.py:{reading.__code__.co_firstlineno + 2}"
                                       " in reading"]
