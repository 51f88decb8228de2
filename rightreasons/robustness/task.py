"""Training a classifier with a group-robustness objective as a task of the engine (``rightreasons robust``):
:class:`RobustTask`, a :class:`~rightreasons.classification.ClassificationTask` whose objective is the one
``robustness.method`` names (:mod:`rightreasons.robustness.objectives`). Model, validation, hooks and export are the
classifier's, so every model family and multi-process runs work as for ``rightreasons train``.

What the run knows is fixed before its first step and identical on every process: the group sizes and the balanced
subset come from the training split's group labels and the run's seed, JTT's error set from the first-stage model
scored once on the un-augmented training images; GroupDRO's group weights ``q`` are updated from group losses summed
across the processes and are saved in every checkpoint (a resumed run continues with them).
"""

from __future__ import annotations

from typing import Any, Iterator

import torch
from torch import Tensor, nn

from ..classification import ClassificationTask
from ..classification.loss import classification_loss
from ..data import load_dataset
from ..engine import Step, Trainer, register_task
from ..engine.data import EpochSampler
from ..errors import TrainingError
from ..models import model_file
from .config import RobustConfig
from .jtt import error_set
from .objectives import GroupDRO, balanced_subset, group_counts, inverse_size_weights, weighted_mean

__all__ = ["RobustTask", "SubsetSampler"]


class SubsetSampler(EpochSampler):
    """A seeded permutation per epoch of a fixed subset ``indices`` of the training set (an epoch is the subset)."""

    def __init__(self, indices: Tensor, seed: int) -> None:
        super().__init__(len(indices), seed)
        self.indices = indices.tolist()

    def __iter__(self) -> Iterator[int]:
        return (self.indices[i] for i in super().__iter__())


class RobustTask(ClassificationTask):
    """Train ``config.model`` on ``config.data`` with the objective of ``robustness.method``."""

    config_class = RobustConfig
    config: RobustConfig

    def __init__(self, config: RobustConfig) -> None:
        super().__init__(config)
        r = config.robustness
        self.first_stage = model_file(r.error_set_from) if r.method == "upweight" else None  # missing: fails now
        self.group_weight: Tensor | None = None
        self.subset: Tensor | None = None
        self.dro: GroupDRO | None = None
        self.errors: set[str] = set()

    def build_datasets(self) -> tuple[Any, Any]:
        """The classifier's datasets; the group sizes, subset or GroupDRO state of the training split's groups."""
        train_set, val_set = super().build_datasets()
        r, data = self.config.robustness, self.config.data
        if not r.uses_group_labels:
            return train_set, val_set
        if train_set.groups is None:
            raise TrainingError(f"robustness.method={r.method} needs group labels, but the training split "
                                f"{data.train_split!r} of {data.name} has none (choose a dataset with groups, e.g. "
                                "synthetic-birds or waterbirds, or robustness.method: upweight, which needs none)")
        groups = train_set.groups
        counts = group_counts(groups, len(train_set.group_names))
        if r.method == "reweight":
            self.group_weight = inverse_size_weights(counts)
        elif r.method == "subsample":
            self.subset = balanced_subset(groups, self.config.seed)
            if len(self.subset) < data.batch_size:
                raise TrainingError(f"robustness.method=subsample keeps {len(self.subset)} training images (every "
                                    f"group cut to the smallest, group sizes {counts.tolist()}), fewer than "
                                    f"data.batch_size={data.batch_size}")
        else:
            self.dro = GroupDRO(counts, r.step_size, r.adjustment)
        return train_set, val_set

    def train_sampler(self, train_set: Any) -> EpochSampler:
        """The balanced subset's seeded permutation per epoch (``subsample``), else the classifier's."""
        if self.subset is not None:
            return SubsetSampler(self.subset, self.config.seed)
        return super().train_sampler(train_set)

    def setup(self, trainer: Trainer) -> None:
        """GroupDRO's ``q`` joins the checkpoints; JTT's error set is scored with the first-stage model."""
        if self.dro is not None:
            trainer.accelerator.register_for_checkpointing(self.dro)
        if self.group_weight is not None:
            self.group_weight = self.group_weight.to(trainer.accelerator.device)
        if self.first_stage is not None:
            data = self.config.data
            images = load_dataset(data.name, data.root, data.train_split, **data.options_for(data.train_split))
            self.errors = error_set(self.first_stage, images, data.image_size, data.eval_batch_size,
                                    trainer.accelerator.device)

    def losses(self, model: nn.Module, batch: dict[str, Any], step: Step) -> tuple[dict[str, Tensor], Tensor]:
        """``{"classification"}`` (the plain mean loss, for comparison) and, except for ``subsample``, the
        objective: ``{"reweighted"}``, ``{"upweighted"}`` or ``{"groupdro"}``."""
        method = self.config.robustness.method
        if method == "subsample":
            return super().losses(model, batch, step)
        per_sample = classification_loss(model(batch["image"]).float(), batch["labels"], self.loss_kind,
                                         self.config.loss.uniform_off_labels, per_sample=True)
        terms = {"classification": per_sample.mean().detach()}
        if method == "groupdro":
            objective, _ = self.dro(per_sample, batch["group"], step)
            terms["groupdro"] = objective.detach() / step.world_size
            return terms, objective
        if method == "reweight":
            weights = self.group_weight.to(per_sample.device)[batch["group"]]
        else:
            up = self.config.robustness.upweight
            weights = torch.tensor([up if i in self.errors else 1.0 for i in batch["id"]]).to(per_sample.device,
                                                                                               non_blocking=True)
        objective = weighted_mean(per_sample, weights, step)
        terms[f"{method}ed"] = objective.detach() / step.world_size
        return terms, objective


register_task("robust", RobustTask)
