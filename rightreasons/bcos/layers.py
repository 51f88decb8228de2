"""B-cos units: ``BcosConv2d``, ``BcosLinear``, their B-cosification variants and the fixed ``LogitLayer``.

A B-cos unit with weight ``w`` computes ``(ŵᵀx) · |cos(x, ŵ)|^(B-1)`` with ``ŵ = w / ‖w‖``: a linear unit whose output
is scaled down by how badly the input aligns with the weight. It is dynamic linear, ``w̃(x) = |cos|^(B-1) ŵ``, and the
``|cos|^(B-1)`` factor is the dynamic weight applied through :mod:`rightreasons.bcos.dynamic`.

Numerics follow the B-cos v2 release (docs/science.md, the B-cos transform) so that its checkpoints reproduce their
outputs: weights are normalised without eps, patch norms get ``+1e-6`` inside the square root (conv) or ``+1e-12``
after it (linear), and ``B != 2`` uses ``(|cos| + 1e-6)^(B-1)``. Parameters live at ``<module>.linear.weight`` as in
the release.

:class:`BcosifiedConv2d` and :class:`BcosifiedLinear` are the units of networks converted from standard ones
(:func:`rightreasons.bcosify`): the same transform on a weight that is not normalised to unit norm (``"raw"``, the
B-cosification release) or normalised and multiplied by a learnt per-output gain (``"gain"``), with an optional bias
added after the transform. At ``B = 1`` both compute the pretrained layer ``wᵀx + b`` exactly.

The backward is in closed form, so that a unit launches a few passes rather than autograd's many small operations
(``make bench``, ``launches``): the normalised convolution (:class:`_NormalizedLinear`), the alignment scale
(:class:`_AlignmentScale`) and the norm map (:class:`_Patches`), whose gradient a unit's own backward gives straight to
its input.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..choices import WEIGHT_MODES
from .dynamic import DynamicLinear, Recomputed, _reduce_to, _same, custom_backwards

__all__ = ["BcosConv2d", "BcosLinear", "BcosifiedConv2d", "BcosifiedLinear", "LogitLayer", "WEIGHT_MODES", "WeightMode",
           "default_logit_bias"]

WeightMode = Literal["raw", "gain"]


def _check_bcos_args(b: float, max_out: int, bias: bool, name: str) -> None:
    if bias:
        raise ValueError(f"{name} never has a bias: B-cos units must stay dynamic linear (got bias=True)")
    if not b >= 1:
        raise ValueError(f"{name}: the alignment exponent B must be >= 1, got b={b!r}")
    if not (isinstance(max_out, int) and max_out >= 1):
        raise ValueError(f"{name}: max_out must be an integer >= 1, got max_out={max_out!r}")


@dataclass(frozen=True, eq=False)  # hashed by identity: TorchDynamo hashes the products it calls
class _Patches:
    """A conv unit's receptive fields, for its norm map ``sqrt(Σ_patch Σ_c x² + 1e-6)`` (channels summed per group):
    the map itself (B-cos v2 numerics) and, for units without dilation, its gradient in closed form."""

    kernel_size: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int

    @property
    def patch_size(self) -> int:
        return self.kernel_size[0] * self.kernel_size[1]

    @property
    def pooled(self) -> bool:
        """Whether the patch sums are an average pooling (times the patch size), not the squares themselves."""
        return self.kernel_size != (1, 1) or self.stride != (1, 1) or self.padding != (0, 0)

    def norms(self, x: Tensor, convolved: bool = False) -> Tensor:
        """``[N, C, H, W] -> [N, groups, H', W']``: the release's operations (a dilated unit sums the squares with a
        ones-kernel convolution, an undilated one pools them). ``convolved``: sum by the convolution in any case,
        the same values to rounding; Inductor's C++ code generation (the CPU) spends long simplifying the indexing of
        a pooling's gradients, so that a traced graph compiles faster this way (a guided step of a B-cos ResNet-18:
        ~90 s instead of ~130 s) and runs as fast."""
        squares = x.square()
        if self.groups == 1:
            squares = squares.sum(1, keepdim=True)
        else:
            squares = squares.unflatten(1, (self.groups, -1)).sum(2)
        if self.dilation != (1, 1) or convolved and self.pooled:
            ones = squares.new_ones(self.groups, 1, *self.kernel_size)
            sums = F.conv2d(squares, ones, None, self.stride, self.padding, self.dilation, self.groups)
        elif self.pooled:
            sums = F.avg_pool2d(squares, self.kernel_size, self.stride, self.padding) * self.patch_size
        else:
            sums = squares
        return (sums + 1e-6).sqrt()

    def input_grad(self, x: Tensor, grad: Tensor) -> Tensor:
        """The gradient to ``x [N, C, H, W]`` of ``½ · avgpool(Σ_c x²)`` (per group; no dilation) under ``grad``
        (``[N, groups, H', W']``, or with a singleton dimension after the groups): ``x · avgpool'(grad)``. The norm
        map's gradient ``g`` is this under ``g · k / norm``."""
        groups = self.groups
        grad = grad.to(x.dtype)  # the squares' precision, as autograd gives it
        if grad.dim() != 4:
            grad = grad.reshape(x.shape[0], groups, *grad.shape[-2:])
        if self.pooled:  # the pooling's input only lends its shape: the gradient itself where the pooling keeps it
            like = grad if grad.shape[-2:] == x.shape[-2:] else x.narrow(1, 0, groups)
            grad = torch.ops.aten.avg_pool2d_backward(grad, like, self.kernel_size, self.stride, self.padding, False,
                                                      True, None)
        if groups == 1:
            return x * grad
        return (x.unflatten(1, (groups, -1)) * grad.unsqueeze(2)).flatten(1, 2)


class _PatchNorms(torch.autograd.Function):
    """:meth:`_Patches.norms` (no dilation) with a closed-form backward from the input and the map, stored instead of
    the pooled squares; differentiable again (its backward is made of differentiable operations)."""

    @staticmethod
    def forward(ctx, x: Tensor, patches: _Patches) -> Tensor:  # noqa: D102
        norm = patches.norms(x)
        ctx.save_for_backward(x, norm)
        ctx.patches = patches
        ctx.set_materialize_grads(False)
        return norm

    @staticmethod
    def backward(ctx, grad: Tensor | None) -> tuple[Tensor | None, None]:  # noqa: D102
        if grad is None:
            return None, None
        x, norm = ctx.saved_tensors
        return ctx.patches.input_grad(x, grad / (norm / ctx.patches.patch_size)), None


def _patch_norms(x: Tensor, patches: _Patches) -> Tensor:
    """The norm map of ``x`` (:meth:`_Patches.norms`), in closed form (:class:`_PatchNorms`) where it has one and the
    kit's custom backwards run (:func:`~.dynamic.custom_backwards`); traced on the CPU, its sums convolved, which
    compiles faster."""
    if patches.dilation == (1, 1) and x.requires_grad and torch.is_grad_enabled() and custom_backwards():
        return _PatchNorms.apply(x, patches)
    return patches.norms(x, convolved=torch.compiler.is_compiling() and x.device.type == "cpu")


@dataclass(frozen=True, eq=False)  # hashed by identity: TorchDynamo hashes the products it calls
class _AlignmentScale:
    """The dynamic weight ``|cos|^(B-1)`` with ``cos = out / norm`` (B-cos v2 numerics), recomputed in the backward
    from the unit's linear output and its norm map, the two tensors a unit stores (besides its input, for the weight
    gradient). A unit scales its own linear output: the product is ``self(out, norm) · out``.

    With ``patches`` (a conv unit's receptive fields, without dilation), the unit's input is a third input, unused by
    the value: the closed-form backward of a unit gives the norm map's gradient to it directly (the map is a function
    of the input alone), so that the map's own backward never runs."""

    b: float
    patches: _Patches | None = None

    def __call__(self, out: Tensor, norm: Tensor, _source: Tensor | None = None) -> Tensor:
        if self.b == 2:
            return out.abs() / norm
        return ((out / norm).abs() + 1e-6).pow(self.b - 1)

    def product_vjp(self, tensors: tuple[Tensor, ...], grad: Tensor,
                    wrt: tuple[bool, ...]) -> tuple[Tensor | None, ...]:
        """Gradients of ``self(out, norm) · x`` to ``x``, ``out`` (through the scale), ``norm`` and the unit's input
        (those marked ``wrt``; ``tensors = (x, out, norm[, input])``) in closed form, a few elementwise passes.

        Where ``x`` is ``out`` (a unit's own backward) both routes to it end in the same tensor, so only their sum
        matters: it is given to ``x`` and ``None`` to ``out``; and where the input is given, the norm map's gradient
        goes on to it (``None`` to ``norm``). A second backward, which runs before the forward's own, leaves it to the
        small norm map instead of holding an input-sized gradient until then."""
        x, out, norm, *source = tensors
        merged = wrt[0] and wrt[1] and _same(x, out)
        grads: list[Tensor | None] = [None] * len(tensors)
        # the norm's gradient is −moment / (factor · norm), moment = factor · Σ_channels grad · x · (−norm ∂scale/∂norm)
        moment, factor = None, 1.0
        if self.b == 2:  # scale = |out| / norm: ∂/∂out = sgn(out) / norm, −norm ∂/∂norm = scale
            if merged:  # grad · x · sgn(out) / norm = grad · scale, as x = out: twice grad · scale in one pass
                grads[0] = twice = grad * out.abs() / (norm / 2)
                moment, factor = (_reduce_to(twice * x, norm.shape) if wrt[2] else None), 2.0
            else:
                scale = self(out, norm)
                grads[0] = grad * scale if wrt[0] else None
                through = grad * x if wrt[1] or wrt[2] else None
                grads[1] = through * out.sgn() / norm if wrt[1] else None
                moment = _reduce_to(through * scale, norm.shape) if wrt[2] else None
        else:  # scale = (|c| + 1e-6)^(B-1), c = out / norm: ∂/∂out = ∂scale/∂c / norm, −norm ∂/∂norm = ∂scale/∂c · c
            grads[0] = grad * self(out, norm) if wrt[0] else None
            if wrt[1] or wrt[2]:
                cos = out / norm
                grad_cos = grad * x * (self.b - 1) * (cos.abs() + 1e-6).pow(self.b - 2) * cos.sgn()
                grads[1] = grad_cos / norm if wrt[1] else None
                moment = _reduce_to(grad_cos * cos, norm.shape) if wrt[2] else None
            if merged:
                grads[0], grads[1] = grads[0] + grads[1], None
        if merged and source and wrt[2] and wrt[3]:  # on to the input: as grad_norm · k / norm (_Patches.input_grad)
            patch_size = self.patches.patch_size
            grads[3] = self.patches.input_grad(source[0], moment / (norm.square() * (-factor / patch_size)))
        elif wrt[2]:
            grads[2] = moment / (norm * -factor)
        return tuple(g for g, need in zip(grads, wrt) if need)


def _alignment(out: Tensor, norm: Tensor, b: float, source: Tensor | None = None,
               patches: _Patches | None = None) -> Recomputed:
    """``|cos|^(B-1)`` as a dynamic weight recomputed in the backward (:class:`_AlignmentScale`); with the unit's
    input ``source`` and its receptive fields (no dilation), the norm map is differentiated in closed form."""
    if source is None or patches is None or patches.dilation != (1, 1):
        return Recomputed(_AlignmentScale(b), (out, norm))
    return Recomputed(_AlignmentScale(b, patches), (out, norm, source))


def _unit_normalized(w: Tensor) -> Tensor:
    """``ŵ = w / ‖w‖`` per output (every dimension but the first), without eps (B-cos v2 numerics)."""
    return w / torch.linalg.vector_norm(w, dim=tuple(range(1, w.dim())), keepdim=True)


@dataclass(frozen=True, eq=False)  # hashed by identity: TorchDynamo hashes the products it calls
class _NormalizedLinear:
    """A unit's linear part ``conv(x, ŵ)`` (``conv``: stride, padding, dilation, groups) or ``linear(x, ŵ)``
    (``conv=None``) as a product of :func:`~rightreasons.bcos.dynamic.dynamic_apply` that stores ``x`` and the
    parameter ``w`` only: its backward recomputes the weight-sized ``ŵ`` (a standard layer stores no such copy)."""

    conv: tuple[tuple[int, int], tuple[int, int], tuple[int, int], int] | None

    def __call__(self, _: None, x: Tensor, w: Tensor) -> Tensor:
        if self.conv is None:
            return F.linear(x, _unit_normalized(w))
        return F.conv2d(x, _unit_normalized(w), None, *self.conv)

    def vjp(self, tensors: tuple[Tensor, Tensor], grad: Tensor, wrt: tuple[bool, bool]) -> tuple[Tensor, ...]:
        """Gradients to ``x`` and ``w`` (those marked ``wrt``) from differentiable operations."""
        return self.value_and_vjp(tensors, grad, wrt, value=False)[1:]

    def value_and_vjp(self, tensors: tuple[Tensor, Tensor], grad: Tensor, wrt: tuple[bool, bool],
                      value: bool = True) -> tuple[Tensor | None, ...]:
        """The product at ``tensors`` (``None`` unless ``value``) and its gradients (:meth:`vjp`), from one
        normalised weight (a second backward needs both)."""
        x, w = tensors
        dims = tuple(range(1, w.dim()))
        norm = torch.linalg.vector_norm(w, dim=dims, keepdim=True)
        w_hat = w / norm
        out = None if not value else F.linear(x, w_hat) if self.conv is None else F.conv2d(x, w_hat, None, *self.conv)
        x_, w_hat_ = x.to(grad.dtype), w_hat.to(grad.dtype)  # the forward's precision (e.g. under autocast)
        if self.conv is None:
            grad_x = grad @ w_hat_ if wrt[0] else None
            grad_w_hat = grad.reshape(-1, grad.shape[-1]).T @ x_.reshape(-1, x.shape[-1]) if wrt[1] else None
        else:
            stride, padding, dilation, groups = self.conv
            grad_x, grad_w_hat, _ = torch.ops.aten.convolution_backward(
                grad, x_, w_hat_, None, stride, padding, dilation, False, (0, 0), groups, (wrt[0], wrt[1], False))
        grad_w_hat = None if grad_w_hat is None else grad_w_hat.to(w.dtype)
        grads = (out, grad_x) if wrt[0] else (out,)
        if wrt[1]:  # through ŵ = w / ‖w‖: (g − ŵ ⟨ŵ, g⟩) / ‖w‖
            grads += (torch.addcmul(grad_w_hat, w_hat, (w_hat * grad_w_hat).sum(dims, keepdim=True), value=-1) / norm,)
        return grads


def _affine(y: Tensor, gain: Tensor | None, bias: Tensor | None, shape: tuple[int, ...]) -> Tensor:
    """``gain · y + bias`` per output (each viewed as ``shape``; each term only where present): a B-cosified unit's
    gain and bias."""
    if gain is not None:
        y = y * gain.view(shape)
    if bias is not None:
        y = y + bias.view(shape)
    return y


def _max_out(out: Tensor, units: int, max_out: int, dim: int) -> Tensor:
    """MaxOut over ``max_out`` consecutive channels per unit. A selection: exact under autograd, no extra mechanism."""
    if max_out == 1:
        return out
    return out.unflatten(dim, (units, max_out)).max(dim=dim + 1 if dim >= 0 else dim).values


class BcosConv2d(DynamicLinear):
    """2-D B-cos convolution: ``out = conv(x, ŵ) · |cos|^(B-1)`` with ``cos`` taken per receptive-field patch.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups: as for :class:`torch.nn.Conv2d`.
        b: alignment exponent B >= 1 (B = 1 is a conv with unit-norm weights).
        max_out: MaxOut units per output channel (each output owns ``max_out`` consecutive filters).
        bias: accepted only as ``False``; B-cos units never have a bias.

    Shapes: ``[N, in_channels, H, W] -> [N, out_channels, H', W']``.
    """

    #: whether the unit's weight is ``w / ‖w‖`` (recomputed in the backward rather than stored)
    normalizes_weight = True

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int] = 1,
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        b: float = 2,
        max_out: int = 1,
        bias: bool = False,
    ) -> None:
        _check_bcos_args(b, max_out, bias, "BcosConv2d")
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"BcosConv2d: in_channels={in_channels} and out_channels={out_channels} "
                             f"must both be divisible by groups={groups}")
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.b = b
        self.max_out = max_out
        self.groups = groups
        self.linear = nn.Conv2d(in_channels, out_channels * max_out, kernel_size, stride, padding, dilation, groups,
                                bias=False)
        self.kernel_size = self.linear.kernel_size
        self.stride = self.linear.stride
        self.padding = self.linear.padding
        self.dilation = self.linear.dilation
        self.patch_size = self.kernel_size[0] * self.kernel_size[1]

    def normalized_weight(self) -> Tensor:
        """``ŵ``: every filter scaled to unit L2 norm over (in, kh, kw). ``[out·max_out, in/groups, kh, kw]``."""
        return _unit_normalized(self.linear.weight)

    def _patches(self) -> _Patches:
        """The unit's receptive fields (kernel, stride, padding, dilation, groups)."""
        return _Patches(self.kernel_size, self.stride, self.padding, self.dilation, self.groups)

    def patch_norms(self, x: Tensor) -> Tensor:
        """``‖x‖`` per zero-padded receptive field and group: ``[N, groups, H', W']``."""
        return _patch_norms(x, self._patches())

    def forward(self, x: Tensor) -> Tensor:
        """``[N, C_in, H, W] -> [N, C_out, H', W']``."""
        conv = (self.stride, self.padding, self.dilation, self.groups)
        if self.normalizes_weight:
            out = self.dynamic(None, x, _NormalizedLinear(conv), (self.linear.weight,))
        else:
            out = F.conv2d(x, self.normalized_weight(), None, *conv)
        out = _max_out(out, self.out_channels, self.max_out, dim=1)
        if self.b == 1:
            return out
        patches = self._patches()
        norm = _patch_norms(x, patches)
        if self.groups == 1:
            return self.dynamic(_alignment(out, norm, self.b, x, patches), out)
        grouped = out.unflatten(1, (self.groups, -1))
        return self.dynamic(_alignment(grouped, norm.unsqueeze(2), self.b, x, patches), grouped).flatten(1, 2)

    def extra_repr(self) -> str:
        return f"B={self.b}" + (f", max_out={self.max_out}" if self.max_out > 1 else "")


class BcosLinear(DynamicLinear):
    """B-cos linear layer on the last dimension: ``[*, in_features] -> [*, out_features]``.

    Args:
        in_features, out_features: sizes of the last dimension.
        b: alignment exponent B >= 1.
        max_out: MaxOut units per output feature.
        bias: accepted only as ``False``.
    """

    normalizes_weight = True

    def __init__(self, in_features: int, out_features: int, b: float = 2, max_out: int = 1, bias: bool = False) -> None:
        _check_bcos_args(b, max_out, bias, "BcosLinear")
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.b = b
        self.max_out = max_out
        self.linear = nn.Linear(in_features, out_features * max_out, bias=False)

    def normalized_weight(self) -> Tensor:
        """``ŵ``: rows of the weight scaled to unit norm. ``[out·max_out, in]``."""
        return _unit_normalized(self.linear.weight)

    def forward(self, x: Tensor) -> Tensor:
        """``[*, in_features] -> [*, out_features]``."""
        if self.normalizes_weight:
            out = self.dynamic(None, x, _NormalizedLinear(None), (self.linear.weight,))
        else:
            out = F.linear(x, self.normalized_weight())
        out = _max_out(out, self.out_features, self.max_out, dim=-1)
        if self.b == 1:
            return out
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True) + 1e-12
        return self.dynamic(_alignment(out, norm, self.b), out)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, B={self.b}" + (
            f", max_out={self.max_out}" if self.max_out > 1 else "")


class _PretrainedScale:
    """What the units of B-cosified networks add to :class:`BcosConv2d` / :class:`BcosLinear` (a mixin before them):
    the weight mode, an optional gain and an optional bias per output."""

    linear: nn.Module
    weight_mode: WeightMode
    gain: nn.Parameter | None
    bias: nn.Parameter | None

    def _add_scale(self, features: int, bias: bool, weight_mode: str) -> None:
        """After the B-cos unit's constructor: ``gain`` (ones, ``gain`` mode) and ``bias`` (zeros) of ``features``."""
        if weight_mode not in WEIGHT_MODES:
            raise ValueError(f"{type(self).__name__}: unknown weight_mode {weight_mode!r}; expected one of "
                             f"{list(WEIGHT_MODES)}")
        self.weight_mode = weight_mode
        self.gain = nn.Parameter(torch.ones(features)) if weight_mode == "gain" else None
        self.bias = nn.Parameter(torch.zeros(features)) if bias else None

    @property
    def normalizes_weight(self) -> bool:
        return self.weight_mode == "gain"

    def normalized_weight(self) -> Tensor:
        """The weight the transform uses: ``w`` (``raw``) or ``ŵ`` (``gain``), shaped as ``linear.weight``."""
        return self.linear.weight if self.weight_mode == "raw" else super().normalized_weight()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, weight_mode={self.weight_mode}, bias={self.bias is not None}"


class BcosifiedConv2d(_PretrainedScale, BcosConv2d):
    """B-cos convolution of a B-cosified standard network: ``out = conv(x, v) · |conv(x, v) / ‖x‖|^(B-1)``, then
    ``g · out + bias`` per output channel (each term only where present).

    ``weight_mode="raw"`` uses the weight as it is, ``v = w`` (the B-cosification release): the output is ``‖w‖^B``
    times that of the unit-norm :class:`BcosConv2d`, i.e. the pretrained pre-activation ``wᵀx`` times
    ``(‖w‖·|cos|)^(B-1)``; the weight's norm stays a trainable part of each filter, as in the standard network.
    ``"gain"`` uses ``v = ŵ`` and a learnt gain ``g`` per output channel (a converter sets it to the pretrained
    ``‖w‖``): the pretrained pre-activation times ``|cos|^(B-1)`` alone, direction and scale learnt apart (as with
    weight normalisation). Both are the pretrained layer at ``B = 1``; at ``B > 1`` ``gain`` is ``‖w‖^(B-1)`` times
    smaller than ``raw``. The bias is added after the B-cos transform, so ``B = 1`` is exactly the pretrained
    ``conv(x, w) + bias``; a bias makes the unit affine (incomplete explanations), so B-cosified models keep it only
    for function-preserving conversions and bias-decay schedules.

    Args:
        in_channels, out_channels, kernel_size, stride, padding, dilation, groups, b, max_out: as for
            :class:`BcosConv2d` (the gain and bias act per output channel, after MaxOut).
        bias: add a learnt bias per output channel (``<module>.bias``, zeros at construction).
        weight_mode: ``"raw"`` or ``"gain"`` (``<module>.gain``, ones at construction).

    Shapes: ``[N, in_channels, H, W] -> [N, out_channels, H', W']``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int] = 1,
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
                 dilation: int | tuple[int, int] = 1, groups: int = 1, b: float = 2, max_out: int = 1,
                 bias: bool = False, weight_mode: WeightMode = "raw") -> None:
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, b, max_out)
        self._add_scale(out_channels, bias, weight_mode)

    def forward(self, x: Tensor) -> Tensor:
        """``[N, C_in, H, W] -> [N, C_out, H', W']``."""
        return _affine(super().forward(x), self.gain, self.bias, (1, -1, 1, 1))


class BcosifiedLinear(_PretrainedScale, BcosLinear):
    """B-cos linear layer of a B-cosified standard network (see :class:`BcosifiedConv2d`): ``out = v x · |v x /
    ‖x‖|^(B-1)``, then ``g · out + bias``, on the last dimension: ``[*, in_features] -> [*, out_features]``.

    Args:
        in_features, out_features, b, max_out: as for :class:`BcosLinear`.
        bias: add a learnt bias per output feature.
        weight_mode: ``"raw"`` (``v = w``) or ``"gain"`` (``v = ŵ`` and a learnt gain per output feature).
    """

    def __init__(self, in_features: int, out_features: int, b: float = 2, max_out: int = 1, bias: bool = False,
                 weight_mode: WeightMode = "raw") -> None:
        super().__init__(in_features, out_features, b, max_out)
        self._add_scale(out_features, bias, weight_mode)

    def forward(self, x: Tensor) -> Tensor:
        """``[*, in_features] -> [*, out_features]``."""
        return _affine(super().forward(x), self.gain, self.bias, (-1,))


def default_logit_bias(num_classes: int) -> float:
    """``-log(C - 1)``: the release's fixed logit bias, so that an all-zero input predicts probability 1/C per class
    under a sigmoid. 0.0 for ``C <= 2``."""
    return -math.log(num_classes - 1) if num_classes > 2 else 0.0


class LogitLayer(nn.Module):
    """Fixed (not learnt) logit transform ``z / T + b``; it has no state-dict entries.

    Args:
        bias: the additive logit bias ``b`` (0.0 is a valid, explicit choice).
        temperature: the divisor ``T``; ``None`` means 1.
    """

    def __init__(self, bias: float = 0.0, temperature: float | None = None) -> None:
        super().__init__()
        if temperature is not None and not temperature > 0:
            raise ValueError(f"LogitLayer: temperature must be > 0, got {temperature!r}")
        if not math.isfinite(bias):
            raise ValueError(f"LogitLayer: bias must be finite, got {bias!r}")
        self.bias = float(bias)
        self.temperature = temperature

    def forward(self, x: Tensor) -> Tensor:
        """``[N, C] -> [N, C]``."""
        if self.temperature is not None:
            x = x / self.temperature
        return x + self.bias if self.bias != 0.0 else x

    def extra_repr(self) -> str:
        return f"bias={self.bias:.4f}, temperature={self.temperature}"

