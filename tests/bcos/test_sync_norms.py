"""Synchronised batch statistics (``rightreasons.convert_sync_batchnorm``).

Two CPU processes (gloo; rank 0 in the test process, rank 1 spawned) each hold an uneven part of one float64 batch
(2 and 4 of 6 images). For every batch-statistics norm — uncentred and centred BatchNorm and AllNorm of the B-cos
layer kit, and torchvision's ``BatchNorm2d`` in a standard model — a synchronised model must give each process the
logits and explanation maps that one process computes for its images within the whole batch, parameter gradients of
an explanation loss whose sum over the processes is the one-process gradient (second order: the loss is on an
explanation taken with ``create_graph=True``, in explanation mode for the B-cos models), and the one-process running
statistics. A float64 central-difference check of the summed gradient closes the loop, and the per-process
statistics of an unsynchronised model are shown to differ, so the checks can fail.

A guided step (``GuidanceObjective``, B-cos contributions at ``mid2``) on processes whose parts of the batch differ —
one part without any annotated image, or with only annotated ones, beside a mixed part — must pair up the processes'
all-reduces (a mismatch would hang or mix up tensors) and give the one-process loss and gradients, explaining only the
annotated images or the whole batch; also with the stages checkpointed (``model.activation_checkpointing``), whose
recomputations in the backward take their statistics over the processes again.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

import rightreasons as rr
from rightreasons.bcos import norms, sync
from rightreasons.errors import UsageError
from rightreasons.explain import attribute
from rightreasons.guidance import GuidanceObjective
from rightreasons.models.checkpointing import checkpoint_stages
from rightreasons.models.resnet import BasicBlock, BcosResNet

KINDS = ("bnu", "bn", "anu", "an", "standard")
ROWS = (slice(0, 2), slice(2, 6))  # rank 0: two images, rank 1: four
FD_KINDS = ("bnu", "bn", "standard")
FD_EPS = 1e-6
#: images with boxes, which rows each process gets and whether the synchronised model's stages are checkpointed
#: (recomputed in the backward, statistics taken again over the processes): (mode, annotated, rows, checkpointed)
GUIDED = {"none-beside-mixed": ("annotated", [0, 0, 1, 0, 1, 0], ROWS, False),
          "only-annotated-beside-mixed": ("annotated", [1, 0, 1, 1, 1, 1], ROWS, False),
          "whole-batch-none-beside-mixed": ("batch", [0, 0, 1, 0, 1, 0], ROWS, False),
          "checkpointed-stages-mixed": ("annotated", [1, 0, 1, 0, 1, 1], ROWS, True)}


def build(kind: str) -> nn.Module:
    """A small float64 model of each kind, the same in every process (seeded)."""
    torch.manual_seed(0)
    if kind == "standard":
        model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                              nn.Conv2d(4, 4, 3, stride=2, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    else:
        model = BcosResNet(BasicBlock, [1, 1, 1], num_classes=3, inplanes=4, small_inputs=True,
                           norm_layer=norms.NORM_LAYERS[kind])
    return model.double().train()


def batch(kind: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    rgb = torch.rand(6, 3, 8, 8, generator=g, dtype=torch.float64)
    images = rgb if kind == "standard" else torch.cat([rgb, 1 - rgb], 1)
    return images, torch.tensor([0, 1, 2, 0, 1, 2])


def objective(model: nn.Module, kind: str, rows: slice) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Logits, explanation maps and the loss ``Σ_n (energy of the map's top-left quarter)² + 0.1 Σ logits²`` of the
    images ``rows`` (second order: the maps keep their graph)."""
    images, target = batch(kind)
    result = attribute(model, images[rows], target[rows], "ixg" if kind == "standard" else "bcos", create_graph=True)
    loss = (result.maps[:, :4, :4].sum((1, 2)) ** 2).sum() + 0.1 * (result.logits ** 2).sum()
    return result.logits, result.maps, loss


def guided(case: str, rows: slice, synchronised: bool) -> tuple[nn.Module, torch.Tensor]:
    """The model after a guided step's backward on the images ``rows`` of ``case``, and the step's loss (the sum over
    images of BCE and the energy loss, so that the processes' losses add up to the one-process loss)."""
    mode, annotated, _, checkpointed = GUIDED[case]
    model = rr.convert_sync_batchnorm(build("bnu")) if synchronised else build("bnu")
    if synchronised and checkpointed:
        checkpoint_stages(model)
    images = batch("bnu")[0][rows]
    n = images.shape[0]
    labels = torch.eye(3, dtype=torch.float64)[torch.tensor([0, 1, 2, 0, 1, 2])[rows]]
    boxes = [torch.tensor([[2.0, 2.0, 6.0, 7.0]])] * n
    box_labels = [label.argmax()[None] for label in labels]
    objective = GuidanceObjective("bcos", "mid2", "energy", reduction="sum", explain=mode)
    out = objective(model, images, labels, boxes, box_labels, torch.tensor(annotated, dtype=torch.bool)[rows])
    loss = nn.functional.binary_cross_entropy_with_logits(out.logits, labels, reduction="sum") + out.loss
    loss.backward()
    return model, loss.detach()


def running_statistics(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items() if "running" in k}


def global_loss(model: nn.Module, kind: str, rank: int) -> float:
    """The loss of the whole batch: each process's part, summed over the processes."""
    loss = objective(model, kind, ROWS[rank])[2].detach().clone()
    dist.all_reduce(loss)
    return loss.item()


def worker(rank: int) -> dict[str, dict]:
    """What one of the two processes computes, by model kind and guided case (gradients summed over processes)."""
    results = {}
    for kind in KINDS:
        model = rr.convert_sync_batchnorm(build(kind))
        logits, maps, loss = objective(model, kind, ROWS[rank])
        loss.backward()
        grads = [p.grad.clone() for p in model.parameters()]
        for g in grads:
            dist.all_reduce(g)
        result = {"logits": logits.detach(), "maps": maps.detach(), "grads": grads,
                  "running": running_statistics(model), "synced": sync.synchronised_batch_norms(model)}
        if kind in FD_KINDS:  # central differences of the global loss at a few entries of every parameter
            entries = []
            with torch.no_grad():
                for p, g in zip(model.parameters(), grads):
                    for i in range(min(2, p.numel())):
                        flat = p.view(-1)
                        flat[i] += FD_EPS
                        up = global_loss(model, kind, rank)
                        flat[i] -= 2 * FD_EPS
                        down = global_loss(model, kind, rank)
                        flat[i] += FD_EPS
                        entries.append(((up - down) / (2 * FD_EPS), g.view(-1)[i].item()))
            result["fd"] = entries
        results[kind] = result
    for case, (_, _, rows, _) in GUIDED.items():
        model, loss = guided(case, rows[rank], synchronised=True)
        grads = [p.grad.clone() for p in model.parameters()]
        for t in (loss, *grads):
            dist.all_reduce(t)
        results[case] = {"loss": loss, "grads": grads, "running": running_statistics(model)}
    return results


@pytest.fixture(scope="module")
def two_processes(gloo_processes) -> list[dict]:
    """What each of the two processes computed (see :func:`worker`)."""
    return gloo_processes(worker)


@pytest.mark.parametrize("kind", KINDS)
def test_two_synchronised_processes_equal_one_process_on_the_whole_batch(two_processes, kind):
    reference = build(kind)
    logits, maps, loss = objective(reference, kind, slice(None))
    loss.backward()
    for rank, results in enumerate(two_processes):
        got = results[kind]
        assert got["synced"] and len(got["synced"]) == sum(isinstance(m, nn.modules.batchnorm._BatchNorm)
                                                           for m in reference.modules())
        torch.testing.assert_close(got["logits"], logits.detach()[ROWS[rank]], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(got["maps"], maps.detach()[ROWS[rank]], rtol=1e-10, atol=1e-12)
        for g, p in zip(got["grads"], reference.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=1e-9, atol=1e-12)
        expected = running_statistics(reference)
        assert got["running"].keys() == expected.keys()
        for key, value in expected.items():
            torch.testing.assert_close(got["running"][key], value, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", FD_KINDS)
def test_synchronised_second_order_gradient_matches_finite_differences(two_processes, kind):
    for results in two_processes:
        fd, analytic = torch.tensor(results[kind]["fd"]).T
        assert (analytic - fd).norm() / fd.norm() < 1e-6, (fd, analytic)
        assert fd.abs().max() > 1e-3  # the perturbed entries matter


@pytest.mark.parametrize("case", GUIDED)
def test_guided_steps_on_processes_with_different_annotations_equal_one_process(two_processes, case):
    reference, loss = guided(case, slice(None), synchronised=False)
    for results in two_processes:
        got = results[case]
        torch.testing.assert_close(got["loss"], loss, rtol=1e-10, atol=1e-12)
        for g, p in zip(got["grads"], reference.parameters()):
            torch.testing.assert_close(g, p.grad, rtol=1e-9, atol=1e-12)
        for key, value in running_statistics(reference).items():
            torch.testing.assert_close(got["running"][key], value, rtol=1e-10, atol=1e-12)


def test_per_process_statistics_differ_from_the_whole_batch():
    """The control: without synchronisation a part of the batch is normalised with its own statistics."""
    whole = objective(build("bnu"), "bnu", slice(None))[1][ROWS[0]]
    alone = objective(build("bnu"), "bnu", ROWS[0])[1]
    assert (whole - alone).abs().max() > 1e-3


def test_conversion_of_a_standard_model_keeps_its_numerics_state_and_kind():
    torch.manual_seed(0)
    plain = rr.create_model("resnet18", num_classes=3).double()
    converted = rr.convert_sync_batchnorm(rr.create_model("resnet18", num_classes=3).double())
    converted.load_state_dict(plain.state_dict())
    assert not any(type(m) is nn.BatchNorm2d for m in converted.modules())
    assert sum(isinstance(m, sync.SyncBatchNorm2d) for m in converted.modules()) == 20
    assert converted.state_dict().keys() == plain.state_dict().keys()
    assert not rr.capabilities(converted).bcos
    x = torch.rand(4, 3, 32, 32, dtype=torch.float64)
    torch.testing.assert_close(converted.train()(x), plain.train()(x), rtol=1e-9, atol=1e-12)
    for key, value in plain.state_dict().items():  # running statistics updated as torch's BatchNorm2d does
        torch.testing.assert_close(converted.state_dict()[key], value, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(converted.eval()(x), plain.eval()(x), rtol=1e-9, atol=1e-12)
    assert sync.synchronised_batch_norms(converted.train()) == []  # one process: nothing to synchronise


def test_conversion_keeps_parameter_objects_and_b_cos_models_in_place():
    norm = nn.BatchNorm2d(4)
    synced = rr.convert_sync_batchnorm(norm)
    assert isinstance(synced, sync.SyncBatchNorm2d) and synced.weight is norm.weight
    assert synced.running_var is norm.running_var
    model = rr.create_model("bcos_resnet18", num_classes=3, inplanes=4)
    modules = dict(model.named_modules())
    assert rr.convert_sync_batchnorm(model) is model
    assert all(modules[name] is m for name, m in model.named_modules())
    assert all(m.synchronise for m in model.modules() if isinstance(m, norms.BatchNormUncentered2d))


def test_other_batch_norm_classes_are_refused_by_name():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.BatchNorm1d(4 * 30 * 30))
    with pytest.raises(UsageError, match=r"3 \(BatchNorm1d\).*model\.sync_bn=false"):
        rr.convert_sync_batchnorm(model)
