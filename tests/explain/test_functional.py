"""The functional route of explanations (``functional_attribute``, ``CompiledStep``): the same explanations as
``attribute`` (float64, with a loss scale too), refused for what it does not cover; a compiled step runs on the bare
model through the wrappers, and where it cannot run a warning says why, once."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

import rightreasons
from rightreasons.errors import UsageError
from rightreasons.explain import CompiledStep, attribute, functional_attribute
from rightreasons.explain.functional import functional_refusal
from rightreasons.models.checkpointing import checkpoint_stages


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return rightreasons.create_model("bcos_resnet18", num_classes=3, inplanes=4).train()


@pytest.mark.parametrize("method", ["bcos", "bcos_weights"])
@pytest.mark.parametrize("grad_scale", [1.0, 1024.0])
def test_functional_attribute_equals_attribute(method, grad_scale):
    """Float64 in training mode: logits, maps, weights and the parameter gradients of a loss on the explanation."""
    model = _model().double()
    x = torch.rand(2, 6, 16, 16, dtype=torch.float64)
    target = torch.tensor([2, 0])
    results = {}
    for name, explain in {"attribute": lambda: attribute(model, x, target, method, create_graph=True,
                                                         grad_scale=grad_scale),
                          "functional": lambda: functional_attribute(model, x, target, method,
                                                                     grad_scale=grad_scale)}.items():
        model.zero_grad(set_to_none=True)
        result = explain()
        (result.explanation.square().sum() + result.logits.sum()).backward()
        results[name] = (result.logits, result.maps, result.weights,
                         torch.cat([p.grad.flatten() for p in model.parameters()]))
    for got, expected in zip(results["functional"], results["attribute"]):
        torch.testing.assert_close(got, expected, rtol=1e-7, atol=1e-9)


def test_functional_attribute_refuses_other_methods_and_standard_models():
    x, target = torch.rand(2, 6, 16, 16), torch.tensor([0, 1])
    with pytest.raises(UsageError, match="functional route"):
        functional_attribute(_model(), x, target, "gradcam")
    with pytest.raises(UsageError, match="needs a B-cos model"):
        functional_attribute(rightreasons.create_model("resnet18", num_classes=3), x[:, :3], target)


def test_functional_refusal_names_what_the_route_does_not_cover():
    model = _model()
    assert functional_refusal(model, "bcos", "input") is None
    assert functional_refusal(torch.compile(model, backend="eager"), "bcos_weights", "input") is None
    assert "'gradcam' at 'final'" in functional_refusal(model, "gradcam", "final")
    assert "at 'mid2'" in functional_refusal(model, "bcos", "mid2")
    assert "DataParallel" in functional_refusal(torch.compile(nn.DataParallel(model), backend="eager"), "bcos",
                                                "input")
    foreign = nn.Sequential(model, nn.Unflatten(1, (3, 1, 1)), nn.BatchNorm2d(3)).train()
    assert "BatchNorm2d module '2'" in functional_refusal(foreign, "bcos", "input")
    checkpoint_stages(model, ["mid2"])
    assert "checkpointed" in functional_refusal(model, "bcos", "input")


def test_a_compiled_step_runs_on_the_bare_model_and_warns_once_where_it_cannot(caplog):
    model = _model()
    calls = []

    def fn(bare: nn.Module, x: torch.Tensor) -> torch.Tensor:
        calls.append(bare)
        return functional_attribute(bare, x, torch.tensor([1, 2])).maps

    wrapped = torch.compile(model, backend="eager")
    step = CompiledStep(fn, "aot_eager", "test step", "bcos", "input")
    assert step.runs(wrapped) and calls == []
    maps = step(wrapped, torch.rand(2, 6, 16, 16))
    assert calls == [model] and maps.shape == (2, 16, 16)  # traced once, with the bare model
    assert not CompiledStep(fn, "no", "test step", "bcos", "input").runs(model)
    refused = CompiledStep(fn, "aot_eager", "test step", "gradcam", "final")
    with caplog.at_level(logging.WARNING, logger="rightreasons.explain.functional"):
        assert not refused.runs(model) and not refused.runs(model)
        assert not CompiledStep(fn, "aot_eager", "test step", "bcos", "input", "a reason of its own").runs(model)
    messages = [r.getMessage() for r in caplog.records if r.name == "rightreasons.explain.functional"]
    assert len(messages) == 2 and "test step runs eagerly" in messages[0] and "'gradcam'" in messages[0]
    assert "a reason of its own" in messages[1]
