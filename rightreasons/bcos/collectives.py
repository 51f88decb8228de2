"""The collective behind synchronised batch statistics: the count, mean and variance of the batch made of every
process's batch, from one all-reduce, differentiable to every order (:mod:`rightreasons.bcos.sync` says how and why).
"""

from __future__ import annotations

import atexit
import datetime

import torch
import torch.distributed as dist
from torch import Tensor

__all__ = ["statistics_group", "synchronised_statistics"]


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
def synchronised_statistics(x: Tensor, dim: tuple[int, ...], centred: bool,
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


def _timeout_of(group: dist.ProcessGroup) -> datetime.timedelta | None:
    """The timeout ``group`` was formed with (``None`` where torch does not tell): a group made with ``new_group``
    waits torch's default of 30 minutes otherwise, whatever the launch set for its default group."""
    for device in ("cpu", "cuda"):
        try:
            return group._get_backend(torch.device(device)).options._timeout
        except (AttributeError, RuntimeError, ValueError):
            continue
    return None


def statistics_group() -> dist.ProcessGroup:
    """The process group synchronised norms use by default: all processes, in a group of their own with the default
    group's timeout (made once per default group, collectively: every process must call this at the same point)."""
    global _STATISTICS_GROUP
    world = dist.group.WORLD
    if _STATISTICS_GROUP is None or _STATISTICS_GROUP[0] is not world:
        if _STATISTICS_GROUP is None:
            atexit.register(_release_statistics_group)
        _STATISTICS_GROUP = (world, dist.new_group(timeout=_timeout_of(world)))
    return _STATISTICS_GROUP[1]


def _release_statistics_group() -> None:
    """Drop the reference to the group of synchronised statistics before the interpreter shuts down (``atexit``): a
    gloo group destroyed during interpreter finalisation can abort the process (its worker threads release tensors
    that need the GIL), after a run that ended well."""
    global _STATISTICS_GROUP
    _STATISTICS_GROUP = None
