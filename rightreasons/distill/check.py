"""How faithful a cache is (``rightreasons cache --check``): cached explanations against live ones under the training
augmentation.

For a sample of training images, one random crop and flip of the training transform is drawn per image and applied
three ways: to the cached map (decoded from its format, on the base view, then cropped and flipped with the image —
what frozen e²KD trains on), to the exact teacher explanation of the base view (what a lossless cache would give,
moved the same way) and, for reference, the teacher explains the augmented image itself (what live e²KD trains on).
The report gives the cosine similarities of each pair (mean and worst) and the e²KD term ``1 − cos`` that a student
matching the live teacher exactly would pay against the cached and the exact maps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..data import eval_transform, load_dataset, train_transform
from ..explain import attribute
from ..metrics.agreement import explanation_similarity
from ..models import capabilities
from .cache import ExplanationCache
from .config import DistillConfig
from .explanations import resolve_explanation
from .teacher import cache_setting, load_teacher, training_subset

__all__ = ["check_cache"]


def _unit(maps: Tensor) -> Tensor:
    """Each map divided by its maximum magnitude: the cosine is unchanged, but maps of tiny norm (deep untrained
    B-cos teachers reach 1e-13) stay above the norm clamp of :func:`explanation_similarity`."""
    peak = maps.flatten(1).abs().amax(1).clamp_min(torch.finfo(maps.dtype).tiny)
    return maps / peak.view(-1, *[1] * (maps.dim() - 1))


def _summary(similarity: Tensor) -> dict[str, float]:
    return {"mean": similarity.mean().item(), "worst": similarity.min().item()}


def check_cache(config: DistillConfig, cache_dir: str | Path, *, num_images: int = 64, batch_size: int = 16,
                seed: int = 0) -> dict[str, Any]:
    """Compare the cache in ``cache_dir`` (written for ``config``'s teacher and data) with the live teacher on
    ``num_images`` training images drawn with ``seed``, each under one random crop/flip of the training transform.

    Returns the format, the number of images, ``cosine`` (``cached_vs_live``, ``exact_vs_live``,
    ``cached_vs_exact``, each ``{"mean", "worst"}``) and ``e2kd_loss`` (``cached``, ``exact``: the mean of
    ``1 − cos`` against the live explanation). Raises :class:`~rightreasons.distill.CacheMismatchError` when the
    cache was written for another setting."""
    teacher = load_teacher(config.teacher)
    encoding = capabilities(teacher).encoding
    method = resolve_explanation(config.distill.explanation, capabilities(teacher).bcos)
    setting = cache_setting(config, teacher, method)
    cache = ExplanationCache(cache_dir, verify=False)
    cache.check_setting(setting)
    data, crop_fraction = config.data, config.distill.crop_fraction
    dataset = training_subset(load_dataset(data.name, data.root, data.train_split,
                                           **data.options_for(data.train_split)), config)
    cache.check_ids(dataset.ids)
    generator = torch.Generator().manual_seed(seed)
    rows = torch.randperm(len(dataset), generator=generator)[:num_images].tolist()
    layer = setting["explanation"]["layer"]

    def explain(images: list[Tensor]) -> Tensor:
        return attribute(teacher, torch.stack(images), None, method, layer).explanation.detach().float()

    augment = ({"scale": tuple(data.crop_scale)} if data.augment else {"scale": (1.0, 1.0), "ratio": (1.0, 1.0),
                                                                       "hflip": 0.0})
    base = eval_transform(data.image_size, encoding=encoding, crop_fraction=crop_fraction)
    similarities: dict[str, list[Tensor]] = {"cached_vs_live": [], "exact_vs_live": [], "cached_vs_exact": []}
    for start in range(0, len(rows), batch_size):
        samples = [dataset[r] for r in rows[start:start + batch_size]]
        exact = dict(zip((s["id"] for s in samples), explain([base(s)["image"] for s in samples])))
        cached_views, exact_views, images = [], [], []
        for k, sample in enumerate(samples):
            crop_seed = int(torch.randint(2 ** 62, (), generator=generator))
            views = []
            for maps in (cache, exact):  # one crop and flip, drawn twice from the same seed
                with torch.random.fork_rng(devices=[]):
                    torch.manual_seed(crop_seed)
                    views.append(train_transform(data.image_size, encoding=encoding, explanations=maps,
                                                 crop_fraction=crop_fraction, **augment)(sample))
            images.append(views[0]["image"])
            cached_views.append(views[0]["explanation"].as_subclass(Tensor))
            exact_views.append(views[1]["explanation"].as_subclass(Tensor))
        live = _unit(explain(images))
        cached, exact_maps = _unit(torch.stack(cached_views)), _unit(torch.stack(exact_views))
        similarities["cached_vs_live"].append(explanation_similarity(cached, live))
        similarities["exact_vs_live"].append(explanation_similarity(exact_maps, live))
        similarities["cached_vs_exact"].append(explanation_similarity(cached, exact_maps))
    cosine = {k: torch.cat(v) for k, v in similarities.items()}
    return {"cache": str(cache_dir), "explanation_format": cache.explanation_format, "images": len(rows),
            "cosine": {k: _summary(v) for k, v in cosine.items()},
            "e2kd_loss": {"cached": (1 - cosine["cached_vs_live"]).mean().item(),
                          "exact": (1 - cosine["exact_vs_live"]).mean().item()}}
