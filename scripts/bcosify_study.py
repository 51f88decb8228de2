"""B-cosification on the synthetic benchmarks: is a B-cosified standard model as accurate and as interpretable as a
B-cos model trained from scratch, how much sooner, and can it be guided?

    OMP_NUM_THREADS=1 python scripts/bcosify_study.py --out runs/bcosify-study   # about 12 minutes on one thread
    python scripts/bcosify_study.py --out /tmp/s --quick                            # a smoke run, not a measurement

Per seed:

* ``speed-up`` — ``synthetic-multilabel`` with one large object per image (six shape classes; a single-label task).
  A standard ResNet-18 (torchvision layout, width ``Settings.width``) is trained with cross-entropy for as many epochs
  as the from-scratch model (as in the paper, whose standard models are fully trained), B-cosified
  (:func:`rightreasons.bcosify`: B = 2, no biases, average pooling) and fine-tuned with the B-cosification recipe
  (AdamW, cosine, BCE with off-labels at 1/C, AGC) for at most as many epochs again; a B-cos ResNet-18 of the same
  width is trained from scratch with the B-cos recipe (Adam, lr 1e-3, cosine, the same BCE, AGC). Both are
  validated after every epoch (accuracy and EPG of B-cos contributions at the input); the B-cosified model also
  right after the conversion (epoch 0). The
  speed-up is the ratio of the epochs each needs to reach the from-scratch model's final validation accuracy, and
  of the wall time: epochs × steps per epoch × the seconds of a training step, measured side by side
  (:func:`rightreasons.engine.timing.compare_step_times`) — once for the fine-tuning alone (the paper's view: the
  standard model exists already) and once counting the standard model's training. Test split: accuracy, EPG and
  the 2×2 grid pointing game.
* ``guidance`` — ``synthetic-birds`` with the background as a 100 % shortcut, as in the demo: a standard ResNet-18
  trained on it, B-cosified and fine-tuned (the B-cosified baseline), then fine-tuned further with Energy guidance on
  B-cos contributions at the input with boxes on 10 % of the images (the demo's λ and schedule). Test split
  (balanced): accuracy, worst-group accuracy, EPG; the worst-group gain of guidance.

Writes ``OUT/results.json``, ``OUT/report.md`` and ``OUT/curves.png`` (validation accuracy and EPG against epochs,
mean ± std over seeds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rightreasons import bcosify, capabilities, load_model, save_model
from rightreasons.data import GROUP_NAMES, collate, load_dataset, transforms_for
from rightreasons.classification import EvalConfig, TrainingRun, run_training
from rightreasons.engine import task_for_config
from rightreasons.engine.timing import compare_step_times
from rightreasons.guidance import GuidanceConfig, GuidedRun
from rightreasons.metrics.evaluation import classifier_evaluators, evaluate
from rightreasons.fileio import write_text_atomic
from rightreasons.metrics import attribution_fn, build_grids, grid_pointing_game, select_confident
from rightreasons.plotting import figure
from rightreasons.reporting import cell, markdown_table, summarize

SHAPES = "synthetic-multilabel"
BIRDS = "synthetic-birds"
MODELS = ("standard", "bcosified", "scratch")
LABELS = {"standard": "standard ResNet-18", "bcosified": "B-cosified + fine-tuned", "scratch": "B-cos from scratch",
          "bcosified_baseline": "B-cosified baseline", "bcosified_energy": "B-cosified + Energy"}
GROUP_KEYS = ("G1", "G2", "G3", "G4")


@dataclass(frozen=True)
class Settings:
    """Every knob of a study run (:meth:`full` / :meth:`quick`). ``images``: the size of the training and of the
    validation split (the engine reads both with the same options) and of the test split, or ``None`` for the
    synthetic datasets' defaults (2,000 / 500 / 1,000)."""

    seeds: int = 3
    size: int = 32
    width: int = 8
    batch_size: int = 64
    images: tuple[int, int] | None = None
    standard_epochs: int = 16
    finetune_epochs: int = 16
    finetune_lr: float = 1e-3
    scratch_epochs: int = 16
    scratch_lr: float = 1e-3
    birds_standard_epochs: int = 5
    birds_finetune_epochs: int = 3
    guided_epochs: int = 4
    guided_lr: float = 2e-3
    guidance_weight: float = 5.0
    annotated_fraction: float = 0.1
    grids: int = 50
    timing_steps: int = 30

    @classmethod
    def full(cls) -> Settings:
        return cls()

    @classmethod
    def quick(cls) -> Settings:
        return cls(seeds=1, images=(48, 48), batch_size=8, standard_epochs=1, finetune_epochs=1, scratch_epochs=2,
                   birds_standard_epochs=1, birds_finetune_epochs=1, guided_epochs=1, annotated_fraction=0.5,
                   grids=4, timing_steps=2)


def data_options(settings: Settings, name: str, split: str) -> dict[str, Any]:
    """``load_dataset`` options of ``split`` of dataset ``name`` (training and validation share them)."""
    base = {"max_objects": 1, "difficulty": 0.0} if name == SHAPES else {"correlation": 1.0}
    count = None if settings.images is None else settings.images[split == "test"]
    return {**base, "seed": 0, "size": settings.size, **({"n": count} if count else {})}


def training_run(settings: Settings, folder: Path, seed: int, data: str, model: str, epochs: int, lr: float,
                 checkpoint: Path | None = None, guidance: GuidanceConfig | None = None,
                 curves: bool = False) -> TrainingRun:
    """One training of the study (a finished one of the same config is kept): a standard model (cross-entropy, no
    AGC), a B-cosified fine-tuning (AdamW) or a B-cos model from scratch (Adam). B-cos models use BCE with off-labels
    at 1/C and AGC; with ``curves`` they are validated after every epoch (accuracy, and EPG of B-cos contributions at
    the input)."""
    run = TrainingRun(output_dir=str(folder), seed=seed, model=model, model_kwargs={"inplanes": settings.width},
                      checkpoint=None if checkpoint is None else str(checkpoint), data=data,
                      data_options=data_options(settings, data, "train"), image_size=settings.size,
                      batch_size=settings.batch_size, crop_scale=[1.0, 1.0] if data == SHAPES else [0.5, 1.0],
                      epochs=epochs, lr=lr, optimizer="adamw" if model.startswith("bcosified_") else "adam",
                      uniform_off_labels=model != "resnet18",
                      annotated_fraction=settings.annotated_fraction if guidance else 1.0,
                      eval=EvalConfig(every_epochs=1, localization=True, method="bcos", layer="input", num_images=0)
                      if curves else None)
    return run if guidance is None else GuidedRun(**vars(run), guidance=guidance)


def convert(standard_file: Path, out: Path) -> Path:
    """B-cosify a trained standard model file with the recipe's options and save it."""
    return save_model(bcosify(load_model(standard_file)), out)


def split(settings: Settings, data: str, name: str, model: nn.Module) -> Any:
    """Split ``name`` of dataset ``data``, transformed for evaluating ``model``."""
    return load_dataset(data, None, name, **data_options(settings, data, name),
                        transform=transforms_for(model, settings.size, crop_fraction=1.0))


def scores(model: nn.Module, dataset: Any) -> dict[str, float]:
    """Accuracy (with groups) and, for B-cos models, EPG and IoU of B-cos contributions at the input."""
    method = "bcos" if capabilities(model).bcos else None
    results = evaluate(model, dataset, classifier_evaluators(dataset, method, "input", batch_size=128),
                       batch_size=128, device="cpu")
    return {k: float(v) for k, v in results.items() if isinstance(v, (int, float))}


def grid_pointing(model: nn.Module, dataset: Any, settings: Settings, seed: int) -> tuple[float | None, int]:
    """Mean 2×2 grid pointing-game score of B-cos contributions (maps smoothed over 3 px, the B-cos papers' 15 px at
    224 px scaled to the tile size) on up to ``settings.grids`` grids of test images the model classifies correctly
    with softmax confidence >= 0.5, and the number of grids; ``(None, 0)`` when no grid of four distinct classes can
    be built."""
    batch = collate([dataset[i] for i in range(len(dataset))])
    images, labels = batch["image"], batch["labels"].argmax(1)
    candidates, _ = select_confident(model.eval(), images, labels)
    try:
        with warnings.catch_warnings():  # fewer grids than asked: the count is reported
            warnings.simplefilter("ignore")
            grids = build_grids(images, labels, candidates, n=2, num_grids=settings.grids,
                                generator=torch.Generator().manual_seed(seed))
    except ValueError:
        return None, 0
    scores = grid_pointing_game(model, grids, attribution_fn("bcos", "input"), batch_size=32, smoothing=3)
    return scores.mean().item(), len(grids.images)


def curve(history: list[dict[str, Any]], key: str) -> list[float]:
    """The validation ``key`` after every epoch of a training's history."""
    return [float(record[key]) for record in history]


def epochs_to_reach(accuracies: list[float], target: float) -> int | None:
    """The first epoch (1-based) whose validation accuracy reaches ``target``; ``None`` when none does."""
    return next((epoch for epoch, value in enumerate(accuracies, start=1) if value >= target - 1e-9), None)


def speed_up_study(settings: Settings, out: Path, seed: int) -> dict[str, Any]:
    """One seed of the speed-up study: the three models, their validation curves and their test scores."""
    folder = out / f"seed-{seed}"
    standard = run_training(training_run(settings, folder / "standard", seed, SHAPES, "resnet18",
                                         settings.standard_epochs, 1e-3))
    converted = convert(Path(standard["model_file"]), folder / "bcosified.safetensors")
    converted_model = load_model(converted)
    at_conversion = scores(converted_model, split(settings, SHAPES, "val", converted_model))
    bcosified = run_training(training_run(settings, folder / "bcosified", seed, SHAPES, "bcosified_resnet18",
                                          settings.finetune_epochs, settings.finetune_lr, checkpoint=converted,
                                          curves=True))
    scratch = run_training(training_run(settings, folder / "scratch", seed, SHAPES, "bcos_resnet18",
                                        settings.scratch_epochs, settings.scratch_lr, curves=True))
    result: dict[str, Any] = {
        "at_conversion": {"accuracy": at_conversion["accuracy"], "epg": at_conversion["epg"]},
        "curves": {name: {key: curve(summary["history"], key) for key in ("accuracy", "epg")}
                   for name, summary in (("bcosified", bcosified), ("scratch", scratch))},
        "test": {}}
    for name, summary in (("standard", standard), ("bcosified", bcosified), ("scratch", scratch)):
        model = load_model(summary["model_file"])
        test = split(settings, SHAPES, "test", model)
        result["test"][name] = scores(model, test)
        if name != "standard":
            score, count = grid_pointing(model, test, settings, seed)
            result["test"][name].update(grid_pointing_game=score, grids=count)
    target = result["curves"]["scratch"]["accuracy"][-1]
    result["target_accuracy"] = target
    result["epochs_to_reach"] = {name: epochs_to_reach(result["curves"][name]["accuracy"], target)
                                 for name in ("bcosified", "scratch")}
    return result


def guidance_study(settings: Settings, out: Path, seed: int) -> dict[str, dict[str, float]]:
    """One seed of the guidance study: test scores of the B-cosified baseline and of its Energy-guided fine-tuning."""
    folder = out / f"seed-{seed}" / "birds"
    standard = run_training(training_run(settings, folder / "standard", seed, BIRDS, "resnet18",
                                         settings.birds_standard_epochs, 1e-3))
    converted = convert(Path(standard["model_file"]), folder / "bcosified.safetensors")
    baseline = run_training(training_run(settings, folder / "baseline", seed, BIRDS, "bcosified_resnet18",
                                         settings.birds_finetune_epochs, settings.finetune_lr, checkpoint=converted))
    energy = GuidanceConfig(method="bcos", layer="input", loss="energy", weight=settings.guidance_weight)
    guided = run_training(training_run(settings, folder / "energy", seed, BIRDS, "bcosified_resnet18",
                                       settings.guided_epochs, settings.guided_lr,
                                       checkpoint=Path(baseline["model_file"]), guidance=energy))
    results = {}
    for name, summary in (("bcosified_baseline", baseline), ("bcosified_energy", guided)):
        model = load_model(summary["model_file"])
        r = scores(model, split(settings, BIRDS, "test", model))
        results[name] = {"accuracy": r["accuracy"], "worst_group_accuracy": r["worst_group_accuracy"],
                         "epg": r["epg"], **{g: r[f"accuracy/{n}"] for g, n in zip(GROUP_KEYS, GROUP_NAMES)}}
    return results


def step_seconds(settings: Settings, converted: Path, folder: Path) -> dict[str, float]:
    """Seconds of a training step (batch loading included) of the three trainings, measured alternately."""
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        runs = {"standard": training_run(settings, Path(tmp) / "standard", 0, SHAPES, "resnet18", 100, 1e-3),
                "bcosified": training_run(settings, Path(tmp) / "bcosified", 0, SHAPES, "bcosified_resnet18", 100,
                                          settings.finetune_lr, checkpoint=converted),
                "scratch": training_run(settings, Path(tmp) / "scratch", 0, SHAPES, "bcos_resnet18", 100,
                                        settings.scratch_lr)}
        timed = compare_step_times({k: task_for_config(r.config())(r.config()) for k, r in runs.items()},
                                   steps=settings.timing_steps, warmup=2)
    return {k: v["step_seconds"] + v["loader_seconds"] for k, v in timed.items()}


def speed_ups(run: dict[str, Any], seconds: dict[str, float], settings: Settings) -> dict[str, float | None]:
    """Epoch and wall-time ratios (from scratch / B-cosified) to reach the from-scratch final accuracy; ``None``
    where the B-cosified model does not reach it. Every training sees the same data and batch size, so a wall time is
    epochs × the step time of that training (times the steps per epoch, which cancel)."""
    reach = run["epochs_to_reach"]
    if reach["bcosified"] is None:
        return {"epochs": None, "wall_time": None, "wall_time_with_standard": None}
    scratch = reach["scratch"] * seconds["scratch"]
    bcosified = reach["bcosified"] * seconds["bcosified"]
    return {"epochs": reach["scratch"] / reach["bcosified"], "wall_time": scratch / bcosified,
            "wall_time_with_standard": scratch / (bcosified + settings.standard_epochs * seconds["standard"])}


def mean_std(values: list[float | None]) -> dict[str, Any]:
    """Mean and sample std of the values that exist (``None`` marks a seed that did not reach the target)."""
    present = [v for v in values if v is not None]
    return {"mean": statistics.fmean(present) if present else None,
            "std": statistics.stdev(present) if len(present) > 1 else None, "values": values,
            "reached": f"{len(present)}/{len(values)}"}


def plot_curves(path: Path, runs: list[dict[str, Any]], target: float) -> Path:
    """Validation accuracy and EPG against epochs (mean ± std over seeds): the B-cosified model from its conversion
    (epoch 0) on, the from-scratch model from its first epoch; the dashed line is the from-scratch final accuracy."""
    colours = {"bcosified": "tab:orange", "scratch": "tab:blue"}
    with figure(path, 1, 2, size=(10, 3.8), title="B-cosification vs B-cos from scratch (validation, mean ± std)") \
            as (_, axes):
        for ax, key, label in zip(axes[0], ("accuracy", "epg"), ("accuracy (%)", "EPG (%)")):
            for name in ("bcosified", "scratch"):
                values = torch.tensor([run["curves"][name][key] for run in runs]) * 100
                if name == "bcosified":
                    start = torch.tensor([[run["at_conversion"][key] * 100] for run in runs])
                    values = torch.cat([start, values], dim=1)
                epochs = torch.arange(values.shape[1]) + (0 if name == "bcosified" else 1)
                mean = values.mean(0)
                std = values.std(0) if len(runs) > 1 else torch.zeros_like(mean)
                ax.plot(epochs, mean, marker="o", markersize=3, color=colours[name], label=LABELS[name])
                ax.fill_between(epochs, mean - std, mean + std, color=colours[name], alpha=0.2)
            if key == "accuracy":
                ax.axhline(100 * target, color="gray", linestyle="--", linewidth=1, label="from-scratch final")
            ax.set_xlabel("epochs (B-cosified: fine-tuning epochs after the conversion)", fontsize=9)
            ax.set_ylabel(label)
            ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize=8)
    return path


def report(settings: Settings, results: dict[str, Any]) -> str:
    """The Markdown report of a study run."""
    test, speed, guided = results["test_summary"], results["speed_up"], results["guidance_summary"]
    seeds, s = settings.seeds, settings
    rows = [{"model": LABELS[m], "accuracy": cell(test[m]["accuracy"]),
             "epg": cell(test[m]["epg"]) if "epg" in test[m] else "",
             "gridpg": cell(test[m]["grid_pointing_game"]) if "grid_pointing_game" in test[m] else ""}
            for m in MODELS]
    conversion = results["at_conversion"]
    ratio = lambda stat: "n/a" if stat["mean"] is None else (  # noqa: E731
        f"{stat['mean']:.2f}" + ("" if stat["std"] is None else f" ± {stat['std']:.2f}"))
    text = [
        f"# B-cosification study ({seeds} seed(s), {s.size} px, ResNet-18 of width {s.width})\n",
        f"**Speed-up** (`{SHAPES}`, one object per image, six classes): a standard ResNet-18 trained for "
        f"{s.standard_epochs} epochs (Adam, lr 1e-3, cross-entropy), B-cosified (B = 2, no biases, average pooling) "
        f"and fine-tuned for {s.finetune_epochs} epochs (AdamW, lr {s.finetune_lr:g}, cosine, BCE with off-labels at "
        f"1/C, AGC), vs a B-cos ResNet-18 trained from scratch for {s.scratch_epochs} epochs (Adam, lr "
        f"{s.scratch_lr:g}, cosine, the same loss and AGC). Test split, %, mean ± std over seeds:\n",
        markdown_table(rows, ["model", "accuracy", "epg", "gridpg"],
                       ["model", "accuracy", "EPG", "grid pointing game 2×2"]),
        "\nGrid pointing game: share of the positive contributions for each tile's class inside that tile of 2×2 "
        "grids of correctly and confidently (softmax >= 0.5) classified test images of four classes (chance 25 %); "
        + ", ".join(f"{LABELS[m]} {statistics.fmean(n):.0f}" for m, n in results["grids"].items())
        + " grids per seed on average.\n",
        f"Right after the conversion (epoch 0), before any fine-tuning: validation accuracy "
        f"{cell(conversion['accuracy'])} %, EPG {cell(conversion['epg'])} %.\n",
        f"To reach the from-scratch model's final validation accuracy ({cell(results['target_accuracy'])} %), the "
        f"B-cosified model needs {ratio(speed['bcosified_epochs'])} fine-tuning epochs (reached in "
        f"{speed['bcosified_epochs']['reached']} seeds), the from-scratch model "
        f"{ratio(speed['scratch_epochs'])}:\n",
        markdown_table([{"what": "epochs", "value": ratio(speed["epochs"])},
                        {"what": "wall time, fine-tuning only", "value": ratio(speed["wall_time"])},
                        {"what": "wall time, counting the standard model's training",
                         "value": ratio(speed["wall_time_with_standard"])}],
                       ["what", "value"], ["speed-up (from scratch / B-cosified)", "mean ± std over seeds"]),
        f"\nSeconds per training step (batch {s.batch_size}, loading included, measured side by side): "
        + ", ".join(f"{LABELS[k]} {v:.3f}" for k, v in results["step_seconds"].items()) + ".\n",
        "![validation curves](curves.png)\n",
        f"**Guidance** (`{BIRDS}`, background = class in every training image, balanced test split): a standard "
        f"ResNet-18 ({s.birds_standard_epochs} epochs), B-cosified and fine-tuned for {s.birds_finetune_epochs} "
        f"epochs (the baseline), then fine-tuned for {s.guided_epochs} more epochs with Energy guidance (λ = "
        f"{s.guidance_weight:g}, lr {s.guided_lr:g}, B-cos contributions at the input, boxes on "
        f"{s.annotated_fraction:.0%} of the images). Test split, %:\n",
        markdown_table([{"model": LABELS[m], **{k: cell(guided[m][k]) for k in (
            "accuracy", *GROUP_KEYS, "worst_group_accuracy", "epg")}} for m in guided],
            ["model", "accuracy", *GROUP_KEYS, "worst_group_accuracy", "epg"],
            ["model", "accuracy", *GROUP_NAMES, "worst group", "EPG"]),
        f"\nWorst-group gain of Energy guidance: {results['worst_group_gain']['mean'] * 100:+.1f} p.p. (per seed "
        + " / ".join(f"{100 * v:+.1f}" for v in results["worst_group_gain"]["values"]) + ").\n"]
    return "\n".join(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder (runs, results.json, report.md)")
    parser.add_argument("--seeds", type=int, help="number of seeds (default 3; --quick: 1)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run, not a measurement")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings.quick() if args.quick else Settings.full()
    if args.seeds:
        settings = replace(settings, seeds=args.seeds)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    runs, guidance = [], []
    for seed in range(settings.seeds):
        runs.append(speed_up_study(settings, out, seed))
        guidance.append(guidance_study(settings, out, seed))
        print(f"seed {seed}: {json.dumps(runs[-1]['epochs_to_reach'])} {json.dumps(guidance[-1])}", file=sys.stderr,
              flush=True)
    seconds = step_seconds(settings, out / "seed-0" / "bcosified.safetensors", out)
    per_seed = [speed_ups(run, seconds, settings) for run in runs]
    test_metrics = {"standard": ("accuracy",), "bcosified": ("accuracy", "epg", "grid_pointing_game"),
                    "scratch": ("accuracy", "epg", "grid_pointing_game")}
    nan = float("nan")
    test_summary = {m: summarize([{m: {k: nan if r["test"][m][k] is None else r["test"][m][k] for k in keys}}
                                  for r in runs], [m], keys)[m] for m, keys in test_metrics.items()}
    guidance_summary = summarize(guidance, list(guidance[0]), ("accuracy", *GROUP_KEYS, "worst_group_accuracy",
                                                                "epg"))
    gains = [g["bcosified_energy"]["worst_group_accuracy"] - g["bcosified_baseline"]["worst_group_accuracy"]
             for g in guidance]
    results = {
        "settings": asdict(settings), "step_seconds": seconds,
        "runs": {f"seed-{k}": {**run, "speed_up": per_seed[k], "guidance": guidance[k]} for k, run in enumerate(runs)},
        "test_summary": test_summary,
        "grids": {m: [r["test"][m]["grids"] for r in runs] for m in ("bcosified", "scratch")},
        "at_conversion": summarize([{"c": r["at_conversion"]} for r in runs], ["c"], ("accuracy", "epg"))["c"],
        "target_accuracy": summarize([{"s": {"a": r["target_accuracy"]}} for r in runs], ["s"], ("a",))["s"]["a"],
        "speed_up": {"bcosified_epochs": mean_std([r["epochs_to_reach"]["bcosified"] for r in runs]),
                     "scratch_epochs": mean_std([r["epochs_to_reach"]["scratch"] for r in runs]),
                     **{k: mean_std([p[k] for p in per_seed]) for k in per_seed[0]}},
        "guidance_summary": guidance_summary, "worst_group_gain": mean_std(gains)}
    plot_curves(out / "curves.png", runs, results["target_accuracy"]["mean"])
    write_text_atomic(out / "results.json", json.dumps(results, indent=2) + "\n")
    write_text_atomic(out / "report.md", report(settings, results))
    print(out / "report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
