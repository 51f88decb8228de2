"""Reproducibility on CPU: two training runs with the same seed and config end with identical metrics and weights, a
run with another seed does not; every report and checkpoint records the resolved config and its provenance."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

import rightreasons
from rightreasons.config import from_dict, to_dict
from rightreasons.classification import ClassificationConfig
from rightreasons.engine import run


def config(output_dir: Path, seed: int) -> ClassificationConfig:
    """bcos_cifar10_resnet20 at 32 px on 32 synthetic-birds images: one epoch of 4 steps, then validation."""
    return from_dict(ClassificationConfig, {
        "output_dir": str(output_dir), "cpu": True, "seed": seed, "log_every": 1,
        "model": {"name": "bcos_cifar10_resnet20"},
        "data": {"name": "synthetic-birds", "image_size": 32, "batch_size": 8, "eval_batch_size": 32,
                 "options": {"n": 32, "seed": 1}},
        "optim": {"epochs": 1, "lr": 1e-3}, "eval": {"num_images": 0},
        "checkpoint": {"every_steps": 2, "keep_last": 2}})


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Runs "a" and "b" with seed 0, run "other" with seed 1 (single-threaded, as CPU reductions depend on the
    thread count)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("reproducibility")
    try:
        for name, seed in (("a", 0), ("b", 0), ("other", 1)):
            run(config(folder / name, seed))
    finally:
        torch.set_num_threads(threads)
    return {name: folder / name for name in ("a", "b", "other")}


def summary(run: Path) -> dict:
    return json.loads((run / "summary.json").read_text())


def train_records(run: Path) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["split"] == "train"]


def test_same_seed_gives_identical_metrics_and_weights(runs):
    a, b = summary(runs["a"]), summary(runs["b"])
    assert a["steps"] == 4 and len(a["history"]) == 1
    assert a["history"] == b["history"] and a["best"] == b["best"] and a["pareto_front"] == b["pareto_front"]
    assert train_records(runs["a"]) == train_records(runs["b"])
    weights_a, weights_b = load_file(runs["a"] / "model.safetensors"), load_file(runs["b"] / "model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    assert all(torch.equal(weights_a[k], weights_b[k]) for k in weights_a)


def test_another_seed_gives_other_weights(runs):
    weights_a, other = load_file(runs["a"] / "model.safetensors"), load_file(runs["other"] / "model.safetensors")
    assert any(not torch.equal(weights_a[k], other[k]) for k in weights_a)
    assert train_records(runs["a"]) != train_records(runs["other"])


def test_reports_and_checkpoints_record_config_and_provenance(runs):
    """summary.json, every checkpoint's trainer_state.json and the exported model carry the full resolved config
    (every schema key, defaults included) and the provenance: package and torch versions, git commit, command line."""
    run = runs["a"]
    resolved = to_dict(config(run, 0))
    head = subprocess.run(["git", "-C", str(Path(rightreasons.__file__).parents[1]), "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout.strip()
    states = [json.loads(p.read_text()) for p in sorted((run / "checkpoints").glob("step-*/trainer_state.json"))]
    assert len(states) == 2
    for record in [summary(run), *states]:
        assert record["config"] == resolved
        origin = record["provenance"]
        assert origin["rightreasons"] == rightreasons.__version__ and origin["torch"] == torch.__version__
        assert isinstance(origin["argv"], list) and origin["python"]
        if head:  # a git checkout: the commit of the code, marked when it has local changes
            assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", origin["git_commit"]) and origin["git_commit"][:40] == head
        else:
            assert origin["git_commit"] is None
    with safe_open(str(run / "model.safetensors"), framework="pt") as f:
        assert json.loads(f.metadata()["config"]) == resolved
