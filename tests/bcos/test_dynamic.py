"""The shared dynamic-linear mechanism: forward identity, explanation gradients, exact double backward."""

import pytest
import torch

from rightreasons.bcos.dynamic import ExplanationSwitch, dynamic_apply


@pytest.mark.parametrize("product", ["mul", "div", "matmul"])
def test_forward_is_the_plain_product(product):
    w = torch.rand(3, 4, 4) + 0.5
    x = torch.randn(3, 4, 4)
    expected = {"mul": w * x, "div": x / w, "matmul": w @ x}[product]
    switch = ExplanationSwitch()
    out = dynamic_apply(w.requires_grad_(), x, switch, product)
    switch.active = True
    out_explaining = dynamic_apply(w, x, switch, product)
    assert torch.equal(out, expected) and torch.equal(out_explaining, expected)


@pytest.mark.parametrize("product", ["mul", "div", "matmul"])
def test_gradients_match_autograd_outside_explanation_mode(product):
    w = (torch.rand(2, 3, 3, dtype=torch.float64) + 0.5).requires_grad_()
    x = torch.randn(2, 3, 3, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda a, b: dynamic_apply(a, b, ExplanationSwitch(), product), (w, x))
    torch.autograd.gradgradcheck(lambda a, b: dynamic_apply(a, b, ExplanationSwitch(), product), (w, x))


def test_explaining_holds_weight_constant_but_keeps_it_differentiable():
    theta = torch.tensor(1.5, dtype=torch.float64, requires_grad=True)
    x = torch.tensor([2.0, -1.0], dtype=torch.float64, requires_grad=True)
    switch = ExplanationSwitch()
    switch.active = True
    w = theta * x.abs()  # a dynamic weight that depends on the input
    y = dynamic_apply(w, x, switch).sum()
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    switch.active = False
    assert torch.allclose(g, w)  # the explanation is W(x), not d(W(x) x)/dx
    (dtheta,) = torch.autograd.grad(g.sum(), theta)
    assert torch.allclose(dtheta, x.abs().sum())  # d/dtheta of sum(theta * |x|)
