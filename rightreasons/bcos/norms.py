"""Normalisation layers read as dynamic linear maps (B-cos v2 §5, docs/science.md, normalisation layers).

Every norm here computes ``y = γ · (x − μ) / σ (+ β)`` where ``1/σ`` is a dynamic weight applied through
:mod:`rightreasons.bcos.dynamic` (held constant in explanation mode, exact under double backward). The centring ``x −
μ`` is linear in ``x`` and stays in the explanation. *Uncentred* norms drop ``μ`` (``σ`` is still the standard
deviation of the centred input, biased); together with :func:`NoBias` they keep a network free of additive terms, so
that ``logit − logit_bias == Σ W(x) ⊙ x`` holds exactly.

The backward is in closed form (a norm's product with its std, :class:`_Std`; its statistics, :class:`_Statistics`),
and a norm's own backward gives the gradient of its batch variance straight to its input (``make bench``,
``launches``).

Statistics are taken over (the name says which)

================  ==================  =====================================
norm              statistics over     parameters / buffers (state-dict keys)
================  ==================  =====================================
BatchNorm         N, H, W per C       weight, bias, running_mean/var, num_batches_tracked
AllNorm           N, C, H, W          the same, with one feature
GroupNorm         C/G, H, W per G     weight, bias
GNLayerNorm2d     C, H, W             weight, bias (GroupNorm with one group)
GNInstanceNorm2d  H, W per C          weight, bias (GroupNorm with C groups)
PositionNorm2d    C per (h, w)        weight, bias
LayerNorm         last dims (tokens)  weight, bias
================  ==================  =====================================

Uncentred BatchNorm/AllNorm keep a ``running_var`` EMA of the biased batch variance and a ``running_mean`` buffer that
is never updated (it exists so that release checkpoints load); centred ones follow :class:`torch.nn.BatchNorm2d`.

In training mode the batch-statistics norms (BatchNorm, AllNorm) take their statistics in one place,
:meth:`RunningStatsNorm.batch_statistics`. :func:`shared_batch_statistics` makes a later forward of a *part* of a batch
reuse the statistics (and their autograd graph) that the forward of the whole batch took, so that explaining only some
images of a batch equals explaining them within the whole batch.

:func:`~rightreasons.bcos.sync.convert_sync_batchnorm` makes them the statistics of the batches of *all* processes
of a distributed run (synchronised BatchNorm, :mod:`rightreasons.bcos.sync`), taken by :mod:`.collectives`.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from typing import Callable, Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .collectives import statistics_group, synchronised_statistics
from ..errors import UsageError
from .dynamic import DynamicLinear, Recomputed, _reduce_to, _same, after_transform, custom_backwards, functional_route

__all__ = [
    "AllNorm2d", "AllNormUncentered2d", "BatchNorm2d", "BatchNormUncentered2d", "GNInstanceNorm2d",
    "GNInstanceNormUncentered2d", "GNLayerNorm2d", "GNLayerNormUncentered2d", "GroupNorm2d", "GroupNormUncentered2d",
    "LayerNorm", "LayerNormUncentered", "NORM_LAYERS", "NoBias", "PositionNorm2d", "PositionNormUncentered2d",
    "RunningStatsNorm",
    "SharingState", "Unaffine", "get_norm_layer", "reinstated_statistics_sharing", "shared_batch_statistics",
    "statistics_sharing", "training_batch_norms", "unshareable_batch_norms",
]


def _normalize(module: nn.Module, x: Tensor, var: Tensor, mean: Tensor | None, shape: tuple[int, ...],
               flatten_groups: bool = False, source: Tensor | None = None) -> Tensor:
    """``γ · (x − mean) / sqrt(var + eps) + β`` (``[N, G, C/G, H, W]`` groups flattened to ``[N, C, H, W]`` first,
    ``γ`` and ``β`` viewed as ``shape``), each term only where present, with the std as the dynamic divisor: one
    product that stores only ``x``, the statistics and the affine parameters, and recomputes the std; a plain
    computation in the norms of standard models (:class:`~rightreasons.bcos.sync.SyncBatchNorm2d`). ``source``:
    ``x`` where ``var`` (and ``mean``) are its own statistics, so that a training backward differentiates them in
    closed form (``None``: statistics taken elsewhere, of a whole batch or of every process's, or running ones)."""
    variance = var + module.eps
    extras = (mean, *(None if p is None else p.view(shape) for p in (module.weight, module.bias)))
    normalized = _Normalized(flatten_groups)
    if isinstance(module, DynamicLinear):
        return module.dynamic(Recomputed(_Std(normalized), (variance, source)), x, normalized, extras)
    return normalized(variance.sqrt(), x, *extras)


@dataclass(frozen=True, eq=False)  # hashed by identity: TorchDynamo hashes the products it calls
class _Normalized:
    """``γ · (x − mean) / std + β`` as a product of :func:`~rightreasons.bcos.dynamic.dynamic_apply` (``γ`` and ``β``
    given in the output's broadcast shape). Elementwise in ``x``; the mean and ``β`` (extras 0 and 2) are offsets,
    added rather than multiplied with ``x``."""

    flatten_groups: bool
    elementwise = True
    offsets = (0, 2)

    def __call__(self, std: Tensor, x: Tensor, mean: Tensor | None, gamma: Tensor | None,
                 beta: Tensor | None) -> Tensor:
        y = (x if mean is None else x - mean) / std
        y = y.flatten(1, 2) if self.flatten_groups else y
        y = y if gamma is None else y * gamma
        return y if beta is None else y + beta


@dataclass(frozen=True, eq=False)  # hashed by identity: TorchDynamo hashes the products it calls
class _Std:
    """A norm's dynamic weight, the std ``sqrt(variance)`` of ``variance = var + eps`` (and of ``source``, unused by
    the value: the input whose statistics ``var`` and a centred norm's mean are, where they are), with the gradients
    of the norm's product (:class:`_Normalized`) in closed form: an explanation's backward is one pass over ``x``, and
    a training backward differentiates the statistics of ``source`` itself, so that their own backward never runs."""

    normalized: _Normalized

    def __call__(self, variance: Tensor, _source: Tensor | None = None) -> Tensor:
        return variance.sqrt()

    def product_vjp(self, tensors: tuple[Tensor | None, ...], grad: Tensor,
                    wrt: tuple[bool, ...]) -> tuple[Tensor, ...]:
        """Gradients to ``x``, ``variance``, ``source``, ``mean``, ``γ`` and ``β`` (those marked ``wrt``) from
        differentiable operations. Where ``source`` is ``x`` (a norm's own backward), the variance's gradient goes on
        to it, ``d var / dx = 2 (x − μ) / M``, added to ``x``'s (``None`` to ``variance``). A second backward, which
        runs before the forward's own, leaves it to the small variance instead of holding an input-sized gradient
        until then."""
        x, variance, source, mean, weight, bias = tensors
        std = variance.sqrt()
        gamma = weight
        if self.normalized.flatten_groups:
            grad = grad.unflatten(1, x.shape[1:3])
            gamma = None if gamma is None else gamma.unflatten(1, x.shape[1:3])
        scale = std.reciprocal() if gamma is None else gamma / std
        grads: list[Tensor | None] = [None] * len(tensors)
        grad_x = grad * scale if wrt[0] or wrt[1] or wrt[3] else None
        centred = x if mean is None else x - mean
        # Σ grad · (x − mean) over what std and γ are shared across: their gradients follow from it without another
        # pass over x where they share the same shape (every norm but PositionNorm and GroupNorm's γ)
        shared = gamma is None or gamma.shape == std.shape
        moment = _reduce_to(grad * centred, std.shape) if shared and (wrt[1] or wrt[4]) else None
        grads[0] = grad_x if wrt[0] else None
        if wrt[1]:  # ∂/∂variance of γ (x − mean) / std = −γ (x − mean) / (2 std · variance)
            along = moment * scale if shared else _reduce_to(grad_x * centred, std.shape)  # Σ grad γ (x − mean) / std
            if wrt[0] and wrt[2] and _same(x, source):  # var = mean((x − μ)²) over what var is shared across
                deviation = centred if mean is not None else x - x.mean(
                    [d for d, n in enumerate(variance.shape) if n == 1], keepdim=True)
                grads[0] = torch.addcmul(grad_x, deviation, along / (variance * -(x.numel() // variance.numel())))
            else:
                grads[1] = along / (variance * -2)
        if wrt[3]:
            grads[3] = _reduce_to(-grad_x, mean.shape)
        if wrt[4]:
            normalized = moment / std if shared else grad * centred / std
            grads[4] = _reduce_to(normalized, gamma.shape)
            grads[4] = grads[4] if grads[4].shape == weight.shape else grads[4].reshape(weight.shape)
        if wrt[5]:
            grads[5] = _reduce_to(grad.flatten(1, 2) if self.normalized.flatten_groups else grad, bias.shape)
        return tuple(g for g, need in zip(grads, wrt) if need)


def _statistics(x: Tensor, dim: int | tuple[int, ...], centred: bool, keepdim: bool) -> tuple[Tensor, Tensor | None]:
    """Biased variance over ``dim`` and, for centred norms, the mean (``None`` otherwise); differentiable, in closed
    form (:class:`_Statistics`) where the kit's custom backwards run (:func:`~.dynamic.custom_backwards`)."""
    if x.requires_grad and torch.is_grad_enabled() and custom_backwards():
        stats = _Statistics.apply(x, dim, centred, keepdim)
        return stats if centred else (stats, None)
    if centred:
        return torch.var_mean(x, dim=dim, unbiased=False, keepdim=keepdim)
    return torch.var(x, dim=dim, unbiased=False, keepdim=keepdim), None


class _Statistics(torch.autograd.Function):
    """``torch.var`` (``torch.var_mean`` where centred) of ``x`` over ``dim``, biased, with a closed-form backward from
    ``x`` alone: ``d var / dx = 2 (x − μ) / M`` and ``d mean / dx = 1 / M`` for ``M`` values per statistic;
    differentiable again (its backward is made of differentiable operations)."""

    @staticmethod
    def forward(ctx, x: Tensor, dim: int | tuple[int, ...], centred: bool,  # noqa: D102
                keepdim: bool) -> Tensor | tuple[Tensor, Tensor]:
        ctx.save_for_backward(x)
        ctx.dim, ctx.keepdim = (dim,) if isinstance(dim, int) else tuple(dim), keepdim
        ctx.set_materialize_grads(False)
        if centred:
            return torch.var_mean(x, dim=dim, unbiased=False, keepdim=keepdim)
        return torch.var(x, dim=dim, unbiased=False, keepdim=keepdim)

    @staticmethod
    def backward(ctx, grad_var: Tensor | None, grad_mean: Tensor | None = None):  # noqa: D102
        (x,) = ctx.saved_tensors
        dims = [d % x.dim() for d in ctx.dim]
        kept = [1 if d in dims else n for d, n in enumerate(x.shape)]  # a statistic's shape with its dims kept
        count = x.numel() // max(1, math.prod(kept))
        grad = None
        if grad_var is not None:
            grad = (x - x.mean(dims, keepdim=True)) * (_kept(grad_var, kept) * (2 / count))
        if grad_mean is not None:
            share = (_kept(grad_mean, kept) / count).expand(x.shape)
            grad = share if grad is None else grad + share
        return grad, None, None, None


def _kept(statistic: Tensor, shape: list[int]) -> Tensor:
    """A statistic in ``shape``, the shape with its reduced dimensions kept."""
    return statistic if list(statistic.shape) == shape else statistic.reshape(shape)


def _check_4d(module: nn.Module, x: Tensor) -> None:
    if x.dim() != 4:
        raise ValueError(f"{type(module).__name__} expects a [N, C, H, W] tensor, got shape {tuple(x.shape)}")


class RunningStatsNorm(nn.BatchNorm2d):
    """BatchNorm-style norm with running statistics; subclasses choose centring and whether C is pooled too, and are
    dynamic linear (the B-cos norms) or not (:class:`~rightreasons.bcos.sync.SyncBatchNorm2d`)."""

    centred: bool
    pool_channels: bool = False

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True) -> None:
        super().__init__(1 if self.pool_channels else num_features, eps, momentum, affine, track_running_stats)

    #: set by :func:`shared_batch_statistics`: ``[]`` to record, ``[(var, mean)]`` to replay
    _shared: list[tuple[Tensor, Tensor | None]] | None = None
    #: set by :func:`~rightreasons.bcos.sync.convert_sync_batchnorm`: take training statistics over the batches of all
    #: processes of ``sync_group`` (``None``: all processes, in a group of their own)
    synchronise: bool = False
    sync_group: dist.ProcessGroup | None = None

    def _momentum(self) -> float:
        self.num_batches_tracked.add_(1)
        return 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum

    def _update_running_statistics(self, var: Tensor, mean: Tensor | None, n: float | Tensor) -> None:
        """``(1 − m) · running + m · batch`` in place, from the batch's biased ``var`` (``[C]``, or 0-dim) and, for
        centred norms, its ``mean``, with the unbiased factor ``n / (n − 1)`` of the ``n`` values per statistic."""
        m = self._momentum()
        with torch.no_grad():
            if self.centred:
                unbiased = var * (n / (n - 1).clamp(min=1) if isinstance(n, Tensor) else n / max(n - 1, 1))
                self.running_mean.mul_(1 - m).add_(m * mean)
                self.running_var.mul_(1 - m).add_(m * unbiased)
            else:
                self.running_var.mul_(1 - m).add_(m * var)

    def synchronised_group(self) -> dist.ProcessGroup | None:
        """The process group whose batches the statistics are taken over now: ``None`` (this process's batch) unless
        the norm is synchronised, in training mode, and its group has more than one process."""
        if not (self.synchronise and self.training and dist.is_available() and dist.is_initialized()
                and dist.get_world_size() > 1):
            return None
        group = statistics_group() if self.sync_group is None else self.sync_group
        return group if dist.get_world_size(group) > 1 else None

    def batch_statistics(self, x: Tensor) -> tuple[Tensor, Tensor | None, float | Tensor]:
        """The biased variance ``[C]`` (``[1]`` for AllNorm) of the batch ``x: [N, C, H, W]``, for centred norms its
        mean (``None`` otherwise), and the number of values each statistic is taken over; differentiable. The one
        place where batch statistics are taken: over every process's batch when synchronised (module docstring)."""
        dims = (0, 1, 2, 3) if self.pool_channels else (0, 2, 3)
        group = self.synchronised_group()
        if group is not None:
            if functional_route():
                raise UsageError(f"{type(self).__name__} synchronises its statistics across processes, which the "
                                 "functional route (a guided or e²KD step compiled whole) does not support: its "
                                 "collective is an autograd function of its own; explain such a model eagerly")
            return synchronised_statistics(x, dims, self.centred, group)
        var, mean = _statistics(x, dims, self.centred, keepdim=False)
        return var, mean, x.numel() / var.numel()

    def forward(self, x: Tensor) -> Tensor:
        """``[N, C, H, W] -> [N, C, H, W]``."""
        _check_4d(self, x)
        shape = (1, -1, 1, 1)
        from_batch = self.training or self.running_var is None
        source = None  # x where the statistics are those of x itself
        if from_batch and self._shared:  # a part of a batch whose statistics were recorded: reuse them
            var, mean = self._shared[0]
            var, mean = var.reshape(shape), None if mean is None else mean.reshape(shape)
        elif from_batch:
            var, mean, n = self.batch_statistics(x)
            if self._shared is not None:
                self._shared.append((var, mean))
            if self.training and self.track_running_stats:  # on the functional route: once its vjp has returned
                after_transform(self._update_running_statistics, var, mean, n)
            source = x if self.synchronised_group() is None else None
            var, mean = var.reshape(shape), None if mean is None else mean.reshape(shape)
        else:
            var, mean = self.running_var.view(shape), self.running_mean.view(shape) if self.centred else None
        return _normalize(self, x, var, mean, shape, source=source)


class BatchNormUncentered2d(RunningStatsNorm, DynamicLinear):
    """Uncentred BatchNorm: ``γ · x / sqrt(var_B + eps)``; the release's ``bnu`` norm (with :func:`NoBias`)."""

    centred = False


class BatchNorm2d(RunningStatsNorm, DynamicLinear):
    """Centred BatchNorm, numerically :class:`torch.nn.BatchNorm2d`, with the std as a dynamic weight."""

    centred = True


class AllNormUncentered2d(RunningStatsNorm, DynamicLinear):
    """Uncentred AllNorm: one variance over the whole batch tensor (N, C, H, W); parameters of size 1."""

    centred = False
    pool_channels = True


class AllNorm2d(RunningStatsNorm, DynamicLinear):
    """Centred AllNorm: one mean and variance over N, C, H, W; parameters of size 1."""

    centred = True
    pool_channels = True


class _GroupStatsNorm(nn.GroupNorm, DynamicLinear):
    """GroupNorm-style norm: statistics per sample over each group of channels and all positions."""

    centred: bool

    def forward(self, x: Tensor) -> Tensor:
        """``[N, C, H, W] -> [N, C, H, W]``."""
        _check_4d(self, x)
        grouped = x.unflatten(1, (self.num_groups, -1))
        var, mean = _statistics(grouped, (2, 3, 4), self.centred, keepdim=True)
        return _normalize(self, grouped, var, mean, (1, -1, 1, 1), flatten_groups=True, source=grouped)


class GroupNormUncentered2d(_GroupStatsNorm):
    """Uncentred GroupNorm: ``γ · x / σ_group``."""

    centred = False


class GroupNorm2d(_GroupStatsNorm):
    """Centred GroupNorm, numerically :class:`torch.nn.GroupNorm`."""

    centred = True


class GNLayerNormUncentered2d(GroupNormUncentered2d):
    """Uncentred LayerNorm over (C, H, W), as a GroupNorm with one group."""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        super().__init__(1, num_channels, eps, affine)


class GNLayerNorm2d(GroupNorm2d):
    """Centred LayerNorm over (C, H, W), as a GroupNorm with one group (the ViT-c conv stem's norm)."""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        super().__init__(1, num_channels, eps, affine)


class GNInstanceNormUncentered2d(GroupNormUncentered2d):
    """Uncentred InstanceNorm over (H, W) per channel, as a GroupNorm with C groups."""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        super().__init__(num_channels, num_channels, eps, affine)


class GNInstanceNorm2d(GroupNorm2d):
    """Centred InstanceNorm over (H, W) per channel, as a GroupNorm with C groups."""

    def __init__(self, num_channels: int, eps: float = 1e-5, affine: bool = True) -> None:
        super().__init__(num_channels, num_channels, eps, affine)


class _ChannelStatsNorm(nn.LayerNorm, DynamicLinear):
    """LayerNorm-style norm over trailing dims (tokens) or, with ``channels_first``, over C per position."""

    centred: bool
    channels_first: bool = False

    def __init__(self, features: int, eps: float = 1e-5, affine: bool = True) -> None:
        if not isinstance(features, int):
            raise TypeError(f"{type(self).__name__}: features must be an int, got {type(features).__name__}")
        super().__init__(features, eps=eps, elementwise_affine=affine)

    def forward(self, x: Tensor) -> Tensor:
        """Position norms: ``[N, C, H, W] -> [N, C, H, W]``; token norms: ``[*, C] -> [*, C]``."""
        if self.channels_first:
            _check_4d(self, x)
        dim, shape = (1, (1, -1, 1, 1)) if self.channels_first else (-1, (-1,))
        var, mean = _statistics(x, dim, self.centred, keepdim=True)
        return _normalize(self, x, var, mean, shape, source=x)


class PositionNormUncentered2d(_ChannelStatsNorm):
    """Uncentred PositionNorm: ``γ · x / σ_C`` at every position (the ConvNeXt ``_pn`` release uses eps 1e-6)."""

    centred = False
    channels_first = True


class PositionNorm2d(_ChannelStatsNorm):
    """Centred PositionNorm: LayerNorm over C at every position of a ``[N, C, H, W]`` map."""

    centred = True
    channels_first = True


class LayerNorm(_ChannelStatsNorm):
    """Centred LayerNorm over the last dimension of token tensors ``[N, T, C]`` (the B-cos ViTs' norm)."""

    centred = True


class LayerNormUncentered(_ChannelStatsNorm):
    """Uncentred LayerNorm over the last dimension of token tensors."""

    centred = False


def training_batch_norms(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The ``(name, module)`` pairs of ``model`` that normalise with the statistics of the batch now: BatchNorm-style
    modules (ours and torch's) in training mode. Through them, the samples of a batch interact."""
    return [(name, m) for name, m in model.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and (m.training or m.running_var is None)]


def unshareable_batch_norms(model: nn.Module) -> list[str]:
    """Names of the modules of ``model`` that normalise with batch statistics now but cannot share them
    (:func:`shared_batch_statistics` refuses them): those that are not ours, e.g. :class:`torch.nn.BatchNorm2d`."""
    return [name for name, m in training_batch_norms(model) if not isinstance(m, RunningStatsNorm)]


@contextmanager
def shared_batch_statistics(model: nn.Module) -> Iterator[None]:
    """Within the block, the first training-mode forward of ``model`` records the batch statistics of each of its
    BatchNorm/AllNorm layers (with their autograd graph); every later forward uses those statistics instead of its own
    input's and leaves the running statistics alone.

    Use: forward the whole batch ``[N, ...]`` (the classification logits; running statistics are updated once), then
    forward a part of it (e.g. the annotated images ``[n, ...]``) to explain: its outputs, explanations and their
    (second-order) gradients are those the part has within the whole batch. Norms with per-sample statistics
    (GroupNorm, PositionNorm, LayerNorm) need nothing. Raises ``ValueError`` when ``model`` holds another
    batch-statistics module (e.g. :class:`torch.nn.BatchNorm2d`) in training mode, whose statistics cannot be shared.
    """
    foreign = unshareable_batch_norms(model)
    if foreign:
        raise ValueError(f"cannot share batch statistics of {type(model.get_submodule(foreign[0])).__name__} "
                         f"module {foreign[0]!r} ({len(foreign)} such modules)")
    norms = [m for m in model.modules() if isinstance(m, RunningStatsNorm)]
    for m in norms:
        m._shared = []
    try:
        yield
    finally:
        for m in norms:
            m._shared = None


#: the shared-statistics setting of each norm of a model at one moment (:func:`statistics_sharing`)
SharingState = list[tuple[RunningStatsNorm, list[tuple[Tensor, Tensor | None]] | None]]


def statistics_sharing(model: nn.Module) -> SharingState:
    """What :func:`shared_batch_statistics` has set for each norm of ``model`` now: nothing, recording, or the
    recorded statistics to replay; :func:`reinstated_statistics_sharing` repeats it for a recomputed forward
    (activation checkpointing, :mod:`rightreasons.models.checkpointing`), which may run after the block is left."""
    return [(m, None if m._shared is None else list(m._shared)) for m in model.modules()
            if isinstance(m, RunningStatsNorm)]


@contextmanager
def reinstated_statistics_sharing(state: SharingState) -> Iterator[None]:
    """Within the block, the norms of ``state`` share statistics as they did when ``state`` was taken; what a forward
    records inside goes to a copy (the recording of the block that set it is left alone)."""
    previous = [m._shared for m, _ in state]
    for m, shared in state:
        m._shared = None if shared is None else list(shared)
    try:
        yield
    finally:
        for (m, _), shared in zip(state, previous):
            m._shared = shared


NormFactory = Callable[..., nn.Module]


def _stripped(make_norm: NormFactory, suffix: str, drop_weight: bool) -> NormFactory:
    @wraps(make_norm)
    def build(*args, **kwargs) -> nn.Module:
        norm = make_norm(*args, **kwargs)
        if getattr(norm, "bias", None) is None:
            raise ValueError(f"{suffix}({getattr(make_norm, '__name__', make_norm)}) needs an affine norm; "
                             "it was built with affine=False")
        norm.bias = None
        if drop_weight:
            norm.weight = None
        return norm

    build.__name__ = build.__qualname__ = f"{suffix}({getattr(make_norm, '__name__', 'norm')})"
    return build


def NoBias(make_norm: NormFactory) -> NormFactory:  # noqa: N802 - reads as a type wrapper
    """Wrap a norm factory so that the built norm has no learnt bias ``β`` (needed for complete explanations)."""
    return _stripped(make_norm, "NoBias", drop_weight=False)


def Unaffine(make_norm: NormFactory) -> NormFactory:  # noqa: N802
    """Wrap a norm factory so that the built norm has neither ``γ`` nor ``β``."""
    return _stripped(make_norm, "Unaffine", drop_weight=True)


NORM_LAYERS: dict[str, NormFactory] = {
    "bnu": NoBias(BatchNormUncentered2d),
    "bn": NoBias(BatchNorm2d),
    "anu": NoBias(AllNormUncentered2d),
    "an": NoBias(AllNorm2d),
    "lnu": NoBias(GNLayerNormUncentered2d),
    "ln": NoBias(GNLayerNorm2d),
    "inu": NoBias(GNInstanceNormUncentered2d),
    "in": NoBias(GNInstanceNorm2d),
    "pnu": NoBias(PositionNormUncentered2d),
    "pn": NoBias(PositionNorm2d),
    "none": lambda num_features: nn.Identity(),
}
"""Bias-free norms by short name (``u`` = uncentred). The release CNNs use ``"bnu"``."""


def get_norm_layer(norm: str | NormFactory) -> NormFactory:
    """Resolve a norm given by short name (see :data:`NORM_LAYERS`) or pass a factory through."""
    if callable(norm):
        return norm
    try:
        return NORM_LAYERS[norm]
    except KeyError:
        raise ValueError(f"unknown norm layer {norm!r}; valid names: {sorted(NORM_LAYERS)}") from None
