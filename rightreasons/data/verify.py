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

from torch.utils.data import DataLoader, Dataset

from .base import AnnotatedDataset
from .errors import BoxWarning, DataError

__all__ = ["sample_problems"]


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
