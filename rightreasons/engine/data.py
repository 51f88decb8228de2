"""Data plumbing of the training engine that makes runs reproducible and resumable mid-epoch.

* :class:`EpochSampler` — a fresh permutation per epoch from ``(seed, epoch)`` alone, so the batches of an epoch are
  known without replaying the ones before (resumption skips the consumed batches of the permutation).
* :class:`SeededTransform` — runs the augmentation of every sample under a seed derived from ``(seed, epoch, sample
  id)``, so random crops and flips do not depend on the DataLoader workers, the number of processes or on whether the
  run was interrupted.
"""

from __future__ import annotations

import zlib
from typing import Any, Callable, Iterator

import torch
from torch.utils.data import Sampler

__all__ = ["EpochSampler", "SeededTransform", "mix_seed"]


def mix_seed(*parts: int) -> int:
    """A stable 63-bit seed from integers (independent of Python's hash randomisation)."""
    return zlib.crc32(" ".join(map(str, parts)).encode()) * 2654435761 % (2 ** 63)


class EpochSampler(Sampler[int]):
    """Indices ``0 … n−1``: a permutation seeded by ``(seed, epoch)`` when ``shuffle``, else in order."""

    def __init__(self, n: int, seed: int, shuffle: bool = True) -> None:
        self.n, self.seed, self.shuffle, self.epoch = n, seed, shuffle, 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if not self.shuffle:
            return iter(range(self.n))
        generator = torch.Generator().manual_seed(mix_seed(self.seed, self.epoch))
        return iter(torch.randperm(self.n, generator=generator).tolist())

    def __len__(self) -> int:
        return self.n


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
