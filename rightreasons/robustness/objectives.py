"""The group-robustness objectives of one training step, and the per-example weights and subsets they rest on.

Every objective turns per-sample losses ``[N]`` of a process's part of the batch into the loss that process
back-propagates. DDP averages gradients over the ``P`` processes, so a process returns ``P`` times its share of the
objective of the *global* batch, with every global normaliser (a sum of weights, a group's count) summed across the
processes (:class:`~rightreasons.engine.Step`): ``P`` processes then train exactly as one process with the global
batch.

* :func:`weighted_mean` — ``Σ w_i ℓ_i / Σ w_i`` over the global batch: group-balanced reweighting (``w = 1 / n_g``,
  :func:`inverse_size_weights`) and JTT's up-weighting (``w = λ_up`` on the error set, 1 elsewhere);
* :func:`balanced_subset` — every non-empty group subsampled to the smallest one's size (Idrissi et al. 2022);
* :class:`GroupDRO` — online GroupDRO (Sagawa et al. 2020) with its group weights ``q`` as checkpointed state.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..engine import Step
from ..engine.data import mix_seed

__all__ = ["GroupDRO", "balanced_subset", "group_counts", "inverse_size_weights", "weighted_mean"]


def group_counts(groups: Tensor, num_groups: int) -> Tensor:
    """How many examples of ``groups [N]`` (long) fall into each of ``num_groups`` groups: ``[G]`` long."""
    return torch.bincount(groups, minlength=num_groups)


def inverse_size_weights(counts: Tensor) -> Tensor:
    """``[G]`` float64: ``1 / n_g`` for every group of ``counts [G]`` (0 for an empty group), so that weighting each
    example by its group's entry gives every group the same total weight."""
    counts = counts.double()
    return torch.where(counts > 0, 1.0 / counts.clamp(min=1), torch.zeros_like(counts))


def balanced_subset(groups: Tensor, seed: int) -> Tensor:
    """Sorted indices ``[m·G']`` of ``groups [N]``: ``m`` examples of each of the ``G'`` non-empty groups, ``m`` the
    smallest non-empty group's size, drawn without replacement by a generator seeded with ``seed`` (the same subset
    on every process and every resumption)."""
    chosen = []
    present = torch.unique(groups)
    smallest = int(min((groups == g).sum() for g in present))
    for g in present.tolist():
        members = (groups == g).nonzero()[:, 0]
        generator = torch.Generator().manual_seed(mix_seed(seed, g))
        chosen.append(members[torch.randperm(len(members), generator=generator)[:smallest]])
    return torch.cat(chosen).sort().values


def weighted_mean(losses: Tensor, weights: Tensor, step: Step) -> Tensor:
    """This process's part of the global batch's ``Σ w_i ℓ_i / Σ w_i`` (``losses``, ``weights`` ``[n]`` of this
    process's samples), scaled by the process count for DDP's averaging."""
    weights = weights.to(losses.dtype)
    total = step.sum_across_processes(weights.sum().detach())
    return (weights * losses).sum() * step.world_size / total.clamp(min=torch.finfo(losses.dtype).tiny)


class GroupDRO:
    """Online GroupDRO: a distribution ``q`` over groups, moved towards the groups that lose most.

    Once per optimiser step, with ``L_g`` the mean loss of group ``g`` over the step's global batch (0 for a group
    absent from it): ``q_g ← q_g · exp(η · (L_g + C / sqrt(n_g)))``, then ``q ← q / Σ q``; the step minimises
    ``Σ_g q_g L_g`` with the updated ``q`` (the order of the authors' code). ``n_g`` are the training split's group
    sizes; groups without a training example get ``q_g = 0`` for good. ``q`` is state: :meth:`state_dict` /
    :meth:`load_state_dict` (the task registers it with the accelerator, so checkpoints carry it and a resumed run
    continues with it).

    With gradient accumulation a step's batch is the union of its micro-batches (the calls that share
    :attr:`~rightreasons.engine.Step.index`): ``q`` takes one step per optimiser step on the group means of the whole
    accumulated batch — as a batch that large would make it move, so ``η`` means the same with or without
    accumulation (an update per micro-batch would move ``q`` ``K`` times per parameter step on noisier means and add
    ``C / sqrt(n_g)`` ``K`` times). A micro-batch cannot wait for the later ones: it minimises with ``q`` updated on
    the step's micro-batches so far, which for the last one is the step's ``q``. Group losses are summed across
    processes, so ``q`` is the same on every process; a micro-batch with a non-finite loss (which the trainer skips)
    leaves ``q`` alone. ``q`` lives on the device of the losses, and every update is computed there.

    Args:
        counts: ``[G]`` training examples per group.
        step_size: η.
        adjustment: the group adjustment ``C`` (0 = none).
    """

    def __init__(self, counts: Tensor, step_size: float, adjustment: float = 0.0) -> None:
        self.counts = counts.double()
        present = self.counts > 0
        if not present.any():
            raise ValueError("GroupDRO needs at least one non-empty group")
        self.step_size = step_size
        self.adjustment = torch.where(present, adjustment / self.counts.clamp(min=1).sqrt(), torch.zeros_like(
            self.counts))
        self.q = present.double() / present.sum()
        self._start_new_step(None)

    def _start_new_step(self, index: int | None) -> None:
        """Open the accumulation window of optimiser step ``index``: ``q`` at its start, its group sums and counts."""
        self._index, self._start = index, self.q
        self._sums, self._seen = torch.zeros_like(self.q), torch.zeros_like(self.q)

    def _move_to(self, device: torch.device) -> None:
        """Keep the state on the device of the losses (once): its update then never waits for the device."""
        if self.q.device != device:
            self.q, self.adjustment, self._start, self._sums, self._seen = (
                t.to(device) for t in (self.q, self.adjustment, self._start, self._sums, self._seen))

    def group_losses(self, losses: Tensor, groups: Tensor, step: Step) -> tuple[Tensor, Tensor, Tensor]:
        """``(L [G], sums [G], n [G])``: every group's summed loss in the global batch divided by its global count (0
        where it is absent) — differentiable in this process's ``losses [n]`` — and the global sums (no gradient) and
        counts."""
        # [n, G]; one_hot would check the group ids' range on the host
        one_hot = (groups[:, None] == torch.arange(len(self.q), device=groups.device)).to(losses.dtype)
        sums = one_hot.T @ losses
        n = step.sum_across_processes(one_hot.sum(0).detach())
        global_sums = step.sum_across_processes(sums.detach())
        # the local part carries the gradient; the other processes' parts enter as constants
        mean = (sums + (global_sums - sums.detach())) / n.clamp(min=1)
        return mean, global_sums, n

    def update(self, sums: Tensor, counts: Tensor, index: int) -> None:
        """Add a micro-batch's global group loss ``sums [G]`` and ``counts [G]`` to optimiser step ``index`` and set
        ``q`` to the exponentiated-gradient step from the step's starting ``q`` on the step's group means so far."""
        self._move_to(sums.device)
        if index != self._index:
            self._start_new_step(index)
        sums, counts = sums.detach().double(), counts.detach().double()
        finite = torch.isfinite(sums).all()  # decided on the device: a non-finite micro-batch changes nothing
        total, seen = self._sums + sums, self._seen + counts
        q = self._start * torch.exp(self.step_size * (total / seen.clamp(min=1) + self.adjustment))
        self._sums, self._seen = torch.where(finite, total, self._sums), torch.where(finite, seen, self._seen)
        self.q = torch.where(finite, q / q.sum(), self.q)

    def __call__(self, losses: Tensor, groups: Tensor, step: Step) -> tuple[Tensor, Tensor]:
        """``(objective, L [G])``: this process's part of ``Σ_g q_g L_g`` (scaled for DDP's averaging) after the
        update of ``q`` on this micro-batch's group losses ``L``."""
        mean, sums, n = self.group_losses(losses, groups, step)
        self.update(sums, n, step.index)
        objective = (self.q.to(mean) * mean).sum()
        # DDP averages the P processes' gradients: each holds the global objective's gradient w.r.t. its own samples
        return objective * step.world_size, mean.detach()

    def state_dict(self) -> dict[str, Any]:
        return {"q": self.q.detach().cpu().clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        q = torch.as_tensor(state["q"], dtype=torch.float64)
        if q.shape != self.q.shape:
            raise ValueError(f"GroupDRO state holds weights for {len(q)} groups, the data has {len(self.q)}")
        self.q = q.to(self.q.device)
        self._start_new_step(None)
