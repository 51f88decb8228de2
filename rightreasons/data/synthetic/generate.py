"""Generation of the synthetic benchmark: two tasks, three splits, deterministic by seed.

**Birds** (``synthetic-birds``; Waterbirds-like, binary, classes :data:`BIRD_CLASSES`). One object per image on a
background of type :data:`PLACES`. The object's *shape* defines its class — a disc is a landbird, an equilateral
triangle a waterbird, both of the same area — visible without colour (it is either dark or bright), with a class hue
tendency (orange-red vs purple) whose spread grows with ``difficulty`` until it carries no information; random
position and rotation; it covers 9–15 % of the image at the default difficulty 0.5 (15–23 % at 0, 5–9 % at 1). The
background is the shortcut and is easier to learn than the object, as Waterbirds backgrounds are: its type is a
texture over the whole image (low-frequency blotches for land, horizontal waves for water). Its colour (green–brown
or blue–teal) is drawn independently of the type, as forests and lakes share colours. Why: in our checks (a 4-layer
B-cos CNN trained from scratch, 2,000 images) a colour-coded background defeated box guidance — Energy-guided models
put over 95 % of their positive evidence in the box yet still classified by the background through negative
evidence, which the Energy loss does not constrain (worst-group accuracy 0 %); with the texture-coded background the
baseline still fails (worst group 0–2 %) while Energy guidance on 10 % of the boxes made the predictions
background-independent (worst group about 50–70 %). In ``train`` the background matches the class in a fraction
``correlation`` of the images of each class (1.0 = Waterbirds-100: only groups G1 and G4); ``val`` and ``test`` are
group-balanced (each group a quarter), so that checkpoints and settings
can be chosen on ``val`` by worst-group accuracy and ``test`` is only reported. Groups: ``group = 2·y + place``, i.e. 0 = G1 landbird/land, 1 = G2 landbird/water,
2 = G3 waterbird/land, 3 = G4 waterbird/water.

**Multi-label** (``synthetic-multilabel``; VOC-like, classes :data:`SHAPES`, contexts :data:`CONTEXTS`). One to
``max_objects`` (≤ 4) objects of distinct classes and random colours, each in its own quadrant (no occlusion), on a
context background (texture and colour). Context co-occurs with some classes, like boats with water: disc ↔ grass,
triangle ↔ water, square ↔ sand; with probability ``correlation`` the context is the one of the first such class in
the image, otherwise uniform. All shapes have the same area. The sample's ``group`` is the context index.

``difficulty`` ∈ [0, 1] also shrinks the objects, blends them into the background and adds pixel noise. Every
object gets a tight box (from its pixels), one point (one click per object, :func:`~.draw.click_points`: the centre of
the object pixel nearest the centroid of its pixels, always on the object; a deterministic function of the object, so
of the data seed) and the segmentation ``mask`` holds the object pixels (value class + 1). Why that click: at 32 px a
disc of 4 px around it lies 99–100 % on the object at difficulties 0.5 and 0.8 (1,000 training images, data seed 0),
around a uniformly random object pixel (an annotator clicking anywhere on the object) 67–72 %
(docs/studies/regions.md).
Images are drawn in chunks of :data:`CHUNK`, each from its own seeded generator: 4,000 images of 64 × 64 take
1–2 s.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from ...choices import SYNTHETIC_SIZES as DEFAULT_SIZES
from ...choices import SYNTHETIC_SPLITS as SPLITS
from ...errors import UsageError
from ..base import Records
from ..options import require_int, require_number
from .draw import (EXTENT, SHAPES, backgrounds, click_points, composite, draw_objects, finish, object_colours,
                   place_quadrants, tight_boxes, uniform)

__all__ = ["BIRD_CLASSES", "CHUNK", "CONTEXTS", "CONTEXT_OF_SHAPE", "DEFAULT_SIZES", "MAX_SIDE", "MAX_SPLIT_PIXELS",
           "PLACES", "SPLITS", "TASKS", "SyntheticConfig", "SyntheticData", "generate", "require_split_size"]

BIRD_CLASSES = ("landbird", "waterbird")
PLACES = ("land", "water")
CONTEXTS = ("grass", "water", "sand")
CONTEXT_OF_SHAPE = (0, 1, 2, -1, -1, -1)  # disc ↔ grass, triangle ↔ water, square ↔ sand; the rest anywhere
TASKS = ("birds", "multilabel")
CHUNK = 512
MAX_SIDE = 512
"""Largest image side: the benchmark is drawn at 32–64 px; one chunk of 512 images of 512 × 512 px is drawn in 1.6 GB
of float32."""
MAX_SPLIT_PIXELS = 2 ** 30
"""Most pixels of one split (images × side²): a split is held in memory at 4 bytes a pixel (RGB and mask), 4 GiB."""
_BIRD_SHAPES = (0, 1)  # landbird = disc, waterbird = triangle
_BIRD_HUES = (0.05, 0.8)  # landbirds orange-red, waterbirds purple-magenta: away from the background hues


@dataclass(frozen=True)
class SyntheticConfig:
    """Generation parameters; ``correlation`` None means the task default (birds 1.0, multi-label 0.8)."""

    size: int = 64
    correlation: float | None = None
    difficulty: float = 0.5
    seed: int = 0
    max_objects: int = 3
    sizes: dict[str, int] = field(default_factory=lambda: dict(DEFAULT_SIZES))

    def __post_init__(self) -> None:
        require_int("size", self.size, 16, at_most=MAX_SIDE,
                    why=f"synthetic images have a side of 16 to {MAX_SIDE} pixels")
        if self.correlation is not None:
            require_number("correlation", self.correlation, 0.0, 1.0)
        require_number("difficulty", self.difficulty, 0.0, 1.0)
        require_int("seed", self.seed, 0)
        require_int("max_objects", self.max_objects, 1, at_most=4, why="one object per quadrant")
        unknown = set(self.sizes) - set(SPLITS)
        if unknown:
            raise UsageError(f"unknown split(s) {sorted(unknown)}; expected {', '.join(SPLITS)}")
        for split, n in self.sizes.items():
            require_split_size(f"sizes.{split}", n, self.size)

    def correlation_for(self, task: str) -> float:
        if self.correlation is not None:
            return self.correlation
        return 1.0 if task == "birds" else 0.8


@dataclass
class SyntheticData:
    """One generated split: ``images`` uint8 ``[N, 3, S, S]``, ``masks`` uint8 ``[N, S, S]`` and the records."""

    images: Tensor
    masks: Tensor
    records: Records
    classes: tuple[str, ...]


def require_split_size(option: str, n: object, size: int) -> None:
    """Refuse a split of ``n`` images of ``size × size`` pixels unless ``n`` is an integer that keeps the split within
    :data:`MAX_SPLIT_PIXELS`."""
    most = MAX_SPLIT_PIXELS // size ** 2
    require_int(option, n, 0, at_most=most, why=f"at most {MAX_SPLIT_PIXELS:,} pixels a split, held in memory: "
                                                f"{most:,} images of {size} × {size}")


def _seed(*parts: int) -> int:
    """A 63-bit generator seed mixed from integers (numpy's SeedSequence)."""
    return int(np.random.SeedSequence(list(parts)).generate_state(1, dtype=np.uint64)[0] >> 1)


def _bird_assignment(n: int, correlation: float, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Classes ``y [n]`` (halves) and places ``[n]``: exactly ``round(correlation · n_y)`` images of each class on
    their own background, in random order."""
    y = (torch.arange(n) >= (n + 1) // 2).long()
    place = 1 - y
    for c in (0, 1):
        idx = torch.nonzero(y == c).flatten()
        matching = math.floor(correlation * len(idx) + 0.5)
        place[idx[:matching]] = c
    order = torch.randperm(n, generator=gen)
    return y[order], place[order]


def _render_birds(gen: torch.Generator, y: Tensor, place: Tensor, size: int, difficulty: float
                  ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Images uint8 ``[n, 3, S, S]``, masks ``[n, S, S]``, tight boxes ``[n, 4]`` and points ``[n, 2]`` of birds of
    class ``y [n]`` on backgrounds of type ``place [n]``."""
    n = len(y)
    shape = torch.tensor(_BIRD_SHAPES)[y]
    r = size * uniform(gen, n, 0.22 - 0.10 * difficulty, 0.27 - 0.10 * difficulty)
    extent = torch.tensor(EXTENT)[shape] * r + 1
    cx = extent + torch.rand(n, generator=gen) * (size - 2 * extent)
    cy = extent + torch.rand(n, generator=gen) * (size - 2 * extent)
    obj = draw_objects(gen, shape, cx, cy, r, size)
    colours = object_colours(gen, n, torch.tensor(_BIRD_HUES)[y], 0.15 + 0.85 * difficulty ** 2)
    palette = torch.randint(0, 2, (n,), generator=gen)  # green–brown or blue–teal, whatever the place
    image = composite(backgrounds(gen, place, size, palette), obj, colours, 1 - 0.4 * difficulty)
    masks = obj.to(torch.uint8) * (y + 1).to(torch.uint8)[:, None, None]
    return finish(gen, image, difficulty), masks, tight_boxes(obj), click_points(obj)


def _render_multilabel(gen: torch.Generator, n: int, size: int, correlation: float, difficulty: float,
                       max_objects: int) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """Images, masks, per-slot classes ``[n, max_objects]`` (−1 for empty slots), boxes ``[n, max_objects, 4]``,
    points ``[n, max_objects, 2]`` and contexts ``[n]``."""
    count = torch.randint(1, max_objects + 1, (n,), generator=gen)
    classes = torch.argsort(torch.rand(n, len(SHAPES), generator=gen), dim=1)[:, :max_objects]
    classes = torch.where(torch.arange(max_objects)[None] < count[:, None], classes, -1)
    affine = torch.tensor(CONTEXT_OF_SHAPE + (-1,))[classes]  # the trailing −1 serves empty slots
    has_affine = (affine >= 0).any(dim=1)
    first = affine.gather(1, (affine >= 0).float().argmax(dim=1, keepdim=True)).squeeze(1)
    follow = has_affine & (torch.rand(n, generator=gen) < correlation)
    context = torch.where(follow, first, torch.randint(0, len(CONTEXTS), (n,), generator=gen))
    image = backgrounds(gen, context, size)
    masks = torch.zeros(n, size, size, dtype=torch.uint8)
    boxes = torch.zeros(n, max_objects, 4)
    points = torch.zeros(n, max_objects, 2)
    quadrant = torch.argsort(torch.rand(n, 4, generator=gen), dim=1)
    half = size // 2
    for slot in range(max_objects):
        present = classes[:, slot] >= 0
        shape = classes[:, slot].clamp(min=0)
        ext = torch.tensor(EXTENT)[shape]
        r = size * uniform(gen, n, 0.10 - 0.03 * difficulty, 0.13 - 0.03 * difficulty)
        r = torch.minimum(r, (half / 2 - 1) / ext)
        margin = ext * r + 0.5
        cx = margin + torch.rand(n, generator=gen) * (half - 2 * margin)  # within the quadrant
        cy = margin + torch.rand(n, generator=gen) * (half - 2 * margin)
        local = draw_objects(gen, shape, cx, cy, r, half) & present[:, None, None]
        obj = place_quadrants(local, quadrant[:, slot], size)
        image = composite(image, obj, object_colours(gen, n), 1 - 0.4 * difficulty)
        masks = torch.where(obj, (shape + 1).to(torch.uint8)[:, None, None], masks)
        boxes[present, slot] = tight_boxes(obj[present])
        points[present, slot] = click_points(obj[present])
    return finish(gen, image, difficulty), masks, classes, boxes, points, context


@contextmanager
def _single_thread() -> Iterator[None]:
    """Run torch single-threaded: drawing is many small ops, for which intra-op threads only add synchronisation
    (4,000 multi-label images took 1.5 s on one thread and 21 s on two on a busy 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def generate(task: str, split: str, n: int | None = None, config: SyntheticConfig | None = None) -> SyntheticData:
    """Generate split ``split`` of ``task`` ("birds" or "multilabel"): ``n`` images (default
    ``config.sizes[split]``), a deterministic function of ``config`` (``seed`` included), ``task`` and ``split``.
    Runs torch single-threaded while drawing (see :func:`_single_thread`)."""
    with _single_thread():
        return _generate(task, split, n, config or SyntheticConfig())


def _generate(task: str, split: str, n: int | None, config: SyntheticConfig) -> SyntheticData:
    if task not in TASKS:
        raise UsageError(f"unknown synthetic task {task!r}; expected birds or multilabel")
    if split not in SPLITS:
        raise UsageError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
    if n is not None:
        require_split_size("n", n, config.size)
    n = config.sizes.get(split, DEFAULT_SIZES[split]) if n is None else n
    task_id, split_id = (0 if task == "birds" else 1), SPLITS.index(split)
    balanced = task == "birds" and split in ("val", "test")
    correlation = 0.5 if balanced else config.correlation_for(task)
    size, d = config.size, config.difficulty
    images, masks, ids, labels, boxes, box_labels, points, groups = [], [], [], [], [], [], [], []
    if task == "birds":
        y, place = _bird_assignment(n, correlation, torch.Generator().manual_seed(_seed(config.seed, task_id,
                                                                                       split_id, 1)))
    for start in range(0, n, CHUNK):
        stop = min(n, start + CHUNK)
        gen = torch.Generator().manual_seed(_seed(config.seed, task_id, split_id, 0, start // CHUNK))
        if task == "birds":
            img, msk, box, point = _render_birds(gen, y[start:stop], place[start:stop], size, d)
            for k in range(stop - start):
                c = int(y[start + k])
                labels.append([c])
                boxes.append(box[k:k + 1].numpy())
                points.append(point[k:k + 1].numpy())
                box_labels.append(np.array([c]))
                groups.append(2 * c + int(place[start + k]))
        else:
            img, msk, cls, box, point, context = _render_multilabel(gen, stop - start, size, correlation, d,
                                                                    config.max_objects)
            for k in range(stop - start):
                keep = cls[k] >= 0
                labels.append(sorted(cls[k][keep].tolist()))
                boxes.append(box[k][keep].numpy())
                points.append(point[k][keep].numpy())
                box_labels.append(cls[k][keep].numpy())
                groups.append(int(context[k]))
        images.append(img)
        masks.append(msk)
        ids += [f"{split}-{k:06d}" for k in range(start, stop)]
    classes = BIRD_CLASSES if task == "birds" else SHAPES
    multi_hot = np.zeros((n, len(classes)), dtype=bool)
    for i, lab in enumerate(labels):
        multi_hot[i, lab] = True
    records = Records.build(ids, [""] * n, multi_hot, boxes, box_labels, groups=groups, points=points,
                            point_labels=box_labels)  # one point per object, labelled as its box
    empty = torch.zeros(0, 3, size, size, dtype=torch.uint8)
    return SyntheticData(torch.cat(images) if images else empty,
                         torch.cat(masks) if masks else empty[:, 0], records, classes)
