"""The explanation methods, declared once: what each computes, what it returns, and what it needs.

For the explained logit ``y = logit[n, target[n]]`` and the attributed feature ``A`` (the input ``x``, or the output of
a layer ``[N, C, h, w]``):

* ``bcos`` — B-cos contributions ``Σ_c ∂y/∂A ⊙ A`` with the gradient taken in explanation mode (``Σ_c W(x) ⊙ x``
  at the input): a map ``[N, H, W]``; needs a B-cos model.
* ``bcos_weights`` — ``W(x)``, the dynamic linear map of ``y`` itself: weights ``[N, C_in, H, W]``, at the input
  only; needs a B-cos model.
* ``ixg`` — Input×Gradient ``Σ_c ∂y/∂A ⊙ A``: a map.
* ``gradcam`` — ``ReLU(Σ_c mean_hw(∂y/∂A)_c · A_c)``: a map.
* ``intgrad`` — Integrated Gradients with a zero baseline at ``A``: a map.

Maps are upsampled to the input resolution. Guidance losses and localisation metrics take maps; e²KD compares any
method's :attr:`~rightreasons.explain.Attribution.explanation` (``[N, C_in, H, W]`` weights, or a map as
``[N, 1, H, W]``): B-cos ``W(x)`` for B-cos pairs and GradCAM for standard ones by default. Config fields take their
allowed values from :data:`MAP_METHOD_NAMES` and :data:`METHOD_NAMES` (no copies of these lists).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ..errors import UnknownNameError

__all__ = ["MAP_METHOD_NAMES", "METHODS", "METHOD_NAMES", "MapMethodName", "Method", "MethodName", "get_method",
           "layer_for"]


@dataclass(frozen=True)
class Method:
    """One explanation method.

    Attributes:
        name: the name used in code and configs.
        output: ``"map"`` (``[N, H, W]`` at input resolution) or ``"weights"`` (``[N, C_in, H, W]``, input-shaped).
        explaining: the gradient is taken in explanation mode (dynamic weights held constant): B-cos only.
        input_only: defined at the input only (``"weights"``).
        default_layer: where the method explains when no layer is chosen (e.g. for localisation metrics):
            the input, or ``"final"`` (GradCAM's last stage).
        description: one line for tables and error messages.
    """

    name: str
    output: Literal["map", "weights"]
    explaining: bool
    input_only: bool
    default_layer: str
    description: str


METHODS: dict[str, Method] = {m.name: m for m in (
    Method("bcos", "map", True, False, "input",
           "B-cos contributions: sum over channels of W ⊙ A (explanation-mode gradient)"),
    Method("bcos_weights", "weights", True, True, "input",
           "B-cos W(x): the dynamic linear map of the logit, input-shaped"),
    Method("ixg", "map", False, False, "input", "Input×Gradient summed over channels"),
    Method("gradcam", "map", False, False, "final", "GradCAM: ReLU of the gradient-weighted channel sum"),
    Method("intgrad", "map", False, False, "input", "Integrated Gradients with a zero baseline at the attributed layer"),
)}
"""Every method, by name."""

METHOD_NAMES: tuple[str, ...] = tuple(METHODS)
MAP_METHOD_NAMES: tuple[str, ...] = tuple(n for n, m in METHODS.items() if m.output == "map")

MethodName = Literal[METHOD_NAMES]  # type: ignore[valid-type]
"""The type of a config field naming any method."""
MapMethodName = Literal[MAP_METHOD_NAMES]  # type: ignore[valid-type]
"""The type of a config field naming a method that returns maps (guidance, localisation metrics)."""


def get_method(name: str) -> Method:
    """The :class:`Method` called ``name``; :class:`~rightreasons.errors.UnknownNameError` lists the valid names."""
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise UnknownNameError(f"unknown explanation method {name!r}; valid methods: {list(METHODS)}") from None


def layer_for(method: str, layer: str) -> str:
    """Where ``method`` explains when asked for ``layer``: the input for input-only methods (``bcos_weights``),
    ``layer`` otherwise (and for ``"none"``, which explains nothing)."""
    return "input" if method in METHODS and METHODS[method].input_only else layer
