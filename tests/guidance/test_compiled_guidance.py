"""A guided step compiled whole (``compile``): the same output, loss and parameter gradients as the eager step for
every localisation loss, one graph without a break, no new compilation for a batch with other annotated images; what
the functional route does not cover runs eagerly with a warning."""

from __future__ import annotations

import logging

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import rightreasons
from rightreasons.guidance import GuidanceObjective


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@pytest.fixture(scope="module")
def setup():
    """A tiny B-cos ResNet-18 in training mode, its state, and a batch of four images (one without boxes)."""
    torch.manual_seed(0)
    model = rightreasons.create_model("bcos_resnet18", num_classes=5, inplanes=4).train()
    images = torch.rand(4, 6, 32, 32)
    labels = F.one_hot(torch.tensor([0, 3, 1, 3]), 5).float()
    boxes = [torch.tensor([[4.0, 4.0, 20.0, 24.0]]) for _ in range(4)]
    box_labels = [labels[n].nonzero()[:, 0] for n in range(4)]
    return model, {k: v.clone() for k, v in model.state_dict().items()}, (images, labels, boxes, box_labels)


def _step(objective, model, state, batch, has_boxes):
    """The objective's output, its total loss and the parameter gradients after one step from ``state``."""
    images, labels, boxes, box_labels = batch
    model.load_state_dict(state)
    model.zero_grad(set_to_none=True)
    out = objective(model, images, labels, boxes, box_labels, has_boxes, torch.Generator().manual_seed(0))
    total = F.binary_cross_entropy_with_logits(out.logits, labels) + out.loss
    total.backward()
    return out, total.detach(), torch.cat([p.grad.flatten() for p in model.parameters()])


@pytest.mark.parametrize("loss, tolerance", [("energy", 1e-4), ("ppce", 1e-2)])
def test_a_compiled_guided_step_equals_the_eager_one(setup, loss, tolerance):
    """Gradients within float32 rounding, as the norm of their difference to theirs: a traced B-cos unit sums its
    patch norms by a convolution (faster to compile), which rounds otherwise, and PPCE's log of the normalised
    attributions near 0 amplifies rounding a hundredfold."""
    model, state, batch = setup
    has_boxes = torch.tensor([True, False, True, True])
    eager = _step(GuidanceObjective("bcos", "input", loss), model, state, batch, has_boxes)
    compiled = _step(GuidanceObjective("bcos", "input", loss, compile="aot_eager"), model, state, batch, has_boxes)
    for name in ("loss", "logits", "classes", "masks", "annotated"):
        torch.testing.assert_close(getattr(compiled[0], name), getattr(eager[0], name), rtol=1e-5, atol=1e-6)
    # the eager step explains the annotated images alone (exactly), the compiled one the whole batch
    assert torch.equal(eager[0].explained, has_boxes) and compiled[0].explained.all()
    torch.testing.assert_close(compiled[0].attributions[has_boxes], eager[0].attributions[has_boxes], rtol=1e-5,
                               atol=1e-6)
    torch.testing.assert_close(compiled[1], eager[1], rtol=1e-5, atol=1e-6)
    assert (compiled[2] - eager[2]).norm() <= tolerance * eager[2].norm()


def test_the_compiled_step_is_one_graph_compiled_once_for_every_annotated_set(setup):
    model, state, batch = setup
    objective = GuidanceObjective("bcos", "input", "energy", compile="aot_eager")
    images, labels = batch[:2]
    report = torch._dynamo.explain(objective.compiled.fn)(model, images, labels.argmax(1),
                                                          torch.ones(4, 32, 32, dtype=torch.bool),
                                                          torch.ones(4, dtype=torch.bool), 1.0)
    assert report.graph_break_count == 0, report.break_reasons
    assert report.graph_count == 1
    torch._dynamo.reset()
    compiled = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for has_boxes in ([True, False, True, True], [False, True, False, False], [True, True, True, True]):
        _step(objective, model, state, batch, torch.tensor(has_boxes))
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == compiled + 1


def test_what_the_functional_route_does_not_cover_runs_eagerly_with_a_warning(setup, caplog):
    model, state, batch = setup
    has_boxes = torch.tensor([True, False, True, True])
    eager = _step(GuidanceObjective("gradcam", "mid2", "energy"), model, state, batch, has_boxes)
    compiled = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with caplog.at_level(logging.WARNING, logger="rightreasons.explain.functional"):
        objective = GuidanceObjective("gradcam", "mid2", "energy", compile="aot_eager")
        fallback = [_step(objective, model, state, batch, has_boxes) for _ in range(2)]
    assert [r.getMessage() for r in caplog.records if r.name == "rightreasons.explain.functional"] == [
        "compile: the guided step runs eagerly (only the model is compiled): it explains with 'gradcam' at 'mid2'; "
        "compiled steps explain with ['bcos', 'bcos_weights'] at the input"]
    for got in fallback:
        assert torch.equal(got[1], eager[1]) and torch.equal(got[2], eager[2])
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == compiled  # nothing was compiled
