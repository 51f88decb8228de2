"""The skip and divergence rules of a run, decided on the device and read on the host only when a step logs.

The rules (the trainer's *What a run never does*): a step whose loss or gradients are not finite on any process is
skipped on every process — no weight and no optimiser state changes; :data:`MAX_BAD_STEPS` skipped steps in a row,
or an optimiser step that makes any weight or buffer non-finite, stop the run with a
:class:`~rightreasons.errors.DivergenceError` naming the step, and no checkpoint ever holds non-finite weights. With
``mixed_precision: fp16`` an overflow is the loss scaler's: it skips the step and lowers its scale, and such a step
counts as bad only at a scale below :data:`MIN_LOSS_SCALE`.

Checking them on the host would read a flag at every step, and on a GPU each read waits for the device's queue to
drain (a host sync). :class:`StepGuard` instead keeps them as tensors on the device, as torch's ``GradScaler`` does:

* every step reduces one flag over all its gradients (``torch._foreach_norm``: a handful of kernels, not one check per
  tensor), and one per weight after the update (kept until the read, to name the weights of a divergence); the loss's flag joins the gradients', and one all-reduce
  makes the decision the same on every process;
* the optimiser skips its update on the device: torch's fused Adam, AdamW and SGD take the decision as ``found_inf``
  and leave weights and state untouched; under fp16 the scaler's own check does it, and a stopped run poisons the
  gradients it checks;
* the count of bad steps in a row lives on the device; once the run has diverged every later step is skipped, so the
  weights stay those before the divergence until the host learns of it;
* the host reads the flags of all steps since the last read together with the losses it logs — one transfer per
  logged step, none on the others — and only then warns about skipped steps and raises the divergence, naming the
  step where it happened. The trainer reads before every checkpoint, so a checkpoint never follows a divergence.

A skipped step is still a step of the schedule, as with ``GradScaler``: it counts towards ``max_steps`` and moves the
learning-rate schedule on, but changes no weight and no optimiser state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["MAX_BAD_STEPS", "MIN_LOSS_SCALE", "StepGuard", "StepOutcome", "all_finite", "finite_each"]

MAX_BAD_STEPS = 3
"""Skipped steps (non-finite loss or gradients) in a row after which a run has diverged."""
MIN_LOSS_SCALE = 1.0
"""With ``mixed_precision: fp16``, a step skipped at a loss scale at least this large is an overflow that the dynamic
loss scale cures (it halves the scale) and does not count towards :data:`MAX_BAD_STEPS`; below it (float16 cannot
hold the unscaled gradients either) it counts as a bad step like any other."""

#: the entries of a step's flag vector on the device
_LOSS_OK, _GRADS_OK, _WEIGHTS_OK, _SKIPPED, _COUNTED, _BAD, _SCALE = range(7)


def finite_each(tensors: Sequence[Tensor], device: torch.device) -> Tensor:
    """``[T]`` bool on ``device``: whether each of the ``T`` tensors is finite, in a few fused kernels: the L1 norm of
    a tensor narrower than float64, summed in float64, is finite exactly when the tensor is (float32's largest values
    times a billion elements stay far below float64's range); float64 tensors, rare, are checked one by one."""
    if not tensors:
        return torch.ones(0, dtype=torch.bool, device=device)
    wide = [t.dtype == torch.float64 and device.type != "mps" for t in tensors]  # MPS has no float64
    flags: list[Tensor] = [t.isfinite().all() for t, w in zip(tensors, wide) if w]
    narrow = [t for t, w in zip(tensors, wide) if not w]
    if narrow:
        norms = torch.stack(torch._foreach_norm(narrow, 1, dtype=None if device.type == "mps" else torch.float64))
        if not flags:
            return norms.isfinite().to(device)
        narrow_flags, wide_flags = iter(norms.isfinite().unbind()), iter(flags)
        flags = [next(wide_flags) if w else next(narrow_flags) for w in wide]
    return torch.stack(flags).to(device)


def all_finite(tensors: Sequence[Tensor], device: torch.device) -> Tensor:
    """A 0-d bool tensor on ``device``: whether every element of ``tensors`` is finite (:func:`finite_each`)."""
    return finite_each(tensors, device).all()


@dataclass
class StepOutcome:
    """What the host learns of one step at a read: where it was, whether it was skipped and why, and its losses."""

    step: int
    epoch: int
    batch: int
    ids: list[str]
    loss_finite: bool
    gradients_finite: bool
    weights_finite: bool
    skipped: bool
    counted: bool
    bad_steps: int
    loss_scale: float
    terms: dict[str, float]
    non_finite: list[int]
    """The indices of the weights (as given to :meth:`StepGuard.settle`) that the step made non-finite."""


@dataclass
class _Pending:
    step: int
    epoch: int
    batch: int
    ids: list[str]
    flags: Tensor  # [7] float64: see the indices above
    terms: dict[str, Tensor]
    weights: Tensor  # [T] bool: which weights are finite after the step


class StepGuard:
    """The skip and divergence state of a run on ``device`` (module docstring).

    Args:
        device: where the flags live (the model's device).
        reduce_min: ``tensor -> its elementwise minimum over all processes`` (identity on one process).
        bad_steps: skipped steps in a row so far (a resumed run's count).
        scaler: the fp16 loss scaler (torch's ``GradScaler``), or ``None``.
    """

    #: read on the host at the latest after this many unread steps (callers that never log, e.g. benchmarks)
    MAX_PENDING = 256

    def __init__(self, device: torch.device, reduce_min: Callable[[Tensor], Tensor], bad_steps: int = 0,
                 scaler: torch.amp.GradScaler | None = None) -> None:
        self.device, self.reduce_min, self.scaler = device, reduce_min, scaler
        self.bad_steps = bad_steps
        self._bad = torch.tensor(float(bad_steps), dtype=torch.float64, device=device)
        self._stopped = torch.zeros((), dtype=torch.bool, device=device)
        self._loss_ok: Tensor | None = None
        self._pending: list[_Pending] = []

    @property
    def pending(self) -> int:
        """Steps taken since the last read."""
        return len(self._pending)

    def add_loss(self, loss: Tensor) -> None:
        """The loss of a micro-batch of the step being taken: its finiteness joins the step's."""
        ok = loss.detach().isfinite().all()
        self._loss_ok = ok if self._loss_ok is None else self._loss_ok & ok

    def hold_if_stopped(self, gradients: Sequence[Tensor]) -> None:
        """Under fp16: make the scaler's own overflow check skip the update once the run has stopped (a NaN in the
        first gradient, before the scaler unscales them)."""
        if self.scaler is not None and gradients:
            first = gradients[0].view(-1)[:1]
            first.add_(torch.where(self._stopped, torch.nan, 0.0).to(first.dtype))

    def decide(self, gradients: Sequence[Tensor]) -> Tensor:
        """Whether the step is skipped, as a 0-d float tensor (1: skip) on the device, the same on every process:
        its loss or ``gradients`` (unscaled) are not finite on some process, or the run has stopped. Pass it to the
        optimiser as ``found_inf``."""
        loss_ok = torch.ones((), dtype=torch.bool, device=self.device) if self._loss_ok is None else self._loss_ok
        ok = self.reduce_min(torch.stack([loss_ok, all_finite(gradients, self.device)]).to(torch.float64))
        self._ok = ok
        skip = (ok.min() < 1) | self._stopped
        if self.scaler is not None:  # the scaler skips on the gradients alone (a non-finite loss still backpropagates)
            skip = (ok[1] < 1) | self._stopped
        self._skip = skip
        return skip.float()

    def settle(self, weights: Sequence[Tensor], step: int, epoch: int, batch: int, ids: Sequence[str],
               terms: dict[str, Tensor], scale: Tensor | None = None) -> None:
        """After the optimiser step numbered ``step`` (epoch, batch, the batch's sample ``ids``, its loss ``terms``;
        ``scale``: the fp16 loss scale the step was taken at): check ``weights``, count the bad steps, stop the run
        when it diverged, and keep the step's flags and losses until the next :meth:`read`."""
        skip, stopped = self._skip, self._stopped
        each = finite_each(weights, self.device)
        weights_ok = each.all()
        scale = torch.ones((), dtype=torch.float64, device=self.device) if scale is None else \
            scale.detach().to(self.device, torch.float64).reshape(())
        counted = skip & ~stopped
        if self.scaler is not None:
            counted = counted & (scale < MIN_LOSS_SCALE)
        self._bad = torch.where(stopped, self._bad, torch.where(skip, self._bad + counted.double(), 0.0))
        self._stopped = stopped | (self._bad >= MAX_BAD_STEPS) | ~weights_ok
        flags = torch.stack([self._ok[0], self._ok[1], weights_ok.double(), skip.double(), counted.double(),
                             self._bad, scale])
        self._pending.append(_Pending(step, epoch, batch, list(ids), flags,
                                      {k: v.detach().float().reshape(()) for k, v in terms.items()}, each))
        self._loss_ok = None

    def read(self) -> list[StepOutcome]:
        """The steps since the last read, in order, with their host values (one transfer from the device). Steps
        after the one where the run stopped are left out: they were skipped only because it had."""
        if not self._pending:
            return []
        pending, self._pending = self._pending, []
        names = [list(p.terms) for p in pending]
        values = torch.cat([torch.cat([p.flags, torch.stack(list(p.terms.values())).double()]) if p.terms
                            else p.flags for p in pending]).tolist()
        outcomes, at = [], 0
        for p, keys in zip(pending, names):
            flags, terms = values[at:at + 7], values[at + 7:at + 7 + len(keys)]
            at += 7 + len(keys)
            weights_ok = flags[_WEIGHTS_OK] == 1
            non_finite = [] if weights_ok else (~p.weights).nonzero()[:, 0].tolist()  # a diverged run only
            outcome = StepOutcome(p.step, p.epoch, p.batch, p.ids, flags[_LOSS_OK] == 1, flags[_GRADS_OK] == 1,
                                  weights_ok, flags[_SKIPPED] == 1, flags[_COUNTED] == 1, int(flags[_BAD]),
                                  flags[_SCALE], dict(zip(keys, terms)), non_finite)
            outcomes.append(outcome)
            self.bad_steps = outcome.bad_steps
            if outcome.bad_steps >= MAX_BAD_STEPS or not outcome.weights_finite:
                break
        return outcomes
