"""The model-guidance stages of the demo: train a baseline per seed, fine-tune it with each guided variant, evaluate
every model on the balanced test split, and compare with the thesis' findings (SCIENCE.md §6).

Training goes through the engine (:func:`rightreasons.engine.train`) with configs built here; each run writes to
``out/runs/seed-<k>/<model>/`` (``model.safetensors``, ``summary.json``, ``metrics.jsonl``). The guided variants
fine-tune the baseline's weights, as the thesis fine-tunes pretrained models, with boxes on a fraction of the
training images (the seed also draws which). Results: ``ctx.results["guidance"]`` and ``ctx.models[name]``.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..checkpoints import load_model
from ..data.waterbirds import GROUP_NAMES
from ..engine import TrainConfig, from_dict, train
from ..engine.evaluation import evaluate_classifier
from .pareto import markdown_table
from .pipeline import DATASET, DemoContext
from .settings import DemoSettings, GuidedVariant

__all__ = ["METRICS", "benchmark_checks", "cell", "evaluate_model", "fresh", "summarize", "train_and_evaluate",
           "training_config"]

GROUP_KEYS = tuple(name.split()[0] for name in GROUP_NAMES)  # "G1" … "G4"
#: the metrics of every model on the test split, in table order
METRICS = ("accuracy", *GROUP_KEYS, "worst_group_accuracy", "epg", "iou")
HEADERS = ("overall acc.", *GROUP_NAMES, "worst group", "EPG", "IoU")


def training_config(settings: DemoSettings, seed: int, output_dir: Path, variant: GuidedVariant | None = None,
                    baseline: Path | None = None) -> TrainConfig:
    """The engine config of the baseline (``variant=None``) or of a guided fine-tuning of ``baseline``.

    Validation during training only tracks accuracy (the validation split is as biased as the training split);
    the demo evaluates on the test split afterwards.
    """
    s = settings
    epochs = s.guided_epochs if variant else s.baseline_epochs
    config: dict[str, Any] = {
        "output_dir": str(output_dir), "seed": seed, "log_every": 10,
        "model": {"name": s.model, "kwargs": dict(s.model_kwargs)},
        "data": {"name": DATASET, "image_size": s.image_size, "batch_size": s.batch_size, "augment": True,
                 "crop_scale": list(s.crop_scale), "options": s.dataset_options("train")},
        "optim": {"name": "adam", "lr": s.guided_lr if variant else s.baseline_lr, "epochs": epochs,
                  "schedule": "cosine"},
        "eval": {"every_epochs": epochs, "num_images": 0, "localization": False},
        "checkpoint": {"keep_last": 1},
    }
    if variant is not None:
        if baseline is None:
            raise ValueError(f"guided variant {variant.name!r} needs the baseline's model file to fine-tune")
        config["model"]["checkpoint"] = str(baseline)
        config["data"]["annotated_fraction"] = s.annotated_fraction
        config["guidance"] = {"enabled": True, "method": "bcos", "layer": "input", "loss": variant.loss,
                              "weight": variant.weight, "dilation": variant.dilation}
    return from_dict(TrainConfig, config)


def evaluate_model(model_file: Path, ctx: DemoContext) -> dict[str, float]:
    """Test-split metrics of a trained model: :data:`METRICS` (fractions in [0, 1]), EPG/IoU of B-cos
    contributions at the input for the ground-truth class against the (undilated) box."""
    model = load_model(model_file).to(ctx.device)
    r = evaluate_classifier(model, ctx.test_set(), batch_size=ctx.settings.batch_size, device=ctx.device,
                            method="bcos", layer="input", group_names=list(GROUP_NAMES))
    metrics = {"accuracy": r["accuracy"], "worst_group_accuracy": r["worst_group_accuracy"], "epg": r["epg"],
               "iou": r["iou"]}
    metrics.update({key: r[f"accuracy/{name}"] for key, name in zip(GROUP_KEYS, GROUP_NAMES)})
    return {k: float(metrics[k]) for k in METRICS}


def fresh(path: Path) -> Path:
    """The run folder, emptied of an earlier demo run (training refuses folders that hold checkpoints)."""
    if path.exists():
        shutil.rmtree(path)
    return path


def summarize(runs: list[dict[str, dict[str, float]]], models: Sequence[str],
              metrics: Sequence[str] = METRICS) -> dict[str, dict[str, Any]]:
    """Per model and metric: the values over seeds, their mean and sample std (None for one seed)."""
    out: dict[str, dict[str, Any]] = {}
    for model in models:
        out[model] = {}
        for key in metrics:
            values = [run[model][key] for run in runs]
            out[model][key] = {"mean": statistics.fmean(values),
                               "std": statistics.stdev(values) if len(values) > 1 else None, "values": values}
    return out


def benchmark_checks(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The result the demo is meant to show (issue 6), from the means; in percentage points.

    * Energy raises worst-group accuracy by >= 15 p.p. over the baseline and does not lower overall accuracy;
    * L1 improves worst-group accuracy too;
    * with 50 %-dilated boxes Energy keeps a larger share of its EPG gain than L1 (gain with dilated boxes / gain
      with tight boxes).
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


def cell(stat: dict[str, Any]) -> str:
    """A summary statistic as a table cell in %: ``mean ± std`` (the mean alone for one seed)."""
    mean = 100 * stat["mean"]
    return f"{mean:.1f}" if stat["std"] is None else f"{mean:.1f} ± {100 * stat['std']:.1f}"


def _section(ctx: DemoContext, summary: dict[str, dict[str, Any]], checks: list[dict[str, Any]]) -> str:
    s = ctx.settings
    rows = [{"model": m, **{k: cell(summary[m][k]) for k in METRICS}} for m in s.models]
    variants = "; ".join(f"{v.name}: {v.loss}, λ = {v.weight:g}" + (f", boxes dilated by {v.dilation:.0%}"
                                                                    if v.dilation else "") for v in s.variants)
    kwargs = ", ".join(f"{k}={v}" for k, v in s.model_kwargs.items())
    text = [f"Baseline: {s.model} ({kwargs}) trained for {s.baseline_epochs} epochs (Adam, lr "
            f"{s.baseline_lr:g}, cosine). Guided models fine-tune it for {s.guided_epochs} epochs (lr {s.guided_lr:g}) "
            f"with a localisation loss on B-cos contributions at the input, boxes on {s.annotated_fraction:.0%} of "
            f"the training images ({variants}). Test split, in %:\n",
            markdown_table(rows, ["model", *METRICS], ["model", *HEADERS]),
            "\nEPG: share of the positive contributions (ground-truth class) inside the bird box; IoU of the "
            "binarised contribution map with the box. Worst group: the lowest of the four group accuracies.\n",
            "**Benchmark** (means, p.p.):\n"]
    text += [f"- {'✓' if c['passed'] else '✗'} {c['check']}: {c['value']:+.1f}" for c in checks]
    return "\n".join(text)


def train_and_evaluate(ctx: DemoContext) -> None:
    """Stage: baseline and guided variants for every seed, evaluated on the test split; the results table."""
    s = ctx.settings
    runs: list[dict[str, dict[str, float]]] = []
    seconds: dict[str, list[float]] = {m: [] for m in s.models}
    ctx.models.update({m: [] for m in s.models})
    for seed in range(s.seeds):
        folder = ctx.out / "runs" / f"seed-{seed}"
        jobs: list[tuple[str, GuidedVariant | None]] = [("baseline", None), *((v.name, v) for v in s.variants)]
        metrics: dict[str, dict[str, float]] = {}
        for name, variant in jobs:
            began = time.time()
            baseline = ctx.models["baseline"][seed] if variant else None
            config = training_config(s, seed, fresh(folder / name), variant, baseline)
            train(config)
            model_file = Path(config.output_dir) / "model.safetensors"
            ctx.models[name].append(model_file)
            metrics[name] = evaluate_model(model_file, ctx)
            seconds[name].append(round(time.time() - began, 1))
            ctx.log(f"seed {seed} {name}: accuracy {metrics[name]['accuracy']:.3f}, worst group "
                    f"{metrics[name]['worst_group_accuracy']:.3f}, EPG {metrics[name]['epg']:.3f} "
                    f"({seconds[name][-1]:.0f} s)")
        runs.append(metrics)
    summary = summarize(runs, s.models)
    checks = benchmark_checks(summary)
    ctx.results["guidance"] = {"models": list(s.models), "metrics": list(METRICS), "test_images": len(ctx.test_set()),
                               "runs": {f"seed-{k}": run for k, run in enumerate(runs)}, "summary": summary,
                               "checks": checks, "seconds": seconds,
                               "model_files": {m: [str(p) for p in ctx.models[m]] for m in s.models}}
    ctx.add_section("Model guidance", _section(ctx, summary, checks))
