"""Explaining a wrapped model (DataParallel, DistributedDataParallel, torch.compile) equals explaining the bare model,
for every method at the input and at named stages, including B-cos explanations, whose explanation-mode switch is
read at backward time."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

import rightreasons
from rightreasons.explain import METHODS, attribute, capture_outputs, resolve_layer
from rightreasons.models import capabilities, unwrap_model

CASES = [(m, layer) for m in METHODS for layer in ("input", "mid2", "final")
         if not (METHODS[m].input_only and layer != "input")]


@pytest.fixture(scope="module")
def process_group(free_port):
    """A one-process gloo group, so that DistributedDataParallel can wrap a CPU model inside the test process."""
    if dist.is_initialized():
        yield
        return
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _wrappers(model: nn.Module) -> dict[str, nn.Module]:
    return {"DataParallel": nn.DataParallel(model), "DistributedDataParallel": nn.parallel.DistributedDataParallel(model),
            "torch.compile": torch.compile(model, backend="eager"),
            "compiled DataParallel": torch.compile(nn.DataParallel(model), backend="eager")}


@pytest.fixture(scope="module")
def bcos_model():
    torch.manual_seed(0)
    return rightreasons.create_model("bcos_resnet18", num_classes=3, inplanes=8).eval()


@pytest.fixture(scope="module")
def standard_model():
    torch.manual_seed(0)
    return rightreasons.create_model("resnet18", num_classes=3).eval()


@pytest.mark.parametrize("method, layer", CASES)
def test_every_method_through_every_wrapper_equals_the_bare_model(process_group, bcos_model, standard_model, method,
                                                                  layer):
    model = bcos_model if METHODS[method].explaining else standard_model
    x = torch.rand(2, capabilities(model).in_chans, 32, 32, generator=torch.Generator().manual_seed(1))
    kwargs = {"steps": 4} if method == "intgrad" else {}
    bare = attribute(model, x, None, method, layer, create_graph=True, **kwargs)
    for name, wrapped in _wrappers(model).items():
        got = attribute(wrapped, x, bare.target, method, layer, create_graph=True, **kwargs)
        assert torch.equal(got.logits, bare.logits), name
        torch.testing.assert_close(got.maps, bare.maps, rtol=1e-5, atol=1e-7, msg=f"{name}: {method} at {layer}")
        if bare.weights is not None:
            torch.testing.assert_close(got.weights, bare.weights, rtol=1e-5, atol=1e-7)


def test_a_loss_on_a_wrapped_explanation_reaches_the_same_parameter_gradients(process_group, bcos_model):
    x = torch.rand(2, 6, 32, 32, generator=torch.Generator().manual_seed(2))
    grads = {}
    for name, model in {"bare": bcos_model, **_wrappers(bcos_model)}.items():
        bcos_model.zero_grad(set_to_none=True)
        attribute(model, x, torch.tensor([0, 2]), "bcos", "mid2", create_graph=True).maps.square().sum().backward()
        grads[name] = torch.cat([p.grad.flatten() for p in bcos_model.parameters()])
    for name, grad in grads.items():
        torch.testing.assert_close(grad, grads["bare"], rtol=1e-5, atol=1e-8, msg=name)


def test_layer_names_resolve_on_the_inner_model(process_group, standard_model):
    for wrapped in _wrappers(standard_model).values():
        assert unwrap_model(wrapped) is standard_model
        assert resolve_layer(wrapped, "final") is standard_model.layer4
        assert resolve_layer(wrapped, "layer3.1") is standard_model.layer3[1]
        with capture_outputs(wrapped, ["mid1", "final"]) as outputs:
            wrapped(torch.rand(1, 3, 32, 32))
        assert [len(o) for o in outputs] == [1, 1] and outputs[1][0].shape == (1, 512, 1, 1)
