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
