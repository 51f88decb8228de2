"""Schedules while fine-tuning a B-cosified model: a linear ramp of the exponent B (:class:`BRamp`, the
B-cosification release's ``linear_b`` ablation; the trainer applies it for ``optim.b_ramp_epochs``) and bias decay
(:func:`decay_biases`, ending in :func:`remove_biases`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...bcos.dynamic import DynamicLinear
from ...errors import UsageError
from .layers import BcosifiedTimmAttention
from .models import BcosifiedModel

__all__ = ["BRamp", "decay_biases", "linear_b", "remove_biases", "set_b"]


def _bcosified(model: nn.Module, what: str) -> BcosifiedModel:
    if not isinstance(model, BcosifiedModel):
        raise UsageError(f"{what} needs a B-cosified model (from rightreasons.bcosify or a bcosified_* name), got "
                         f"{type(model).__name__}")
    return model


def _update_options(model: BcosifiedModel, **changes: Any) -> None:
    """Record changed options on the model and in its ``model_args`` (so that a saved file rebuilds it)."""
    model.options = dataclasses.replace(model.options, **changes)
    args = getattr(model, "model_args", None)
    if args is not None:
        args["kwargs"].update({k: model.options.kwargs()[k] for k in changes})


def linear_b(step: int, ramp_steps: int, start: float = 1.0, end: float = 2.0) -> float:
    """B of a linear ramp from ``start`` to ``end`` over ``ramp_steps`` optimiser steps, ``end`` afterwards (the
    release's ``linear_b`` ablation; use with :func:`set_b` before every step)."""
    if ramp_steps < 1:
        raise UsageError(f"linear_b: ramp_steps must be >= 1, got {ramp_steps}")
    return start + (end - start) * min(max(step, 0) / ramp_steps, 1.0)


@dataclass(frozen=True)
class BRamp:
    """A linear ramp of B over ``steps`` optimiser steps, from ``start`` to ``end`` (then ``end``): the engine's
    ``optim.b_ramp_epochs`` (:func:`linear_b` applied with :func:`set_b`)."""

    steps: int
    end: float
    start: float = 1.0

    @classmethod
    def for_model(cls, model: nn.Module, steps: int, what: str = "BRamp") -> BRamp:
        """A ramp from 1 to the B that the B-cosified ``model`` was built with (``what`` names the caller in the
        error for any other model)."""
        return cls(max(int(steps), 1), _bcosified(model, what).options.b)

    def apply(self, model: nn.Module, step: int) -> None:
        """Give every B-cos unit of ``model`` the B of optimiser step ``step``."""
        set_b(model, linear_b(step, self.steps, self.start, self.end))


def set_b(model: nn.Module, b: float) -> nn.Module:
    """Set the exponent B of every B-cos unit of a B-cosified ``model`` (and of its recorded options) in place."""
    bcosified = _bcosified(model, "set_b")
    if not b >= 1:
        raise UsageError(f"set_b: B must be >= 1, got {b!r}")
    for unit in bcosified.bcos_units():
        unit.b = float(b)
    _update_options(bcosified, b=float(b))
    return model


def _additive_biases(model: nn.Module) -> list[tuple[nn.Module, str]]:
    """``(module, attribute)`` of every bias added to an output: those of the converted units and norms and the v
    bias of timm attention (not q/k biases or the norms of q and k, which only shape the attention matrix)."""
    pairs = [(m, "bias") for m in model.modules()
             if isinstance(m, DynamicLinear) and isinstance(getattr(m, "bias", None), nn.Parameter)]
    return pairs + [(m, "v_bias") for m in model.modules()
                    if isinstance(m, BcosifiedTimmAttention) and m.v_bias is not None]


def decay_biases(model: nn.Module, factor: float) -> None:
    """One step of a bias-decay schedule: multiply every bias of a B-cosified ``model`` kept with ``keep_bias`` by
    ``factor`` in [0, 1] (e.g. after each optimiser step; the q/k biases of timm attention are not additive and
    stay). End the schedule with :func:`remove_biases`."""
    if not 0.0 <= factor <= 1.0:
        raise UsageError(f"decay_biases: factor must lie in [0, 1], got {factor!r}")
    _bcosified(model, "decay_biases")
    with torch.no_grad():
        for module, name in _additive_biases(model):
            getattr(module, name).mul_(factor)


def remove_biases(model: nn.Module) -> nn.Module:
    """Delete every additive bias of a B-cosified ``model`` in place (the end of a bias-decay schedule): CNNs become
    dynamic linear, with complete contributions. The logit bias keeps its value; the recorded options say so."""
    bcosified = _bcosified(model, "remove_biases")
    for module, name in _additive_biases(model):
        setattr(module, name, None)
    _update_options(bcosified, keep_bias=False, logit_bias=model.logit_layer.bias)
    return model
