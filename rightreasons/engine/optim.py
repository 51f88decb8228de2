"""Optimisers, learning-rate schedules and gradient clipping for the training engine.

The B-cos v2 recipe (docs/science.md, input encoding and training): Adam without weight decay, cosine schedule with
linear warm-up, adaptive gradient clipping (AGC: clip 0.01, eps 1e-3, unit-wise norms — timm's implementation).
Standard models in e²KD use AdamW with weight decay and gradient-norm clipping at 1. Schedules are stepped once per
optimiser step.
"""

from __future__ import annotations

from typing import Iterable, Literal

import torch
from timm.utils.agc import adaptive_clip_grad
from torch import nn
from torch.utils._foreach_utils import _get_fused_kernels_supported_devices as _fused_kernels_supported_devices
from torch.optim import SGD, Adam, AdamW, Optimizer
from torch.optim.lr_scheduler import ConstantLR, CosineAnnealingLR, LinearLR, LRScheduler, SequentialLR

__all__ = ["OPTIMIZERS", "SCHEDULES", "OptimizerName", "ScheduleName", "build_optimizer", "build_scheduler",
           "clip_gradients"]

OPTIMIZERS = {"adam": Adam, "adamw": AdamW, "sgd": SGD}
SCHEDULES: tuple[str, ...] = ("constant", "cosine")
OptimizerName = Literal[tuple(OPTIMIZERS)]  # type: ignore[valid-type]
ScheduleName = Literal[SCHEDULES]  # type: ignore[valid-type]


def build_optimizer(params: Iterable[nn.Parameter], name: str, lr: float, weight_decay: float = 0.0,
                    momentum: float = 0.9) -> Optimizer:
    """``adam`` | ``adamw`` | ``sgd`` over the parameters that require gradients: torch's fused implementation (one
    kernel per step on a GPU, and it skips an update on the device when told to, ``found_inf``) wherever the
    parameters' device has it, the default one elsewhere (e.g. ``meta``)."""
    params = [p for p in params if p.requires_grad]
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; valid: {sorted(OPTIMIZERS)}")
    if not lr > 0:
        raise ValueError(f"learning rate must be > 0, got {lr}")
    extra = {"momentum": momentum} if name == "sgd" else {}
    fused = bool(params) and all(p.is_floating_point() and p.device.type in _fused_kernels_supported_devices()
                                 for p in params)
    return OPTIMIZERS[name](params, lr=lr, weight_decay=weight_decay, fused=fused or None, **extra)


def build_scheduler(optimizer: Optimizer, name: str, total_steps: int,
                    warmup_steps: int = 0, warmup_start_factor: float = 0.01) -> LRScheduler:
    """A per-step schedule: ``constant`` or ``cosine`` (to 0 at ``total_steps``), either after a linear warm-up."""
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    warmup_steps = min(max(warmup_steps, 0), total_steps - 1)
    if name == "constant":
        main: LRScheduler = ConstantLR(optimizer, factor=1.0, total_iters=0)
    elif name == "cosine":
        main = CosineAnnealingLR(optimizer, T_max=max(total_steps - warmup_steps, 1))
    else:
        raise ValueError(f"unknown schedule {name!r}; valid: {list(SCHEDULES)}")
    if warmup_steps == 0:
        return main
    warmup = LinearLR(optimizer, start_factor=warmup_start_factor, end_factor=1.0, total_iters=warmup_steps)
    return SequentialLR(optimizer, [warmup, main], milestones=[warmup_steps])


def clip_gradients(parameters: Iterable[nn.Parameter], agc: float | None = None, max_norm: float | None = None) -> None:
    """Adaptive (unit-wise, relative to the weight norm) and/or global-norm gradient clipping, in place."""
    params = [p for p in parameters if p.grad is not None]
    if agc is not None:
        adaptive_clip_grad(params, clip_factor=agc, eps=1e-3)
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(params, max_norm)
