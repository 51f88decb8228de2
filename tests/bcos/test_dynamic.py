"""The shared dynamic-linear mechanism: forward identity, explanation gradients, exact higher-order backward, and
what it holds for the backward."""

import weakref

import pytest
import torch

from rightreasons.bcos import BcosConv2d, norms
from rightreasons.bcos.dynamic import ExplanationSwitch, Recomputed, dynamic_apply, explanation_mode


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


def _alignment(out, norm):
    return out.abs() / norm


def _scaled_centred(w, x, mean, gain):
    return (x - mean) * w * gain


@pytest.mark.parametrize("explaining", [False, True], ids=["plain", "explaining"])
def test_recomputed_weights_and_extras_are_exact_to_the_third_order(explaining):
    """A weight recomputed in the backward and linear steps passed as extras give the derivatives of the plain
    expression; while explaining, the input gradient is ``W(x)ᵀ a`` with ``W`` differentiable (any order)."""
    x0 = torch.randn(2, 3, dtype=torch.float64)
    norm0 = torch.rand(2, 1, dtype=torch.float64) + 1.0
    gain0 = torch.rand(3, dtype=torch.float64) + 0.5
    a = torch.arange(6.0, dtype=torch.float64).view(2, 3)

    def derivatives(lean: bool):
        x, norm, gain = (t.clone().requires_grad_() for t in (x0, norm0, gain0))
        switch = ExplanationSwitch()
        switch.active = explaining
        if lean:
            y = dynamic_apply(Recomputed(_alignment, (x, norm)), x, switch, _scaled_centred, (x.mean(1, True), gain))
            (g,) = torch.autograd.grad((y * a).sum(), x, create_graph=True)
        elif explaining:  # W(x)ᵀ a for y = W(x) x with W = diag(w · gain) (I − 1/3): the centring stays linear
            v = a * _alignment(x, norm) * gain
            y, g = None, v - v.sum(1, keepdim=True) / 3
        else:
            y = _scaled_centred(_alignment(x, norm), x, x.mean(1, True), gain)
            (g,) = torch.autograd.grad((y * a).sum(), x, create_graph=True)
        switch.active = False
        second = torch.autograd.grad(g.square().sum(), (x, norm, gain), create_graph=True)
        third = torch.autograd.grad(sum(s.sin().sum() for s in second), (x, norm, gain))
        return y, (g, *second, *third)

    (y, lean), (y_plain, plain) = derivatives(True), derivatives(False)
    if not explaining:
        assert torch.equal(y, y_plain)
    for ours, expected in zip(lean, plain):
        torch.testing.assert_close(ours, expected)


@pytest.mark.parametrize("explaining", [False, True], ids=["plain", "explaining"])
def test_recomputed_products_pass_gradcheck(explaining):
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    norm = (torch.rand(2, 1, dtype=torch.float64) + 1.0).requires_grad_()
    gain = (torch.rand(3, dtype=torch.float64) + 0.5).requires_grad_()
    switch = ExplanationSwitch()

    def fn(x, norm, gain):
        return dynamic_apply(Recomputed(_alignment, (x, norm)), x, switch, _scaled_centred, (x.mean(1, True), gain))

    torch.autograd.gradcheck(fn, (x, norm, gain))
    torch.autograd.gradgradcheck(fn, (x, norm, gain))


def held_for_backward(loss) -> int:
    """Bytes of the distinct storages that autograd holds for the backward of ``loss()`` when it returns."""
    packed = []

    def pack(t):
        packed.append((weakref.ref(t), (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        value = loss()
    held = {key: key[1] for ref, key in packed if ref() is not None}
    del value
    return sum(held.values())


def test_a_bcos_unit_and_its_norm_hold_their_input_linear_output_and_norm_map():
    """The memory-lean mechanism: conv → B-cos scale → BatchNorm holds the unit's input, its linear output, the
    one-channel patch-norm map, the norm's input and the weights (the old mechanism held three more activations);
    an explanation's backward adds the output (which the loss squares) and one incoming gradient: those that elementwise
    products made (into the norm's division and into the B-cos scale) are recomputed from it, not held (four
    activations before)."""
    unit = BcosConv2d(4, 8, kernel_size=3, padding=1)
    norm = norms.BatchNormUncentered2d(8)
    x = torch.randn(2, 4, 16, 16, requires_grad=True)
    activation = 2 * 8 * 16 * 16 * 4  # bytes of one [2, 8, 16, 16] float tensor
    weights = unit.linear.weight.numel() * 4 + 8 * 4 * 4  # w (not ŵ); the norm's gain, std, var, batch var
    norm_map = 2 * 1 * 16 * 16 * 4 * 2  # the map and the pooled squares it is computed from
    held = held_for_backward(lambda: norm(unit(x)).sum())
    assert held <= x.numel() * 4 + 2 * activation + norm_map + weights

    def explanation():
        with explanation_mode(unit), explanation_mode(norm):
            (g,) = torch.autograd.grad(norm(unit(x)).square().sum(), x, create_graph=True)
        return g.sum()

    # + the output (saved by the square) and the gradient into the norm; the B-cos product's and the conv's are
    # recomputed from it
    assert held_for_backward(explanation) <= held + 2 * activation + 64  # (and scalars)


def test_backward_under_bf16_autocast_recomputes_in_the_forwards_precision():
    """Under autocast the backward (which runs outside the autocast block) recomputes in bf16 as the forward did:
    it runs, and its gradients are those of the same formula differentiated by autograd."""
    torch.manual_seed(0)
    unit = BcosConv2d(4, 8, kernel_size=3, padding=1)
    x = torch.randn(2, 4, 8, 8, requires_grad=True)
    with torch.autocast("cpu", torch.bfloat16):
        ours = unit(x)
        out = torch.nn.functional.conv2d(x, unit.normalized_weight(), None, 1, 1)
        reference = out * (out.abs() / unit.patch_norms(x))
    assert torch.equal(ours, reference)
    grads = [torch.autograd.grad(y.float().square().sum(), (x, unit.linear.weight)) for y in (ours, reference)]
    for a, b in zip(*grads):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=2e-2, atol=1e-2)
