"""The model-guidance stage of the demo: train a baseline per seed, fine-tune it with each guided variant, evaluate
every model on the balanced test split, and compare with the thesis' findings.

Each run is the guidance study's recipe (:class:`~rightreasons.guidance.recipe.GuidanceRecipe`), trained on the grid
runner (a finished run of the same config is kept), writing to ``out/runs/seed-<k>/<run>/`` (``model.safetensors``,
``summary.json``, ``metrics.jsonl``): validated every epoch on the group-balanced validation split, exporting the
checkpoint with the best worst-group accuracy there (the fine-tunings stop early after ``recipe.patience`` epochs
without a new best). The guided variants fine-tune the baseline's weights, as the thesis fine-tunes pretrained models,
with boxes on a fraction of the training images (the seed also draws which), once per λ of ``settings.weights``; λ = 0
is the unguided fine-tuning of the same length (``unguided-boxes<share>``, shared by the variants of one box share).
Per variant the λ with the best mean validation worst-group accuracy over the seeds is chosen
(:func:`~rightreasons.engine.selection.choose`), the baseline itself (no fine-tuning) a candidate too, so that no
variant hands back a model worse on validation than the one it started from (chosen ``baseline``: the variant's rows
are the baseline's runs), and only the chosen runs are scored on the test split. Results:
``ctx.results["guidance"]`` (``selection``: every variant's validation curve) and ``ctx.models[name]``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...console import count
from ...data import GROUP_NAMES
from ...classification import TrainingRun
from ...engine.grid import GridRun, read_summary, run_grid
from ...engine.selection import START, Selection, candidates, choose, exported
from ...metrics.evaluation import Evaluator, score_model
from ...reporting import cell, markdown_table, summarize
from .pipeline import DemoContext
from .settings import DemoSettings, GuidedVariant

__all__ = ["METRICS", "benchmark_checks", "candidate_runs", "evaluate_model", "score_on_test", "train_and_evaluate",
           "training_run"]

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


def candidate_runs(settings: DemoSettings, seed: int, folder: Path, baseline: Path) -> dict[str, dict[str,
                                                                                                  TrainingRun]]:
    """Per guided variant, its fine-tunings of ``baseline`` by λ label (``weight25``) into ``folder``; λ = 0 is the
    unguided fine-tuning of the variant's box share, one run shared by the variants of that share."""
    runs: dict[str, dict[str, TrainingRun]] = {}
    for variant in settings.variants:
        fraction = variant.annotated_fraction or settings.annotated_fraction
        runs[variant.name] = {}
        for label, setting in candidates(variant, settings.grid[variant.name], "weights"):
            if setting.weight == 0:
                setting, name = GuidedVariant("unguided", "energy", 0.0, annotated_fraction=fraction), \
                    f"unguided-boxes{fraction:g}"
            else:
                name = f"{variant.name}-{label}"
            runs[variant.name][label] = training_run(settings, seed, folder / name, setting, baseline)
    return runs


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


def _section(ctx: DemoContext, summary: dict[str, dict[str, Any]], checks: list[dict[str, Any]],
             selection: dict[str, Selection]) -> str:
    s = ctx.settings
    rows = [{"model": m, "λ": "" if m == "baseline" else _chosen_weight(selection[m]),
             **{k: cell(summary[m][k]) for k in METRICS}} for m in s.models]
    variants = "; ".join(f"{v.name}: {v.loss}"
                         + (f", boxes dilated by {v.dilation:.0%}" if v.dilation else "")
                         + (f", boxes on {v.annotated_fraction:.0%} of the images, "
                            f"{s.recipe.min_annotated_per_batch} in every batch" if v.annotated_fraction is not None
                            else "") for v in s.variants)
    r = s.recipe
    kwargs = ", ".join(f"{k}={v}" for k, v in r.model_kwargs.items())
    epochs = count(r.guided_epochs, "epoch") + ("" if r.patience is None else
                                                 f" at most (stopped after {r.patience} without a new best)")
    text = [f"Baseline: {r.model} ({kwargs}) trained for {count(r.baseline_epochs, 'epoch')} (Adam, lr "
            f"{r.baseline_lr:g}, cosine). Guided models fine-tune it for {epochs} "
            f"(lr {r.guided_lr:g}) "
            f"with a localisation loss on B-cos contributions at the input, boxes on {s.annotated_fraction:.0%} of "
            f"the training images unless said otherwise ({variants}). Every training exports the checkpoint with the "
            "best worst-group accuracy on the group-balanced validation split; each variant's λ is chosen among "
            f"{{{', '.join(f'{w:g}' for w in s.weights)}}} by the best mean validation worst-group accuracy over the "
            "seeds, the baseline itself (no fine-tuning, λ column `baseline`) a candidate too (λ = 0: fine-tuning "
            "without boxes; a variant is never worse on validation than either); the test split is only reported. "
            "Test split, in %:\n",
            markdown_table(rows, ["model", "λ", *METRICS], ["model", "λ", *HEADERS]),
            "\nEPG: share of the positive contributions (ground-truth class) inside the bird box; IoU of the "
            "binarised contribution map with the box. Worst group: the lowest of the four group accuracies.\n",
            "\nValidation worst-group accuracy (%, mean ± std over the seeds) per λ; bold: chosen:\n",
            *(f"- {name}: {choice.describe()}" for name, choice in selection.items()),
            "", ctx.benchmark(checks)]
    unguided = [name for name, choice in selection.items() if _chosen_weight(choice) == "0"]
    if unguided:
        text.append(f"\nValidation chose λ = 0 for {', '.join(unguided)}: their rows and checks measure the "
                    "fine-tuning without boxes, not guidance.")
    kept = [name for name, choice in selection.items() if choice.chosen == START]
    if kept:
        text.append(f"\nValidation chose the baseline itself for {', '.join(kept)}: no fine-tuning beat it there, so "
                    "their rows are the baseline's.")
    return "\n".join(text)


def _chosen_weight(choice: Selection) -> str:
    """The λ a variant's selection chose (``"25"``), or :data:`~rightreasons.engine.selection.START`."""
    return choice.chosen if choice.chosen == START else choice.chosen.removeprefix("weight")


def train_and_evaluate(ctx: DemoContext) -> None:
    """Stage: the baseline and every variant's candidate fine-tunings for every seed; per variant the λ chosen on
    validation; the baseline and the chosen runs evaluated on the test split; the results table."""
    s = ctx.settings
    baselines, grids, seconds = [], [], {}
    for seed in range(s.seeds):
        folder = ctx.out / "runs" / f"seed-{seed}"
        baseline = training_run(s, seed, folder / "baseline")
        grid = candidate_runs(s, seed, folder, baseline.model_file)
        unique = {run.output_dir: run for run in [baseline, *(r for runs in grid.values() for r in runs.values())]}
        trained = run_grid([GridRun(f"seed {seed} {Path(path).name}", run.config()) for path, run in unique.items()])
        seconds.update({f"seed-{seed}/{name.split(' ', 2)[2]}": round(o.seconds, 1) for name, o in trained.items()})
        baselines.append(baseline)
        grids.append(grid)
    start = [exported(read_summary(baseline.output_dir))["validation"] for baseline in baselines]
    selection = {v.name: choose({label: [exported(read_summary(grid[v.name][label].output_dir))["validation"]
                                         for grid in grids] for label in grids[0][v.name]},
                                s.recipe.select, v.name, start=start) for v in s.variants}
    runs: list[dict[str, dict[str, float]]] = []
    epochs: dict[str, list[Any]] = {v.name: [] for v in s.variants}
    tested: dict[Path, dict[str, float]] = {}  # a shared unguided run chosen by several variants is scored once
    ctx.models.update({m: [] for m in s.models})
    for seed, (baseline, grid) in enumerate(zip(baselines, grids)):
        chosen = {"baseline": baseline, **{name: baseline if selection[name].chosen == START else
                                           grid[name][selection[name].chosen] for name in selection}}
        metrics: dict[str, dict[str, float]] = {}
        for name, recipe in chosen.items():
            ctx.models[name].append(recipe.model_file)
            if recipe.model_file not in tested:
                tested[recipe.model_file] = evaluate_model(recipe.model_file, ctx)
            metrics[name] = tested[recipe.model_file]
            if name != "baseline":  # guided epochs of the exported checkpoint; 0 where the baseline was kept
                epochs[name].append(0 if recipe is baseline else exported(read_summary(recipe.output_dir))["epoch"])
            logger.info("seed %d %s: accuracy %.3f, worst group %.3f, EPG %.3f", seed, name,
                        metrics[name]["accuracy"], metrics[name]["worst_group_accuracy"], metrics[name]["epg"])
        runs.append(metrics)
    summary = summarize(runs, s.models, METRICS)
    checks = benchmark_checks(summary)
    ctx.results["guidance"] = {"models": list(s.models), "metrics": list(METRICS), "test_images": len(ctx.test_set()),
                               "runs": {f"seed-{k}": run for k, run in enumerate(runs)}, "summary": summary,
                               "selection": {name: {**c.to_dict(), "epochs": epochs[name]}
                                             for name, c in selection.items()},
                               "checks": checks, "training_seconds": seconds,
                               "model_files": {m: [str(p) for p in ctx.models[m]] for m in s.models}}
    ctx.add_section("Model guidance", _section(ctx, summary, checks, selection))
