"""Limited-data distillation (thesis §8.2.1): a seeded subset of N images ("shots") per class.

Single-label data: exactly ``shots`` images of every class, drawn by a seeded permutation (a class with fewer images
is an error). Multi-label data: the permutation is walked once and an image is taken while any of its classes still
has fewer than ``shots`` images (co-occurring classes may end up with more). The same seed gives the same images in
every run, as in the paper ("the same randomly selected shots for all limited-data experiments").
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

__all__ = ["ShotSubset", "few_shot_indices"]


def few_shot_indices(labels: Tensor, shots: int, seed: int = 0) -> list[int]:
    """Sorted indices of a ``shots``-per-class subset of images with multi-hot ``labels [N, K]`` (float or bool)."""
    if shots < 1:
        raise ValueError(f"shots must be >= 1, got {shots}")
    positive = labels if labels.dtype == torch.bool else labels > 0.5
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
    if (positive.sum(1) == 1).all():
        classes = positive.to(torch.uint8).argmax(1)  # argmax needs numbers; uint8 keeps the copy at 1 byte per label
        return _single_label(classes[order].numpy(), order.numpy(), labels.shape[1], shots)
    counts = torch.zeros(labels.shape[1], dtype=torch.long)
    chosen = []
    for i in order.tolist():
        classes = positive[i].nonzero()[:, 0]
        if len(classes) and (counts[classes] < shots).any():
            counts[classes] += 1
            chosen.append(i)
    return sorted(chosen)


def _single_label(classes: np.ndarray, order: np.ndarray, num_classes: int, shots: int) -> list[int]:
    """The first ``shots`` images of every class in permutation ``order`` (``classes`` given in that order)."""
    by_class = np.argsort(classes, kind="stable")
    ranked = classes[by_class]
    rank = np.arange(len(ranked)) - np.searchsorted(ranked, ranked, side="left")
    take = by_class[rank < shots]
    counts = np.bincount(classes[take], minlength=num_classes)
    short = np.flatnonzero(counts < shots).tolist()
    if short:
        raise ValueError(f"shots={shots}: classes {short} have only {counts[short].tolist()} images")
    return sorted(order[take].tolist())


class ShotSubset(Dataset):
    """The images ``indices`` of an annotated dataset, with the metadata the training engine reads (``ids``,
    ``labels``, ``positive_labels``, ``groups``, ``group_names``, ``annotated``, ``num_classes``, ``classes``) and
    its ``transform`` (setting it sets the dataset's)."""

    def __init__(self, dataset: Any, indices: list[int]) -> None:
        self.dataset = dataset
        self.indices = list(indices)
        self._index = torch.tensor(self.indices, dtype=torch.long)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return self.dataset[self.indices[index]]

    @property
    def transform(self) -> Any:
        return self.dataset.transform

    @transform.setter
    def transform(self, transform: Any) -> None:
        self.dataset.transform = transform

    @property
    def ids(self) -> list[str]:
        ids = self.dataset.ids
        return [ids[i] for i in self.indices]

    @property
    def labels(self) -> Tensor:
        return self.dataset.labels[self._index]

    @property
    def positive_labels(self) -> Tensor:
        return self.dataset.positive_labels[self._index]

    @property
    def groups(self) -> Tensor | None:
        groups = self.dataset.groups
        return None if groups is None else groups[self._index]

    @property
    def group_names(self) -> tuple[str, ...] | None:
        return self.dataset.group_names

    @property
    def annotated(self) -> Any:
        return self.dataset.annotated[self.indices]

    @property
    def num_classes(self) -> int:
        return self.dataset.num_classes

    @property
    def classes(self) -> tuple[str, ...]:
        return self.dataset.classes

    def __repr__(self) -> str:
        return f"ShotSubset({len(self)} of {self.dataset!r})"
