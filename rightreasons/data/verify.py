"""The one dataset check: read every sample as training reads it and collect what is refused.

``rightreasons prepare`` and the loaders must never disagree about a dataset: a download that ``prepare`` passes must
train, and one that training refuses must fail ``prepare`` with the same message. So ``prepare`` builds the loader
(which checks the annotation files, split lists and ids) and then calls :func:`sample_problems`, which runs the
loader's own :meth:`~rightreasons.data.base.AnnotatedDataset.load_checked` on every sample — the image decoded in
full, its size compared with the one its annotation declares, its boxes checked, its mask read — and keeps the
message of every :class:`DataError`, exactly as training would raise it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from torch.utils.data import DataLoader, Dataset

from .base import AnnotatedDataset
from .errors import BoxWarning, DataError

__all__ = ["check_training_splits", "sample_problems", "shared_ids"]


class _Problems(Dataset):
    """Sample ``i`` of ``dataset``'s ``indices`` → the message of the DataError its loading raises, or ``""``."""

    def __init__(self, dataset: AnnotatedDataset, indices: Sequence[int]) -> None:
        self.dataset, self.indices = dataset, list(indices)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> str:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", BoxWarning)  # repairs under the box policy are not problems
                self.dataset.load_checked(self.indices[i])
        except DataError as e:
            return str(e)
        return ""


def sample_problems(dataset: AnnotatedDataset, indices: Sequence[int] | None = None, workers: int = 0) -> list[str]:
    """The messages of the samples of ``dataset`` (all, or ``indices``) that loading refuses, in order; ``workers``
    processes decode the images (0: this process)."""
    checked = _Problems(dataset, range(len(dataset)) if indices is None else indices)
    loader = DataLoader(checked, batch_size=None, num_workers=workers if len(checked) else 0)
    return [message for message in loader if message]


def _split_name(dataset: Any) -> str:
    """``dataset`` in messages about its split: ``split 'val' of voc2007``, or its repr for other datasets."""
    split, name = getattr(dataset, "split", None), getattr(dataset, "name", None)
    return f"split {split!r} of {name}" if split is not None and name is not None else repr(dataset)


def shared_ids(first: Any, second: Any) -> str | None:
    """The problem of two splits meant to be disjoint (train, val, test) that hold the same image ids — leakage: a
    model chosen or scored on one would be judged on images it trained on — or ``None``. Ids name images within one
    dataset, so only splits of the same dataset (``name``) that have ``ids`` are compared (e²KD may validate on
    another dataset)."""
    ids = getattr(first, "ids", None), getattr(second, "ids", None)
    name = getattr(first, "name", None)
    if ids[0] is None or ids[1] is None or name is None or name != getattr(second, "name", None):
        return None
    shared = sorted(set(map(str, ids[0])) & set(map(str, ids[1])))
    if not shared:
        return None
    examples = ", ".join(repr(i) for i in shared[:5]) + (", ..." if len(shared) > 5 else "")
    return (f"{_split_name(first)} and {_split_name(second)} share {len(shared)} image id(s) ({examples}): a model "
            "chosen or scored on one would be judged on images it trained on; expected every image in one split only")


def check_training_splits(train_set: Any, val_set: Any) -> None:
    """Refuse, before any training, a validation split without images (validation after the first epoch would
    fail) and a training and validation split that share images (:func:`shared_ids`), with a :class:`DataError`."""
    if len(val_set) == 0:
        raise DataError(f"{_split_name(val_set)} holds no images; validation needs at least one (data.val_split "
                        "names the split, its list of ids is empty)")
    problem = shared_ids(train_set, val_set)
    if problem is not None:
        raise DataError(problem)
