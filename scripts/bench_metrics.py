"""``make bench`` section ``metrics-vs-quantus``: seconds per image of our batched explanation metrics against Quantus
0.6.0 (the ``dev`` extra's test-only referee) on the same inputs, on the CPU.

The map-only metrics (pointing game, relevance rank, top-k, sparseness, complexity) score 64 maps of 224 × 224 with
box masks. The model-based ones (faithfulness correlation, ROAD, IROF) run a small one-channel CNN (conv 1→16 →
ReLU → conv 16→16 → ReLU → global pool → linear, 10 classes) on 16 images of 64 px — one channel because Quantus
0.6.0's ROAD and IROF fail on three-channel images with one-channel maps (docs/metrics.md). Each metric is called
once on the whole batch by each contender (Quantus with ``batch_size`` the whole batch), alternating, after a
warm-up; the medians are divided by the number of images. Settings that make both compute the same thing
(tests/metrics/test_quantus_referee.py): pointing game at tolerance 1, no ``abs`` or normalisation, top-k at
k = 1000 (Quantus's default), faithfulness correlation with 100 subsets of 224 pixels on the logit, ROAD's MoRF and
LeRF curves at 10 … 90 % (Quantus run twice, on the map and its negation, for the two orders; noise 0.01), IROF with
a fixed baseline, each contender computing the same SLIC segments (scikit-image) inside its call. The target is the
issue's: at least 5× faster per image.
"""

from __future__ import annotations

import statistics
import warnings
from collections.abc import Callable

import numpy as np
import torch
from torch import Tensor, nn

from benchlib import Row, Settings, alternate, section

TARGET = 5.0


def _model(classes: int = 10) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, classes)).eval()


@section("metrics-vs-quantus")
def metrics_vs_quantus(settings: Settings) -> list[Row]:
    try:
        import quantus
    except ImportError as e:
        raise SystemExit(f"the metrics section needs Quantus (pip install -c constraints.txt -e '.[dev]'): {e}") \
            from e
    import rightreasons.metrics as M

    np.trapz = getattr(np, "trapz", np.trapezoid)   # Quantus 0.6.0's IROF calls np.trapz, gone in NumPy 2
    n, size, repeats, warmup = (2, 16, 1, 0) if settings.quick else (16, 64, 3, 1)
    g = torch.Generator().manual_seed(0)
    model = _model()
    x = torch.rand(n, 1, size, size, generator=g)
    with torch.no_grad():
        y = model(x).argmax(1)
    maps = torch.randn(n, size, size, generator=g)
    subset = min(224, size * size)
    # the map-only metrics on more and larger maps: 64 of 224 px (what they cost is the maps, not a model)
    m, side = (2, 16) if settings.quick else (64, 224)
    big_maps = torch.randn(m, side, side, generator=g)
    masks = torch.zeros(m, side, side, dtype=torch.bool)
    masks[:, side // 4:side // 2, side // 4:3 * side // 4] = True
    k = min(1000, side * side // 2)
    plain = {"abs": False, "normalise": False, "disable_warnings": True}

    def theirs(metric: object, a: Tensor = maps, s: Tensor | None = None) -> Callable[[], object]:
        xs = x.numpy() if s is None else np.zeros((len(a), 1, side, side), dtype=np.float32)
        ys = y.numpy() if s is None else np.zeros(len(a), dtype=np.int64)
        sn = None if s is None else s[:, None].numpy().astype(float)
        return lambda: metric(model=model, x_batch=xs, y_batch=ys, a_batch=a[:, None].numpy(), s_batch=sn,
                              device="cpu", batch_size=len(a))

    road_q = quantus.ROAD(noise=0.01, percentages=list(range(10, 100, 10)), **plain)
    cases: dict[str, tuple[int, str, Callable[[], object], Callable[[], object]]] = {
        "pointing game": (m, "maps", lambda: M.pointing_game(big_maps, masks, tolerance=1),
                          theirs(quantus.PointingGame(disable_warnings=True), big_maps, masks)),
        "relevance rank": (m, "maps", lambda: M.relevance_rank_accuracy(big_maps, masks),
                           theirs(quantus.RelevanceRankAccuracy(**plain), big_maps, masks)),
        "top-k": (m, "maps", lambda: M.top_k_intersection(big_maps, masks, k),
                  theirs(quantus.TopKIntersection(k=k, **plain), big_maps, masks)),
        "sparseness": (m, "maps", lambda: M.sparseness(big_maps),
                       theirs(quantus.Sparseness(**{**plain, "abs": True}), big_maps, masks)),
        "complexity": (m, "maps", lambda: M.complexity(big_maps),
                       theirs(quantus.Complexity(**{**plain, "abs": True}), big_maps, masks)),
        "faithfulness correlation": (n, "model", lambda: M.faithfulness_correlation(
            model, x, y, maps, subset_size=subset, batch_size=n, generator=torch.Generator().manual_seed(0)),
            theirs(quantus.FaithfulnessCorrelation(nr_runs=100, subset_size=subset, perturb_baseline=0.0,
                                                   return_aggregate=False, **plain))),
        "ROAD (MoRF + LeRF)": (n, "model", lambda: M.road(model, x, y, maps, generator=torch.Generator().manual_seed(0),
                                                         batch_size=n),
                               lambda: (theirs(road_q)(), theirs(road_q, -maps)())),
        "IROF": (n, "model", lambda: M.irof(model, x, y, maps, segments=M.slic_segments(x), baseline=0.5,
                                            batch_size=n),
                 theirs(quantus.IROF(perturb_baseline=0.5, return_aggregate=False, **plain))),
    }
    setups = {"maps": f"{m} maps and box masks of {side}x{side}, 5 alternating repeats",
              "model": f"{n} images 1x{size}x{size}, small CNN, {repeats} alternating repeats"}
    rows = []
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        for name, (count, kind, ours, reference) in cases.items():
            times = alternate({"ours": ours, "quantus": reference}, settings,
                              5 if kind == "maps" and not settings.quick else repeats, max(warmup, 1))
            mine, ref = statistics.median(times["ours"]) / count, statistics.median(times["quantus"]) / count
            speedup = ref / mine
            rows.append(Row(f"metrics-vs-quantus: {name}", mine, ref, speedup, f">= {TARGET:g}x faster",
                            speedup >= TARGET,
                            f"{setups[kind]}, CPU; seconds per image (one call on the whole batch each); "
                            "ratio = Quantus / ours"))
    return rows
