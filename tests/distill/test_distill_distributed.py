"""Distillation across processes and nodes.

* Frozen e²KD (B-cos → B-cos) on two nodes of one process each (``torchrun --nnodes 2`` on 127.0.0.1), from a cache
  the two nodes wrote together (``rightreasons cache``, each node its share of the shards), ends as the one-process
  run on that cache — weights, BatchNorm running statistics (the student's uncentred BatchNorm is synchronised) and
  validation metrics.
* Two nodes given cache directories of their own (nodes without a shared filesystem) both stop with the same
  ``error:`` line before computing any shard.
* B-cos CNN → B-cos ViT e²KD trains on two processes, live and frozen.

The other pairs under DDP: ``test_distill_train.py`` (B-cos → B-cos, live) and ``test_distill_wrapped.py`` (standard
→ standard GradCAM, live and frozen)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from rightreasons import create_model, save_model
from rightreasons.apps.cli import main
from rightreasons.config import from_dict
from rightreasons.distill import ExplanationCache
from rightreasons.distill import DistillConfig, write_teacher_cache

METRICS = ("accuracy", "agreement", "teacher_accuracy", "explanation_similarity", "epg", "iou")


@pytest.fixture(scope="module")
def frozen_runs(tmp_path_factory, launch) -> Path:
    """A cache of a B-cos teacher's explanations written by two nodes, then the frozen run on one process and on
    two nodes."""
    folder = tmp_path_factory.mktemp("frozen")
    torch.manual_seed(0)
    teacher = save_model(create_model("bcos_cifar10_resnet20", num_classes=2), folder / "teacher.safetensors")
    config = {
        "output_dir": str(folder / "one"), "seed": 1, "log_every": 1,
        "model": {"name": "bcos_cifar10_resnet20"}, "teacher": {"checkpoint": str(teacher)},
        "data": {"name": "synthetic-birds", "image_size": 32, "batch_size": 8, "eval_batch_size": 16,
                 "options": {"n": 32, "size": 32}},
        "optim": {"name": "sgd", "lr": 0.05, "momentum": 0.9, "epochs": 1},
        "eval": {"num_images": 0},
        "distill": {"explanation_weight": 1.0, "frozen": str(folder / "cache")},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    first_node, _ = launch(["cache", "--config", str(folder / "config.yaml"), "--out", str(folder / "cache"),
                            "--shard-size", "8"], nodes=2)
    assert "cache: 2/2 shards written by process 0" in first_node.stderr  # process 1 wrote the other two
    assert main(["distill", "--config", str(folder / "config.yaml")]) == 0
    launch(["distill", "--config", str(folder / "config.yaml"), f"output_dir={folder / 'nodes'}"], nodes=2)
    return folder


@pytest.mark.slow
def test_frozen_e2kd_on_two_nodes_equals_one_process(frozen_runs):
    reference = load_file(frozen_runs / "one" / "model.safetensors")
    got = load_file(frozen_runs / "nodes" / "model.safetensors")
    assert got.keys() == reference.keys() and any(k.endswith("running_var") for k in reference)
    difference = {k: (got[k].double() - reference[k].double()).abs().max().item() for k in reference}
    assert max(difference.values()) < 1e-5, max(difference.items(), key=lambda item: item[1])
    summaries = [json.loads((frozen_runs / name / "summary.json").read_text()) for name in ("one", "nodes")]
    assert summaries[0]["steps"] == summaries[1]["steps"] == 4
    for expected, record in zip(summaries[0]["history"], summaries[1]["history"], strict=True):
        for key in METRICS:
            assert record[key] == pytest.approx(expected[key], abs=1e-5), key


@pytest.mark.slow
def test_two_nodes_share_the_shards_of_one_cache(frozen_runs):
    """The cache the frozen runs trained on is complete: 32 images in 4 shards (each node wrote two)."""
    manifest = json.loads((frozen_runs / "cache" / "manifest.json").read_text())
    assert manifest["num_images"] == 32 and len(list((frozen_runs / "cache").glob("shard-*.safetensors"))) == 4
    assert len(ExplanationCache(frozen_runs / "cache")) == 32


@pytest.mark.slow
def test_nodes_without_a_shared_directory_refuse_to_write_a_cache(frozen_runs, launch):
    disks = [frozen_runs / f"disk-of-node-{node}" for node in (0, 1)]
    results = launch(["cache", "--config", str(frozen_runs / "config.yaml")], nodes=2,
                     node_args=[["--out", str(disk / "cache")] for disk in disks], check=False)
    for disk, result in zip(disks, results):
        assert result.returncode != 0
        assert f"rightreasons cache: error: {disk / 'cache'} is not one directory for all 2 processes: process(es) " \
            "[1] do not see the file process 0 wrote there" in result.stderr and "filesystem they share" in result.stderr
    assert not list(disks[0].rglob("shard-*")) and not list(disks[1].rglob("shard-*"))


@pytest.mark.slow
@pytest.mark.exhaustive  # test_distill_train and test_distill_wrapped run two-process e²KD in the suite
@pytest.mark.parametrize("frozen", [False, True], ids=["live", "frozen"])
def test_bcos_cnn_to_vit_e2kd_trains_on_two_processes(tmp_path, launch, frozen):
    config = {
        "output_dir": str(tmp_path / "run"), "max_steps": 2, "log_every": 1,
        "model": {"name": "bcos_simple_vit_ti_patch16_224",
                  "kwargs": {"image_size": 32, "patch_size": 8, "dim": 32, "depth": 2, "heads": 2, "mlp_dim": 64}},
        "teacher": {"name": "bcos_cifar10_resnet20", "kwargs": {"num_classes": 2}},
        "data": {"name": "synthetic-birds", "image_size": 32, "batch_size": 4, "eval_batch_size": 8,
                 "options": {"n": 8, "size": 32}},
        "optim": {"epochs": 1, "agc": None, "max_grad_norm": 1.0},
        "eval": {"num_images": 0}, "distill": {"explanation_weight": 1.0},
    }
    if frozen:
        config["distill"]["frozen"] = str(tmp_path / "cache")
        write_teacher_cache(from_dict(DistillConfig, config), tmp_path / "cache")
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    launch(["distill", "--config", str(tmp_path / "config.yaml")], processes=2)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["steps"] == 2 and 0 <= summary["history"][-1]["agreement"] <= 1
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert len(train) == 2 and all(math.isfinite(r["explanation"]) and r["explanation"] > 0 for r in train)
    assert (tmp_path / "run" / "checkpoints" / "step-000002" / "random_states_1.pkl").is_file()
