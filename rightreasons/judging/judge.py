"""Judging: every model × explanation (method at a layer) scored by the suite's metrics on the same images.

Each model sees the first ``images`` samples of one dataset through its own evaluation transform (at its
``image_size``, the crop its model file records), as :func:`rightreasons.metrics.evaluation.score_model` does; it
explains its first true class (the argmax of the multi-hot labels, as the viewer) in batches on ``device``, and the
localisation metrics compare the map with that class's region (its boxes unless ``regions`` says otherwise:
:func:`rightreasons.regions.batch_regions`, the regions evaluation and guidance use). Every (model, explanation) draws
the same noise (a generator seeded with ``seed``), so that the randomised metrics compare like with like.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from ..data import AnnotatedDataset, collate, transforms_for
from ..errors import UsageError
from ..explain import MAP_METHOD_NAMES, get_method, layer_for
from ..metrics import attribution_fn, run_attribution
from ..metrics.evaluation import is_multilabel
from ..models.preprocessing import recorded_crop
from ..regions import POINT_RADIUS, batch_regions, require_regions
from .intervals import bootstrap_interval
from .suite import DEFAULT_METRICS, SUITE, Scored, columns_of

__all__ = ["JudgedModel", "Judgement", "explanations", "judge"]


@dataclass(frozen=True)
class JudgedModel:
    """A model to judge: its ``label`` in the table, the ``model`` and the side of the square ``image_size`` it
    takes."""

    label: str
    model: nn.Module
    image_size: int


@dataclass(frozen=True)
class Judgement:
    """Per-image ``scores`` (one row per model, method, layer and image: ``model``, ``method``, ``layer``,
    ``image`` (its id) and a value per column, NaN where it does not apply) and the ``columns`` (column → is higher
    better)."""

    scores: list[dict[str, Any]]
    columns: dict[str, bool]

    def summary(self, seed: int = 0) -> list[dict[str, Any]]:
        """One row per model, method and layer: those three, ``images`` and per column its
        :class:`~rightreasons.judging.intervals.Interval` (bootstrap over the images, seeded by ``seed``)."""
        groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for row in self.scores:
            groups.setdefault((row["model"], row["method"], row["layer"]), []).append(row)
        return [{"model": model, "method": method, "layer": layer, "images": len(rows),
                 **{c: bootstrap_interval(torch.tensor([float(r[c]) for r in rows]), seed) for c in self.columns}}
                for (model, method, layer), rows in groups.items()]


def explanations(methods: Sequence[str], layers: Sequence[str | None]) -> list[tuple[str, str]]:
    """The (method, layer) pairs of ``methods × layers`` (``None``: the method's default layer; an input-only
    method explains the input whatever the layer), each once; a method without maps is a
    :class:`~rightreasons.errors.UsageError`."""
    bad = [m for m in methods if m not in MAP_METHOD_NAMES]
    if bad:
        raise UsageError(f"--methods {','.join(methods)}: {', '.join(bad)} gives no maps; expected methods of "
                         f"{', '.join(MAP_METHOD_NAMES)}")
    pairs = [(m, layer_for(m, layer or get_method(m).default_layer)) for m in methods for layer in layers]
    return list(dict.fromkeys(pairs))


def judge(models: Sequence[JudgedModel], dataset: AnnotatedDataset, pairs: Sequence[tuple[str, str]],
          metrics: Sequence[str] = DEFAULT_METRICS, *, images: int | None = None, batch_size: int = 32,
          device: torch.device | str = "cpu", seed: int = 0, regions: str = "boxes",
          point_radius: float = POINT_RADIUS) -> Judgement:
    """Score the first ``images`` samples of ``dataset`` (``None``: all) for every model and (method, layer) of
    ``pairs`` with ``metrics`` (names of :data:`~rightreasons.judging.suite.SUITE`) against ``regions`` (a choice
    of :data:`rightreasons.regions.REGIONS`, points as discs of ``point_radius``); module docstring. Sets
    ``dataset.transform`` to each model's in turn."""
    require_regions(regions, "--regions")
    count = len(dataset) if images is None else min(images, len(dataset))
    if not count:
        raise UsageError("--images: the dataset has no images to judge")
    output = "sigmoid" if is_multilabel(dataset) else "softmax"
    batches = range(0, count, batch_size)
    bar = tqdm(total=len(models) * len(pairs) * len(batches), desc="judge", disable=None)
    scores: list[dict[str, Any]] = []
    with bar:
        for judged in models:
            model = judged.model.to(device).eval()
            dataset.transform = transforms_for(model, judged.image_size, crop_fraction=recorded_crop(model))
            for method, layer in pairs:
                fn = attribution_fn(method, layer)
                generator = torch.Generator().manual_seed(seed)
                for start in batches:
                    batch = collate([dataset[i] for i in range(start, min(start + batch_size, count))])
                    x = batch["image"].to(device)
                    targets = batch["labels"].argmax(1)
                    masks, void = batch_regions(regions, batch, targets, point_radius)
                    targets = targets.to(device)
                    scored = Scored(model, x, targets, run_attribution(fn, model, x, targets), masks.to(device), fn,
                                    output, generator, None if void is None else void.to(device))
                    values = {c: v.detach().cpu() for name in metrics for c, v in SUITE[name].score(scored).items()}
                    scores += [{"model": judged.label, "method": method, "layer": layer, "image": str(image_id),
                                **{c: v[i].item() for c, v in values.items()}}
                               for i, image_id in enumerate(batch["id"])]
                    bar.update()
    return Judgement(scores, columns_of(tuple(metrics)))
