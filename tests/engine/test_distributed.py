"""Distributed runs equal one process: the same guided run on 1 process, on 2 processes (``torchrun``) and on 2 nodes of
one process each (``torchrun --nnodes 2`` meeting at a c10d rendezvous on 127.0.0.1) ends with the same weights,
BatchNorm running statistics and validation metrics.

The model is a B-cos CIFAR ResNet-20 with its default uncentred BatchNorm, synchronised (``model.sync_bn``, the
default); guidance at ``mid2`` differentiates the explanation through the synchronised norms (second order). Half the
training images have boxes, so in some steps one process's part of the batch has no annotated image, or only
annotated ones, while the other's has both: the processes must still pair their all-reduces. SGD keeps float32
rounding (the sums over a batch split differently) at the 1e-7 level; Adam divides each gradient entry by its running
root mean square plus ε = 1e-8, so weights whose gradients are of the order of ε move by rounding-decided fractions of
the learning rate (up to 1.7e-3 apart after these 8 steps at lr 1e-3). No config says ``cpu: true``: on this machine
without CUDA, the multi-process launches must form one gloo group by themselves and train once.

A two-process run killed in its second epoch and resumed is the uninterrupted one, bit for bit: the epoch has to reach
the sampler through accelerate's wrappers of a resumed loader (skip → shard → batch sampler), which it once did not
(the resumed epoch repeated epoch 1's order and ended 2e-3 away).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rightreasons.apps.cli import main
from rightreasons.faults import KILL_VARIABLE

CONFIG = """
seed: 3
log_every: 1
model: {name: bcos_cifar10_resnet20}
data: {name: synthetic-birds, image_size: 32, batch_size: 8, eval_batch_size: 16, annotated_fraction: 0.5,
       options: {n: 32, seed: 1}}
optim: {name: sgd, lr: 0.05, momentum: 0.9, epochs: 2}
guidance: {weight: 1.0, layer: mid2}
eval: {num_images: 0}
"""
METRICS = ("accuracy", "worst_group_accuracy", "epg", "iou")
#: 4 steps per epoch and a checkpoint after each: the 6th is step 6, batch 2 of epoch 2
KILL_AT = "checkpoint: renamed into place:6"


@pytest.fixture(scope="module")
def runs(tmp_path_factory, launch) -> Path:
    """The run on one process (in this process), on two processes and on two nodes."""
    folder = tmp_path_factory.mktemp("distributed")
    (folder / "config.yaml").write_text(CONFIG)
    config = str(folder / "config.yaml")
    assert main(["guide", "--config", config, f"output_dir={folder / 'one'}"]) == 0
    launch(["guide", "--config", config, f"output_dir={folder / 'processes'}"], processes=2)
    launch(["guide", "--config", config, f"output_dir={folder / 'nodes'}"], nodes=2)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("launched", ["processes", "nodes"])
def test_synchronised_batchnorm_runs_on_two_processes_and_two_nodes_equal_one_process(runs, launched):
    reference, got = load_file(runs / "one" / "model.safetensors"), load_file(runs / launched / "model.safetensors")
    assert got.keys() == reference.keys()
    running = [k for k in reference if k.endswith(("running_var", "num_batches_tracked"))]
    assert len(running) == 2 * 21  # every BatchNorm's statistics are compared with the rest
    difference = {k: (got[k].double() - reference[k].double()).abs().max().item() for k in reference}
    assert max(difference.values()) < 1e-5, max(difference.items(), key=lambda item: item[1])
    assert all(torch.equal(got[k], reference[k]) for k in running if k.endswith("num_batches_tracked"))
    history = [json.loads((runs / name / "summary.json").read_text())["history"] for name in ("one", launched)]
    assert len(history[0]) == len(history[1]) == 2
    for expected, record in zip(*history):
        assert record["step"] == expected["step"]
        for key in METRICS:
            assert record[key] == pytest.approx(expected[key], abs=1e-5), key


@pytest.mark.slow
def test_a_cpu_only_multi_process_launch_without_cpu_true_trains_once(runs):
    """Both processes trained one run together (one gloo group): one record per step, and the second process's
    random state in the checkpoints; two independent runs would have logged every step twice or crashed."""
    run = runs / "processes"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["config"]["cpu"] is False and summary["steps"] == 8
    train = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["split"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 9))
    assert (run / "checkpoints" / "step-000008" / "random_states_1.pkl").is_file()


def _train_records(run: Path) -> list[dict]:
    return [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["split"] == "train"]


@pytest.mark.slow
def test_a_two_process_run_killed_in_epoch_2_and_resumed_equals_the_uninterrupted_run(runs, tmp_path, launch,
                                                                                       monkeypatch):
    """Killed with ``SIGKILL`` right after a checkpoint in the middle of epoch 2 (``RIGHTREASONS_FAULT_KILL``: rank 0
    dies at the boundary, the launcher then ends rank 1), then ``--resume``: the weights and every training record
    equal those of the uninterrupted two-process run."""
    (tmp_path / "config.yaml").write_text(CONFIG + "checkpoint: {every_steps: 1, keep_last: 1}\n")
    command = ["guide", "--config", str(tmp_path / "config.yaml"), f"output_dir={tmp_path / 'resumed'}"]
    with monkeypatch.context() as patch:
        patch.setenv(KILL_VARIABLE, KILL_AT)
        killed, = launch(command, processes=2, check=False)
    assert killed.returncode != 0 and not (tmp_path / "resumed" / "summary.json").exists(), killed.stderr[-3000:]
    state = json.loads((tmp_path / "resumed" / "checkpoints" / "step-000006" / "trainer_state.json").read_text())
    assert (state["epoch"], state["batch"]) == (1, 2)  # killed in the middle of epoch 2
    launch([*command, "--resume"], processes=2)

    whole, resumed = load_file(runs / "processes" / "model.safetensors"), \
        load_file(tmp_path / "resumed" / "model.safetensors")
    assert whole.keys() == resumed.keys()
    assert [k for k in whole if not torch.equal(whole[k], resumed[k])] == []
    assert _train_records(tmp_path / "resumed") == _train_records(runs / "processes")
