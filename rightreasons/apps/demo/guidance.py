"""The model-guidance stage of the demo: train a baseline per seed, fine-tune it with each guided variant, evaluate
every model on the balanced test split, and compare with the thesis' findings.

Each run is the guidance study's recipe (:class:`~rightreasons.guidance.recipe.GuidanceRecipe`), trained on the grid
runner (a finished run of the same config is kept), writing to ``out/runs/seed-<k>/<model>/`` (``model.safetensors``,
``summary.json``, ``metrics.jsonl``): validated every epoch on the group-balanced validation split, exporting the
checkpoint with the best worst-group accuracy there. The guided variants fine-tune the baseline's weights, as the thesis
fine-tunes pretrained models, with boxes on a fraction of the training images (the seed also draws which). Results:
``ctx.results["guidance"]`` and ``ctx.models[name]``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...console import count
from ...data import GROUP_NAMES
from ...classification import TrainingRun
from ...engine.grid import GridRun, run_grid
from ...metrics.evaluation import Evaluator, score_model
from ...reporting import cell, markdown_table, summarize
from .pipeline import DemoContext
from .settings import DemoSettings, GuidedVariant

__all__ = ["METRICS", "benchmark_checks", "evaluate_model", "score_on_test", "train_and_evaluate", "training_run"]

logger = logging.getLogger(__name__)

GROUP_KEYS = tuple(name.split()[0] for name in GROUP_NAMES)  # "G1" … "G4"
#: the metrics of every model on the test split, in table order
METRICS = ("accuracy", *GROUP_KEYS, "worst_group_accuracy", "epg", "iou")
HEADERS = ("overall acc.", *GROUP_NAMES, "worst group", "EPG", "IoU")


def training_run(settings: DemoSettings, seed: int, output_dir: Path, variant: GuidedVariant | None = None,
                 baseline: Path | None = None) -> TrainingRun:
    """The baseline (``variant=None``) or a guided fine-tuning of ``baseline`` (B-cos contributions at the input) on
    the variant's share of boxes (``settings.annotated_fraction`` unless the variant sets its own)."""
    fraction = settings.annotated_fraction if variant is None or variant.annotated_fraction is None \
        else variant.annotated_fraction
    return settings.recipe.run(settings.data, seed, Path(output_dir), variant, fraction, baseline)


def score_on_test(model_file: Path, ctx: DemoContext, extra: Sequence[Evaluator] = ()) -> dict[str, Any]:
    """Every metric of a trained model on the test split, from one pass of the scorer
    (:func:`~rightreasons.metrics.evaluation.score_model`): classification, EPG/IoU of B-cos contributions at the input
    for the ground-truth class against the (undilated) box, and the ``extra`` evaluators' metrics."""
    return score_model(model_file, ctx.test_set(), image_size=ctx.settings.image_size, method="bcos", layer="input",
                       extra=extra, batch_size=ctx.settings.recipe.batch_size, device=ctx.device)


def evaluate_model(model_file: Path, ctx: DemoContext) -> dict[str, float]:
    """Test-split metrics of a trained model: :data:`METRICS` (fractions in [0, 1])."""
    r = score_on_test(model_file, ctx)
    r.update({key: r[f"accuracy/{name}"] for key, name in zip(GROUP_KEYS, GROUP_NAMES)})
    return {k: float(r[k]) for k in METRICS}


def benchmark_checks(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The result the demo is meant to show, from the means; in percentage points.

    * Energy raises worst-group accuracy by >= 15 p.p. over the baseline and does not lower overall accuracy;
    * L1 improves worst-group accuracy too;
    * with 50 %-dilated boxes Energy keeps a larger share of its EPG gain than L1 (gain with dilated boxes / gain
      with tight boxes);
    * with boxes on 1 % of the images (every batch holding some of them) Energy still raises worst-group accuracy by
      >= 15 p.p.
    """
    def mean(model: str, key: str) -> float:
        return 100 * summary[model][key]["mean"]

    checks = []
    if "energy" in summary:
        gain = mean("energy", "worst_group_accuracy") - mean("baseline", "worst_group_accuracy")
        change = mean("energy", "accuracy") - mean("baseline", "accuracy")
        checks += [{"check": "Energy: worst-group accuracy gain >= 15 p.p.", "value": gain, "passed": gain >= 15},
                   {"check": "Energy: overall accuracy not lower than the baseline", "value": change,
                    "passed": change >= 0}]
    if "l1" in summary:
        gain = mean("l1", "worst_group_accuracy") - mean("baseline", "worst_group_accuracy")
        checks.append({"check": "L1: worst-group accuracy gain > 0 p.p.", "value": gain, "passed": gain > 0})
    if "energy-1pct" in summary:
        gain = mean("energy-1pct", "worst_group_accuracy") - mean("baseline", "worst_group_accuracy")
        checks.append({"check": "Energy, boxes on 1 % of the images: worst-group accuracy gain >= 15 p.p.",
                       "value": gain, "passed": gain >= 15})
    if all(m in summary for m in ("energy", "l1", "energy-dilated50", "l1-dilated50")):
        kept = {}
        for loss in ("energy", "l1"):
            tight = mean(loss, "epg") - mean("baseline", "epg")
            dilated = mean(f"{loss}-dilated50", "epg") - mean("baseline", "epg")
            kept[loss] = dilated / tight if tight > 0 else 0.0
        checks.append({"check": "50 %-dilated boxes: Energy keeps a larger share of its EPG gain than L1",
                       "value": 100 * (kept["energy"] - kept["l1"]), "passed": kept["energy"] > kept["l1"],
                       "energy_share_kept": kept["energy"], "l1_share_kept": kept["l1"]})
    return checks


def _section(ctx: DemoContext, summary: dict[str, dict[str, Any]], checks: list[dict[str, Any]]) -> str:
    s = ctx.settings
    rows = [{"model": m, **{k: cell(summary[m][k]) for k in METRICS}} for m in s.models]
    variants = "; ".join(f"{v.name}: {v.loss}, λ = {v.weight:g}"
                         + (f", boxes dilated by {v.dilation:.0%}" if v.dilation else "")
                         + (f", boxes on {v.annotated_fraction:.0%} of the images, "
                            f"{s.recipe.min_annotated_per_batch} in every batch" if v.annotated_fraction is not None
                            else "") for v in s.variants)
    r = s.recipe
    kwargs = ", ".join(f"{k}={v}" for k, v in r.model_kwargs.items())
    text = [f"Baseline: {r.model} ({kwargs}) trained for {count(r.baseline_epochs, 'epoch')} (Adam, lr "
            f"{r.baseline_lr:g}, cosine). Guided models fine-tune it for {count(r.guided_epochs, 'epoch')} "
            f"(lr {r.guided_lr:g}) "
            f"with a localisation loss on B-cos contributions at the input, boxes on {s.annotated_fraction:.0%} of "
            f"the training images unless said otherwise ({variants}). Every training exports the checkpoint with the "
            "best worst-group accuracy on the group-balanced validation split; the test split is only reported. "
            "Test split, in %:\n",
            markdown_table(rows, ["model", *METRICS], ["model", *HEADERS]),
            "\nEPG: share of the positive contributions (ground-truth class) inside the bird box; IoU of the "
            "binarised contribution map with the box. Worst group: the lowest of the four group accuracies.\n",
            ctx.benchmark(checks)]
    return "\n".join(text)


def train_and_evaluate(ctx: DemoContext) -> None:
    """Stage: baseline and guided variants for every seed, evaluated on the test split; the results table."""
    s = ctx.settings
    runs: list[dict[str, dict[str, float]]] = []
    seconds: dict[str, list[float]] = {m: [] for m in s.models}
    ctx.models.update({m: [] for m in s.models})
    for seed in range(s.seeds):
        folder = ctx.out / "runs" / f"seed-{seed}"
        baseline = training_run(s, seed, folder / "baseline")
        recipes = {"baseline": baseline, **{v.name: training_run(s, seed, folder / v.name, v, baseline.model_file)
                                            for v in s.variants}}
        trained = run_grid([GridRun(f"seed {seed} {name}", recipe.config()) for name, recipe in recipes.items()])
        metrics: dict[str, dict[str, float]] = {}
        for name, recipe in recipes.items():
            began = time.time()
            ctx.models[name].append(recipe.model_file)
            metrics[name] = evaluate_model(recipe.model_file, ctx)
            seconds[name].append(round(trained[f"seed {seed} {name}"].seconds + time.time() - began, 1))
            logger.info("seed %d %s: accuracy %.3f, worst group %.3f, EPG %.3f (%.0f s)", seed, name,
                        metrics[name]["accuracy"], metrics[name]["worst_group_accuracy"], metrics[name]["epg"],
                        seconds[name][-1])
        runs.append(metrics)
    summary = summarize(runs, s.models, METRICS)
    checks = benchmark_checks(summary)
    ctx.results["guidance"] = {"models": list(s.models), "metrics": list(METRICS), "test_images": len(ctx.test_set()),
                               "runs": {f"seed-{k}": run for k, run in enumerate(runs)}, "summary": summary,
                               "checks": checks, "seconds": seconds,
                               "model_files": {m: [str(p) for p in ctx.models[m]] for m in s.models}}
    ctx.add_section("Model guidance", _section(ctx, summary, checks))
