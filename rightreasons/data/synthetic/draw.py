"""Vectorised drawing primitives of the synthetic benchmark: shapes, textured backgrounds, colours, noise.

Everything works on batches ``[n, ...]`` with torch ops (no per-pixel Python loops) and draws its randomness from
the ``torch.Generator`` it is given, so a seeded generator makes the output deterministic.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["EXTENT", "SHAPES", "backgrounds", "click_points", "composite", "draw_objects", "finish", "hsv_to_rgb",
           "object_colours", "place_quadrants", "tight_boxes", "uniform"]

SHAPES = ("disc", "triangle", "square", "cross", "ring", "bar")

# Shapes in units of r (all of area π r²): inradius of the triangle, half-side of the square, arm half-width and
# half-length of the cross, inner/outer radius of the ring, semi-axes of the bar; EXTENT = distance of the farthest
# shape point from its centre.
_TRI = math.sqrt(math.pi / (3 * math.sqrt(3)))
_SQUARE = math.sqrt(math.pi) / 2
_CROSS_L = math.sqrt(math.pi / (8 * 0.35 - 4 * 0.35 ** 2))
_CROSS_W = 0.35 * _CROSS_L
_RING_OUT, _RING_IN = 1.25, 0.75
_BAR_A, _BAR_B = 1.8, 1 / 1.8
EXTENT = (1.0, 2 * _TRI, _SQUARE * math.sqrt(2), math.hypot(_CROSS_L, _CROSS_W), _RING_OUT, _BAR_A)


def uniform(gen: torch.Generator, n: int, lo: float, hi: float, *shape: int) -> Tensor:
    """``[n, *shape]`` uniform in ``[lo, hi)``."""
    return lo + (hi - lo) * torch.rand(n, *shape, generator=gen)


def hsv_to_rgb(h: Tensor, s: Tensor, v: Tensor) -> Tensor:
    """``[n]`` hue/saturation/value in [0, 1] → ``[n, 3]`` RGB."""
    k = (torch.tensor([5.0, 3.0, 1.0]) + h[:, None] * 6) % 6
    return v[:, None] - (v * s)[:, None] * torch.clamp(torch.minimum(k, 4 - k), 0, 1)


def _shape_mask(shape: int, u: Tensor, v: Tensor) -> Tensor:
    """Inside-test of shape id ``shape`` at local coordinates ``u, v [n, S, S]`` (units of r)."""
    if shape == 0:
        return u * u + v * v <= 1
    if shape == 1:
        inside = v <= _TRI
        for angle in (math.pi / 2 + 2 * math.pi / 3, math.pi / 2 + 4 * math.pi / 3):
            inside &= u * math.cos(angle) + v * math.sin(angle) <= _TRI
        return inside
    au, av = u.abs(), v.abs()
    if shape == 2:
        return torch.maximum(au, av) <= _SQUARE
    if shape == 3:
        return ((au <= _CROSS_W) & (av <= _CROSS_L)) | ((av <= _CROSS_W) & (au <= _CROSS_L))
    if shape == 4:
        rr = u * u + v * v
        return (rr <= _RING_OUT ** 2) & (rr >= _RING_IN ** 2)
    return (u / _BAR_A) ** 2 + (v / _BAR_B) ** 2 <= 1


def draw_objects(gen: torch.Generator, shape: Tensor, cx: Tensor, cy: Tensor, r: Tensor, size: int) -> Tensor:
    """Pixel masks ``[n, S, S]`` of one object per image (shape ids ``[n]``, random rotation)."""
    n = len(shape)
    coords = torch.arange(size, dtype=torch.float32) + 0.5
    theta = uniform(gen, n, 0.0, 2 * math.pi)[:, None, None]
    dx = (coords[None, None, :] - cx[:, None, None]) / r[:, None, None]
    dy = (coords[None, :, None] - cy[:, None, None]) / r[:, None, None]
    cos, sin = torch.cos(theta), torch.sin(theta)
    u, v = dx * cos + dy * sin, dy * cos - dx * sin
    out = torch.zeros(n, size, size, dtype=torch.bool)
    for k in shape.unique().tolist():
        rows = shape == k
        out[rows] = _shape_mask(k, u[rows], v[rows])
    return out


def place_quadrants(local: Tensor, quadrant: Tensor, size: int) -> Tensor:
    """Put ``local [n, h, h]`` (``h = size // 2``) into quadrant ``quadrant [n]`` (0 top-left, 1 top-right,
    2 bottom-left, 3 bottom-right) of an empty ``[n, size, size]`` canvas."""
    n, h = local.shape[0], local.shape[-1]
    grid = local.new_zeros(n, 2, 2, h, h)
    grid[torch.arange(n), quadrant // 2, quadrant % 2] = local
    out = local.new_zeros(n, size, size)
    out[:, :2 * h, :2 * h] = grid.permute(0, 1, 3, 2, 4).reshape(n, 2 * h, 2 * h)
    return out


def tight_boxes(masks: Tensor) -> Tensor:
    """XYXY boxes ``[n, 4]`` tight around the pixels of non-empty masks ``[n, S, S]``."""
    size = masks.shape[-1]
    cols, rows = masks.any(dim=1), masks.any(dim=2)  # [n, S] over x and y
    x1 = cols.float().argmax(dim=1)
    x2 = size - cols.flip(1).float().argmax(dim=1)
    y1 = rows.float().argmax(dim=1)
    y2 = size - rows.flip(1).float().argmax(dim=1)
    return torch.stack([x1, y1, x2, y2], dim=1).float()


def click_points(masks: Tensor) -> Tensor:
    """XY points ``[n, 2]``, one click per non-empty mask ``[n, S, S]``: the centre of the object pixel nearest the
    centroid of the object's pixel centres (ties: the first in row-major order). Always on the object, also where the
    centroid is not (a ring's centre); a deterministic function of the mask."""
    size = masks.shape[-1]
    centres = torch.arange(size, dtype=torch.float32) + 0.5
    area = masks.flatten(1).sum(1).clamp(min=1)
    cx = (masks.sum(1) * centres).sum(1) / area  # column counts · x
    cy = (masks.sum(2) * centres).sum(1) / area  # row counts · y
    dist = (centres[None, None, :] - cx[:, None, None]).square() + (centres[None, :, None] - cy[:, None, None]).square()
    nearest = torch.where(masks, dist, torch.inf).flatten(1).argmin(1)
    return torch.stack([nearest % size, nearest // size], dim=1).float() + 0.5


def _outer(col: Tensor, row: Tensor) -> Tensor:
    """``[m, S] × [m, S] → [m, S, S]`` with ``out[m, y, x] = col[m, y] · row[m, x]``."""
    return col[:, :, None] * row[:, None, :]


def backgrounds(gen: torch.Generator, kind: Tensor, size: int, colour: Tensor | None = None) -> Tensor:
    """Backgrounds ``[n, 3, S, S]`` with the texture of ``kind [n]`` — 0 low-frequency blotches (grass/land),
    1 horizontal waves (water), 2 fine diagonal ripples (sand) — and the palette of ``colour [n]`` (default
    ``kind``): 0 green–brown, 1 blue–teal, 2 beige. Textures are sums of plane waves, computed as separable outer
    products (``cos(a + b) = cos a cos b − sin a sin b``)."""
    n = len(kind)
    colour = kind if colour is None else colour
    t = 2 * math.pi * (torch.arange(size, dtype=torch.float32) + 0.5) / size  # radians per cycle per image
    palettes = torch.tensor([[[0.22, 0.42, 0.13], [0.42, 0.33, 0.18]],   # grass / brown earth
                             [[0.12, 0.27, 0.58], [0.10, 0.42, 0.52]],   # blue / teal
                             [[0.78, 0.68, 0.47], [0.70, 0.58, 0.42]]])  # sand
    mix = torch.rand(n, 1, generator=gen)
    base = palettes[colour, 0] * (1 - mix) + palettes[colour, 1] * mix + uniform(gen, n, -0.05, 0.05, 3)
    angle, freq = uniform(gen, n, 0, 2 * math.pi, 3), uniform(gen, n, 1.5, 3.0, 3)
    phase = uniform(gen, n, 0, 2 * math.pi, 3)
    wave_freq, wave_phase = uniform(gen, n, 4.0, 7.0), uniform(gen, n, 0, 2 * math.pi)
    meander_freq, meander_phase = uniform(gen, n, 0.5, 1.5), uniform(gen, n, 0, 2 * math.pi)
    texture = torch.empty(n, size, size)
    rows = kind == 0  # grass: three plane waves cos(a·x + b·y + φ) in random directions, summed
    if rows.any():
        ax = (freq * torch.cos(angle))[rows][:, :, None] * t
        by = (freq * torch.sin(angle))[rows][:, :, None] * t + phase[rows][:, :, None]  # [m, 3, S]
        texture[rows] = (torch.einsum("mky,mkx->myx", torch.cos(by), torch.cos(ax))
                         - torch.einsum("mky,mkx->myx", torch.sin(by), torch.sin(ax))) / math.sqrt(3)
    rows = kind == 1  # water: sin(horizontal wave + slow meander along x)
    if rows.any():
        wave = wave_freq[rows, None] * t + wave_phase[rows, None]
        meander = 1.5 * torch.sin(meander_freq[rows, None] * t + meander_phase[rows, None])
        texture[rows] = (_outer(torch.sin(wave), torch.cos(meander)) + _outer(torch.cos(wave), torch.sin(meander)))
    rows = kind == 2  # sand: fine diagonal ripples sin(a·(x + y) + φ)
    if rows.any():
        along = 2 * wave_freq[rows, None] * t
        texture[rows] = (_outer(torch.cos(along + wave_phase[rows, None]), torch.sin(along))
                         + _outer(torch.sin(along + wave_phase[rows, None]), torch.cos(along)))
    amplitude = torch.tensor([0.10, 0.09, 0.04])[kind][:, None, None, None]
    return base[:, :, None, None] + amplitude * texture[:, None]


def object_colours(gen: torch.Generator, n: int, hue_centre: Tensor | None = None, spread: float = 1.0) -> Tensor:
    """``[n, 3]`` colours whose grey level (channel mean) is dark (0–0.08) or bright (0.8–1) at random, so objects
    stand out from the mid-grey backgrounds without colour; hue uniform within ``spread`` around ``hue_centre [n]``
    (uniform when None), chroma shrunk where needed to stay in [0, 1]."""
    hue = torch.rand(n, generator=gen)
    if hue_centre is not None:
        hue = (hue_centre + spread * (hue - 0.5)) % 1.0
    rgb = hsv_to_rgb(hue, uniform(gen, n, 0.4, 1.0), torch.ones(n))
    chroma = rgb - rgb.mean(dim=1, keepdim=True)
    bright = torch.rand(n, generator=gen) < 0.5
    level = torch.where(bright, uniform(gen, n, 0.8, 1.0), uniform(gen, n, 0.0, 0.08))[:, None]
    room = torch.minimum(level / (-chroma).amax(dim=1, keepdim=True).clamp(min=1e-6),
                         (1 - level) / chroma.amax(dim=1, keepdim=True).clamp(min=1e-6))
    return level + chroma * room.clamp(max=1.0)


def composite(image: Tensor, obj: Tensor, colour: Tensor, alpha: float) -> Tensor:
    """Paint ``colour [n, 3]`` with opacity ``alpha`` where ``obj [n, S, S]``."""
    paint = alpha * colour[:, :, None, None] + (1 - alpha) * image
    return torch.where(obj[:, None], paint, image)


def finish(gen: torch.Generator, image: Tensor, difficulty: float) -> Tensor:
    """Add Gaussian pixel noise (σ = 0.02 + 0.06 · difficulty), clamp to [0, 1] and quantise to uint8."""
    noise = (0.02 + 0.06 * difficulty) * torch.randn(image.shape, generator=gen)
    return ((image + noise).clamp(0, 1) * 255).round().to(torch.uint8)
