"""The one evaluation loop on two processes equals one process (``rightreasons.metrics.evaluation.evaluate``).

Seven validation images (not divisible by two) with evaluation batches of two, so both processes end on an uneven last
batch: classification, localisation (EPG, IoU) and teacher-fidelity metrics computed by two CPU processes (gloo; rank
0 in the test process, rank 1 spawned) equal those of one process, and every image is scored exactly once — no image
dropped and none repeated to pad a shard, as a ``DistributedSampler`` would.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.distributed as dist

import rightreasons as rr
from rightreasons.data import eval_transform, load_dataset
from rightreasons.distill import FidelityEvaluator
from rightreasons.metrics.evaluation import classifier_evaluators, evaluate

IMAGES = 7


class SeenImages:
    """An evaluator that reports how often each image id was scored, over every process."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def update(self, model, batch: dict[str, Any], logits) -> None:
        self.ids += [str(i) for i in batch["id"]]

    def compute(self) -> dict[str, Any]:
        shards = [self.ids]
        if dist.is_initialized():
            shards = [None] * dist.get_world_size()
            dist.all_gather_object(shards, self.ids)
        seen = [i for shard in shards for i in shard]
        return {"seen": {i: seen.count(i) for i in seen}}


def results(rank: int = 0, world_size: int = 1) -> dict[str, Any]:
    """Every evaluator's results on the seven images, as process ``rank`` of ``world_size`` reports them."""
    torch.manual_seed(0)
    model = rr.create_model("bcos_cifar10_resnet20", num_classes=2)
    teacher = rr.create_model("bcos_cifar10_resnet20", num_classes=2)
    dataset = load_dataset("synthetic-birds", None, "val", n=IMAGES, size=32,
                           transform=eval_transform(32, encoding="bcos", crop_fraction=1.0))
    assert len(dataset) == IMAGES
    evaluators = [*classifier_evaluators(dataset, "bcos", "mid2", batch_size=2),
                  FidelityEvaluator(teacher, method="bcos_weights", layer="input", group_names=dataset.group_names),
                  SeenImages()]
    return evaluate(model, dataset, evaluators, batch_size=2, device="cpu", rank=rank, world_size=world_size)


def test_two_processes_score_an_odd_sized_dataset_as_one_process(gloo_processes):
    distributed = gloo_processes(results, 2)
    expected = results()
    assert sorted(expected["seen"].values()) == [1] * IMAGES
    assert {"accuracy", "worst_group_accuracy", "epg", "iou", "agreement", "explanation_similarity"} <= expected.keys()
    for got in distributed:
        assert got["seen"] == expected["seen"]  # every image once, on one of the processes
        assert got.keys() == expected.keys()
        for key, value in expected.items():
            exact = isinstance(value, (str, dict))  # worst group's name, score metric, images seen
            assert got[key] == (value if exact else pytest.approx(value, rel=1e-5, abs=1e-6)), key
