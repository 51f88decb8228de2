"""Where does box guidance help? A baseline and guided fine-tunings of it over a grid of data variants, with seeds:
:class:`GuidanceRecipe` (how one cell trains), :class:`GuidanceStudy` (the grid, loadable from YAML) and
:func:`run_study` (``rightreasons study guidance``).

The benchmark is ``synthetic-birds`` (:mod:`rightreasons.data.synthetic`). A *data variant* fixes its shortcut
``correlation``, ``difficulty``, data ``seed`` and image size. Per variant and training seed a baseline is trained; per
annotated fraction and guided method a fine-tuning of that baseline, once per candidate setting of the method's
``grid`` entry (e.g. λ ∈ {0, 1, 5, 25}; a λ grid must hold 0, the unguided fine-tuning of the same length). Every
training validates each epoch on the group-balanced validation split and exports the checkpoint with the best
``recipe.select`` metric (worst-group accuracy by default; with ``recipe.patience`` the guided fine-tunings stop early,
so their number of epochs is chosen too); per cell the setting with the best mean validation score over the seeds is
chosen (:func:`~rightreasons.engine.selection.choose`) and only its runs are scored on the test split, which never
chooses anything. With ``baseline_candidate`` (the default) the baseline itself, not fine-tuned, is a candidate of
every guided cell, first in grid order (:func:`~rightreasons.engine.selection.with_start`): a cell whose fine-tunings
all score below it on validation chooses ``baseline`` and reports the baseline's runs, gain 0. With few boxes
(``fraction · batch_size < min_annotated_per_batch``) the guided runs compose every batch of
``min_annotated_per_batch`` annotated images (``guidance.annotated_per_batch``), so that the boxes act at every step.

The trainings run on the grid runner (:func:`~rightreasons.engine.grid.run_grid`) and each is scored once
(``<run>/test.json`` beside its ``summary.json``; EPG and IoU against ``recipe.test_regions``, the boxes by default,
``<run>/test-<regions>.json`` for other regions: :func:`test_scores_file`), so an interrupted study resumes where it
stopped; the tables are mean ± sample std over the seeds, and the worst-group gain over the baseline is paired by
seed.
"""

from __future__ import annotations

import itertools
import json
import logging
import statistics
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config import FieldError, expect
from ..console import count
from ..data import AnnotatedDataset, SyntheticConfig, load_dataset
from ..engine.grid import GridRun, read_summary, run_grid
from ..engine.selection import Selection, candidates, check_grid, choose_cells, curves_markdown, exported, with_start
from ..errors import ConfigError, UsageError
from ..fileio import writable_directory, write_json_atomic, write_text_atomic
from ..metrics.evaluation import score_model
from ..models.weights import RUN_MODEL_FILE
from ..plotting import figure
from ..reporting import cell, markdown_table, statistic, write_csv
from .recipe import DATASET, DataVariant, GuidanceRecipe, GuidedVariant, check_weight_grid

__all__ = ["CELL", "GuidanceStudy", "TEST_METRICS", "baseline_of", "run_study", "score_on_test", "test_scores_file"]

logger = logging.getLogger(__name__)

#: what every model is scored on in the test split (fractions in [0, 1])
TEST_METRICS = ("accuracy", "worst_group_accuracy", "epg", "iou")
#: the fields of a record that make one cell of a table (seeds and a method's candidate settings are within a cell)
CELL = (*asdict(DataVariant()), "method", "fraction")


def score_on_test(model_file: str | Path, dataset: AnnotatedDataset, image_size: int,
                 device: torch.device | str = "cpu", batch_size: int = 64, regions: str = "boxes") -> dict[str, float]:
    """Accuracy, worst-group and per-group accuracy (``accuracy/<group name>``), and EPG / IoU of B-cos contributions
    at the input for the ground-truth class against ``regions`` (default the boxes;
    :data:`~rightreasons.guidance.recipe.TEST_REGIONS`), of a model file on ``dataset``
    (:func:`~rightreasons.metrics.evaluation.score_model` at ``image_size``)."""
    r = score_model(model_file, dataset, image_size=image_size, method="bcos", layer="input", batch_size=batch_size,
                    device=device, regions=regions)
    keys = [*TEST_METRICS, *(f"accuracy/{name}" for name in dataset.group_names)]
    return {k: float(r[k]) for k in keys}


def test_scores_file(run_dir: str | Path, regions: str = "boxes") -> Path:
    """Where a study keeps the test scores of the run in ``run_dir`` with EPG and IoU against ``regions``:
    ``test.json`` for the boxes, ``test-<regions>.json`` otherwise."""
    return Path(run_dir) / ("test.json" if regions == "boxes" else f"test-{regions}.json")


@dataclass
class GuidanceStudy:
    """A grid of data variants × annotated fractions × guided methods × seeds (YAML: ``configs/studies/``).

    Every list is an axis; the study trains ``len(variants) × seeds`` baselines and ``len(variants) × seeds ×
    len(annotated_fraction) × len(methods)`` guided fine-tunings.
    """

    recipe: GuidanceRecipe = field(default_factory=GuidanceRecipe)
    """How each baseline and fine-tuning trains."""
    seeds: int = 3
    """Training seeds per data variant (0, 1, ...); the tables give mean ± sample std over them."""
    correlation: list[float] = field(default_factory=lambda: [1.0])
    """Axis: the share of training images whose background matches the class (the shortcut), each in [0, 1]."""
    difficulty: list[float] = field(default_factory=lambda: [0.5])
    """Axis: how hard the birds are to see (smaller, blended into the background, noisier), each in [0, 1]."""
    data_seed: list[int] = field(default_factory=lambda: [0])
    """Axis: the seed that draws the images of a data variant."""
    image_size: list[int] = field(default_factory=lambda: [64])
    """Axis: the side of the generated images in pixels (at least 16)."""
    annotated_fraction: list[float] = field(default_factory=lambda: [0.1])
    """Axis: the share of training images with boxes in the guided fine-tunings."""
    methods: list[GuidedVariant] = field(default_factory=lambda: [GuidedVariant("energy", "energy", 5.0),
                                                                  GuidedVariant("l1", "l1", 5.0)])
    """Axis: the guided fine-tunings, each with a distinct `name`."""
    grid: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    """Per method name, hyper-parameters to choose on validation (`{energy: {weight: [0, 1, 5, 25]}}`): every
    combination trains with every seed; per cell the best mean validation score is reported. A `weight` grid holds
    0."""
    baseline_candidate: bool = True
    """Whether the baseline itself (no fine-tuning) is a candidate of every guided cell's selection, so that a cell
    never chooses a fine-tuning worse on validation than the model it started from (chosen setting `baseline`);
    false: only the method's settings compete (to measure a fixed λ)."""

    def __post_init__(self) -> None:
        expect(self.seeds >= 1, "seeds", self.seeds, "an integer >= 1")
        for key in ("correlation", "difficulty", "data_seed", "image_size", "annotated_fraction", "methods"):
            expect(len(getattr(self, key)) > 0, key, getattr(self, key), "a non-empty list")
        for key, option in (("correlation", "correlation"), ("difficulty", "difficulty"), ("data_seed", "seed"),
                            ("image_size", "size")):  # the data axes, by the generator's own rules
            for value in getattr(self, key):
                try:
                    SyntheticConfig(**{option: value})
                except UsageError as e:
                    raise FieldError(key, str(e)) from None
        expect(all(0 < f <= 1 for f in self.annotated_fraction), "annotated_fraction", self.annotated_fraction,
               "values in (0, 1]")
        names = [m.name for m in self.methods]
        expect(len(set(names)) == len(names), "methods", names, "methods with distinct names")
        expect(all(m.annotated_fraction is None for m in self.methods), "methods", names,
               "methods without annotated_fraction (the study's fractions are its annotated_fraction axis)")
        check_grid(self.grid, self.methods)
        check_weight_grid(self.grid, self.methods)
        self._check_trainings()

    def _check_trainings(self) -> None:
        """Build, without running, the training config of every baseline and fine-tuning, so that a value a training
        would refuse (an unknown model, a loss, a learning rate) is an error before the first training starts."""
        unused = Path("unused")
        for variant in self.variants:
            try:
                self.recipe.run(variant, 0, unused).config()
            except ConfigError as e:
                raise FieldError("recipe", f"the baselines would not train: {e}") from None
            for i, method in enumerate(self.methods):
                for fraction, (_, setting) in itertools.product(self.annotated_fraction, self.settings(method)):
                    try:
                        self.recipe.run(variant, 0, unused, setting, fraction, baseline=unused).config()
                    except ConfigError as e:
                        raise FieldError(f"methods[{i}]", f"its fine-tunings would not train: {e}") from None

    @property
    def variants(self) -> list[DataVariant]:
        return [DataVariant(c, d, s, size) for c in self.correlation for d in self.difficulty
                for s in self.data_seed for size in self.image_size]

    def settings(self, method: GuidedVariant) -> list[tuple[str, GuidedVariant]]:
        """``(label, variant)`` of every candidate setting of ``method`` by its ``grid`` entry
        (:func:`~rightreasons.engine.selection.candidates`)."""
        return candidates(method, self.grid.get(method.name, {}), f"grid.{method.name}")

    @property
    def trainings(self) -> int:
        """How many trainings the study runs."""
        guided = sum(len(self.settings(m)) for m in self.methods)
        return len(self.variants) * self.seeds * (1 + len(self.annotated_fraction) * guided)


def _runs(study: GuidanceStudy, out: Path) -> list[tuple[GridRun, dict[str, Any]]]:
    """Every training of ``study`` in training order (each baseline before its fine-tunings), with the fields of
    its record: data variant, seed, method, candidate setting, box fraction."""
    runs = []
    for variant in study.variants:
        for seed in range(study.seeds):
            folder = out / variant.label / f"seed-{seed}"
            baseline = study.recipe.run(variant, seed, folder / "baseline")
            runs.append((GridRun(f"{variant.label} seed {seed} baseline", baseline.config()),
                         {**asdict(variant), "seed": seed, "method": "baseline", "setting": "", "fraction": None}))
            for fraction in study.annotated_fraction:
                for method in study.methods:
                    for label, setting in study.settings(method):
                        title = " ".join(filter(None, (method.name, label)))
                        recipe = study.recipe.run(variant, seed,
                                                  folder / f"{title.replace(' ', '-')}-boxes{fraction:g}", setting,
                                                  fraction, baseline.model_file)
                        runs.append((GridRun(f"{variant.label} seed {seed} {title} boxes {fraction:g}",
                                             recipe.config()),
                                     {**asdict(variant), "seed": seed, "method": method.name, "setting": label,
                                      "fraction": fraction}))
    return runs


def baseline_of(runs: Sequence[tuple[GridRun, dict[str, Any]]],
                guided: Collection[str]) -> Callable[[Mapping[str, Any]], Any]:
    """For :func:`~rightreasons.engine.selection.with_start`: the ``(run, record)`` of the baseline that the run of
    a record of one of the ``guided`` methods fine-tunes (among ``runs``: same data variant and seed); ``None`` for
    the records of other methods."""
    variant = tuple(asdict(DataVariant()))
    baselines = {(*(f[k] for k in variant), f["seed"]): (r, f) for r, f in runs if f["method"] == "baseline"}
    return lambda f: baselines[(*(f[k] for k in variant), f["seed"])] if f["method"] in guided else None


def _scored(run_dir: Path, score: Callable[[Path], dict[str, float]], regions: str) -> dict[str, float]:
    """The test metrics of the finished run in ``run_dir`` with EPG and IoU against ``regions``, read from
    :func:`test_scores_file` or scored and written there (also where that file lacks one of :data:`TEST_METRICS`:
    written by hand, e.g. EPG alone)."""
    result = test_scores_file(run_dir, regions)
    if result.is_file():
        kept = json.loads(result.read_text())
        if isinstance(kept, dict) and set(TEST_METRICS) <= set(kept):
            return kept
    metrics = score(run_dir / RUN_MODEL_FILE)
    write_json_atomic(result, metrics)
    return metrics


def run_study(study: GuidanceStudy, out: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Train every cell of ``study`` into ``out`` on the grid runner (:func:`~rightreasons.engine.grid.run_grid`:
    finished runs are kept, interrupted ones resume), choose every cell's setting on validation
    (:func:`~rightreasons.engine.selection.choose_cells`), score the chosen runs on the test split (kept in
    ``<run>/test.json``) and write ``study.json``, ``study.md``, ``study.csv`` and ``study.png``; returns the results
    (``rows`` as in the table, ``selection``: every cell's validation curve)."""
    out, recipe = writable_directory(out), study.recipe
    runs = _runs(study, out)
    run_grid([grid_run for grid_run, _ in runs])
    trained = [(r, {**f, **exported(read_summary(r.output_dir))}) for r, f in runs]
    if study.baseline_candidate:
        trained = with_start(trained, CELL, baseline_of(trained, [m.name for m in study.methods]))
    choices = choose_cells([f for _, f in trained], CELL, recipe.select)
    chosen = [(r, f) for r, f in trained if f["setting"] == choices[tuple(f[k] for k in CELL)].chosen]
    records: list[dict[str, Any]] = []
    test_sets: dict[DataVariant, AnnotatedDataset] = {}
    for k, (grid_run, fields) in enumerate(chosen, 1):
        variant = DataVariant(*(fields[key] for key in asdict(DataVariant())))
        if variant not in test_sets:
            test_sets[variant] = load_dataset(DATASET, None, "test", **recipe.data_options(variant, "test"))
        metrics = _scored(grid_run.output_dir, lambda model_file: score_on_test(
            model_file, test_sets[variant], variant.image_size, device, recipe.batch_size, recipe.test_regions),
            recipe.test_regions)
        records.append({**fields, **metrics})
        logger.info("[%d/%d] %s: worst group %.3f", k, len(chosen), grid_run.name, metrics["worst_group_accuracy"])
    rows = summarize_study(records, choices)
    selection = [{**dict(zip(CELL, key)), **choice.to_dict()} for key, choice in choices.items()]
    results = {"study": asdict(study), "selection": selection, "records": records, "rows": rows,
               "helps": helps(rows)}
    write_json_atomic(out / "study.json", results)
    fixed = [*asdict(DataVariant()), "seed", "method", "setting", "fraction"]
    write_csv(out / "study.csv", records, [*fixed, *dict.fromkeys(k for r in records for k in r if k not in fixed)])
    write_text_atomic(out / "study.md", study_markdown(study, rows) + curves_markdown(choices, CELL))
    plot_study(out / "study.png", study, rows)
    return results


def summarize_study(records: Sequence[dict[str, Any]],
                    choices: dict[tuple[Any, ...], Selection]) -> list[dict[str, Any]]:
    """One row per cell (data variant, method, fraction): its chosen ``setting`` among ``candidates``, mean ± std
    over seeds of the validation score that selected each checkpoint (``validation``), of the epoch it was taken at
    (``epoch``), of :data:`TEST_METRICS` and of the worst-group gain over the same seed's baseline (``gain``)."""
    variant_keys = tuple(asdict(DataVariant()))
    baselines = {(tuple(r[k] for k in variant_keys), r["seed"]): r for r in records if r["method"] == "baseline"}
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in records:
        cells.setdefault(tuple(r[k] for k in CELL), []).append(r)
    rows = []
    for key, members in cells.items():
        row: dict[str, Any] = {**dict(zip(CELL, key)), "setting": choices[key].chosen,
                               "candidates": len(choices[key].curve), "seeds": len(members)}
        for metric in ("validation", "epoch", *TEST_METRICS):
            row[metric] = statistic([m[metric] for m in members])
        gains = [m["worst_group_accuracy"] - baselines[(key[:len(variant_keys)], m["seed"])]["worst_group_accuracy"]
                 for m in members]
        row["gain"] = statistic(gains)
        rows.append(row)
    return rows


def study_markdown(study: GuidanceStudy, rows: Sequence[dict[str, Any]]) -> str:
    """The study's table: per variant, method and fraction, test metrics in % and the worst-group gain in p.p."""
    r = study.recipe
    against = "" if r.test_regions == "boxes" else f" ({r.test_regions})"
    table = [{"correlation": row["correlation"], "difficulty": row["difficulty"], "data seed": row["data_seed"],
              "size": row["image_size"], "method": row["method"],
              "boxes": "" if row["fraction"] is None else f"{100 * row['fraction']:g} %",
              "setting": row["setting"] + (f" (of {row['candidates']})" if row["candidates"] > 1 else ""),
              "epochs": f"{row['epoch']['mean']:.1f}",
              f"val. {r.select}": cell(row["validation"]), "worst group": cell(row["worst_group_accuracy"]),
              "gain (p.p.)": "" if row["method"] == "baseline" else cell(row["gain"], signed=True),
              "overall": cell(row["accuracy"]), f"EPG{against}": cell(row["epg"]), f"IoU{against}": cell(row["iou"])}
             for row in rows]
    columns = ["correlation", "difficulty", "data seed", "size", "method", "boxes", "setting", "epochs",
               f"val. {r.select}", "worst group", "gain (p.p.)", "overall", f"EPG{against}", f"IoU{against}"]
    methods = "; ".join(f"{m.name}: {m.loss}, λ = {m.weight:g}" + (f", boxes dilated by {m.dilation:.0%}"
                                                                   if m.dilation else "") for m in study.methods)
    grid = "; ".join(f"{name}: " + ", ".join(f"{key} ∈ {{{', '.join(f'{v:g}' for v in values)}}}"
                                             for key, values in axes.items()) for name, axes in study.grid.items())
    epochs = count(r.guided_epochs, "epoch") + ("" if r.patience is None else
                                                 f" at most, stopped after {r.patience} without a new best")
    return "\n".join([
        "# Guidance study on synthetic-birds\n",
        f"{study.trainings} trainings: {len(study.variants)} data variant(s) × {study.seeds} seed(s) × (baseline + "
        f"{len(study.annotated_fraction)} box fraction(s) × the candidate settings of {len(study.methods)} "
        f"method(s)). Baseline: {r.model} "
        f"({r.model_kwargs}), {count(r.baseline_epochs, 'epoch')}, lr {r.baseline_lr:g}; guided: fine-tunings of it "
        f"for {epochs}, lr {r.guided_lr:g} ({methods}; chosen on validation: {grid or 'none'}); with fewer than "
        f"{r.min_annotated_per_batch} "
        f"annotated images per batch on average, every batch holds {r.min_annotated_per_batch}. Every training "
        f"exports its checkpoint with the best validation {r.select} (group-balanced validation split); the test "
        f"split is only reported. setting: the candidate chosen by the best mean validation {r.select} over the "
        f"seeds" + (" (the baseline, not fine-tuned, is a candidate of every guided cell: `baseline` where no "
                    "fine-tuning beat it)" if study.baseline_candidate else "") +
        f"; epochs: mean epoch of the exported checkpoints; val. {r.select}: the validation score that chose; "
        "the other columns: test split, %, mean ± std over seeds; gain = worst-group accuracy minus that of the same "
        f"seed's baseline; EPG and IoU of B-cos contributions at the input against the {r.test_regions} "
        "(`recipe.test_regions`).\n",
        markdown_table(table, columns), "\n## Where guidance helps\n",
        "Per guided method and box share over the data variants: the cells where the validation-chosen model's mean "
        "test worst-group accuracy is at least the baseline's minus 1 p.p., and the cells' mean gain (p.p.; "
        "± std over the cells; min and max).\n",
        markdown_table(helps(rows), ["method", "boxes", "cells", "held", "mean gain", "min gain", "max gain"])])


def helps(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per guided method and box share: in how many of its cells (data variants) the mean worst-group gain over the
    baseline is >= -1 p.p. (``held``), and the mean, min and max of the cells' mean gains (p.p.)."""
    by_method: dict[tuple[str, float], list[float]] = {}
    for row in rows:
        if row["method"] != "baseline":
            by_method.setdefault((row["method"], row["fraction"]), []).append(100 * row["gain"]["mean"])
    return [{"method": method, "boxes": f"{100 * fraction:g} %", "cells": len(gains),
             "held": f"{sum(g >= -1 for g in gains)} of {len(gains)}",
             "mean gain": cell({"mean": statistics.fmean(gains) / 100,
                                "std": statistics.stdev(gains) / 100 if len(gains) > 1 else None}, signed=True),
             "min gain": f"{min(gains):+.1f}", "max gain": f"{max(gains):+.1f}"}
            for (method, fraction), gains in by_method.items()]


def plot_study(path: Path, study: GuidanceStudy, rows: Sequence[dict[str, Any]]) -> None:
    """Worst-group accuracy against the box fraction, one panel per (correlation, difficulty), a line per method:
    per fraction the mean over the panel's data seeds and image sizes of the mean over seeds (error bars: the mean of
    their std over seeds), the baseline as a dashed line."""
    panels = [(c, d) for c in study.correlation for d in study.difficulty]
    cols = len(study.difficulty)
    with figure(path, len(study.correlation), cols, title="Worst-group accuracy (test) vs share of boxes",
                sharey=True) as (_, axes):
        for k, (c, d) in enumerate(panels):
            ax = axes[k // cols][k % cols]
            here = [r for r in rows if r["correlation"] == c and r["difficulty"] == d]
            base = [r["worst_group_accuracy"]["mean"] for r in here if r["method"] == "baseline"]
            if base:
                ax.axhline(100 * statistics.fmean(base), linestyle="--", color="grey", label="baseline")
            for method in study.methods:
                by_fraction: dict[float, list[dict[str, Any]]] = {}
                for r in here:
                    if r["method"] == method.name:
                        by_fraction.setdefault(r["fraction"], []).append(r["worst_group_accuracy"])
                fractions = sorted(by_fraction)
                ax.errorbar([100 * f for f in fractions],
                            [100 * statistics.fmean(s["mean"] for s in by_fraction[f]) for f in fractions],
                            yerr=[100 * statistics.fmean(s["std"] or 0 for s in by_fraction[f]) for f in fractions],
                            marker="o", capsize=3, label=method.name)
            ax.set_xscale("log")
            ax.set_title(f"correlation {c:g}, difficulty {d:g}")
            ax.set_xlabel("boxes on % of training images")
            ax.set_ylabel("worst-group accuracy (%)")
            ax.set_ylim(0, 100)
        axes[0][0].legend(fontsize="small")
