"""The grid runner: runs in order; a finished run is kept only when it was trained with the same config, an interrupted
one resumes, a new one starts; failures are reported per run."""

from __future__ import annotations

import json
import logging

import pytest

from rightreasons.classification import ClassificationConfig, OptimConfig
from rightreasons.config import to_dict
from rightreasons.engine.grid import GridRun, run_grid
from rightreasons.errors import TrainingError


def _run(tmp_path, name, lr=1e-3):
    return GridRun(name, ClassificationConfig(output_dir=str(tmp_path / name), optim=OptimConfig(lr=lr)))


def _finish(run):
    run.output_dir.mkdir(parents=True, exist_ok=True)
    (run.output_dir / "summary.json").write_text(json.dumps({"config": to_dict(run.config)}))


def test_new_runs_start_interrupted_ones_resume_finished_ones_are_kept(tmp_path, caplog):
    new, partial, done = (_run(tmp_path, name) for name in ("new", "partial", "done"))
    (partial.output_dir / "checkpoints" / "step-000002").mkdir(parents=True)
    _finish(done)
    calls = []

    def execute(run, resume):
        calls.append((run.name, resume))
        return run.name != "partial"

    with caplog.at_level(logging.INFO, logger="rightreasons.engine.grid"):
        outcomes = run_grid([new, partial, done], execute)
    assert calls == [("new", False), ("partial", True)]
    assert {name: o.status for name, o in outcomes.items()} == {"new": "trained", "partial": "failed",
                                                                "done": "skipped"}
    assert "[3/3] done: done, skipped" in caplog.text and "[2/3] partial: failed after" in caplog.text


def test_a_finished_run_of_another_config_is_refused_never_reused(tmp_path):
    _finish(_run(tmp_path, "run", lr=1e-3))
    with pytest.raises(TrainingError, match=r"holds a finished run of another config .*optim\.lr: 0\.001 != 0\.01"):
        run_grid([_run(tmp_path, "run", lr=1e-2)], lambda run, resume: pytest.fail("trained again"))
    assert run_grid([_run(tmp_path, "run", lr=1e-3)], lambda run, resume: pytest.fail("trained again"))[
        "run"].status == "skipped"


def test_a_run_written_before_an_option_existed_is_kept_while_the_option_stays_at_its_default(tmp_path):
    """A finished run whose recorded config lacks an option added since (``data.rotation``: the regions study's 114
    runs were refused for it) was trained as that option's default says, so it is kept; with the option set to
    anything else, or with a key the record holds at another value, it is refused, naming the key."""
    from dataclasses import replace

    run = _run(tmp_path, "run")
    _finish(run)
    summary = run.output_dir / "summary.json"
    recorded = json.loads(summary.read_text())
    del recorded["config"]["data"]["rotation"]
    summary.write_text(json.dumps(recorded))
    never = lambda run, resume: pytest.fail("trained again")  # noqa: E731
    assert run_grid([run], never)["run"].status == "skipped"
    rotated = GridRun("run", replace(run.config, data=replace(run.config.data, rotation=10.0)))
    with pytest.raises(TrainingError, match=r"another config \(data\.rotation: None != 10\.0\)"):
        run_grid([rotated], never)
    del recorded["config"]["optim"]  # a whole section missing is not an option added at its default
    summary.write_text(json.dumps(recorded))
    with pytest.raises(TrainingError, match=r"another config \(optim: None != \{"):
        run_grid([run], never)
