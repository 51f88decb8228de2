"""Choosing the model on validation: ``eval.select`` names the metric, ``checkpoint.export: best`` exports the weights
of the best validation instead of the last ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rightreasons.config import from_dict
from rightreasons.classification import ClassificationConfig
from rightreasons.engine import run
from rightreasons.errors import ConfigError, TrainingError


def _config(out: Path, **sections) -> ClassificationConfig:
    raw = {"output_dir": str(out), "cpu": True, "seed": 5,  # a seed whose best validation is not its last
           "model": {"name": "bcos_resnet18", "kwargs": {"inplanes": 4}},
           "data": {"name": "synthetic-birds", "image_size": 32, "batch_size": 8, "eval_batch_size": 16,
                    "options": {"n": 32, "size": 32, "correlation": 1.0}},
           "optim": {"name": "adam", "lr": 0.1, "epochs": 4},
           "eval": {"num_images": 0, "localization": False, "select": "worst_group_accuracy"},
           "checkpoint": {"keep_last": 1, "export": "best"}}
    for key, value in sections.items():
        raw[key] = {**raw.get(key, {}), **value}
    return from_dict(ClassificationConfig, raw)


@pytest.fixture(scope="module")
def selected_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("selection") / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run(_config(out))
    finally:
        torch.set_num_threads(threads)
    return out


def test_the_best_validation_by_the_selected_metric_is_exported(selected_run):
    summary = json.loads((selected_run / "summary.json").read_text())
    history = summary["history"]
    values = [record["worst_group_accuracy"] for record in history]
    best = history[values.index(max(values))]  # the first of equal maxima
    assert summary["best"] == {"step": best["step"], "score": best["worst_group_accuracy"],
                               "metric": "worst_group_accuracy"}
    assert summary["exported_step"] == best["step"] != summary["steps"]  # (this run's best is not its last step)
    exported = load_file(str(selected_run / "model.safetensors"))
    kept = load_file(str(selected_run / "checkpoints" / f"step-{best['step']:06d}" / "model.safetensors"))
    assert exported.keys() == kept.keys() and all(torch.equal(exported[k], kept[k]) for k in kept)


def test_the_balanced_validation_split_reports_every_group(selected_run):
    record = json.loads((selected_run / "summary.json").read_text())["history"][0]
    groups = [k for k in record if k.startswith("accuracy/G")]
    assert len(groups) == 4  # a biased (correlation 1) validation split would hold only G1 and G4


def test_an_unknown_selection_metric_names_the_metrics_there_are(tmp_path):
    config = _config(tmp_path / "run", eval={"select": "wrost_group_accuracy"}, optim={"epochs": 1})
    with pytest.raises(TrainingError, match=r"eval.select='wrost_group_accuracy' is not a validation metric of this "
                                             r"run; it reports \[.*'worst_group_accuracy'"):
        run(config)
    with pytest.raises(ConfigError, match="checkpoint.export"):
        _config(tmp_path / "other", checkpoint={"export": "first"})


def _stop(values: list[float], patience: int) -> int:
    """How many validations a run with early stopping makes, by the rule written out: it stops after the first
    validation that is the ``patience``-th in a row without a new (strict) best."""
    best, since = float("-inf"), 0
    for i, value in enumerate(values, 1):
        best, since = (value, 0) if value > best else (best, since + 1)
        if since >= patience:
            return i
    return len(values)


LONG = {"optim": {"epochs": 6}}


@pytest.fixture(scope="module")
def long_run(tmp_path_factory) -> dict:
    """The summary of the selection run trained for 6 epochs without early stopping."""
    out = tmp_path_factory.mktemp("long") / "run"
    run(_config(out, **LONG))
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("patience", [1, 2])
def test_early_stopping_ends_the_run_where_the_rule_says_and_exports_the_best(long_run, tmp_path, patience):
    """The same run with ``eval.patience``: its validations are the first ones of the full run, up to where the rule
    stops it, and the best of those is exported."""
    values = [record["worst_group_accuracy"] for record in long_run["history"]]
    expected = _stop(values, patience)
    assert _stop(values, 1) < len(values)  # this run does stop early
    out = tmp_path / "run"
    run(_config(out, eval={"patience": patience}, **LONG))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["history"] == long_run["history"][:expected]
    assert summary["stopped_early"] == (expected < len(values))
    assert summary["steps"] == long_run["history"][expected - 1]["step"]
    kept = values[:expected]
    assert summary["exported_step"] == long_run["history"][kept.index(max(kept))]["step"]


def test_patience_must_be_a_positive_integer(tmp_path):
    with pytest.raises(ConfigError, match="patience"):
        _config(tmp_path, eval={"patience": 0})
