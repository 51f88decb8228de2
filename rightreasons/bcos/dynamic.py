"""The one mechanism behind every dynamic-linear layer, and explanation mode.

A B-cos network computes ``y = W(x) x``: every layer multiplies its input by a *dynamic weight* that itself depends on
the input (the ``|cos|^(B-1)`` scale of a B-cos unit, the ``1/sigma`` of a norm, the attention matrix of a ViT). The
explanation ``W(x)`` is the input gradient taken with those dynamic weights held constant.

The reference implementation holds them constant by ``detach()``-ing them in the forward pass. That is enough to *read*
an explanation, but it cuts the dynamic weights out of the graph, so a loss computed on the explanation (model guidance,
e²KD) gets wrong parameter gradients. Here every dynamic-linear product goes through :func:`dynamic_apply`, a custom
autograd function whose

* forward is the plain product (so outputs are bit-identical with and without explanation mode);
* backward returns no gradient to the dynamic weight *only while the owning module explains* (``ExplanationSwitch``),
  but builds that backward from differentiable operations on the saved dynamic weight, so a second backward
  (``create_graph=True``) flows through the dynamic weight's own graph into every parameter exactly.

The outer backward (of a classification loss plus an explanation loss) must run outside :func:`explanation_mode`, where
the function behaves like an ordinary product.

The switch is read when the backward runs, so :func:`dynamic_apply` is excluded from ``torch.compile`` tracing
(``torch.compiler.disable``): TorchDynamo would otherwise trace the backward once, with the switch as it was at
compile time, and a compiled model's explanations would silently include the dynamic weights' gradients. The
exclusion costs a fraction of a microsecond per call in eager mode.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Literal

import torch
from torch import Tensor, nn

__all__ = ["DynamicLinear", "ExplanationSwitch", "dynamic_apply", "explanation_mode", "is_explaining"]

Product = Literal["mul", "div", "matmul"]


class ExplanationSwitch:
    """A flag shared by a dynamic-linear module and the autograd nodes it creates; read at backward time."""

    __slots__ = ("active",)

    def __init__(self) -> None:
        self.active = False


def _reduce_to(grad: Tensor, shape: torch.Size) -> Tensor:
    """Sum a broadcast gradient back to ``shape`` (the inverse of broadcasting in a product)."""
    return grad if grad.shape == shape else grad.sum_to_size(shape)


class _DynamicProduct(torch.autograd.Function):
    """``weight * x``, ``x / weight`` or ``weight @ x`` whose gradient to ``weight`` is suppressed while its switch is
    active."""

    @staticmethod
    def forward(ctx, weight: Tensor, x: Tensor, product: Product, switch: ExplanationSwitch) -> Tensor:  # noqa: D102
        ctx.save_for_backward(weight, x)
        ctx.product = product
        ctx.switch = switch
        return _product(weight, x, product)

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: D102
        weight, x = ctx.saved_tensors
        grad_weight = grad_x = None
        if ctx.product == "mul":
            if ctx.needs_input_grad[1]:
                grad_x = _reduce_to(grad * weight, x.shape)
            if ctx.needs_input_grad[0] and not ctx.switch.active:
                grad_weight = _reduce_to(grad * x, weight.shape)
        elif ctx.product == "div":
            if ctx.needs_input_grad[1]:
                grad_x = _reduce_to(grad / weight, x.shape)
            if ctx.needs_input_grad[0] and not ctx.switch.active:
                grad_weight = _reduce_to(-grad * x / (weight * weight), weight.shape)
        else:
            if ctx.needs_input_grad[1]:
                grad_x = _reduce_to(weight.transpose(-1, -2) @ grad, x.shape)
            if ctx.needs_input_grad[0] and not ctx.switch.active:
                grad_weight = _reduce_to(grad @ x.transpose(-1, -2), weight.shape)
        return grad_weight, grad_x, None, None


def _product(weight: Tensor, x: Tensor, product: Product) -> Tensor:
    if product == "mul":
        return weight * x
    if product == "div":
        return x / weight
    return weight @ x


@torch.compiler.disable  # the switch must be read at backward time, not baked in when compiling (module docstring)
def dynamic_apply(weight: Tensor, x: Tensor, switch: ExplanationSwitch, product: Product = "mul") -> Tensor:
    """Apply a dynamic weight to ``x``: ``weight * x`` (broadcasting), ``x / weight`` (a norm's std) or ``weight @ x``.

    Forward values equal the plain product. While ``switch.active`` the backward treats ``weight`` as a constant
    (the explanation), but keeps it differentiable for a second backward.
    """
    if not (weight.requires_grad or x.requires_grad):
        return _product(weight, x, product)
    return _DynamicProduct.apply(weight, x, product, switch)


class DynamicLinear(nn.Module):
    """Base class of every module whose forward is ``W(x) x``; gives it a switch for :func:`explanation_mode`."""

    def __init__(self) -> None:
        super().__init__()
        self.explanation_switch = ExplanationSwitch()

    def dynamic(self, weight: Tensor, x: Tensor, product: Product = "mul") -> Tensor:
        """Apply this module's dynamic ``weight`` to ``x`` through the shared mechanism."""
        return dynamic_apply(weight, x, self.explanation_switch, product)

    @property
    def explaining(self) -> bool:
        """Whether input gradients currently hold this module's dynamic weights constant."""
        return self.explanation_switch.active


def is_explaining(model: nn.Module) -> bool:
    """Whether any dynamic-linear module of ``model`` is in explanation mode."""
    return any(m.explaining for m in model.modules() if isinstance(m, DynamicLinear))


@contextmanager
def explanation_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Hold the dynamic weights of ``model`` constant for input gradients taken inside the block.

    Inside, ``torch.autograd.grad(logit, x, create_graph=True)`` returns the dynamic linear map ``W(x)`` (the
    explanation); a loss on it, back-propagated *after* the block, reaches every parameter with exact gradients.
    Forward values are identical inside and outside. Nesting is allowed; the previous state is restored on exit.

    Example::

        x.requires_grad_(True)
        with explanation_mode(model):
            logits = model(x)
            (w,) = torch.autograd.grad(logits[:, 3].sum(), x, create_graph=True)
        loss = criterion(logits, y) + lam * explanation_loss(w * x)
        loss.backward()
    """
    switches = [m.explanation_switch for m in model.modules() if isinstance(m, DynamicLinear)]
    previous = [s.active for s in switches]
    for s in switches:
        s.active = True
    try:
        yield model
    finally:
        for s, p in zip(switches, previous):
            s.active = p

