"""Shared building blocks of the metrics: input checks and two accumulating torchmetrics bases.

* :class:`PerSampleMean` — the mean of a per-sample score (EPG, IoU, pointing game, cosine similarity, ...) over
  every sample seen, on every process: the states are a sum and a count, reduced by summation.
* :class:`GroupedRate` — the fraction of "hits" (correct predictions, agreeing predictions) overall, per group and
  in the worst group, from per-group hit and sample counts reduced by summation.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torchmetrics import Metric

__all__ = ["GroupedRate", "PerSampleMean", "check_batch", "check_binary_mask", "check_maps", "top1"]


def check_maps(where: str, **maps: Tensor) -> None:
    """Raise ``ValueError`` unless every map is a tensor ``[N, H, W]`` and all share one shape.

    ``where`` names the calling function in the message; the keyword names name the offending argument.
    """
    shape = None
    for name, value in maps.items():
        if not isinstance(value, Tensor):
            raise TypeError(f"{where}: {name} must be a torch.Tensor [N, H, W], got {type(value).__name__}")
        if value.dim() != 3:
            raise ValueError(f"{where}: {name} must have shape [N, H, W], got shape {tuple(value.shape)}")
        if shape is None:
            shape = value.shape
        elif value.shape != shape:
            shapes = ", ".join(f"{k}={tuple(v.shape)}" for k, v in maps.items())
            raise ValueError(f"{where}: all maps must have the same shape [N, H, W], got {shapes}")


def check_batch(where: str, images: Tensor, targets: Tensor, **maps: Tensor) -> None:
    """Raise ``ValueError`` unless ``images`` is ``[N, C, H, W]``, ``targets`` ``[N]`` and every map (keyword: its
    argument's name) ``[N, H, W]`` of the images' ``N``, ``H`` and ``W`` — the inputs of every metric that runs the
    model on a batch (``where`` names it in the message)."""
    if images.dim() != 4 or targets.shape != (images.shape[0],):
        raise ValueError(f"{where}: need images [N, C, H, W] and targets [N], got shapes {tuple(images.shape)} and "
                         f"{tuple(targets.shape)}")
    if maps:
        check_maps(where, **maps)
        expected = (images.shape[0], *images.shape[-2:])
        for name, value in maps.items():
            if value.shape != expected:
                raise ValueError(f"{where}: {name} must be [N, H, W] = {list(expected)}, got {list(value.shape)}")


def check_binary_mask(where: str, name: str, mask: Tensor) -> Tensor:
    """Return ``mask`` as a bool tensor; raise ``ValueError`` if a numeric mask holds values other than 0 and 1."""
    if mask.dtype == torch.bool:
        return mask
    if ((mask != 0) & (mask != 1)).any():
        bad = mask[(mask != 0) & (mask != 1)].unique()[:5].tolist()
        raise ValueError(f"{where}: {name} must be binary (bool or 0/1 values), got values such as {bad}")
    return mask != 0


def top1(preds: Tensor, where: str, name: str) -> Tensor:
    """Predicted classes ``[N]`` from scores ``[N, K]`` (argmax) or from integer class indices ``[N]``."""
    if preds.dim() == 2 and preds.is_floating_point():
        return preds.argmax(1)
    if preds.dim() == 1 and not preds.is_floating_point():
        return preds.long()
    raise ValueError(f"{where}: {name} must be float scores [N, K] or integer classes [N], "
                     f"got dtype {preds.dtype} and shape {tuple(preds.shape)}")


class PerSampleMean(Metric):
    """Mean of a per-sample score over all samples given to :meth:`update`, across batches and processes.

    Subclasses implement :meth:`score` ``(*inputs) -> [N, *score_shape]`` (one score per sample, or a fixed-size
    vector of scores per sample, e.g. one per IoU threshold); :meth:`update` takes the same inputs (detached).
    :meth:`compute` raises ``ValueError`` when no sample was scored anywhere: an empty evaluation is a set-up error,
    not a score.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    def __init__(self, score_shape: tuple[int, ...] = (), **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("total", default=torch.zeros(score_shape), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def score(self, *inputs: Tensor) -> Tensor:
        """Per-sample scores ``[N, *score_shape]``; defined by each subclass."""
        raise NotImplementedError(f"{type(self).__name__} must implement score()")

    def update(self, *inputs: Tensor) -> None:
        """Score a batch and add it to the running sum and count."""
        scores = self.score(*(x.detach() if isinstance(x, Tensor) else x for x in inputs))
        self.total += scores.sum(0).to(self.total.dtype)
        self.count += scores.shape[0]

    def compute(self) -> Tensor:
        """The mean score over every sample seen (on every process after synchronisation)."""
        if self.count == 0:
            raise ValueError(f"{type(self).__name__}.compute(): no sample was scored; call update() with data first")
        return self.total / self.count


class GroupedRate(Metric):
    """Fraction of hits overall, per group and in the worst group (the group with the lowest rate among those seen).

    Args:
        num_groups: number of groups ``G``; group ids passed to :meth:`update` must lie in ``[0, G)``.
        group_names: optional display names for the per-group keys (default ``"0"``, ``"1"``, ...).

    :meth:`compute` returns a dict of tensors: ``name`` (overall rate), ``worst_group_<name>``, ``worst_group`` (its
    index) and ``<name>/<group name>`` for every group that has samples (groups without samples are left out rather
    than reported as NaN). ``name`` is the subclass's ``rate_name`` (``"accuracy"``, ``"agreement"``). With one
    group (data without groups, e.g. VOC) only ``name``: a worst group of one would repeat it under a misleading name.
    """

    is_differentiable = False
    higher_is_better = True
    full_state_update = False
    rate_name = "rate"

    def __init__(self, num_groups: int = 1, group_names: Sequence[str] | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if int(num_groups) < 1:
            raise ValueError(f"{type(self).__name__}: num_groups must be >= 1, got {num_groups}")
        self.num_groups = int(num_groups)
        names = [str(g) for g in range(self.num_groups)] if group_names is None else [str(n) for n in group_names]
        if len(names) != self.num_groups:
            raise ValueError(f"{type(self).__name__}: group_names has {len(names)} names for {self.num_groups} groups")
        self.group_names = names
        self.add_state("hits", default=torch.zeros(self.num_groups, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("seen", default=torch.zeros(self.num_groups, dtype=torch.long), dist_reduce_fx="sum")

    def _add(self, hits: Tensor, groups: Tensor | None) -> None:
        """Count boolean ``hits [N]`` into their ``groups [N]`` (all group 0 when ``None``). Group ids on the CPU (as
        the loader gives them) are checked here; on a device, by the counting kernel (an index error on the CPU, a
        device-side assert on a GPU), as reading them would make the host wait for the device."""
        where = f"{type(self).__name__}.update"
        if groups is None:
            groups = torch.zeros_like(hits, dtype=torch.long)
        groups = torch.as_tensor(groups)
        if groups.shape != hits.shape or groups.is_floating_point():
            raise ValueError(f"{where}: groups must be integer ids of shape {tuple(hits.shape)}, "
                             f"got dtype {groups.dtype} and shape {tuple(groups.shape)}")
        groups = groups.long()
        if groups.device.type == "cpu" and ((groups < 0) | (groups >= self.num_groups)).any():
            raise ValueError(f"{where}: group ids must lie in [0, {self.num_groups - 1}], "
                             f"got {groups.unique().tolist()}")
        groups = groups.to(hits.device, non_blocking=True)
        self.hits.index_add_(0, groups, hits.long())
        self.seen.index_add_(0, groups, torch.ones_like(groups))

    def result_names(self) -> list[str]:
        """Every key :meth:`compute` may return (a group's own key only when it has samples)."""
        name = self.rate_name
        if self.num_groups == 1:
            return [name]
        return [name, f"worst_group_{name}", "worst_group", *(f"{name}/{g}" for g in self.group_names)]

    def compute(self) -> dict[str, Tensor]:
        """Overall, per-group and worst-group rates (see the class docstring)."""
        if self.seen.sum() == 0:
            raise ValueError(f"{type(self).__name__}.compute(): no sample was seen; call update() with data first")
        name = self.rate_name
        present = self.seen > 0
        rates = self.hits.float() / self.seen.clamp(min=1)
        out = {name: self.hits.sum().float() / self.seen.sum()}
        if self.num_groups == 1:
            return out
        worst = torch.where(present, rates, torch.inf).argmin()
        out.update({f"worst_group_{name}": rates[worst], "worst_group": worst})
        out.update({f"{name}/{self.group_names[g]}": rates[g] for g in range(self.num_groups) if present[g]})
        return out
