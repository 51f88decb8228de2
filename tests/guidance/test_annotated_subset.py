"""Explaining only the annotated images of a batch equals explaining the whole batch.

The localisation loss, the logits, every parameter gradient (second order through the explanation) and the running
statistics after the step are compared, in float64, between ``explain="annotated"`` and ``explain="batch"``, for a
BatchNorm-uncentred and a PositionNorm B-cos ResNet at the input, ``mid2`` and ``final``, for the four methods. Where
the subset cannot be exact (non-B-cos methods through batch statistics, torchvision BatchNorm, DataParallel) the
objective must fall back to explaining the whole batch.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
import torchvision

from rightreasons.bcos.norms import shared_batch_statistics
from rightreasons.guidance import GuidanceObjective
from rightreasons.models.resnet import BasicBlock, BcosResNet

METHODS = ["bcos", "ixg", "gradcam", "intgrad"]
LAYERS = ["input", "mid2", "final"]


def _model(norm: str) -> BcosResNet:
    torch.manual_seed(0)
    model = BcosResNet(BasicBlock, [1, 1, 1], num_classes=5, inplanes=4, small_inputs=True, norm_layer=norm)
    return model.double().train()


def _batch(n: int = 6, size: int = 16):
    g = torch.Generator().manual_seed(1)
    rgb = torch.rand(n, 3, size, size, generator=g, dtype=torch.float64)
    images = torch.cat([rgb, 1 - rgb], 1)
    labels = torch.zeros(n, 5, dtype=torch.float64)
    labels[:, 0] = 1
    labels[::2, 3] = 1
    boxes = [torch.tensor([[2.0, 2.0, 9.0, 10.0], [6.0, 5.0, 14.0, 15.0]]) for _ in range(n)]
    box_labels = [torch.tensor([0, 3]) for _ in range(n)]
    has_boxes = torch.tensor([False, True, False, False, True, False])[:n]
    return images, labels, boxes, box_labels, has_boxes


def _step(model, objective: GuidanceObjective, batch):
    """One guided step's loss and gradients; returns (output, total loss, parameter gradients)."""
    images, labels, boxes, box_labels, has_boxes = batch
    out = objective(model, images, labels, boxes, box_labels, has_boxes, torch.Generator().manual_seed(0))
    total = F.binary_cross_entropy_with_logits(out.logits, labels) + 0.7 * out.loss
    grads = torch.autograd.grad(total, [p for p in model.parameters()], allow_unused=True)
    return out, total, grads


def _assert_steps_equal(model, method: str, layer: str, expect_subset: bool) -> None:
    batch = _batch()
    subset, whole = copy.deepcopy(model), copy.deepcopy(model)
    kwargs = {"method": method, "layer": layer, "loss": "energy", "reduction": "sum", "steps": 1}
    ours = GuidanceObjective(**kwargs, explain="annotated")
    assert ours.explains_annotated_only(subset, batch[-1]) == expect_subset
    out_a, total_a, grads_a = _step(subset, ours, batch)
    out_b, total_b, grads_b = _step(whole, GuidanceObjective(**kwargs, explain="batch"), batch)
    assert torch.equal(out_a.explained, batch[-1] if expect_subset else torch.ones(6, dtype=torch.bool))
    assert out_a.loss.abs() > 0
    torch.testing.assert_close(out_a.loss, out_b.loss, rtol=0, atol=1e-8)
    torch.testing.assert_close(out_a.logits, out_b.logits, rtol=0, atol=1e-8)
    torch.testing.assert_close(out_a.attributions[out_a.annotated], out_b.attributions[out_b.annotated], rtol=0,
                               atol=1e-8)
    for (name, _), ga, gb in zip(subset.named_parameters(), grads_a, grads_b):
        assert (ga is None) == (gb is None), name
        if ga is not None:
            torch.testing.assert_close(ga, gb, rtol=0, atol=1e-8, msg=lambda m: f"{name}: {m}")
    for (name, a), b in zip(subset.named_buffers(), whole.buffers()):  # running statistics updated exactly once
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("method", METHODS)
def test_position_norm_model_explains_the_annotated_images_only_and_exactly(method, layer):
    _assert_steps_equal(_model("pnu"), method, layer, expect_subset=True)


@pytest.mark.parametrize("layer", LAYERS)
@pytest.mark.parametrize("method", METHODS)
def test_batchnorm_model_equals_the_whole_batch(method, layer):
    """B-cos explanations hold the batch statistics constant, so only the statistics' graph (shared) links the images:
    the subset is exact. The other methods' batched gradients carry cross-sample terms through the statistics: the
    whole batch is explained."""
    _assert_steps_equal(_model("bnu"), method, layer, expect_subset=method == "bcos")


def test_the_subset_costs_one_update_of_the_running_statistics():
    model = _model("bnu")
    images = _batch()[0]
    before = model.bn1.num_batches_tracked.item()
    with shared_batch_statistics(model):
        model(images)
        model(images[:2])
    assert model.bn1.num_batches_tracked.item() == before + 1
    reference = _model("bnu")
    reference(images)
    torch.testing.assert_close(model.bn1.running_var, reference.bn1.running_var, rtol=0, atol=0)


def test_models_whose_statistics_cannot_be_shared_explain_the_whole_batch():
    has_boxes = _batch()[-1]
    objective = GuidanceObjective(method="gradcam", layer="final")
    torchvision_bn = torchvision.models.resnet18(num_classes=5).train()
    assert not objective.explains_annotated_only(torchvision_bn, has_boxes)
    assert objective.explains_annotated_only(torchvision_bn.eval(), has_boxes)  # running statistics: per sample
    with pytest.raises(ValueError, match="cannot share batch statistics of BatchNorm2d module 'bn1'"):
        with shared_batch_statistics(torchvision_bn.train()):
            pass
    bcos = GuidanceObjective(method="bcos")
    assert not bcos.explains_annotated_only(torch.nn.DataParallel(_model("pnu")), has_boxes)
    assert not bcos.explains_annotated_only(_model("pnu"), torch.ones(6, dtype=torch.bool))  # all annotated
    assert not GuidanceObjective(method="bcos", explain="batch").explains_annotated_only(_model("pnu"), has_boxes)
    with pytest.raises(ValueError, match="explain must be one of"):
        GuidanceObjective(explain="some")
