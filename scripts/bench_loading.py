"""``make bench`` section ``loading``: images/s of one DataLoader worker for the training loaders at 224 px.

A B-cos ResNet-50 step on a GPU needs several hundred images/s from at most 16 loader workers; one worker should
deliver :data:`TARGET` images/s. Measured on files of realistic size and content written to a temporary folder:

* ``voc``: a VOC 2007 layout — 500 × 375 (and 375 × 500, 500 × 333) JPEGs at quality 90 of natural-ish content
  (1/f noise with coloured shapes; about 90 kB each, like VOC's photographs), VOC's XML with 1–5 boxes each;
* ``coco``: a COCO 2014 layout — 640 × 480 (and 480 × 640, 640 × 427) JPEGs (about 150 kB), an instances JSON with
  the release's keys, polygons and 2–12 boxes per image (one in 50 a crowd);
* ``e2kd-float16`` / ``e2kd-compact``: frozen e²KD on an ImageNet-layout folder of the VOC-like JPEGs and a complete
  explanation cache (``rightreasons.distill.write_cache``) of ``[6, 224, 224]`` W(x)-like maps (sparse, shaped by
  the image) in each storage format.

Each goes the training path: ``SeededTransform(train_transform(224, encoding="bcos", ...))`` on the dataset (the
guidance runs' box-aware crop and flip; for e²KD the base view, the cached map, and the joint crop and flip with the
ImageNet recipe's area scale 0.08–1), :func:`rightreasons.data.collate`, batches of 32, through one
DataLoader worker process, which runs torch on one thread (as DataLoader workers do). A worker's rate is its images
per second of CPU time, from the first batch's arrival (its start-up excluded) to the last: what it delivers with a
core of its own, as each of 16 workers does on a GPU node; the wall-clock rate on this machine, under its load, is
stated beside it. The per-stage breakdown (ms per image, CPU time, in this process on one thread) names where the time
goes: ``decode`` (reading the JPEG), ``sample`` (the rest of ``AnnotatedDataset.load``: boxes, sample assembly and,
for presets that take float images, the conversion), ``seeding`` (``SeededTransform``'s RNG fork), one stage per
step of the preset and ``collate``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw
from torch.utils.data import DataLoader

from benchlib import Row, Settings, section

TARGET = 150.0
"""Images/s one loader worker must deliver (16 workers feeding several hundred images/s with headroom)."""


@dataclass(frozen=True)
class Scale:
    """What a run measures: ``n`` images per dataset, the ``(H, W)`` of VOC's and COCO's images (cycled), the
    preset's output ``size``, ``batch`` size, ``passes`` of the worker over the images and ``repeats`` of the
    in-process stage timing."""

    n: int
    voc_sizes: tuple[tuple[int, int], ...]
    coco_sizes: tuple[tuple[int, int], ...]
    size: int
    batch: int
    passes: int
    repeats: int


FULL = Scale(128, ((375, 500), (375, 500), (500, 375), (333, 500)), ((480, 640), (480, 640), (640, 480), (427, 640)),
             224, 32, 3, 3)
"""VOC 2007's and COCO 2014's typical image sizes, 224 px, the engine's batch of 32."""
QUICK = Scale(8, ((75, 100), (100, 75)), ((96, 128), (128, 96)), 32, 4, 2, 1)
"""``--quick``: a smoke run of every step in seconds, not a measurement."""
VOC_NAMES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair", "cow", "diningtable",
             "dog", "horse", "motorbike", "person", "pottedplant", "sheep", "sofa", "train", "tvmonitor")


def natural_image(rng: np.random.Generator, height: int, width: int) -> Image.Image:
    """An RGB image of natural-ish statistics: 1/f noise (the amplitude spectrum of natural scenes), mostly shared by
    the three channels, plus a few flat coloured ellipses and rectangles (edges) and a little sensor noise; at JPEG
    quality 90 it takes about as many bytes as a photograph of its size."""
    fy = np.fft.fftfreq(height)[:, None]
    fx = np.fft.rfftfreq(width)[None, :]
    amplitude = 1.0 / np.maximum(np.hypot(fy, fx), 1.0 / max(height, width))
    phases = np.exp(2j * np.pi * rng.random((4, *amplitude.shape)))
    fields = np.fft.irfft2(amplitude * phases, s=(height, width))
    pixels = 0.7 * fields[0][..., None] + 0.3 * np.moveaxis(fields[1:], 0, -1)
    pixels = (pixels - pixels.mean()) / pixels.std()
    pixels = np.clip(128 + 40 * pixels + rng.normal(0, 3, pixels.shape), 0, 255).astype(np.uint8)
    image = Image.fromarray(pixels)
    draw = ImageDraw.Draw(image)
    for _ in range(int(rng.integers(2, 6))):
        x0, y0 = int(rng.integers(0, width - 40)), int(rng.integers(0, height - 40))
        x1, y1 = x0 + int(rng.integers(30, width // 2)), y0 + int(rng.integers(30, height // 2))
        shape = draw.ellipse if rng.random() < 0.5 else draw.rectangle
        shape([x0, y0, x1, y1], fill=tuple(int(v) for v in rng.integers(0, 256, 3)))
    return image


def _random_box(rng: np.random.Generator, height: int, width: int) -> tuple[int, int, int, int]:
    """A box ``(x0, y0, x1, y1)`` in pixels covering 2–60 % of each side."""
    w = int(rng.integers(max(2, width // 50), int(width * 0.6)))
    h = int(rng.integers(max(2, height // 50), int(height * 0.6)))
    x0, y0 = int(rng.integers(0, width - w)), int(rng.integers(0, height - h))
    return x0, y0, x0 + w, y0 + h


def write_voc_like(root: Path, n: int, sizes: tuple[tuple[int, int], ...], seed: int = 0) -> Path:
    """A VOCdevkit under ``root`` with ``n`` JPEGs (quality 90, of the ``(H, W)`` ``sizes`` in turn) in ``train``,
    annotations in VOC 2007's own XML (source, owner, size, segmented, objects with pose, truncated, difficult and a
    1-based ``bndbox``); returns the VOC2007 folder."""
    voc = root / "VOCdevkit" / "VOC2007"
    for folder in ("JPEGImages", "Annotations", "ImageSets/Main"):
        (voc / folder).mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    ids = [f"{i:06d}" for i in range(1, n + 1)]
    for k, image_id in enumerate(ids):
        height, width = sizes[k % len(sizes)]
        natural_image(rng, height, width).save(voc / "JPEGImages" / f"{image_id}.jpg", quality=90)
        objects = []
        for _ in range(int(rng.integers(1, 6))):
            x0, y0, x1, y1 = _random_box(rng, height, width)
            objects.append(f"""
	<object>
		<name>{VOC_NAMES[int(rng.integers(len(VOC_NAMES)))]}</name>
		<pose>Unspecified</pose>
		<truncated>{int(rng.random() < 0.3)}</truncated>
		<difficult>{int(rng.random() < 0.1)}</difficult>
		<bndbox>
			<xmin>{x0 + 1}</xmin>
			<ymin>{y0 + 1}</ymin>
			<xmax>{x1}</xmax>
			<ymax>{y1}</ymax>
		</bndbox>
	</object>""")
        (voc / "Annotations" / f"{image_id}.xml").write_text(f"""<annotation>
	<folder>VOC2007</folder>
	<filename>{image_id}.jpg</filename>
	<source>
		<database>The VOC2007 Database</database>
		<annotation>PASCAL VOC2007</annotation>
		<image>flickr</image>
		<flickrid>{int(rng.integers(10 ** 8, 10 ** 9))}</flickrid>
	</source>
	<owner>
		<flickrid>someone</flickrid>
		<name>?</name>
	</owner>
	<size>
		<width>{width}</width>
		<height>{height}</height>
		<depth>3</depth>
	</size>
	<segmented>0</segmented>{"".join(objects)}
</annotation>
""")
    (voc / "ImageSets" / "Main" / "train.txt").write_text("".join(f"{i}\n" for i in ids))
    return voc


def write_coco_like(root: Path, n: int, sizes: tuple[tuple[int, int], ...], seed: int = 1) -> Path:
    """A COCO 2014 ``train`` split under ``root``: ``n`` JPEGs (quality 90, of the ``(H, W)`` ``sizes`` in turn) named
    like the release's and ``annotations/instances_train2014.json`` with the release's keys — 80 categories with ids
    1…90 (with gaps), 2–12 annotations per image with polygon ``segmentation``, ``area`` and ``bbox`` (one in 50 a
    crowd with an RLE); returns ``root``."""
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "train2014").mkdir(exist_ok=True)
    rng = np.random.default_rng(seed)
    category_ids = [c for c in range(1, 91) if c not in (12, 26, 29, 30, 45, 66, 68, 69, 71, 83)]
    categories = [{"supercategory": "thing", "id": c, "name": f"category{c}"} for c in category_ids]
    images, annotations = [], []
    for k in range(n):
        image_id = 100000 + 7 * k
        height, width = sizes[k % len(sizes)]
        name = f"COCO_train2014_{image_id:012d}.jpg"
        natural_image(rng, height, width).save(root / "train2014" / name, quality=90)
        images.append({"license": 3, "file_name": name, "coco_url": f"http://images.cocodataset.org/{name}",
                       "height": height, "width": width, "date_captured": "2013-11-14 16:28:13",
                       "flickr_url": "http://farm.staticflickr.com/x.jpg", "id": image_id})
        for _ in range(int(rng.integers(2, 13))):
            x0, y0, x1, y1 = _random_box(rng, height, width)
            crowd = int(rng.random() < 0.02)
            polygon = [float(v) for v in (x0, y0, x1, y0, x1, y1, x0, y1)]
            segmentation = {"counts": [int(v) for v in rng.integers(1, 500, 20)], "size": [height, width]} \
                if crowd else [polygon]
            annotations.append({"segmentation": segmentation, "area": float((x1 - x0) * (y1 - y0)),
                                "iscrowd": crowd, "image_id": image_id,
                                "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
                                "category_id": int(rng.choice(category_ids)), "id": len(annotations) + 1})
    content = {"info": {"description": "COCO 2014 Dataset", "year": 2014}, "licenses": [], "images": images,
               "annotations": annotations, "categories": categories}
    (root / "annotations" / "instances_train2014.json").write_text(json.dumps(content))
    return root


def write_imagenet_like(root: Path, voc: Path, classes: int = 8) -> Path:
    """An ImageNet-layout ``root/train/<wnid>/*.JPEG`` holding the VOC-like JPEGs of ``voc`` (hard links), spread
    over ``classes`` class folders; returns ``root``."""
    for k, jpeg in enumerate(sorted((voc / "JPEGImages").glob("*.jpg"))):
        folder = root / "train" / f"n{k % classes:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{folder.name}_{jpeg.stem}.JPEG").hardlink_to(jpeg)
    return root


def write_frozen_cache(root: Path, images: Path, explanation_format: str, size: int) -> Any:
    """A complete explanation cache in ``explanation_format`` for the ImageNet-layout folder ``images``: the base
    view at ``size`` px, W(x)-like maps ``[6, size, size]`` (the encoded image times a sparse random field: 5 % of
    the pixels carry the energy, like a B-cos ``W(x)``), random logits; returns the opened
    :class:`ExplanationCache`."""
    from rightreasons.data import eval_transform, load_dataset
    from rightreasons.distill import ExplanationCache
    from rightreasons.distill.cache import write_cache

    dataset = load_dataset("imagenet", images, "train", transform=eval_transform(size, encoding="bcos"))
    generator = torch.Generator().manual_seed(0)

    def explainer(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        sparse = (torch.rand(x.shape[0], 1, *x.shape[2:], generator=generator) < 0.05).float()
        weights = torch.randn(x.shape, generator=generator) * sparse
        return torch.randn(x.shape[0], dataset.num_classes, generator=generator), x * weights

    setting = {"teacher": {"name": "bench"}, "data": {"name": "imagenet"}, "transform": {"size": size},
               "explanation": {"kind": "bench"}}
    write_cache(explainer, dataset, root, setting, batch_size=16, explanation_format=explanation_format)
    return ExplanationCache(root, verify=False)


def datasets(folder: Path, scale: Scale) -> dict[str, Any]:
    """The training datasets measured, by name, written under ``folder`` and transformed as the trainer does (the
    preset seeded by :class:`SeededTransform`): ``voc``, ``coco``, ``e2kd-float16``, ``e2kd-compact``."""
    from rightreasons.data import load_dataset, train_transform
    from rightreasons.engine.data import SeededTransform

    def seeded(**options: Any) -> SeededTransform:
        return SeededTransform(train_transform(scale.size, encoding="bcos", **options), seed=0)

    voc = write_voc_like(folder / "voc", scale.n, scale.voc_sizes)
    imagenet = write_imagenet_like(folder / "imagenet", voc)
    found = {"voc": load_dataset("voc2007", voc, "train", transform=seeded()),
             "coco": load_dataset("coco2014", write_coco_like(folder / "coco", scale.n, scale.coco_sizes), "train",
                                  transform=seeded())}
    for name in ("float16", "compact"):
        cache = write_frozen_cache(folder / f"cache-{name}", imagenet, name, scale.size)
        found[f"e2kd-{name}"] = load_dataset("imagenet", imagenet, "train",
                                             transform=seeded(scale=(0.08, 1.0), explanations=cache))
    return found


def worker_rate(dataset: Any, batch: int, passes: int) -> tuple[float, float]:
    """Images/s of one DataLoader worker process (batches of ``batch``, :func:`collate`) over ``passes`` passes of
    ``dataset``, from the arrival of the first batch (the worker's start excluded) to that of the last: per second of
    the worker's CPU time and per second of wall-clock time."""
    from rightreasons.data import collate

    pid = multiprocessing.Value("i", 0)
    indices = [i for _ in range(passes) for i in range(len(dataset))]
    loader = DataLoader(dataset, batch_size=batch, sampler=indices, num_workers=1, collate_fn=collate,
                        drop_last=True, worker_init_fn=partial(_record_pid, pid))
    iterator = iter(loader)
    next(iterator)
    wall, cpu = time.perf_counter(), _cpu_seconds(pid.value)
    count, last = 0, (len(indices) // batch - 1) * batch
    for received in iterator:
        count += len(received["id"])
        if count == last:  # read the clocks before the worker exits
            wall, cpu = time.perf_counter() - wall, _cpu_seconds(pid.value) - cpu
    return count / max(cpu, 1 / os.sysconf("SC_CLK_TCK")), count / wall  # a quick run may take under a clock tick


def _record_pid(pid: Any, worker_id: int) -> None:
    pid.value = os.getpid()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``, clock-tick resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stage_times(dataset: Any, n: int, batch: int) -> dict[str, float]:
    """CPU milliseconds per image of each stage of loading the first ``n`` samples of ``dataset`` (transform: a
    :class:`SeededTransform` of a ``v2.Compose``) as ``dataset[i]`` does and collating them in batches of ``batch``,
    in this process: ``decode`` (``load_image``), ``sample`` (the rest of ``load``), ``seeding`` (the transform's RNG
    fork), each step of the preset by class name, ``collate``."""
    from rightreasons.data import collate
    from rightreasons.data.transforms import takes_uint8

    seeded, load_image = dataset.transform, dataset.load_image
    steps, keep_uint8 = _steps(seeded.transform), takes_uint8(seeded)
    totals = dict.fromkeys(["decode", "sample", "seeding", *(name for name, _ in steps), "collate"], 0.0)

    def add(name: str, seconds: float) -> None:
        totals[name] += seconds

    def timed(name: str, fn: Callable[[Any], Any], argument: Any) -> Any:
        start = time.thread_time()
        result = fn(argument)
        add(name, time.thread_time() - start)
        return result

    def timed_steps(sample: dict[str, Any]) -> dict[str, Any]:
        for name, step in steps:
            sample = timed(name, step, sample)
        return sample

    dataset.load_image = partial(timed, "decode", load_image)
    seeded.transform, preset = timed_steps, seeded.transform
    try:
        samples = []
        for index in range(n):
            sample = timed("sample", partial(dataset.load_checked, keep_uint8=keep_uint8), index)
            before = sum(totals[name] for name, _ in steps)
            samples.append(timed("seeding", seeded, sample))
            add("seeding", before - sum(totals[name] for name, _ in steps))  # the steps' own time is theirs
            if len(samples) == batch:
                timed("collate", collate, samples)
                samples = []
    finally:
        del dataset.load_image
        seeded.transform = preset
    totals["sample"] -= totals["decode"]
    return {name: 1e3 * seconds / n for name, seconds in totals.items()}


def _steps(transform: Any) -> list[tuple[str, Callable[[Any], Any]]]:
    """The steps of a (nested) ``v2.Compose`` as ``(class name, step)``, in order."""
    from torchvision.transforms import v2

    if isinstance(transform, v2.Compose):
        return [named for step in transform.transforms for named in _steps(step)]
    return [(type(transform).__name__, transform)]


def _describe(name: str, scale: Scale) -> str:
    """What loader ``name`` reads and how it transforms it, at ``scale``."""
    def sizes(of: tuple[tuple[int, int], ...]) -> str:
        return " / ".join(f"{w}x{h}" for h, w in dict.fromkeys(of))

    if name == "voc":
        return (f"VOC-like JPEGs ({sizes(scale.voc_sizes)}, quality 90, 1-5 boxes each), "
                f"train_transform({scale.size}, bcos)")
    if name == "coco":
        return (f"COCO-like JPEGs ({sizes(scale.coco_sizes)}, quality 90, 2-12 boxes each, instances JSON), "
                f"train_transform({scale.size}, bcos)")
    return (f"frozen e2KD: the VOC-like JPEGs in an ImageNet layout and a {name.split('-')[1]} cache of [6, "
            f"{scale.size}, {scale.size}] maps, train_transform({scale.size}, bcos, scale (0.08, 1), "
            "explanations=ExplanationCache)")


@section("loading")
def loading(settings: Settings) -> list[Row]:
    """One worker's images/s for each training loader (:func:`datasets`), against :data:`TARGET`."""
    scale = QUICK if settings.quick else FULL
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, dataset in datasets(Path(tmp), scale).items():
                stage_times(dataset, scale.batch, scale.batch)  # warm-up: page cache, allocator, lazy imports
                runs = [stage_times(dataset, scale.n, scale.batch) for _ in range(scale.repeats)]
                stages = {stage: statistics.median(run[stage] for run in runs) for stage in runs[0]}
                load = os.getloadavg()[0]
                cpu, wall = worker_rate(dataset, scale.batch, scale.passes)
                breakdown = ", ".join(f"{stage} {ms:.2f}" for stage, ms in stages.items())
                rows.append(Row(
                    f"loading: {name}, images/s of one worker", cpu, TARGET, cpu / TARGET, f">= {TARGET:g}",
                    cpu >= TARGET,
                    f"{scale.n} {_describe(name, scale)}; batch {scale.batch}, one worker process (torch 1 thread), "
                    f"{scale.passes} passes; ours = images per second of the worker's CPU time, wall-clock "
                    f"{wall:.1f} images/s on this machine ({os.cpu_count()} cores, load average {load:.2f}); stages, "
                    f"CPU ms per image in-process (median of {scale.repeats}): {breakdown} (total "
                    f"{sum(stages.values()):.2f}); ratio = ours / {TARGET:g}", unit="img/s"))
    finally:
        torch.set_num_threads(threads)
    return rows
