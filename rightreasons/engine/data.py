"""Data plumbing of the training engine that makes runs reproducible and resumable mid-epoch.

* :class:`EpochSampler` — a fresh permutation per epoch from ``(seed, epoch)`` alone, so the batches of an epoch are
  known without replaying the ones before (resumption skips the consumed batches of the permutation). With
  ``per_batch = k`` it composes every batch of ``k`` annotated and ``B − k`` unannotated images instead (guidance from
  few boxes: ``guidance.annotated_per_batch``).
* :class:`SeededTransform` — runs the augmentation of every sample under a seed derived from ``(seed, epoch, sample
  id)``, so random crops and flips do not depend on the DataLoader workers, the number of processes or on whether the
  run was interrupted.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, Iterator, Sequence

import torch
from torch import Tensor
from torch.utils.data import Sampler

__all__ = ["EpochSampler", "SeededTransform", "mix_seed"]


def mix_seed(*parts: int) -> int:
    """A stable 63-bit seed from integers (independent of Python's hash randomisation)."""
    return zlib.crc32(" ".join(map(str, parts)).encode()) * 2654435761 % (2 ** 63)


class EpochSampler(Sampler[int]):
    """Indices ``0 … n−1``: a permutation seeded by ``(seed, epoch)`` when ``shuffle``, else in order.

    With ``per_batch = k > 0`` (and ``annotated``, ``batch_size = B``) every consecutive run of ``B`` indices — one
    batch of a ``DataLoader`` with ``drop_last`` — holds exactly ``k`` annotated and ``B − k`` unannotated images. An
    epoch is still ``n // B`` batches (so epochs, schedules and checkpoints mean what they mean without the option);
    the annotated and the unannotated images are each drawn from their own endless stream: one seeded permutation of
    the set after another, so every annotated image is used before any is used again, whatever the epoch boundaries.
    Where epoch ``e`` starts in each stream follows from ``e`` alone, so the order is a function of ``(seed, epoch)``
    (resumable mid-epoch by skipping batches, like the plain permutation). Within a batch the annotated images sit at
    evenly spread positions ``⌊j·B/k⌋``, so splitting the batch between processes (accelerate's ``split_batches``)
    gives each process its share of them.

    Args:
        n: dataset size.
        seed: the run's seed.
        shuffle: permute (training) or keep the order.
        annotated: ``[n]`` bool, the images with usable boxes (needed when ``per_batch > 0``).
        per_batch: annotated images per batch ``k``; 0 = plain permutation.
        batch_size: ``B`` (needed when ``per_batch > 0``); ``1 <= k < B``.
    """

    def __init__(self, n: int, seed: int, shuffle: bool = True, *, annotated: Sequence[bool] | Tensor | None = None,
                 per_batch: int = 0, batch_size: int | None = None) -> None:
        self.n, self.seed, self.shuffle, self.epoch = n, seed, shuffle, 0
        self.per_batch, self.batch_size = per_batch, batch_size
        if per_batch:
            flags = torch.as_tensor(annotated if annotated is not None else [], dtype=torch.bool)
            if flags.shape != (n,):
                raise ValueError(f"annotated must hold one flag per image ({n}), got shape {tuple(flags.shape)}")
            if batch_size is None or not 0 < per_batch < batch_size:
                raise ValueError(f"per_batch must lie in [1, batch_size - 1] = [1, {(batch_size or 1) - 1}], "
                                 f"got {per_batch}")
            self.annotated = flags.nonzero()[:, 0]
            self.unannotated = (~flags).nonzero()[:, 0]
            if not len(self.annotated) or not len(self.unannotated):
                raise ValueError(f"{per_batch} annotated images per batch need annotated and unannotated images; "
                                 f"{len(self.annotated)} of {n} are annotated")

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return iter(range(self.n))
        if self.per_batch:
            return iter(self._composed())
        generator = torch.Generator().manual_seed(mix_seed(self.seed, self.epoch))
        return iter(torch.randperm(self.n, generator=generator).tolist())

    def __len__(self) -> int:
        if self.per_batch and self.shuffle:
            return self.n // self.batch_size * self.batch_size
        return self.n

    def _permutation(self, pool: Tensor, name: str, cycle: int) -> list[int]:
        """The ``cycle``-th seeded permutation of ``pool``."""
        generator = torch.Generator().manual_seed(mix_seed(self.seed, zlib.crc32(name.encode()), cycle))
        return pool[torch.randperm(len(pool), generator=generator)].tolist()

    def _cycle(self, pool: Tensor, name: str, cycle: int, group: int) -> list[int]:
        """The ``cycle``-th permutation of the stream that is consumed ``group`` items per batch, with no item twice
        in the batch that straddles the previous cycle's end: the ``r`` last items of the previous cycle share a batch
        with the ``group − r`` first of this one, and any of those that repeats one of the ``r`` is swapped with an item
        from the middle (positions ``group … len − group − 1``, so no cycle's head or tail is changed twice). Possible
        when the pool holds at least ``3 · group`` items; smaller pools may repeat an item within such a batch."""
        order = self._permutation(pool, name, cycle)
        straddling = cycle * len(pool) % group
        if not cycle or not straddling or len(pool) < 3 * group:
            return order
        tail = set(self._permutation(pool, name, cycle - 1)[len(pool) - straddling:])
        middle = (j for j in range(group, len(pool) - group) if order[j] not in tail)
        for i in range(group - straddling):
            if order[i] in tail:
                j = next(middle)
                order[i], order[j] = order[j], order[i]
        return order

    def _stream(self, pool: Tensor, name: str, group: int, batches: int) -> Iterator[int]:
        """The items of the epoch's ``batches`` groups of ``group`` in the endless stream of cycles of ``pool``: the
        epoch starts at position ``epoch · batches · group``."""
        count = batches * group
        cycle, offset = divmod(self.epoch * count, len(pool))
        while count > 0:
            items = self._cycle(pool, name, cycle, group)[offset:offset + count]
            yield from items
            count -= len(items)
            cycle, offset = cycle + 1, 0

    def _composed(self) -> list[int]:
        batches, size, k = self.n // self.batch_size, self.batch_size, self.per_batch
        annotated = self._stream(self.annotated, "annotated", k, batches)
        plain = self._stream(self.unannotated, "unannotated", size - k, batches)
        slots = [j * size // k for j in range(k)]
        return [next(annotated) if i in slots else next(plain) for _ in range(batches) for i in range(size)]


class SeededTransform:
    """Wrap a sample transform so that its randomness is a function of ``(seed, epoch, sample["id"])``."""

    def __init__(self, transform: Callable[[dict[str, Any]], dict[str, Any]], seed: int) -> None:
        self.transform, self.seed, self.epoch = transform, seed, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __call__(self, sample: dict[str, Any]) -> dict[str, Any]:
        seed = mix_seed(self.seed, self.epoch, zlib.crc32(str(sample["id"]).encode()))
        # only the CPU generator: seeding CUDA too (torch.manual_seed) would change its state outside fork_rng's
        # restore and costs a Python stack capture per sample
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            return self.transform(sample)
