"""How a cache stores its explanation maps (``rightreasons cache --format NAME``, ``distill.cache_format``).

A format turns a batch of float32 maps ``[B, C, H, W]`` into tensors that concatenate along their first dimension
(so a shard is the concatenation of its batches), and one stored row back into the float32 map ``[C, H, W]`` at the
resolution it was computed at (the base view's). Rows are read from a memory-mapped shard; the few per-image numbers
a format needs to find and scale a row (``per_image``) are loaded once when the cache is opened.

* ``float16`` — each map divided by its maximum magnitude and cast to float16 (``explanations [n, C, H, W]``, the
  maximum in ``scales [n]``): relative error < 2⁻¹¹ of the map's maximum, 2 bytes a value (0.6 MB an image of
  ``[6, 224, 224]``). The layout of version-1 caches, byte for byte.
* ``compact`` — each map quantised to int8 levels ``k · step`` with the largest step whose decoded map still has a
  cosine similarity of at least :data:`COMPACT_COSINE` with the map, and the levels deflate-compressed (``codes``:
  the compressed bytes of every map, back to back; ``lengths [n]``, ``scales [n]`` = the steps). B-cos ``W(x)`` is
  sparse (a few per cent of the values hold 99 % of its energy), so most levels are 0 and deflate stores them in a few
  bits; at 224 px a B-cos ResNet-50's map takes about 14 KB. Full resolution and all channels are kept: the energy of
  ``W(x)`` lies at the pixel scale (a map down-sampled to half the resolution and up again keeps a cosine similarity
  of only ≈ 0.65 with itself) and no few channels carry it (three principal channels hold 70–85 % of the energy).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

__all__ = ["COMPACT_COSINE", "DEFAULT_FORMAT", "FORMATS", "CompactFormat", "Float16Format", "MapFormat"]

COMPACT_COSINE = 0.995
"""The cosine similarity each ``compact`` map keeps with the map it encodes (the quantisation step is chosen for it)."""

_LEVELS = 127  # int8 levels on each side of 0
_SEARCH_STEPS = 12  # bisections of the step (log scale between peak/127 and peak)


class MapFormat(Protocol):
    """The storage of explanation maps in a shard (see the module docstring)."""

    name: str
    #: the shard tensors holding one small value per image, loaded once per cache
    per_image: tuple[str, ...]

    def encode(self, maps: Tensor) -> dict[str, Tensor]:
        """The shard tensors of float32 maps ``[B, C, H, W]`` (each concatenable along dim 0 with other batches')."""

    def index(self, per_image: dict[str, Tensor]) -> dict[str, Tensor]:
        """What :meth:`decode` looks rows up in, from a shard's :attr:`per_image` tensors (read once)."""

    def decode(self, shard: Any, row: int, per_image: Mapping[str, Tensor], shape: tuple[int, ...]) -> Tensor:
        """The float32 map ``[C, H, W]`` of ``row`` of an open shard (``safe_open`` handle)."""


def _peaks(maps: Tensor) -> Tensor:
    """``[B]`` the maximum magnitude of each map, 1 for all-zero maps (so that dividing by it is safe)."""
    peak = maps.flatten(1).abs().amax(1)
    return torch.where(peak > 0, peak, torch.ones_like(peak))


class Float16Format:
    name = "float16"
    per_image = ("scales",)

    def encode(self, maps: Tensor) -> dict[str, Tensor]:
        scale = maps.flatten(1).abs().amax(1)
        return {"explanations": (maps / _peaks(maps).view(-1, *[1] * (maps.dim() - 1))).half(), "scales": scale}

    def index(self, per_image: dict[str, Tensor]) -> dict[str, Tensor]:
        return per_image

    def decode(self, shard: Any, row: int, per_image: Mapping[str, Tensor], shape: tuple[int, ...]) -> Tensor:
        return shard.get_slice("explanations")[row:row + 1][0].float() * per_image["scales"][row]


def _quantise(unit: Tensor, target: float) -> tuple[Tensor, float]:
    """int8 levels and the step (both relative to a map ``unit`` of maximum magnitude 1): the largest step in
    ``[1/127, 1]`` (bisected on a log scale) whose decoded map has cosine similarity >= ``target`` with ``unit``."""
    flat = unit.reshape(-1).double()
    norm = flat.norm()

    def levels(step: float) -> Tensor:
        return torch.round(flat / step).clamp_(-_LEVELS, _LEVELS)

    def cosine(step: float) -> float:
        codes = levels(step)
        return float(codes @ flat / (codes.norm() * norm)) if codes.any() else 0.0

    low, high = np.log(1 / _LEVELS), 0.0  # cosine(exp(low)) >= target always holds in practice (> 0.9999)
    for _ in range(_SEARCH_STEPS):
        middle = (low + high) / 2
        if cosine(float(np.exp(middle))) >= target:
            low = middle
        else:
            high = middle
    step = float(np.exp(low))
    return levels(step).to(torch.int8), step


class CompactFormat:
    name = "compact"
    per_image = ("lengths", "scales")

    def encode(self, maps: Tensor) -> dict[str, Tensor]:
        peaks, blobs, steps = _peaks(maps), [], []
        for unit, peak, empty in zip(maps / peaks.view(-1, *[1] * (maps.dim() - 1)), peaks,
                                     maps.flatten(1).abs().amax(1) == 0):
            codes, step = _quantise(unit, COMPACT_COSINE)
            blobs.append(zlib.compress(codes.numpy().tobytes(), 9))
            steps.append(0.0 if empty else step * float(peak))
        return {"codes": torch.frombuffer(bytearray(b"".join(blobs)), dtype=torch.uint8),
                "lengths": torch.tensor([len(b) for b in blobs], dtype=torch.int64),
                "scales": torch.tensor(steps, dtype=torch.float32)}

    def index(self, per_image: dict[str, Tensor]) -> dict[str, Tensor]:
        """Adds ``offsets [n]``: where each map's bytes start in ``codes``."""
        lengths = per_image["lengths"]
        return {**per_image, "offsets": torch.cumsum(lengths, 0) - lengths}

    def decode(self, shard: Any, row: int, per_image: Mapping[str, Tensor], shape: tuple[int, ...]) -> Tensor:
        start = int(per_image["offsets"][row])
        stored = shard.get_slice("codes")[start:start + int(per_image["lengths"][row])]
        codes = np.frombuffer(zlib.decompress(stored.numpy().tobytes()), dtype=np.int8)
        return torch.from_numpy(codes.astype(np.float32)).reshape(shape) * per_image["scales"][row]


FORMATS: dict[str, MapFormat] = {f.name: f for f in (Float16Format(), CompactFormat())}
"""The storage formats by name."""
DEFAULT_FORMAT = "float16"
