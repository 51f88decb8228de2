"""Differentiable attributions for one target class per sample at any layer (thesis §7.1.2, ``SCIENCE.md`` §6).

Methods, for the explained logit ``y = logit[n, target[n]]`` and the attributed feature ``A`` (the input ``x`` or the
output of a layer, ``[N, C, h, w]``), each summed over channels to a map ``[N, h, w]``:

* ``bcos``: B-cos contributions ``Σ_c (∂y/∂A ⊙ A)`` with the gradient taken in
  :func:`~rightreasons.bcos.dynamic.explanation_mode`, i.e. ``W(x) ⊙ x`` at the input and the contribution of the
  layer's activation at a deeper layer. Needs a B-cos model.
* ``ixg``: Input×Gradient ``Σ_c (∂y/∂A ⊙ A)`` with the ordinary gradient.
* ``gradcam``: ``ReLU(Σ_c mean_hw(∂y/∂A)_c · A_c)``.
* ``intgrad``: Integrated Gradients with a zero baseline *at the attributed layer*,
  ``Σ_c A ⊙ ∫_0^1 ∂y/∂A(αA) dα``. For an X-DNN (a bias-free ReLU network, see :func:`is_xdnn`) the
  gradient is constant along the path, so IntGrad equals Input×Gradient and is exact in one pass. Other models get the
  right Riemann sum ``(1/steps) Σ_{k=1..steps} ∂y/∂A(k/steps · A)`` (Captum's ``riemann_right``): ``steps − 1`` extra
  forward and backward passes, expensive, and only in eval mode (in train mode they would update BatchNorm statistics).

The layer's output is captured by a forward hook in the one forward pass that also produces the logits: the model
runs exactly as in a normal training step (BatchNorm statistics included) and the logits can feed the classification
loss. All target logits are summed and differentiated once, so a batch costs one backward pass. Samples interact only
through batch statistics: in train mode, for methods other than ``bcos``, BatchNorm makes the batched gradient hold
cross-sample terms (as in the Model-Guidance code); ``bcos`` holds the statistics constant (explanation mode), so B-cos
attributions are exactly per-sample.

Maps below input resolution are upsampled bilinearly (``align_corners=False``) to ``[N, H, W]``. With
``create_graph=True`` everything stays differentiable: a loss on the maps back-propagates (outside this function,
after it returns) into every parameter — for ``bcos`` with exact second-order gradients.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Iterator, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..bcos.dynamic import DynamicLinear, explanation_mode
from .explanation import resolve_target
from .layers import resolve_layer

__all__ = ["METHODS", "Attribution", "attribute", "compute_attribution", "is_xdnn", "upsample"]

Method = Literal["bcos", "ixg", "gradcam", "intgrad"]
METHODS: tuple[str, ...] = ("bcos", "ixg", "gradcam", "intgrad")


@dataclass
class Attribution:
    """What :func:`compute_attribution` returns (detached unless ``create_graph=True``).

    Attributes:
        logits: ``[N, K]`` the outputs of the (single) ordinary forward pass.
        target: ``[N]`` the explained class per sample.
        maps: ``[N, H, W]`` attributions at input resolution.
        raw: ``[N, h, w]`` attributions at the layer's resolution (``maps`` itself for the input layer).
    """

    logits: Tensor
    target: Tensor
    maps: Tensor
    raw: Tensor


def is_xdnn(model: nn.Module) -> bool:
    """Whether ``model`` is an X-DNN (bias-free and positively homogeneous, so that IntGrad with a zero baseline
    equals Input×Gradient): its ``is_xdnn`` attribute when it has one, else whether it was built from the registry
    under an ``xdnn_*`` name (``model.model_args["name"]``, see :func:`rightreasons.create_model`)."""
    flag = getattr(model, "is_xdnn", None)
    if flag is not None:
        return bool(flag)
    return str(getattr(model, "model_args", {}).get("name", "")).startswith("xdnn_")


def compute_attribution(model: nn.Module, x: Tensor, target: int | Tensor | None, method: Method,
                        layer: str = "input", *, create_graph: bool = False, steps: int = 50) -> Attribution:
    """Attribute ``model``'s logits for ``target`` on ``x [N, C, H, W]`` at ``layer`` with ``method``.

    Args:
        model: a classifier returning logits ``[N, K]``.
        x: the input batch.
        target: one class per sample (``[N]``), an int for all, or ``None`` for the predicted classes.
        method: one of :data:`METHODS` (see the module docstring).
        layer: ``"input"``, ``"mid1"``–``"mid3"``, ``"final"`` or a module path
            (see :func:`~rightreasons.explain.layers.resolve_layer`); the module must output ``[N, C, h, w]``.
        create_graph: keep logits and maps differentiable (for guidance losses); otherwise all are detached.
        steps: Riemann steps of ``intgrad`` on models that are not X-DNNs (ignored otherwise).

    Returns:
        :class:`Attribution` with the logits of the forward pass, so a training step needs no second forward.
    """
    _check_method(model, method)
    riemann = method == "intgrad" and not is_xdnn(model)
    if riemann:
        _check_riemann(model, steps)
    module = resolve_layer(model, layer)
    with torch.enable_grad():  # also inside an evaluation loop's no_grad block
        if module is None and not x.requires_grad:
            x = x.detach().requires_grad_(True)
        with _capture_output(module, layer) as captured:
            logits = model(x)
        if logits.dim() != 2:
            raise ValueError(f"attribution expects the model to return logits [N, K], got {tuple(logits.shape)}")
        feature = x if module is None else captured[0]
        target = resolve_target(target, logits)
        grad = _target_gradient(model, logits, target, feature, method == "bcos", create_graph)
        if riemann and steps > 1:
            grad = _riemann_mean_gradient(model, x, module, feature, target, grad, steps, create_graph)
        raw = _combine(method, feature, grad)
        maps = upsample(raw, x.shape[-2:])
    if not create_graph:
        logits, raw, maps = logits.detach(), raw.detach(), maps.detach()
    return Attribution(logits=logits, target=target, maps=maps, raw=raw)


def attribute(model: nn.Module, x: Tensor, target: int | Tensor | None, method: Method, layer: str = "input", *,
              create_graph: bool = False, steps: int = 50, return_raw: bool = False) -> Tensor | tuple[Tensor, Tensor]:
    """Attribution maps ``[N, H, W]`` at input resolution (and the layer-resolution maps ``[N, h, w]`` with
    ``return_raw=True``); see :func:`compute_attribution`, which also returns the logits for a training step."""
    result = compute_attribution(model, x, target, method, layer, create_graph=create_graph, steps=steps)
    return (result.maps, result.raw) if return_raw else result.maps


def upsample(maps: Tensor, size: tuple[int, int] | torch.Size) -> Tensor:
    """Bilinear upsampling ``[N, h, w] -> [N, H, W]`` (identity when the sizes agree)."""
    if tuple(maps.shape[-2:]) == tuple(size):
        return maps
    return F.interpolate(maps[:, None], size=tuple(size), mode="bilinear", align_corners=False)[:, 0]


def _check_method(model: nn.Module, method: str) -> None:
    if method not in METHODS:
        raise ValueError(f"unknown attribution method {method!r}; valid methods: {list(METHODS)}")
    if method == "bcos" and not any(isinstance(m, DynamicLinear) for m in model.modules()):
        raise ValueError(f"method 'bcos' needs a B-cos model (with dynamic-linear layers); {type(model).__name__} has "
                         "none — use 'ixg', 'gradcam' or 'intgrad'")


def _check_riemann(model: nn.Module, steps: int) -> None:
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")
    if steps > 1 and model.training:
        raise ValueError("intgrad on a model that is not an X-DNN runs `steps` extra forward passes, which in train "
                         "mode would update BatchNorm statistics; call model.eval() first, or use an X-DNN "
                         "(model.is_xdnn = True) for exact one-pass IntGrad")


@contextmanager
def _capture_output(module: nn.Module | None, layer: str) -> Iterator[list[Tensor]]:
    """Collect the output of ``module`` during the forward pass run inside the block (nothing for ``None``)."""
    captured: list[Tensor] = []
    if module is None:
        yield captured
        return

    def hook(_module: nn.Module, _inputs: tuple, output: Tensor) -> None:
        if not isinstance(output, Tensor) or output.dim() != 4:
            shape = tuple(output.shape) if isinstance(output, Tensor) else type(output).__name__
            raise ValueError(f"layer {layer!r} must output a tensor [N, C, h, w] to be attributed, got {shape}")
        if not output.requires_grad:  # a frozen model on a plain input: make the activation the graph's leaf
            output.requires_grad_(True)
        captured.append(output)

    handle = module.register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()
    if len(captured) != 1:
        raise ValueError(f"layer {layer!r} ran {len(captured)} times in one forward pass; attribute at a module that "
                         "runs exactly once")


def _target_gradient(model: nn.Module, logits: Tensor, target: Tensor, feature: Tensor, explaining: bool,
                     create_graph: bool) -> Tensor:
    """``∂(Σ_n logits[n, target[n]]) / ∂feature`` in one backward, in explanation mode for ``bcos``."""
    selected = logits.gather(1, target[:, None]).sum()
    with explanation_mode(model) if explaining else nullcontext():
        (grad,) = torch.autograd.grad(selected, feature, create_graph=create_graph)
    return grad


def _riemann_mean_gradient(model: nn.Module, x: Tensor, module: nn.Module | None, feature: Tensor, target: Tensor,
                           grad_at_one: Tensor, steps: int, create_graph: bool) -> Tensor:
    """Mean of the gradients at ``k/steps · feature``, ``k = 1..steps`` (``k = steps`` is the forward already run).

    At a layer, the model runs on ``x`` with the layer's output replaced by the scaled feature."""
    total = grad_at_one
    for k in range(1, steps):
        scaled = (k / steps) * feature
        with _replacing_output(module, scaled):
            logits = model(scaled if module is None else x)
        total = total + _target_gradient(model, logits, target, scaled, False, create_graph)
    return total / steps


@contextmanager
def _replacing_output(module: nn.Module | None, value: Tensor) -> Iterator[None]:
    """Make ``module`` return ``value`` in the forward passes inside the block (nothing for ``None``)."""
    if module is None:
        yield
        return
    handle = module.register_forward_hook(lambda _module, _inputs, _output: value)
    try:
        yield
    finally:
        handle.remove()


def _combine(method: str, feature: Tensor, grad: Tensor) -> Tensor:
    """The method's map ``[N, h, w]`` from the feature and its (mean) gradient ``[N, C, h, w]``."""
    if method == "gradcam":
        return F.relu((grad.mean((2, 3), keepdim=True) * feature).sum(1))
    return (grad * feature).sum(1)
