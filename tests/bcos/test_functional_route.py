"""The functional route of the kit (``functional_vjp``, ``hold_constant``): a dynamic weight held constant for the
vjp alone gives the hand-derived gradients, eager and compiled (a guard on the private functorch calls it rests on);
a B-cos network with every norm explains and trains on it exactly as on the eager route (explanation mode, double
backward) — losses, gradients and running statistics — and its step compiles into one graph."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F

from rightreasons.bcos.dynamic import functional_route, functional_vjp, hold_constant
from rightreasons.explain import attribute
from rightreasons.guidance.losses import l1_loss

from conftest import NORM_CLASSES, tiny_network


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _scalar_step(a: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``f(x) = sg(a·x²)·x`` on the functional route: ``(f(x), E)`` with ``E = ∂f/∂x`` holding ``a·x²`` constant."""
    out, vjp = functional_vjp(lambda inner: hold_constant(a * inner * inner) * inner, x)
    return out, vjp(torch.ones_like(out))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_weight_held_constant_for_the_vjp_alone_gives_the_hand_derived_gradients(compiled):
    """a = 1.5, x = 2: f = a·x³ = 12, E = a·x² = 6 (not 3·a·x² = 18: the weight is held); L = E² = a²·x⁴ has
    dL/da = 2·a·x⁴ = 48 and dL/dx = 4·a²·x³ = 72 (the held weight is differentiable outside the vjp); with the primal
    output, L = f + E² has dL/da = x³ + 48 = 56 and dL/dx = 3·a·x² + 72 = 90."""
    step = torch.compile(_scalar_step, backend="aot_eager", fullgraph=True) if compiled else _scalar_step
    a = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    x = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    out, e = step(a, x)
    assert (out.item(), e.item()) == (12.0, 6.0)
    assert [g.item() for g in torch.autograd.grad(e.square(), (a, x))] == [48.0, 72.0]
    out, e = step(a, x)
    assert [g.item() for g in torch.autograd.grad(out + e.square(), (a, x))] == [56.0, 90.0]
    assert not functional_route()  # left on return


def _library_step(model, x, target, masks):
    result = attribute(model, x, target, "bcos", "input", create_graph=True)
    return F.cross_entropy(result.logits, target) + l1_loss(result.maps, masks)


def _functional_step(model, x, target, masks):
    logits, vjp = functional_vjp(model, x)
    weights = vjp(F.one_hot(target, logits.shape[1]).to(logits.dtype))
    return F.cross_entropy(logits, target) + l1_loss((weights * x).sum(1), masks)


def _trained(step, model, state, *batch):
    """Loss, gradients and buffers after one step from ``state``."""
    model.load_state_dict(state)
    model.zero_grad(set_to_none=True)
    loss = step(model, *batch)
    loss.backward()
    return loss.detach(), torch.cat([p.grad.flatten() for p in model.parameters()]), _buffers(model)


def _buffers(model):
    return torch.cat([b.double().flatten() for b in model.buffers()])


def _batch(dtype):
    torch.manual_seed(0)
    x = torch.rand(4, 6, 8, 8, dtype=dtype)
    masks = torch.zeros(4, 8, 8, dtype=torch.bool)
    masks[:, 2:6, 1:5] = True
    return x, torch.tensor([0, 1, 2, 0]), masks


def test_a_network_with_every_norm_trains_on_the_functional_route_as_on_the_eager_one():
    """Float64: the same loss, gradients and running statistics (the norms' updates, deferred until the vjp has
    returned, happen once, as in the eager forward)."""
    torch.manual_seed(0)
    model = tiny_network(NORM_CLASSES).double().train()
    state, initial = {k: v.clone() for k, v in model.state_dict().items()}, _buffers(model)
    batch = _batch(torch.float64)
    library = _trained(_library_step, model, state, *batch)
    functional = _trained(_functional_step, model, state, *batch)
    assert library[2].ne(initial).any()  # the running statistics were updated
    torch.testing.assert_close(functional[0], library[0], rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(functional[1], library[1], rtol=1e-10, atol=1e-14)
    torch.testing.assert_close(functional[2], library[2], rtol=1e-12, atol=1e-14)


def test_the_step_compiles_into_one_graph_equal_to_the_eager_route():
    torch.manual_seed(0)
    model = tiny_network(NORM_CLASSES).train()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    batch = _batch(torch.float32)
    report = torch._dynamo.explain(_functional_step)(model, *batch)
    assert report.graph_break_count == 0, report.break_reasons
    assert report.graph_count == 1
    library = _trained(_library_step, model, state, *batch)
    compiled = _trained(torch.compile(_functional_step, backend="aot_eager"), model, state, *batch)
    torch.testing.assert_close(compiled[0], library[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(compiled[1], library[1], rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(compiled[2], library[2])

