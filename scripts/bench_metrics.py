"""``make bench`` section ``metrics-vs-quantus``: seconds per image of our batched explanation metrics against Quantus
0.6.0 (the ``dev`` extra's test-only referee) on the same inputs, on ``--device``: the CPU, or a CUDA GPU with the model
and the inputs there and Quantus called with ``device="cuda"``.

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
issue's: at least 5× faster per image. On a GPU each row also gives the largest difference between our scores there
and the same call's on the CPU (the noise and the subsets are drawn on the CPU, so both compute the same thing).
"""

from __future__ import annotations

import statistics
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from benchlib import Row, Settings, alternate, section

TARGET = 5.0


def _model(classes: int = 10) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, classes)).eval()


@dataclass
class _Inputs:
    """The inputs of every case, on one device: ``n`` images ``x`` [n, 1, size, size] with the small CNN's classes
    ``y`` and random ``maps``; ``m`` maps ``big_maps`` [m, side, side] with box ``masks`` for the map-only metrics."""

    model: nn.Module
    x: Tensor
    y: Tensor
    maps: Tensor
    big_maps: Tensor
    masks: Tensor

    @property
    def subset(self) -> int:
        """Faithfulness correlation's subset size: 224 pixels (Quantus's default), at most the image."""
        return min(224, self.x.shape[-1] * self.x.shape[-2])

    @property
    def k(self) -> int:
        """Top-k's ``k``: 1000 (Quantus's default), at most half a map."""
        return min(1000, self.masks[0].numel() // 2)


def _inputs(device: torch.device, quick: bool) -> _Inputs:
    """The same inputs on any device (drawn on the CPU from one seed, then moved)."""
    n, size = (2, 16) if quick else (16, 64)
    m, side = (2, 16) if quick else (64, 224)   # the map-only metrics on more and larger maps: they cost the maps
    g = torch.Generator().manual_seed(0)
    model = _model()
    x = torch.rand(n, 1, size, size, generator=g)
    with torch.no_grad():
        y = model(x).argmax(1)
    maps = torch.randn(n, size, size, generator=g)
    big_maps = torch.randn(m, side, side, generator=g)
    masks = torch.zeros(m, side, side, dtype=torch.bool)
    masks[:, side // 4:side // 2, side // 4:3 * side // 4] = True
    return _Inputs(model.to(device), x.to(device), y.to(device), maps.to(device), big_maps.to(device),
                   masks.to(device))


def _ours(a: _Inputs) -> dict[str, Callable[[], object]]:
    """Our metric calls on ``a``, one per case (scores, or curves for ROAD and IROF); the model-based ones first."""
    import rightreasons.metrics as M

    seeded = lambda: torch.Generator().manual_seed(0)  # noqa: E731 - a fresh generator per call
    return {
        "faithfulness correlation": lambda: M.faithfulness_correlation(
            a.model, a.x, a.y, a.maps, subset_size=a.subset, batch_size=len(a.x), generator=seeded()),
        "ROAD (MoRF + LeRF)": lambda: M.road(a.model, a.x, a.y, a.maps, generator=seeded(), batch_size=len(a.x)),
        "IROF": lambda: M.irof(a.model, a.x, a.y, a.maps, segments=M.slic_segments(a.x), baseline=0.5,
                               batch_size=len(a.x)),
        "pointing game": lambda: M.pointing_game(a.big_maps, a.masks, tolerance=1),
        "relevance rank": lambda: M.relevance_rank_accuracy(a.big_maps, a.masks),
        "top-k": lambda: M.top_k_intersection(a.big_maps, a.masks, a.k),
        "sparseness": lambda: M.sparseness(a.big_maps),
        "complexity": lambda: M.complexity(a.big_maps),
    }


def _theirs(a: _Inputs, device: torch.device) -> dict[str, Callable[[], object]]:
    """Quantus's calls of the same cases on the same inputs (NumPy arrays; the model on ``device``)."""
    import quantus

    np.trapz = getattr(np, "trapz", np.trapezoid)   # Quantus 0.6.0's IROF calls np.trapz, gone in NumPy 2
    side = a.masks.shape[-1]
    plain = {"abs": False, "normalise": False, "disable_warnings": True}

    def call(metric: object, maps: Tensor = a.maps, masks: Tensor | None = None) -> Callable[[], object]:
        xs = a.x.cpu().numpy() if masks is None else np.zeros((len(maps), 1, side, side), dtype=np.float32)
        ys = a.y.cpu().numpy() if masks is None else np.zeros(len(maps), dtype=np.int64)
        ss = None if masks is None else masks[:, None].cpu().numpy().astype(float)
        return lambda: metric(model=a.model, x_batch=xs, y_batch=ys, a_batch=maps[:, None].cpu().numpy(),
                              s_batch=ss, device=str(device), batch_size=len(maps))

    road = quantus.ROAD(noise=0.01, percentages=list(range(10, 100, 10)), **plain)
    return {
        "faithfulness correlation": call(quantus.FaithfulnessCorrelation(
            nr_runs=100, subset_size=a.subset, perturb_baseline=0.0, return_aggregate=False, **plain)),
        "ROAD (MoRF + LeRF)": lambda: (call(road)(), call(road, -a.maps)()),
        "IROF": call(quantus.IROF(perturb_baseline=0.5, return_aggregate=False, **plain)),
        "pointing game": call(quantus.PointingGame(disable_warnings=True), a.big_maps, a.masks),
        "relevance rank": call(quantus.RelevanceRankAccuracy(**plain), a.big_maps, a.masks),
        "top-k": call(quantus.TopKIntersection(k=a.k, **plain), a.big_maps, a.masks),
        "sparseness": call(quantus.Sparseness(**{**plain, "abs": True}), a.big_maps, a.masks),
        "complexity": call(quantus.Complexity(**{**plain, "abs": True}), a.big_maps, a.masks),
    }


@section("metrics-vs-quantus")
def metrics_vs_quantus(settings: Settings) -> list[Row]:
    try:
        import quantus  # noqa: F401
    except ImportError as e:
        raise SystemExit(f"the metrics section needs Quantus (pip install -c constraints.txt -e '.[dev]'): {e}") \
            from e
    device, repeats, warmup = settings.device, (1 if settings.quick else 3), (0 if settings.quick else 1)
    inputs = _inputs(device, settings.quick)
    ours, theirs = _ours(inputs), _theirs(inputs, device)
    on_cpu = _ours(_inputs(torch.device("cpu"), settings.quick)) if device.type != "cpu" else {}
    counts = {"maps": len(inputs.big_maps), "model": len(inputs.x)}
    setups = {"maps": f"{len(inputs.big_maps)} maps and box masks of {inputs.masks.shape[-1]}px, 5 alternating repeats",
              "model": f"{len(inputs.x)} images 1x{inputs.x.shape[-1]}px, small CNN, {repeats} alternating repeats"}
    rows = []
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        for name in ours:
            kind = "model" if name in ("faithfulness correlation", "ROAD (MoRF + LeRF)", "IROF") else "maps"
            times = alternate({"ours": ours[name], "quantus": theirs[name]}, settings,
                              5 if kind == "maps" and not settings.quick else repeats, max(warmup, 1))
            mine = statistics.median(times["ours"]) / counts[kind]
            ref = statistics.median(times["quantus"]) / counts[kind]
            agreement = ""
            if name in on_cpu:
                difference = (_flat(ours[name]()) - _flat(on_cpu[name]())).abs().nan_to_num().max()
                agreement = f"; largest difference from the CPU's scores {float(difference):.1e}"
            rows.append(Row(f"metrics-vs-quantus: {name}", mine, ref, ref / mine, f">= {TARGET:g}x faster",
                            ref / mine >= TARGET,
                            f"{setups[kind]}, {device.type}; seconds per image (one call on the whole batch each); "
                            f"ratio = Quantus / ours{agreement}"))
            print(f"{rows[-1].section}: {ref / mine:.2f}x{agreement}", file=sys.stderr, flush=True)  # kept if stopped
    return rows


def _flat(result: object) -> Tensor:
    """Every number of a metric's result (a tensor, or the tensors of a curves dataclass) in one CPU vector."""
    tensors = [result] if isinstance(result, Tensor) else [v for v in vars(result).values() if isinstance(v, Tensor)]
    return torch.cat([t.detach().double().cpu().flatten() for t in tensors])
