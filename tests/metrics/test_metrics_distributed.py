"""Two CPU processes (gloo) each update the metrics with part of the data; compute() synchronises and must equal
the single-process value. Rank 0 runs in the test process and rank 1 in a spawned one, so that only one extra
interpreter has to import torch."""

import torch

from rightreasons.metrics import EnergyPointingGame, GroupAccuracy, IoU, MultiLabelClassification

SPLIT = 3   # rank 0 gets rows [0, 3), rank 1 rows [3, 10): uneven on purpose


def make_data():
    g = torch.Generator().manual_seed(1234)
    maps = torch.randn(10, 6, 6, generator=g)
    masks = torch.rand(10, 6, 6, generator=g) > 0.5
    maps[4] = 0.0                                          # a zero map on rank 1
    logits = torch.randn(10, 4, generator=g)
    labels = (torch.rand(10, 4, generator=g) > 0.5).long()
    labels[0] = 1
    target = torch.randint(0, 4, (10,), generator=g)
    groups = torch.randint(0, 3, (10,), generator=g)
    return maps, masks, logits, labels, target, groups


def evaluate(rows):
    maps, masks, logits, labels, target, groups = (d[rows] for d in make_data())
    metrics = {"epg": EnergyPointingGame(), "iou": IoU([0.2, 0.5]), "acc": GroupAccuracy(3),
               "cls": MultiLabelClassification(4)}
    metrics["epg"].update(maps, masks)
    metrics["iou"].update(maps, masks)
    metrics["acc"].update(logits, target, groups)
    metrics["cls"].update(logits, labels)
    return {name: m.compute() for name, m in metrics.items()}


def worker(rank):
    return evaluate(slice(0, SPLIT) if rank == 0 else slice(SPLIT, None))


def test_two_process_sync_equals_single_process(gloo_processes):
    distributed = gloo_processes(worker)
    expected = evaluate(slice(None))
    for got in distributed:
        torch.testing.assert_close(got["epg"], expected["epg"])
        torch.testing.assert_close(got["iou"], expected["iou"])
        for key, value in expected["acc"].items():
            torch.testing.assert_close(got["acc"][key], value)
        for key, value in expected["cls"].items():
            torch.testing.assert_close(got["cls"][key], value)
    # the partial data alone would give a different EPG: the sync did something
    assert not torch.allclose(evaluate(slice(0, SPLIT))["epg"], expected["epg"])
