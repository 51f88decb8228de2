"""Differentiable explanations for one target class per sample at any layer: :func:`attribute`, the one entry point.

The methods and what each returns are declared in :mod:`rightreasons.explain.methods`. For all of them:

* The layer's output is captured by a forward hook in the one forward pass that also produces the logits: the model
  runs exactly as in a normal training step (BatchNorm statistics included) and the logits can feed the
  classification loss.
* All target logits are summed and differentiated once, so a batch costs one backward pass. Samples interact only
  through batch statistics: in train mode, for methods other than the B-cos ones, BatchNorm makes the batched
  gradient hold cross-sample terms (as in the Model-Guidance code); ``bcos`` / ``bcos_weights`` hold the statistics
  constant (explanation mode), so B-cos explanations are exactly per-sample.
* ``intgrad``: for an X-DNN (``capabilities(model).xdnn``: bias-free and positively homogeneous) the gradient is
  constant along the path, so IntGrad equals Input×Gradient and is exact in one pass. Other models get the right
  Riemann sum ``(1/steps) Σ_{k=1..steps} ∂y/∂A(k/steps · A)`` (Captum's ``riemann_right``): ``steps − 1`` extra
  forward and backward passes, only in eval mode (in train mode they would update BatchNorm statistics).
* Maps below input resolution are upsampled bilinearly (``align_corners=False``). With ``create_graph=True`` everything
  stays differentiable: a loss on the maps back-propagates (after :func:`attribute` returns) into every parameter —
  for the B-cos methods with exact second-order gradients.

**Float16.** Under float16 autocast the explanation's backward runs in float16, whose range ends at 65504 and whose
normal numbers start at 6e-5: the small gradients of a B-cos explanation (``W(x)`` of an untrained ResNet is ~1e-5 at
the input) lose their precision or vanish. ``grad_scale`` seeds that backward with the dynamic loss scale ``s`` of the
training step (``rightreasons.engine.Step.loss_scale``) and divides it out again in float32: the explanation's
gradient is computed ``s`` times larger, as dynamic loss scaling computes the ordinary gradients, and in the second
backward the products that make the parameters' gradients carry the factor ``s`` of the outer loss. An overflow makes
the explanation non-finite, hence the loss: the scaler skips the step and lowers ``s``, as for any other overflow.
What no scale moves is the gradient of the loss with respect to the explanation, which the second backward carries
unscaled: the scale-invariant localisation losses make it grow like ``1 / max|E|``, and beyond 65504 float16 cannot
hold it (bfloat16 has float32's range and needs no scaling).

Wrapped models (DDP, ``DataParallel``, ``torch.compile``) are explained like the bare model; the forward pass runs
through the wrapper, a compiled one eagerly (``torch.compiler.set_stance``): AOTAutograd's graphs have no second
backward, and the hooks that capture a layer are added after compiling. A training step compiled whole explains on the
functional route instead (:mod:`rightreasons.explain.functional`).
"""

from __future__ import annotations

import math
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..bcos.dynamic import explanation_mode
from ..errors import UsageError
from ..models.capabilities import capabilities, unwrap_model
from .layers import capture_outputs, resolve_layer
from .methods import Method, get_method

__all__ = ["Attribution", "INTGRAD_STEPS", "attribute", "explain", "resolve_target", "upsample"]

INTGRAD_STEPS = 50
"""The Riemann steps of ``intgrad`` on models that are not X-DNNs, wherever they are not given (explanations,
evaluation, guidance): each step is one more forward and backward pass."""


@dataclass
class Attribution:
    """What :func:`attribute` returns (detached unless ``create_graph=True``).

    Attributes:
        method: the method's name.
        logits: ``[N, K]`` the outputs of the (single) ordinary forward pass.
        target: ``[N]`` the explained class per sample.
        maps: ``[N, H, W]`` the attribution map at input resolution (for the B-cos methods: the contributions
            ``Σ_c W ⊙ x`` at the input, which for a bias-free B-cos CNN sum to ``logit − logit_bias``).
        raw: ``[N, h, w]`` the map at the layer's resolution (``maps`` itself at the input).
        weights: ``[N, C_in, H, W]`` the gradient of the target logit with respect to the input — ``W(x)`` for the
            B-cos methods — or ``None`` when a deeper layer was attributed.
    """

    method: str
    logits: Tensor
    target: Tensor
    maps: Tensor
    raw: Tensor
    weights: Tensor | None

    @property
    def explanation(self) -> Tensor:
        """What the method returns (:mod:`~rightreasons.explain.methods`), as e²KD compares it: the weights
        ``[N, C_in, H, W]`` for ``bcos_weights``, the map as ``[N, 1, H, W]`` for every other method."""
        if get_method(self.method).output == "weights":
            return self.weights
        return self.maps[:, None]


def resolve_target(target: int | Tensor | None, logits: Tensor) -> Tensor:
    """Per-sample target classes ``[N]``: the argmax when ``None``, an int broadcast (checked for range), or a tensor
    checked for dtype and shape. A tensor's range is checked where the classes are gathered (:func:`gather_targets`):
    reading its values here would make the host wait for the device."""
    n, k = logits.shape
    if target is None:
        return logits.detach().argmax(1)
    if isinstance(target, int) and not 0 <= target < k:
        raise UsageError(_out_of_range(k, logits.shape, [target]))
    t = torch.as_tensor(target, device=logits.device)
    if t.is_floating_point() or t.is_complex():
        raise TypeError(f"target must hold integer class indices, got dtype {t.dtype}")
    t = t.long()
    if t.dim() == 0:
        t = t.expand(n)
    if t.shape != (n,):
        raise UsageError(f"target must be an int or a tensor of shape [N] = [{n}], got shape {tuple(t.shape)}")
    return t


def _out_of_range(k: int, shape: torch.Size, values: list[int]) -> str:
    return f"target classes must lie in [0, {k - 1}] for logits of shape {list(shape)}, got values {values}"


def gather_targets(logits: Tensor, target: Tensor) -> Tensor:
    """``logits[n, target[n]]`` ``[N]``. A class out of range is a :class:`~rightreasons.errors.UsageError` naming
    the classes on the CPU; on a GPU, the gather's device-side assert (as torch's own losses check their targets)."""
    try:
        return logits.gather(1, target[:, None])[:, 0]
    except RuntimeError as e:
        if "out of bounds" not in str(e):
            raise
        raise UsageError(_out_of_range(logits.shape[1], logits.shape, target.tolist())) from None


def _check(model: nn.Module, method: Method, layer: str, steps: int) -> bool:
    """Refuse a method the model or layer cannot have; returns whether IntGrad needs the Riemann sum."""
    caps = capabilities(model)
    if method.explaining and not caps.bcos:
        raise UsageError(f"method {method.name!r} needs a B-cos model (with dynamic-linear layers); {caps.name} has "
                         "none — use 'ixg', 'gradcam' or 'intgrad'")
    if method.input_only and layer.lower() != "input":
        raise UsageError(f"method {method.name!r} is defined at the input only, got layer={layer!r}")
    riemann = method.name == "intgrad" and not caps.xdnn
    if riemann:
        if not isinstance(steps, int) or steps < 1:
            raise UsageError(f"steps must be a positive int, got {steps!r}")
        if steps > 1 and unwrap_model(model).training:
            raise UsageError("intgrad on a model that is not an X-DNN runs `steps` extra forward passes, which in "
                             "train mode would update BatchNorm statistics; call model.eval() first, or use an X-DNN "
                             "(model.is_xdnn = True) for exact one-pass IntGrad")
    return riemann


def attribute(model: nn.Module, x: Tensor, target: int | Tensor | None, method: str = "bcos", layer: str = "input",
              *, create_graph: bool = False, steps: int = INTGRAD_STEPS,
              grad_scale: float | Tensor = 1.0) -> Attribution:
    """Explain ``model``'s logits for ``target`` on ``x [N, C, H, W]`` at ``layer`` with ``method``.

    Args:
        model: a classifier returning logits ``[N, K]`` (possibly wrapped in DDP, DataParallel or torch.compile).
        x: the input batch, encoded for the model.
        target: one class per sample (``[N]``), an int for all, or ``None`` for the predicted classes.
        method: a name of :data:`~rightreasons.explain.methods.METHODS`.
        layer: ``"input"``, ``"mid1"``–``"mid3"``, ``"final"`` or a module path
            (:func:`~rightreasons.explain.layers.resolve_layer`); the module must output ``[N, C, h, w]``.
        create_graph: keep logits and maps differentiable (for guidance and e²KD losses); otherwise all is detached.
        steps: Riemann steps of ``intgrad`` on models that are not X-DNNs (ignored otherwise).
        grad_scale: the seed of the explanation's backward, divided out in float32 (the loss scale of a float16
            step; module docstring); 1 leaves the computation as it is. A 0-d tensor (a loss scaler's scale on the
            device) is taken as it is: checking its value would wait for the device.
    """
    if not isinstance(grad_scale, Tensor) and not (math.isfinite(grad_scale) and grad_scale > 0):
        raise UsageError(f"grad_scale must be a finite number > 0, got {grad_scale!r}")
    spec = get_method(method)
    riemann = _check(model, spec, layer, steps)
    module = resolve_layer(model, layer)
    # enable_grad: also inside an evaluation loop's no_grad block; force_eager: a compiled model too (module docstring)
    with torch.enable_grad(), torch.compiler.set_stance("force_eager"):
        if module is None and not x.requires_grad:
            x = x.detach().requires_grad_(True)
        with capture_outputs(model, [] if module is None else [layer], differentiable=True) as captured:
            logits = model(x)
        if logits.dim() != 2:
            raise ValueError(f"attribution expects the model to return logits [N, K], got {tuple(logits.shape)}")
        feature = x if module is None else _single_output(captured[0], layer)
        target = resolve_target(target, logits)
        grad = _target_gradient(model, logits, target, feature, spec.explaining, create_graph, grad_scale)
        if riemann and steps > 1:
            grad = _riemann_mean_gradient(model, x, module, feature, target, grad, steps, create_graph, grad_scale)
        raw = _combine(spec.name, feature, grad)
        maps = upsample(raw, x.shape[-2:])
    weights = grad if module is None else None
    if not create_graph:
        logits, raw, maps = logits.detach(), raw.detach(), maps.detach()
        weights = None if weights is None else weights.detach()
    return Attribution(method=spec.name, logits=logits, target=target, maps=maps, raw=raw, weights=weights)


def explain(model: nn.Module, x: Tensor, target: int | Tensor | None = None, *,
            create_graph: bool = False) -> Attribution:
    """The B-cos explanation of a batch: ``W(x)`` (``.weights [N, C, H, W]``) and the contributions ``Σ_c W ⊙ x``
    (``.maps [N, H, W]``) for ``target`` (default: the predicted class), from one forward and one backward pass;
    :func:`attribute` with ``method="bcos_weights"``."""
    return attribute(model, x, target, "bcos_weights", create_graph=create_graph)


def upsample(maps: Tensor, size: tuple[int, int] | torch.Size) -> Tensor:
    """Bilinear upsampling ``[N, h, w] -> [N, H, W]`` (identity when the sizes agree)."""
    if tuple(maps.shape[-2:]) == tuple(size):
        return maps
    return F.interpolate(maps[:, None], size=tuple(size), mode="bilinear", align_corners=False)[:, 0]


def _single_output(outputs: list[Tensor], layer: str) -> Tensor:
    if len(outputs) != 1:
        raise UsageError(f"layer {layer!r} ran {len(outputs)} times in one forward pass; attribute at a module that "
                         "runs exactly once")
    output = outputs[0]
    if not isinstance(output, Tensor) or output.dim() != 4:
        shape = tuple(output.shape) if isinstance(output, Tensor) else type(output).__name__
        raise UsageError(f"layer {layer!r} must output a tensor [N, C, h, w] to be attributed, got {shape}")
    return output


def _target_gradient(model: nn.Module, logits: Tensor, target: Tensor, feature: Tensor, explaining: bool,
                     create_graph: bool, grad_scale: float | Tensor) -> Tensor:
    """``∂(Σ_n logits[n, target[n]]) / ∂feature`` in one backward, in explanation mode for the B-cos methods; a
    backward seeded with ``grad_scale`` (not 1) returns its gradient divided by it in float32 (or wider)."""
    selected = gather_targets(logits, target).sum()
    scaled = _scaled(grad_scale)
    if scaled:
        selected = selected.to(_at_least_float32(selected.dtype)) * grad_scale
    with explanation_mode(model) if explaining else nullcontext():
        (grad,) = torch.autograd.grad(selected, feature, create_graph=create_graph)
    return _unscaled(grad, grad_scale) if scaled else grad


def _scaled(grad_scale: float | Tensor) -> bool:
    """Whether a backward seeded with ``grad_scale`` must divide it out (a tensor's value is not read)."""
    return isinstance(grad_scale, Tensor) or grad_scale != 1.0


def _unscaled(grad: Tensor, grad_scale: float | Tensor) -> Tensor:
    """The gradient of a backward seeded with ``grad_scale``, divided by it in float32 (or wider)."""
    return grad.to(_at_least_float32(grad.dtype)) / grad_scale


def _at_least_float32(dtype: torch.dtype) -> torch.dtype:
    return torch.promote_types(dtype, torch.float32)


def _riemann_mean_gradient(model: nn.Module, x: Tensor, module: nn.Module | None, feature: Tensor, target: Tensor,
                           grad_at_one: Tensor, steps: int, create_graph: bool, grad_scale: float | Tensor) -> Tensor:
    """Mean of the gradients at ``k/steps · feature``, ``k = 1..steps`` (``k = steps`` is the forward already run).

    At a layer, the model runs on ``x`` with the layer's output replaced by the scaled feature."""
    total = grad_at_one
    for k in range(1, steps):
        scaled = (k / steps) * feature
        with _replacing_output(module, scaled):
            logits = model(scaled if module is None else x)
        total = total + _target_gradient(model, logits, target, scaled, False, create_graph, grad_scale)
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
