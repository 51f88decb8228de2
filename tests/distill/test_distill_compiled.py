"""An e²KD step compiled whole (``compile``): the same terms and parameter gradients as the eager step (with the
ground-truth term too), one graph without a break; attention transfer, whose hooks the route cannot run, stays eager
with a warning."""

from __future__ import annotations

import logging

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

import rightreasons
from rightreasons.distill import DistillObjective, teacher_outputs


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@pytest.fixture(scope="module")
def setup():
    """A tiny B-cos ResNet-18 student in training mode, its state, images, labels and a teacher's outputs."""
    torch.manual_seed(0)
    student = rightreasons.create_model("bcos_resnet18", num_classes=5, inplanes=4).train()
    teacher = rightreasons.create_model("bcos_resnet18", num_classes=5, inplanes=8).eval()
    images = torch.rand(4, 6, 32, 32)
    labels = F.one_hot(torch.tensor([0, 3, 1, 3]), 5).float()
    return student, {k: v.clone() for k, v in student.state_dict().items()}, images, labels, teacher


def _step(objective, setup):
    """The objective's terms and total and the student's parameter gradients after one step from its state."""
    student, state, images, labels, teacher = setup
    student.load_state_dict(state)
    student.zero_grad(set_to_none=True)
    out = objective(student, images, teacher_outputs(teacher, images, objective.method, objective.layer,
                                                      objective.teacher_at_layers), labels)
    out.total.backward()
    return out, torch.cat([p.grad.flatten() for p in student.parameters()])


def test_a_compiled_e2kd_step_equals_the_eager_one(setup):
    settings = dict(method="bcos_weights", layer="input", temperature=2.0, explanation_weight=5.0, gt_weight=0.5,
                    classification=F.binary_cross_entropy_with_logits)
    eager = _step(DistillObjective(**settings), setup)
    compiled = _step(DistillObjective(**settings, compile="aot_eager"), setup)
    assert set(compiled[0].terms) == {"kd", "explanation", "classification"} == set(eager[0].terms)
    for name, term in eager[0].terms.items():
        torch.testing.assert_close(compiled[0].terms[name], term, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(compiled[0].total, eager[0].total, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(compiled[0].explanations, eager[0].explanations, rtol=1e-5, atol=1e-7)
    assert (compiled[1] - eager[1]).norm() <= 1e-4 * eager[1].norm()  # float32 rounding (test_compiled_guidance)


def test_the_compiled_e2kd_step_is_one_graph(setup):
    student, _, images, labels, teacher = setup
    objective = DistillObjective("bcos_weights", "input", explanation_weight=1.0, compile="aot_eager")
    t = teacher_outputs(teacher, images, "bcos_weights", "input")
    report = torch._dynamo.explain(objective.compiled.fn)(student, images, t.logits, t.explanations, labels, 1.0)
    assert report.graph_break_count == 0, report.break_reasons
    assert report.graph_count == 1


def test_attention_transfer_runs_eagerly_with_a_warning(setup, caplog):
    settings = dict(method="bcos_weights", layer="input", explanation_weight=1.0, at_weight=10.0,
                    at_layers=("mid1",))
    eager = _step(DistillObjective(**settings), setup)
    with caplog.at_level(logging.WARNING, logger="rightreasons.explain.functional"):
        fallback = _step(DistillObjective(**settings, compile="aot_eager"), setup)
    assert [r.getMessage() for r in caplog.records if r.name == "rightreasons.explain.functional"] == [
        "compile: the e²KD step runs eagerly (only the model is compiled): attention transfer captures layer "
        "outputs by hooks"]
    assert fallback[0].terms.keys() == eager[0].terms.keys()
    assert torch.equal(fallback[0].total, eager[0].total) and torch.equal(fallback[1], eager[1])
