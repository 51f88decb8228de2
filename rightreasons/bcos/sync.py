"""Synchronised BatchNorm: :func:`convert_sync_batchnorm` makes the batch statistics of a model's BatchNorm/AllNorm
layers those of the batches of *all* processes of a distributed run, so that N processes with a global batch of B
images train as one process with B images:

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

import torch.distributed as dist
from torch import nn

from ..errors import UsageError
from .collectives import statistics_group
from .norms import RunningStatsNorm

__all__ = ["SyncBatchNorm2d", "convert_sync_batchnorm", "synchronised_batch_norms"]


class SyncBatchNorm2d(RunningStatsNorm):
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


def synchronised_batch_norms(model: nn.Module) -> list[str]:
    """Names of the modules of ``model`` whose statistics are synchronised across processes now (see
    :func:`convert_sync_batchnorm`): through them, every process's batch and gradients reach every other process."""
    return [name for name, m in model.named_modules()
            if isinstance(m, RunningStatsNorm) and m.synchronised_group() is not None]


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
             and not isinstance(m, (RunningStatsNorm, nn.SyncBatchNorm))]
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
        if isinstance(m, RunningStatsNorm):
            m.synchronise, m.sync_group = True, process_group
    if process_group is None and dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        statistics_group()
    return model
