"""How a cache stores its explanation maps (``rightreasons cache --format NAME``, ``distill.cache_format``).

A format turns a batch of float32 maps ``[B, C, H, W]`` into tensors that concatenate along their first dimension
(so a shard is the concatenation of its batches), and one stored row back into the float32 map ``[C, H, W]`` at the
resolution it was computed at (the base view's). Rows are read from the shard one at a time; the few per-image numbers
a format needs to find and scale a row (``per_image``) are loaded once when the cache is opened.

* ``float16`` — each map divided by its maximum magnitude and cast to float16 (``explanations [n, C, H, W]``, the
  maximum in ``scales [n]``): relative error < 2⁻¹¹ of the map's maximum, 2 bytes a value (0.6 MB an image of
  ``[6, 224, 224]``). The layout of version-1 caches, byte for byte.
* ``compact`` — each map cut into :data:`TILE`-pixel squares; each square quantised to int8 levels ``k · step`` with
  the largest step whose decoded square keeps a cosine similarity of at least :data:`COMPACT_COSINE` with it, and the
  levels deflate-compressed. ``codes`` holds, per map and back to back, the float32 steps of its squares followed by
  the compressed levels; ``lengths [n]`` their sizes. B-cos ``W(x)`` is sparse (a few per cent of the values hold
  99 % of its energy), so most levels are 0 and deflate stores them in a few bits: at 224 px a B-cos ResNet-50's map
  takes about 18 KB. Full resolution and all channels are kept: the energy of ``W(x)`` lies at the pixel scale (a
  map down-sampled to half the resolution and up again keeps a cosine similarity of only ≈ 0.65 with itself) and no
  few channels carry it (three principal channels hold 70–85 % of the energy).

A shard is checked before its maps are read (:meth:`MapFormat.check`: the shapes of its tensors against the map
shape, finite per-image numbers), and a stored map is decoded only within the bytes its shape needs: a ``compact`` map
whose levels would inflate to more, or whose steps are not finite, is refused before anything of its size is
allocated (``ValueError`` naming the tensor; the cache adds the shard and sample).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor

__all__ = ["COMPACT_COSINE", "DEFAULT_FORMAT", "FORMATS", "TILE", "CompactFormat", "Float16Format", "MapFormat",
           "require_finite", "require_shape"]

COMPACT_COSINE = 0.995
"""The cosine similarity each ``compact`` tile keeps with the tile it encodes (its quantisation step is chosen so)."""

TILE = 32
"""``compact`` chooses its quantisation step per ``TILE × TILE`` square (all channels), so that a crop of the map is
as faithful as the whole map (a single step for the whole map leaves the quiet parts of a sparse map at 0)."""

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

    def check(self, shapes: Mapping[str, tuple[int, ...]], per_image: Mapping[str, Tensor], rows: int,
              shape: tuple[int, ...]) -> None:
        """Refuse (``ValueError`` naming the tensor and what was expected) a shard whose tensors (``shapes``: name →
        shape; ``per_image``: its :attr:`per_image` tensors) cannot hold ``rows`` maps of ``shape``."""

    def decode(self, shard: Any, row: int, per_image: Mapping[str, Tensor], shape: tuple[int, ...]) -> Tensor:
        """The float32 map ``[C, H, W]`` of ``row`` of an open shard (read as a ``safe_open`` handle is:
        ``shard.get_slice(name)[a:b]``); ``ValueError`` when the stored map cannot be that map."""


def require_shape(shapes: Mapping[str, tuple[int, ...]], name: str, expected: tuple[int, ...]) -> None:
    """Refuse a shard whose tensor ``name`` is missing or not of shape ``expected`` (``ValueError``)."""
    if name not in shapes:
        raise ValueError(f"holds no tensor {name!r}")
    if tuple(shapes[name]) != expected:
        raise ValueError(f"{name!r} has shape {list(shapes[name])}, expected {list(expected)}")


def require_finite(name: str, values: Tensor) -> None:
    """Refuse a tensor ``name`` holding NaN or infinite values (``ValueError`` naming how many and the first rows):
    a teacher's outputs are finite, and a non-finite one would turn a training into NaN losses."""
    bad = ~values.isfinite()
    if bad.any():
        count = int(bad.sum())
        rows = bad.reshape(len(values), -1).any(1).nonzero().flatten()[:5].tolist() if values.dim() else []
        raise ValueError(f"{name!r} holds {count} non-finite value{'s' if count != 1 else ''} (rows {rows}); a "
                         "teacher's outputs are finite")


class Float16Format:
    name = "float16"
    per_image = ("scales",)

    def encode(self, maps: Tensor) -> dict[str, Tensor]:
        scale = maps.flatten(1).abs().amax(1)
        safe = torch.where(scale > 0, scale, torch.ones_like(scale))  # all-zero maps stay 0
        return {"explanations": (maps / safe.view(-1, *[1] * (maps.dim() - 1))).half(), "scales": scale}

    def index(self, per_image: dict[str, Tensor]) -> dict[str, Tensor]:
        return per_image

    def check(self, shapes: Mapping[str, tuple[int, ...]], per_image: Mapping[str, Tensor], rows: int,
              shape: tuple[int, ...]) -> None:
        require_shape(shapes, "explanations", (rows, *shape))
        require_shape(shapes, "scales", (rows,))
        require_finite("scales", per_image["scales"])
        if (per_image["scales"] < 0).any():
            raise ValueError("'scales' holds negative values (each is a map's maximum magnitude)")

    def decode(self, shard: Any, row: int, per_image: Mapping[str, Tensor], shape: tuple[int, ...]) -> Tensor:
        return shard.get_slice("explanations")[row:row + 1][0].float().mul_(per_image["scales"][row])


def _tiles(maps: Tensor) -> Tensor:
    """``[C, H, W]`` → ``[T, C·TILE·TILE]``: the map cut into :data:`TILE`-pixel squares (row-major; zero-padded
    at the bottom and right edges to whole tiles)."""
    c, h, w = maps.shape
    rows, cols = -(-h // TILE), -(-w // TILE)
    padded = torch.nn.functional.pad(maps, (0, cols * TILE - w, 0, rows * TILE - h))
    return padded.reshape(c, rows, TILE, cols, TILE).permute(1, 3, 0, 2, 4).reshape(rows * cols, -1)


def _tile_count(shape: tuple[int, ...]) -> int:
    """How many :data:`TILE`-pixel squares cover a map of ``shape`` ``[C, H, W]``."""
    return -(-shape[1] // TILE) * -(-shape[2] // TILE)


def _quantise(tiles: Tensor, target: float) -> tuple[Tensor, Tensor]:
    """int8 levels ``[T, D]`` and steps ``[T]`` of tiles ``[T, D]``: per tile the largest step between
    ``peak/127`` and ``peak`` (bisected on a log scale) whose decoded tile keeps cosine similarity >= ``target``."""
    tiles = tiles.double()
    peak = tiles.abs().amax(1, keepdim=True)
    unit = tiles / torch.where(peak > 0, peak, torch.ones_like(peak))
    norm = unit.norm(dim=1, keepdim=True)

    def levels(log_step: Tensor) -> Tensor:
        return torch.round(unit / log_step.exp()).clamp_(-_LEVELS, _LEVELS)

    low = torch.full_like(peak, -float(np.log(_LEVELS)))  # peak/127: cosine > 0.9999 on any tile
    high = torch.zeros_like(peak)
    for _ in range(_SEARCH_STEPS):
        middle = (low + high) / 2
        codes = levels(middle)
        cosine = (codes * unit).sum(1, keepdim=True) / (codes.norm(dim=1, keepdim=True) * norm).clamp_min(1e-300)
        good = cosine >= target
        low, high = torch.where(good, middle, low), torch.where(good, high, middle)
    return levels(low).to(torch.int8), (low.exp() * peak).squeeze(1).float()


class CompactFormat:
    name = "compact"
    per_image = ("lengths",)

    def encode(self, maps: Tensor) -> dict[str, Tensor]:
        blobs = []
        for explanation in maps:
            codes, steps = _quantise(_tiles(explanation), COMPACT_COSINE)
            blobs.append(steps.numpy().tobytes() + zlib.compress(codes.numpy().tobytes(), 9))
        return {"codes": torch.frombuffer(bytearray(b"".join(blobs)), dtype=torch.uint8),
                "lengths": torch.tensor([len(b) for b in blobs], dtype=torch.int64)}

    def index(self, per_image: dict[str, Tensor]) -> dict[str, Tensor]:
        """Adds ``offsets [n]``: where each map's bytes start in ``codes``."""
        lengths = per_image["lengths"]
        return {**per_image, "offsets": torch.cumsum(lengths, 0) - lengths}

    def check(self, shapes: Mapping[str, tuple[int, ...]], per_image: Mapping[str, Tensor], rows: int,
              shape: tuple[int, ...]) -> None:
        require_shape(shapes, "lengths", (rows,))
        lengths = per_image["lengths"]
        smallest = 4 * _tile_count(shape)
        if rows and int(lengths.min()) < smallest:
            raise ValueError(f"'lengths' holds {int(lengths.min())}, less than the {smallest} bytes of a map's "
                             f"quantisation steps (shape {list(shape)})")
        require_shape(shapes, "codes", (int(lengths.sum()),))

    def decode(self, shard: Any, row: int, per_image: Mapping[str, Tensor], shape: tuple[int, ...]) -> Tensor:
        """Levels times their tile's step, written straight into the untiled map (one pass over the levels, none
        over float copies of them). The levels are inflated to at most the size the map's shape needs."""
        start = int(per_image["offsets"][row])
        blob = shard.get_slice("codes")[start:start + int(per_image["lengths"][row])].numpy().tobytes()
        c, h, w = shape
        rows, cols = -(-h // TILE), -(-w // TILE)
        count = rows * cols
        steps = torch.from_numpy(np.frombuffer(blob, dtype=np.float32, count=count).copy())
        if not steps.isfinite().all():
            raise ValueError("has non-finite quantisation steps in 'codes'")
        codes = torch.frombuffer(_inflate(blob[4 * count:], c * count * TILE * TILE, shape), dtype=torch.int8)
        maps = torch.empty(c, rows, TILE, cols, TILE)
        torch.mul(codes.view(rows, cols, c, TILE, TILE).permute(2, 0, 3, 1, 4), steps.view(1, rows, 1, cols, 1),
                  out=maps)
        return maps.view(c, rows * TILE, cols * TILE)[:, :h, :w]


def _inflate(stream: bytes, size: int, shape: tuple[int, ...]) -> bytearray:
    """The ``size`` bytes a deflate ``stream`` holds, never more inflated than ``size + 1`` (a crafted stream can
    inflate a thousand-fold); ``ValueError`` when it holds another amount or is not deflate."""
    inflater = zlib.decompressobj()
    try:
        levels = inflater.decompress(stream, size + 1)
    except zlib.error as e:
        raise ValueError(f"holds levels that do not inflate ({e})") from None
    if len(levels) > size:
        raise ValueError(f"inflates to more than the {size:,} bytes of levels its shape {list(shape)} needs")
    if len(levels) < size or not inflater.eof:
        raise ValueError(f"inflates to {len(levels):,} bytes of levels, its shape {list(shape)} needs {size:,}")
    return bytearray(levels)


FORMATS: dict[str, MapFormat] = {f.name: f for f in (Float16Format(), CompactFormat())}
"""The storage formats by name."""
DEFAULT_FORMAT = "float16"
