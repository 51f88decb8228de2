"""Activation functions read as dynamic-linear maps.

GELU is ``x · Φ(x)``, with ``Φ`` the standard normal CDF (or its tanh approximation): an input-dependent *gate*
``Φ(x)`` applied to the input. :class:`DynamicGELU` applies the gate through :mod:`rightreasons.bcos.dynamic`, like the
``|cos|^(B-1)`` of a B-cos unit, so that explanation mode holds it constant (``W(x)`` contains ``Φ(x)``, the
B-cosification release's "detach the gate") while a loss on the explanation still differentiates through it exactly.
ReLU needs no such module: its gate ``1[x > 0]`` has zero derivative almost everywhere, so ``nn.ReLU`` is already
exact under double backward.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Literal

import torch
from torch import Tensor

from .dynamic import DynamicLinear, Recomputed

__all__ = ["DynamicGELU", "gelu_gate"]

Approximation = Literal["none", "tanh"]


def gelu_gate(x: Tensor, approximate: Approximation = "none") -> Tensor:
    """The GELU gate ``Φ(x)`` such that ``x · Φ(x) == torch.nn.functional.gelu(x, approximate=approximate)``."""
    if approximate == "tanh":
        return 0.5 * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))
    return 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))


class DynamicGELU(DynamicLinear):
    """GELU ``x · Φ(x)`` with the gate ``Φ(x)`` as a dynamic weight: ``[*] -> [*]``.

    Args:
        approximate: ``"none"`` (the exact normal CDF) or ``"tanh"``, as for :class:`torch.nn.GELU`.
    """

    def __init__(self, approximate: Approximation = "none") -> None:
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"DynamicGELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return self.dynamic(Recomputed(partial(gelu_gate, approximate=self.approximate), (x,)), x)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"
