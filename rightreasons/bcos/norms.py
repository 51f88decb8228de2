"""Normalisation layers read as dynamic linear maps (B-cos v2 §5, docs/science.md, normalisation layers).

Every norm here computes ``y = γ · (x − μ) / σ (+ β)`` where ``1/σ`` is a dynamic weight applied through
:mod:`rightreasons.bcos.dynamic` (held constant in explanation mode, exact under double backward). The centring ``x −
μ`` is linear in ``x`` and stays in the explanation. *Uncentred* norms drop ``μ`` (``σ`` is still the standard
deviation of the centred input, biased); together with :func:`NoBias` they keep a network free of additive terms, so
that ``logit − logit_bias == Σ W(x) ⊙ x`` holds exactly.

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
:meth:`_RunningStatsNorm.batch_statistics`. :func:`shared_batch_statistics` makes a later forward of a *part* of a batch
reuse the statistics (and their autograd graph) that the forward of the whole batch took, so that explaining only some
images of a batch equals explaining them within the whole batch.

:func:`convert_sync_batchnorm` makes these statistics those of the batches of *all* processes of a distributed run
(synchronised BatchNorm), so that N processes with a global batch of B images train as one process with B images:

* each process contributes one row ``(count, mean [C], biased variance [C])`` of its own batch to a
  ``[processes, 1 + 2C]`` table (zeros elsewhere), and one all-reduce sums the table, so every process holds every row;
* the rows combine exactly: the mean is the count-weighted mean of the means and the variance is the count-weighted
  mean of ``variance + (mean − global mean)²`` (within-process spread plus the spread of the means), with no
  ``E[x²] − E[x]²`` cancellation;
* the all-reduce is an autograd function whose backward is the same all-reduce of the gradients (every process's loss
  depends on every process's batch through the statistics) and is itself differentiable, so first- and second-order
  gradients (a loss on an explanation) and explanation mode see the global statistics exactly as one process would;
* running statistics are updated from the global statistics on every process, centred ones with the unbiased factor
  ``n / (n − 1)`` of the global count ``n``.

Only training-mode statistics are synchronised; every process must then run the same forward and backward passes
through the norms (their all-reduces pair up in order), and they run on a process group of their own, so that they
never interleave with the gradient all-reduces of ``DistributedDataParallel``. Standard models'
:class:`torch.nn.BatchNorm2d` modules become :class:`SyncBatchNorm2d` (the same numerics, a plain division instead of a
dynamic weight, so the model stays a standard one); :class:`torch.nn.SyncBatchNorm` is not used: it runs on GPUs only
and its backward is not differentiable, so a loss on an explanation could not be trained through it.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import wraps
from typing import Callable, Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..errors import UsageError
from .dynamic import DynamicLinear

__all__ = [
    "AllNorm2d", "AllNormUncentered2d", "BatchNorm2d", "BatchNormUncentered2d", "GNInstanceNorm2d",
    "GNInstanceNormUncentered2d", "GNLayerNorm2d", "GNLayerNormUncentered2d", "GroupNorm2d", "GroupNormUncentered2d",
    "LayerNorm", "LayerNormUncentered", "NORM_LAYERS", "NoBias", "PositionNorm2d", "PositionNormUncentered2d",
    "SyncBatchNorm2d", "Unaffine", "convert_sync_batchnorm", "get_norm_layer", "shared_batch_statistics",
    "synchronised_batch_norms", "training_batch_norms", "unshareable_batch_norms",
]


def _normalize(module: nn.Module, x: Tensor, var: Tensor, mean: Tensor | None) -> Tensor:
    """``(x − mean) / sqrt(var + eps)`` with the std as the dynamic divisor (shapes broadcast); a plain division in
    the norms of standard models (:class:`SyncBatchNorm2d`)."""
    centred = x if mean is None else x - mean
    std = (var + module.eps).sqrt()
    return module.dynamic(std, centred, product="div") if isinstance(module, DynamicLinear) else centred / std


def _statistics(x: Tensor, dim: int | tuple[int, ...], centred: bool, keepdim: bool) -> tuple[Tensor, Tensor | None]:
    """Biased variance over ``dim`` and, for centred norms, the mean (``None`` otherwise)."""
    if centred:
        return torch.var_mean(x, dim=dim, unbiased=False, keepdim=keepdim)
    return torch.var(x, dim=dim, unbiased=False, keepdim=keepdim), None


def _affine(y: Tensor, weight: Tensor | None, bias: Tensor | None, shape: tuple[int, ...]) -> Tensor:
    if weight is not None:
        y = y * weight.view(shape)
    if bias is not None:
        y = y + bias.view(shape)
    return y


def _check_4d(module: nn.Module, x: Tensor) -> None:
    if x.dim() != 4:
        raise ValueError(f"{type(module).__name__} expects a [N, C, H, W] tensor, got shape {tuple(x.shape)}")


class _AllReduceSum(torch.autograd.Function):
    """The sum of a tensor over the processes of a group. Every process's loss depends on every process's input, so
    the gradient is the same sum of the gradients; taken with this function again, it is itself differentiable."""

    @staticmethod
    def forward(ctx, x: Tensor, group: dist.ProcessGroup) -> Tensor:  # noqa: D102
        ctx.group = group
        total = x.clone(memory_format=torch.contiguous_format)
        dist.all_reduce(total, group=group)
        return total

    @staticmethod
    def backward(ctx, grad: Tensor):  # noqa: D102
        return _AllReduceSum.apply(grad, ctx.group), None


@torch.compiler.disable  # a collective with an autograd graph of its own; traced graphs would not pair it up
def _synchronised_statistics(x: Tensor, dim: tuple[int, ...], centred: bool,
                             group: dist.ProcessGroup) -> tuple[Tensor, Tensor | None, Tensor]:
    """Biased variance ``[C]``, mean ``[C]`` (``None`` unless ``centred``) and count (0-dim) over ``dim`` of the
    batch made of every process's ``x`` (the module docstring says how); differentiable to every process's ``x``."""
    var, mean = torch.var_mean(x, dim=dim, unbiased=False)
    var, mean = var.reshape(-1), mean.reshape(-1)
    dtype = torch.promote_types(x.dtype, torch.float32)  # counts and sums of half-precision batches stay exact
    count = torch.full((1,), x.numel() // var.numel(), dtype=dtype, device=x.device)
    row = torch.cat([count, mean.to(dtype), var.to(dtype)])
    rank = torch.tensor([dist.get_rank(group)], device=x.device)
    table = _AllReduceSum.apply(row.new_zeros(dist.get_world_size(group), row.numel()).index_copy(0, rank, row[None]),
                                group)
    counts, means, variances = table[:, :1], table[:, 1:1 + var.numel()], table[:, 1 + var.numel():]
    total = counts.sum()
    weights = counts / total
    global_mean = (weights * means).sum(0)
    global_var = (weights * (variances + (means - global_mean) ** 2)).sum(0)
    return global_var.to(x.dtype), global_mean.to(x.dtype) if centred else None, total


#: the process group of synchronised statistics: ``(default group it was made in, group)``
_STATISTICS_GROUP: tuple[dist.ProcessGroup, dist.ProcessGroup] | None = None


def _statistics_group() -> dist.ProcessGroup:
    """The process group synchronised norms use by default: all processes, in a group of their own (made once per
    default group, collectively: every process must call this at the same point)."""
    global _STATISTICS_GROUP
    world = dist.group.WORLD
    if _STATISTICS_GROUP is None or _STATISTICS_GROUP[0] is not world:
        _STATISTICS_GROUP = (world, dist.new_group())
    return _STATISTICS_GROUP[1]


class _RunningStatsNorm(nn.BatchNorm2d):
    """BatchNorm-style norm with running statistics; subclasses choose centring and whether C is pooled too, and are
    dynamic linear (the B-cos norms) or not (:class:`SyncBatchNorm2d`)."""

    centred: bool
    pool_channels: bool = False

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True) -> None:
        super().__init__(1 if self.pool_channels else num_features, eps, momentum, affine, track_running_stats)

    #: set by :func:`shared_batch_statistics`: ``[]`` to record, ``[(var, mean)]`` to replay
    _shared: list[tuple[Tensor, Tensor | None]] | None = None
    #: set by :func:`convert_sync_batchnorm`: take training statistics over the batches of all processes of
    #: ``sync_group`` (``None``: all processes, in a group of their own)
    synchronise: bool = False
    sync_group: dist.ProcessGroup | None = None

    def _momentum(self) -> float:
        self.num_batches_tracked.add_(1)
        return 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum

    def synchronised_group(self) -> dist.ProcessGroup | None:
        """The process group whose batches the statistics are taken over now: ``None`` (this process's batch) unless
        the norm is synchronised, in training mode, and its group has more than one process."""
        if not (self.synchronise and self.training and dist.is_available() and dist.is_initialized()
                and dist.get_world_size() > 1):
            return None
        group = _statistics_group() if self.sync_group is None else self.sync_group
        return group if dist.get_world_size(group) > 1 else None

    def batch_statistics(self, x: Tensor) -> tuple[Tensor, Tensor | None, float | Tensor]:
        """The biased variance ``[C]`` (``[1]`` for AllNorm) of the batch ``x: [N, C, H, W]``, for centred norms its
        mean (``None`` otherwise), and the number of values each statistic is taken over; differentiable. The one
        place where batch statistics are taken: over every process's batch when synchronised (module docstring)."""
        dims = (0, 1, 2, 3) if self.pool_channels else (0, 2, 3)
        group = self.synchronised_group()
        if group is not None:
            return _synchronised_statistics(x, dims, self.centred, group)
        var, mean = _statistics(x, dims, self.centred, keepdim=False)
        return var, mean, x.numel() / var.numel()

    def forward(self, x: Tensor) -> Tensor:
        """``[N, C, H, W] -> [N, C, H, W]``."""
        _check_4d(self, x)
        shape = (1, -1, 1, 1)
        from_batch = self.training or self.running_var is None
        if from_batch and self._shared:  # a part of a batch whose statistics were recorded: reuse them
            var, mean = self._shared[0]
            var, mean = var.reshape(shape), None if mean is None else mean.reshape(shape)
        elif from_batch:
            var, mean, n = self.batch_statistics(x)
            if self._shared is not None:
                self._shared.append((var, mean))
            if self.training and self.track_running_stats:
                m = self._momentum()
                with torch.no_grad():
                    if self.centred:
                        unbiased = var.reshape(-1) * (n / (n - 1).clamp(min=1) if isinstance(n, Tensor)
                                                      else n / max(n - 1, 1))
                        self.running_mean.copy_((1 - m) * self.running_mean + m * mean.reshape(-1))
                        self.running_var.copy_((1 - m) * self.running_var + m * unbiased)
                    else:
                        self.running_var.copy_((1 - m) * self.running_var + m * var.reshape(-1))
            var, mean = var.reshape(shape), None if mean is None else mean.reshape(shape)
        else:
            var, mean = self.running_var.view(shape), self.running_mean.view(shape) if self.centred else None
        y = _normalize(self, x, var, mean)
        return _affine(y, self.weight, self.bias, shape)


class BatchNormUncentered2d(_RunningStatsNorm, DynamicLinear):
    """Uncentred BatchNorm: ``γ · x / sqrt(var_B + eps)``; the release's ``bnu`` norm (with :func:`NoBias`)."""

    centred = False


class BatchNorm2d(_RunningStatsNorm, DynamicLinear):
    """Centred BatchNorm, numerically :class:`torch.nn.BatchNorm2d`, with the std as a dynamic weight."""

    centred = True


class AllNormUncentered2d(_RunningStatsNorm, DynamicLinear):
    """Uncentred AllNorm: one variance over the whole batch tensor (N, C, H, W); parameters of size 1."""

    centred = False
    pool_channels = True


class AllNorm2d(_RunningStatsNorm, DynamicLinear):
    """Centred AllNorm: one mean and variance over N, C, H, W; parameters of size 1."""

    centred = True
    pool_channels = True


class SyncBatchNorm2d(_RunningStatsNorm):
    """:class:`torch.nn.BatchNorm2d` of a standard model, synchronised: the same numerics, parameters, buffers and
    state-dict keys, with the batch statistics of :meth:`batch_statistics`. Not dynamic linear, so a standard model
    stays a standard one; :func:`convert_sync_batchnorm` puts it in place of each ``torch.nn.BatchNorm2d``."""

    centred = True

    @classmethod
    def from_batchnorm(cls, norm: nn.BatchNorm2d) -> SyncBatchNorm2d:
        """The norm holding ``norm``'s own parameters and buffers (the same tensor objects, so an optimiser built
        before the conversion keeps updating them), in ``norm``'s mode; :func:`convert_sync_batchnorm` synchronises
        it."""
        synced = cls(norm.num_features, norm.eps, norm.momentum, norm.affine, norm.track_running_stats)
        synced.weight, synced.bias = norm.weight, norm.bias
        synced.running_mean, synced.running_var = norm.running_mean, norm.running_var
        synced.num_batches_tracked = norm.num_batches_tracked
        return synced.train(norm.training)


class _GroupStatsNorm(nn.GroupNorm, DynamicLinear):
    """GroupNorm-style norm: statistics per sample over each group of channels and all positions."""

    centred: bool

    def forward(self, x: Tensor) -> Tensor:
        """``[N, C, H, W] -> [N, C, H, W]``."""
        _check_4d(self, x)
        grouped = x.unflatten(1, (self.num_groups, -1))
        var, mean = _statistics(grouped, (2, 3, 4), self.centred, keepdim=True)
        y = _normalize(self, grouped, var, mean).flatten(1, 2)
        return _affine(y, self.weight, self.bias, (1, -1, 1, 1))


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
        y = _normalize(self, x, var, mean)
        return _affine(y, self.weight, self.bias, shape)


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
    return [name for name, m in training_batch_norms(model) if not isinstance(m, _RunningStatsNorm)]


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
    norms = [m for m in model.modules() if isinstance(m, _RunningStatsNorm)]
    for m in norms:
        m._shared = []
    try:
        yield
    finally:
        for m in norms:
            m._shared = None


def synchronised_batch_norms(model: nn.Module) -> list[str]:
    """Names of the modules of ``model`` whose statistics are synchronised across processes now (see
    :func:`convert_sync_batchnorm`): through them, every process's batch and gradients reach every other process."""
    return [name for name, m in model.named_modules()
            if isinstance(m, _RunningStatsNorm) and m.synchronised_group() is not None]


def convert_sync_batchnorm(model: nn.Module, process_group: dist.ProcessGroup | None = None) -> nn.Module:
    """Make every batch-statistics norm of ``model`` take its training statistics over the batches of all processes
    (synchronised BatchNorm; how and why: the module docstring).

    Our BatchNorm/AllNorm variants (centred or not) are switched in place; each :class:`torch.nn.BatchNorm2d` of a
    standard model is replaced by a :class:`SyncBatchNorm2d` holding its parameters and buffers;
    :class:`torch.nn.SyncBatchNorm` modules are left as they are. The state dict is unchanged, so weights saved from
    the converted model load into the plain one. Outside a multi-process run (or in eval mode) nothing changes.

    Args:
        model: the model (converted in place and returned; a bare ``torch.nn.BatchNorm2d`` is returned replaced).
        process_group: the processes to synchronise over; default: all, in a process group of their own (made here
            when the default process group exists, else at the first synchronised forward; every process must
            convert its model at the same point).

    Raises:
        UsageError: ``model`` holds another BatchNorm class (``BatchNorm1d``/``3d``, or a subclass such as timm's
            ``BatchNormAct2d``), whose statistics cannot be synchronised here.
    """
    if type(model) is nn.BatchNorm2d:
        model = SyncBatchNorm2d.from_batchnorm(model)
    other = [(name, type(m).__name__) for name, m in model.named_modules()
             if isinstance(m, nn.modules.batchnorm._BatchNorm) and type(m) is not nn.BatchNorm2d
             and not isinstance(m, (_RunningStatsNorm, nn.SyncBatchNorm))]
    if other:
        listed = ", ".join(f"{name or '<model>'} ({kind})" for name, kind in other[:3])
        raise UsageError(f"cannot synchronise the batch statistics of {listed}{' and more' if len(other) > 3 else ''}: "
                         "only BatchNorm2d and the B-cos BatchNorm/AllNorm variants can be synchronised; "
                         "set model.sync_bn=false to keep per-process statistics")
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.BatchNorm2d:
                setattr(parent, name, SyncBatchNorm2d.from_batchnorm(child))
    for m in model.modules():
        if isinstance(m, _RunningStatsNorm):
            m.synchronise, m.sync_group = True, process_group
    if process_group is None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        _statistics_group()
    return model


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
