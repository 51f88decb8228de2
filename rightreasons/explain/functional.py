"""Explanations inside a compiled training step: the functional route of :func:`~.attribution.attribute`, and the step
compiled whole with it (``compile`` of a guided or e²KD run).

:func:`attribute` explains by a backward with ``create_graph=True`` in explanation mode, and a loss on the explanation
then needs a double backward, which AOTAutograd cannot trace: under ``torch.compile`` it runs eagerly.
:func:`functional_attribute` takes the same explanation by ``torch.func.vjp`` inside the traced function, with the
dynamic weights held constant for the vjp alone (:func:`~rightreasons.bcos.dynamic.functional_vjp`, whose docstring
says how): forward, explanation, loss and the parameters' backward then compile into one forward and one backward
graph, without a graph break. The values are those of :func:`attribute` (float64: to rounding).

:class:`CompiledStep` compiles a task's step function (forward, explanation, losses) with the run's backend and runs
it on the bare model. It covers the B-cos methods at the input (:data:`FUNCTIONAL_METHODS`) of a model on one process;
where a step cannot run compiled (:func:`functional_refusal`) the caller's eager step runs instead, and a warning says
why, once per reason.

On the CPU, Inductor's layout optimisation (channels-last activations) makes such a step slower than eager; it is
switched off there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..bcos.dynamic import functional_vjp
from ..bcos.norms import unshareable_batch_norms
from ..bcos.sync import synchronised_batch_norms
from ..errors import UsageError
from ..models.capabilities import unwrap_model
from ..models.checkpointing import checkpointed_stages
from .attribution import Attribution, _check, _combine, _scaled, _unscaled, upsample
from .methods import get_method

__all__ = ["FUNCTIONAL_METHODS", "CompiledStep", "functional_attribute", "functional_refusal"]

logger = logging.getLogger(__name__)

FUNCTIONAL_METHODS: tuple[str, ...] = ("bcos", "bcos_weights")
"""The methods :func:`functional_attribute` takes (at the input): those whose explanation is the B-cos ``W(x)``."""


def functional_attribute(model: nn.Module, x: Tensor, target: Tensor, method: str = "bcos", *,
                         grad_scale: float | Tensor = 1.0) -> Attribution:
    """:func:`~.attribution.attribute` of ``model`` (a bare model, not a wrapper) on ``x [N, C, H, W]`` for the
    classes ``target [N]`` at the input, with ``create_graph=True``, on the functional route (module docstring):
    traceable by torch.compile, for a step compiled whole. No value is read on the host. ``grad_scale`` as for
    :func:`attribute`.

    Raises:
        UsageError: a method other than :data:`FUNCTIONAL_METHODS`, or a model that is not a B-cos model.
    """
    if method not in FUNCTIONAL_METHODS:
        raise UsageError(f"the functional route explains with {list(FUNCTIONAL_METHODS)} at the input, not "
                         f"{method!r}")
    spec = get_method(method)
    _check(model, spec, "input", 1)
    logits, vjp = functional_vjp(model, x)
    classes = torch.arange(logits.shape[1], device=target.device)
    seed = (target[:, None] == classes).to(logits.dtype)  # the one-hot rows of the explained logits
    scaled = _scaled(grad_scale)
    weights = vjp((seed * grad_scale).to(logits.dtype) if scaled else seed)
    weights = _unscaled(weights, grad_scale) if scaled else weights
    raw = _combine(spec.name, x, weights)
    return Attribution(method=spec.name, logits=logits, target=target, maps=upsample(raw, x.shape[-2:]), raw=raw,
                       weights=weights)


def functional_refusal(model: nn.Module, method: str, layer: str) -> str | None:
    """Why a step cannot explain ``model`` (as the step gets it: possibly wrapped) with ``method`` at ``layer`` on the
    functional route, or ``None`` where it can."""
    if method not in FUNCTIONAL_METHODS or layer.lower() != "input":
        return (f"it explains with {method!r} at {layer!r}; compiled steps explain with {list(FUNCTIONAL_METHODS)} at "
                "the input")
    parallel = [m for m in model.modules() if isinstance(m, (nn.parallel.DistributedDataParallel, nn.DataParallel))]
    if parallel:
        return (f"the model is wrapped in {type(parallel[0]).__name__}, which synchronises gradients or replicates "
                "the model around its own forward only")
    inner = unwrap_model(model)
    synchronised = synchronised_batch_norms(inner)
    if synchronised:
        return f"its BatchNorm statistics are synchronised across processes ({synchronised[0]!r}, ...)"
    foreign = unshareable_batch_norms(inner)
    if foreign:
        return (f"{type(inner.get_submodule(foreign[0])).__name__} module {foreign[0]!r} would update its running "
                "statistics inside the explanation's transform")
    stages = checkpointed_stages(inner)
    if stages:
        return f"its stages {stages} are checkpointed (activation checkpointing)"
    return None


class CompiledStep:
    """``fn(model, *args)``, a step that explains with :func:`functional_attribute` (forward, explanation and losses),
    compiled whole by ``torch.compile`` with ``backend`` when first called, and called with the bare model.

    :meth:`runs` says whether it runs for a model: never with ``backend="no"``, nor where
    :func:`functional_refusal` or ``refusal`` (the caller's own reason, e.g. hooks of attention transfer) says why
    not; the caller then runs its eager step, and a warning names the reason once."""

    def __init__(self, fn: Callable[..., Any], backend: str, what: str, method: str, layer: str,
                 refusal: str | None = None) -> None:
        self.fn, self.backend, self.what = fn, backend, what
        self.method, self.layer, self.refusal = method, layer, refusal
        self._compiled: Callable[..., Any] | None = None
        self._warned: set[str] = set()

    def runs(self, model: nn.Module) -> bool:
        """Whether a step for ``model`` runs compiled (warning once per reason where it does not)."""
        if self.backend == "no":
            return False
        reason = self.refusal or functional_refusal(model, self.method, self.layer)
        if reason is not None and reason not in self._warned:
            self._warned.add(reason)
            logger.warning("compile: the %s runs eagerly (only the model is compiled): %s", self.what, reason)
        return reason is None

    def __call__(self, model: nn.Module, *args: Any) -> Any:
        """``fn(bare model, *args)``, compiled (at the first call, for the device of the first tensor of ``args``)."""
        if self._compiled is None:
            device = next(a.device for a in args if isinstance(a, Tensor))
            # channels-last activations make a compiled CPU step slower than eager (module docstring)
            options = {"layout_optimization": False} if self.backend == "inductor" and device.type == "cpu" else None
            self._compiled = torch.compile(self.fn, backend=self.backend, options=options)
        return self._compiled(unwrap_model(model), *args)
