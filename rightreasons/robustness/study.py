"""Box guidance beside the group-robustness methods, at equal annotation cost (``rightreasons study robustness``):
:class:`RobustnessStudy` (the grid, loadable from YAML) and :func:`run_study`.

Per data variant of ``synthetic-birds`` (:class:`~rightreasons.guidance.DataVariant`) and training seed the study
trains, on the grid runner (:func:`~rightreasons.engine.grid.run_grid`; finished runs are kept, interrupted ones
resume):

* ERM — the guidance recipe's baseline (:class:`~rightreasons.guidance.GuidanceRecipe`);
* every trained method of ``robust`` (:class:`~rightreasons.robustness.recipe.RobustVariant`: reweighting,
  subsampling, GroupDRO from scratch with the baseline's schedule; JTT as two runs, a first-stage ERM for ``T`` epochs
  exporting its last weights, then the up-weighted second stage);
* every box-guided fine-tuning of the baseline (``methods`` × ``annotated_fraction``, as the guidance study);

each method once per candidate setting of its hyper-parameters in ``grid`` (every combination; JTT's first stage once
per ``T``). Every training selects its exported checkpoint by ``recipe.select`` on the group-balanced validation split;
per method (and box fraction) the setting with the best mean validation score over the seeds is chosen
(:func:`~rightreasons.engine.selection.choose`, the rule of every study; a λ grid of a guided method holds 0; with
``baseline_candidate``, the default, ERM itself — the model the guided runs fine-tune — is a candidate of every guided
cell, chosen as ``baseline`` where no fine-tuning beats it) and only its runs are scored on the test split
(``<run>/test.json``). DFR (:mod:`rightreasons.robustness.dfr`) then retrains the last layer of the baseline and, with
``dfr_on_guided``, of the chosen guided runs (guidance then DFR), selecting its regularisation on half of the
validation split (``<run>/dfr.json``). The test split never chooses anything.

Reported per run: worst-group and mean test accuracy, the test group accuracies weighted by the training split's group
proportions (the average DFR's paper reports), EPG (of B-cos contributions; not for DFR, whose new last layer is not
a B-cos layer), and the annotation cost: training/held-out images whose group label the method trains on, and
training images with boxes. Every method also uses the validation split's group labels for model selection.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from ..classification.recipe import TrainingRun
from ..config import FieldError, expect
from ..console import count
from ..data import load_dataset
from ..engine.grid import GridRun, read_summary, run_grid
from ..engine.selection import Selection, candidates, check_grid, choose_cells, curves_markdown, exported, with_start
from ..errors import ConfigError
from ..fileio import writable_directory, write_json_atomic, write_text_atomic
from ..guidance.recipe import DATASET, DataVariant, GuidanceRecipe, GuidedVariant, check_weight_grid
from ..guidance.study import CELL, baseline_of, score_on_test, test_scores_file
from ..models.weights import RUN_MODEL_FILE
from ..plotting import figure
from ..reporting import cell, markdown_table, statistic, write_csv
from .dfr import deep_feature_reweighting, extract_features, score_last_layer
from .objectives import group_counts
from .recipe import RobustRun, RobustVariant

__all__ = ["RobustnessStudy", "run_study", "weighted_accuracy"]

logger = logging.getLogger(__name__)

METRICS = ("accuracy", "worst_group_accuracy", "weighted_accuracy", "epg")
WATERBIRDS = "waterbirds100"
#: every group in the validation split: model selection by worst group and DFR's balanced subsets need them
WATERBIRDS_OPTIONS = {"train_like_val": False}


def weighted_accuracy(scores: dict[str, float], group_names: Sequence[str], train_counts: torch.Tensor) -> float:
    """Σ_g p_g · acc_g: the group accuracies ``scores["accuracy/<name>"]`` weighted by the training split's group
    proportions ``p_g = n_g / n`` (groups without training images weigh nothing)."""
    p = train_counts.double() / train_counts.sum()
    return float(sum(p[g] * scores[f"accuracy/{name}"] for g, name in enumerate(group_names) if p[g] > 0))


@dataclass
class RobustnessStudy:
    """A grid of data variants × methods × seeds (YAML: ``configs/studies/robustness.yaml``).

    ``waterbirds_root`` (a prepared Waterbirds-100 folder) runs the study on it instead of ``synthetic-birds``: one
    variant per ``image_size`` (the other data axes do not apply), with every group in the validation split
    (``train_like_val: false``), which model selection and DFR need.
    """

    recipe: GuidanceRecipe = field(default_factory=GuidanceRecipe)
    seeds: int = 3
    correlation: list[float] = field(default_factory=lambda: [0.95])
    difficulty: list[float] = field(default_factory=lambda: [0.5])
    data_seed: list[int] = field(default_factory=lambda: [0])
    image_size: list[int] = field(default_factory=lambda: [32])
    robust: list[RobustVariant] = field(default_factory=lambda: [
        RobustVariant("reweight", "reweight"), RobustVariant("subsample", "subsample"),
        RobustVariant("groupdro", "groupdro", adjustment=1.0), RobustVariant("jtt", "jtt")])
    annotated_fraction: list[float] = field(default_factory=lambda: [0.01, 0.1])
    methods: list[GuidedVariant] = field(default_factory=lambda: [GuidedVariant("energy", "energy", 5.0),
                                                                  GuidedVariant("l1", "l1", 5.0)])
    grid: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    dfr_on_guided: bool = True
    dfr_retrains: int = 20
    dfr_chooses: bool = False
    """With ``dfr_on_guided``: choose the guided setting that DFR follows by DFR's own validation score (every
    candidate run of a guided cell fitted, scored on the half of the validation split DFR does not train on) instead
    of by the guided run's; with ``baseline_candidate``, guided + DFR is then never below ERM + DFR on validation."""
    waterbirds_root: str | None = None
    baseline_candidate: bool = True
    """Whether ERM itself (the guided runs' starting model, not fine-tuned) is a candidate of every guided cell's
    selection (as in the guidance study)."""

    def __post_init__(self) -> None:
        expect(self.seeds >= 1, "seeds", self.seeds, "an integer >= 1")
        expect(self.dfr_retrains >= 1, "dfr_retrains", self.dfr_retrains, "an integer >= 1")
        expect(self.dfr_on_guided or not self.dfr_chooses, "dfr_chooses", self.dfr_chooses,
               "false unless dfr_on_guided is true (it chooses what DFR retrains of the guided runs)")
        for key in ("correlation", "difficulty", "data_seed", "image_size"):
            expect(len(getattr(self, key)) > 0, key, getattr(self, key), "a non-empty list")
        expect(all(0 < f <= 1 for f in self.annotated_fraction), "annotated_fraction", self.annotated_fraction,
               "values in (0, 1]")
        names = ["baseline", *(m.name for m in self.robust), *(m.name for m in self.methods)]
        expect(len(set(names)) == len(names), "robust", names, "methods with distinct names (also from methods)")
        check_grid(self.grid, [*self.robust, *self.methods])
        check_weight_grid(self.grid, self.methods)
        try:
            self.runs(Path("unused"))
        except ConfigError as e:
            raise FieldError("recipe", f"a training of the study would not start: {e}") from None

    @property
    def variants(self) -> list[DataVariant]:
        if self.waterbirds_root is not None:
            return [DataVariant(image_size=size) for size in self.image_size]
        return [DataVariant(c, d, s, size) for c in self.correlation for d in self.difficulty
                for s in self.data_seed for size in self.image_size]

    def label(self, variant: DataVariant) -> str:
        """The folder and panel name of ``variant``."""
        return variant.label if self.waterbirds_root is None else f"{WATERBIRDS}-{variant.image_size}px"

    def on_data(self, run: TrainingRun) -> TrainingRun:
        """``run`` on the study's data: as built (``synthetic-birds``) or on ``waterbirds_root``."""
        if self.waterbirds_root is None:
            return run
        return replace(run, data=WATERBIRDS, data_root=self.waterbirds_root, data_options=dict(WATERBIRDS_OPTIONS),
                       data_split_options={})

    def load(self, variant: DataVariant, split: str) -> Any:
        """Split ``split`` of ``variant``."""
        if self.waterbirds_root is None:
            return load_dataset(DATASET, None, split, **self.recipe.data_options(variant, split))
        return load_dataset(WATERBIRDS, self.waterbirds_root, split, **WATERBIRDS_OPTIONS)

    def runs(self, out: Path) -> list[tuple[GridRun, dict[str, Any]]]:
        """Every training in training order (each before the runs that start from it), with its record's fields:
        data variant, seed, method, box fraction, and ``scored`` (False for JTT's first stage)."""
        runs: list[tuple[GridRun, dict[str, Any]]] = []
        recipe = self.recipe
        for variant in self.variants:
            for seed in range(self.seeds):
                folder = out / self.label(variant) / f"seed-{seed}"
                fields = {**asdict(variant), "seed": seed}

                def add(name: str, run: TrainingRun, method: str, fraction: float | None = None,
                        scored: bool = True, setting: str = "") -> None:
                    runs.append((GridRun(f"{self.label(variant)} seed {seed} {name}", self.on_data(run).config()),
                                 {**fields, "method": method, "setting": setting, "fraction": fraction,
                                  "scored": scored}))

                baseline = recipe.run(variant, seed, folder / "baseline")
                add("baseline", baseline, "baseline")
                stage1: dict[int, str] = {}
                for method in self.robust:
                    for label, robust in self.settings(method):
                        title = " ".join(filter(None, (robust.name, label)))
                        error_set_from = None
                        if robust.method == "jtt":
                            epochs = robust.first_stage_epochs
                            if epochs not in stage1:
                                first = TrainingRun(**{**vars(baseline), "epochs": epochs, "export": "last",
                                                       "output_dir": str(folder / f"{robust.name}-stage1-{epochs}ep")})
                                add(f"{robust.name} stage 1 ({count(epochs, 'epoch')})", first, robust.name,
                                    scored=False)
                                stage1[epochs] = first.output_dir
                            error_set_from = stage1[epochs]
                        run = RobustRun(**{**vars(baseline), "output_dir": str(folder / title.replace(" ", "-"))},
                                        robustness=robust.section(error_set_from))
                        add(title, run, robust.name, setting=label)
                for fraction in self.annotated_fraction:
                    for method in self.methods:
                        for label, guided in self.settings(method):
                            title = " ".join(filter(None, (guided.name, label)))
                            run = recipe.run(variant, seed, folder / f"{title.replace(' ', '-')}-boxes{fraction:g}",
                                             guided, fraction, baseline.model_file)
                            add(f"{title} boxes {fraction:g}", run, guided.name, fraction, setting=label)
        return runs

    def settings(self, method: Any) -> list[tuple[str, Any]]:
        """``(label, variant)`` of every candidate setting of ``method`` (a :class:`RobustVariant` or
        :class:`~rightreasons.guidance.GuidedVariant`) by its ``grid`` entry
        (:func:`~rightreasons.engine.selection.candidates`)."""
        return candidates(method, self.grid.get(method.name, {}), f"grid.{method.name}")

    def dfr_bases(self, runs: Sequence[tuple[GridRun, dict[str, Any]]]) -> list[tuple[GridRun, dict[str, Any]]]:
        """Those of ``runs`` whose last layer DFR retrains: the baseline and, with ``dfr_on_guided``, the guided ones
        (:func:`run_study` passes the runs of the chosen settings)."""
        guided = {m.name for m in self.methods}
        return [(r, f) for r, f in runs if f["method"] == "baseline" or (self.dfr_on_guided and f["method"] in guided)]

    def dry_run(self) -> tuple[list[str], list[str]]:
        """The name of every training and of every DFR fit, in order (a DFR fit of a guided method with several
        candidate settings retrains the one chosen on validation; with ``dfr_chooses``, every candidate)."""
        runs = self.runs(Path("."))
        if self.dfr_chooses:
            return [r.name for r, _ in runs], [f"{r.name} + DFR" for r, _ in self.dfr_bases(runs)]
        fits: dict[tuple[Any, ...], str] = {}
        for r, f in self.dfr_bases(runs):
            key = (*(f[k] for k in CELL), f["seed"])
            fits[key] = f"{r.name} + DFR" if key not in fits else \
                f"{self.label(DataVariant(*key[:4]))} seed {f['seed']} {f['method']} boxes {f['fraction']:g} " \
                "(the setting chosen on validation) + DFR"
        return [r.name for r, _ in runs], list(fits.values())


def _cached(path: Path, compute: Any) -> dict[str, Any]:
    """The JSON object in ``path``, or ``compute()`` written there."""
    if path.is_file():
        return json.loads(path.read_text())
    result = compute()
    write_json_atomic(path, result)
    return result


def run_study(study: RobustnessStudy, out: str | Path, device: torch.device | str = "cpu") -> dict[str, Any]:
    """Train every run of ``study`` into ``out``, choose every method's setting on validation
    (:func:`~rightreasons.engine.selection.choose_cells`), fit DFR, score the chosen runs on the test split once (kept
    beside each run) and write ``study.json``, ``study.md``, ``study.csv`` and ``study.png``; returns the results."""
    out, recipe = writable_directory(out), study.recipe
    runs = [(r, f) for r, f in study.runs(out)]
    run_grid([r for r, _ in runs])
    scored = [(r, {**f, **exported(read_summary(r.output_dir))}) for r, f in runs if f["scored"]]
    if study.baseline_candidate:  # ERM is what the guided runs fine-tune; the other methods train from scratch
        scored = with_start(scored, CELL, baseline_of(scored, [m.name for m in study.methods]))
    choices = choose_cells([f for _, f in scored], CELL, recipe.select)
    chosen = [(r, f) for r, f in scored if f["setting"] == choices[tuple(f[k] for k in CELL)].chosen]
    records: list[dict[str, Any]] = []
    splits: dict[tuple[DataVariant, str], Any] = {}

    def split(variant: DataVariant, name: str) -> Any:
        if (variant, name) not in splits:
            splits[variant, name] = study.load(variant, name)
        return splits[variant, name]

    def variant_of(fields: dict[str, Any]) -> DataVariant:
        return DataVariant(*(fields[key] for key in asdict(DataVariant())))

    def dfr_fit(run_dir: Path, fields: dict[str, Any]) -> dict[str, Any]:
        """DFR on the run in ``run_dir`` (kept beside it in ``dfr.json``): the chosen C, every C's selection score
        and the retrained layer's test scores."""
        variant = variant_of(fields)
        val, test, model = split(variant, "val"), split(variant, "test"), run_dir / RUN_MODEL_FILE

        def fit() -> dict[str, Any]:
            result = deep_feature_reweighting(*extract_features(model, val, variant.image_size, recipe.batch_size,
                                                                device),
                                              val.num_classes, len(val.group_names), retrains=study.dfr_retrains,
                                              seed=fields["seed"])
            tested = score_last_layer(result.layer, *extract_features(model, test, variant.image_size,
                                                                      recipe.batch_size, device), val.group_names)
            return {"c": result.c, "selection": {str(c): s for c, s in result.selection.items()}, **tested}

        return _cached(run_dir / "dfr.json", fit)

    dfr_choices = {}
    if study.dfr_chooses:  # every guided candidate fitted; DFR's own validation score chooses
        fitted = [(r, {**f, "validation": _dfr_validation(dfr_fit(r.output_dir, f))})
                  for r, f in study.dfr_bases(scored) if f["method"] != "baseline"]
        dfr_choices = choose_cells([f for _, f in fitted], CELL, recipe.select)
        dfr_runs = [(r, f) for r, f in study.dfr_bases(chosen) if f["method"] == "baseline"] + \
            [(r, f) for r, f in fitted if f["setting"] == dfr_choices[tuple(f[k] for k in CELL)].chosen]
    else:
        dfr_runs = study.dfr_bases(chosen)
    dfr_of = {(*(f[k] for k in CELL), f["seed"]): (r, f) for r, f in dfr_runs}  # per cell and seed

    for grid_run, fields in chosen:
        variant = variant_of(fields)
        train, val, test = split(variant, "train"), split(variant, "val"), split(variant, "test")
        counts = group_counts(train.groups, len(train.group_names))
        robust = next((m for m in study.robust if m.name == fields["method"]), None)
        run_dir = grid_run.output_dir
        scores = _cached(test_scores_file(run_dir, recipe.test_regions), lambda: score_on_test(
            run_dir / RUN_MODEL_FILE, test, variant.image_size, device, recipe.batch_size, recipe.test_regions))
        base = {**fields, "boxes": round((fields["fraction"] or 0) * len(train)),
                "group_labels": robust.group_labels(len(train)) if robust else 0}
        records.append({**base, **{k: scores[k] for k in ("accuracy", "worst_group_accuracy", "epg")},
                        "weighted_accuracy": weighted_accuracy(scores, train.group_names, counts)})
        dfr_run = dfr_of.get((*(fields[k] for k in CELL), fields["seed"]))
        if dfr_run is None:
            continue
        fit = dfr_fit(dfr_run[0].output_dir, dfr_run[1])
        records.append({**base, **{k: dfr_run[1][k] for k in ("setting", "epoch", "stopped_early")},
                        "method": f"{fields['method']}+dfr",
                        "group_labels": len(val), "validation": _dfr_validation(fit), "accuracy": fit["accuracy"],
                        "worst_group_accuracy": fit["worst_group_accuracy"], "epg": None,
                        "weighted_accuracy": weighted_accuracy(fit, val.group_names, counts)})
    rows = summarize(records, choices)
    selection = [{**dict(zip(CELL, key)), **choice.to_dict()} for key, choice in choices.items()]
    selection += [{**dict(zip(CELL, key)), "after_dfr": True, **choice.to_dict()}
                  for key, choice in dfr_choices.items()]
    results = {"study": asdict(study), "selection": selection, "records": records, "rows": rows}
    write_json_atomic(out / "study.json", results)
    fixed = [*asdict(DataVariant()), "seed", "method", "setting", "fraction", "group_labels", "boxes"]
    write_csv(out / "study.csv", records, [*fixed, "validation", *METRICS])
    after_dfr = curves_markdown(dfr_choices, CELL, "Guided + DFR chosen on validation after DFR",
                                "DFR's worst-group accuracy on the half of the validation split it does not train "
                                "on (%, mean ± std over the seeds)")
    write_text_atomic(out / "study.md", study_markdown(study, rows) + curves_markdown(choices, CELL) + after_dfr)
    plot_study(out / "study.png", study, rows)
    return results


def _dfr_validation(fit: dict[str, Any]) -> float:
    """A DFR fit's validation score: the worst-group accuracy of its chosen C on the half it does not train on."""
    return fit["selection"][str(fit["c"])]


def summarize(records: Sequence[dict[str, Any]],
              choices: dict[tuple[Any, ...], Selection]) -> list[dict[str, Any]]:
    """One row per cell (data variant, method, box fraction): its chosen setting, how many it was chosen among
    (``candidates``; DFR's rows: those of the run it retrains), annotation cost and mean ± std over seeds of the
    validation score and :data:`METRICS` (EPG ``None`` where a method has none)."""
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in records:
        cells.setdefault(tuple(r[k] for k in CELL), []).append(r)
    rows = []
    for key, members in cells.items():
        trained = (*key[:-2], key[-2].removesuffix("+dfr"), key[-1])
        row: dict[str, Any] = {**dict(zip(CELL, key)), "setting": members[0]["setting"],
                               "candidates": len(choices[trained].curve), "seeds": len(members),
                               "group_labels": members[0]["group_labels"], "boxes": members[0]["boxes"]}
        for metric in ("validation", *METRICS):
            values = [m[metric] for m in members]
            row[metric] = None if any(v is None for v in values) else statistic(values)
        rows.append(row)
    return rows


def study_markdown(study: RobustnessStudy, rows: Sequence[dict[str, Any]]) -> str:
    """The study's table: test metrics in % (mean ± std over seeds) and the annotation cost of every method."""
    r = study.recipe
    epg = "EPG" if r.test_regions == "boxes" else f"EPG ({r.test_regions})"  # what recipe.test_regions scored against
    table = [{"correlation": row["correlation"], "difficulty": row["difficulty"], "size": row["image_size"],
              "method": row["method"], "boxes": "" if row["fraction"] is None else f"{100 * row['fraction']:g} %",
              "setting": row["setting"] + (f" (of {row['candidates']})" if row["candidates"] > 1 else ""),
              "worst group": cell(row["worst_group_accuracy"]), "mean": cell(row["accuracy"]),
              "train-weighted": cell(row["weighted_accuracy"]),
              epg: "n/a" if row["epg"] is None else cell(row["epg"]), "group labels": row["group_labels"],
              "box images": row["boxes"], f"val. {r.select}": cell(row["validation"])} for row in rows]
    columns = ["correlation", "difficulty", "size", "method", "boxes", "setting", "worst group", "mean",
               "train-weighted", epg, "group labels", "box images", f"val. {r.select}"]
    grid = "; ".join(f"{name}: " + ", ".join(f"{key} ∈ {{{', '.join(f'{v:g}' for v in values)}}}"
                                             for key, values in axes.items()) for name, axes in study.grid.items())
    trainings, fits = study.dry_run()
    return "\n".join([
        f"# Robustness study on {DATASET if study.waterbirds_root is None else WATERBIRDS}\n",
        f"{count(len(trainings), 'training')}, {count(len(fits), 'DFR fit')}, {count(study.seeds, 'seed')}. "
        f"ERM: {r.model} ({r.model_kwargs}), {count(r.baseline_epochs, 'epoch')}, lr {r.baseline_lr:g}; "
        "reweighting, subsampling, GroupDRO and JTT's second stage train with the same schedule; guided runs "
        f"fine-tune ERM for {count(r.guided_epochs, 'epoch')}, lr {r.guided_lr:g}; +dfr: DFR's last layer on that "
        f"run's features. Every training selects its checkpoint by validation {r.select} (group labels of the "
        "validation split, used by every method). setting: the hyper-parameters chosen among the study's grid "
        f"({grid or 'none'}) by the best mean validation {r.select} over the seeds (per box share for the guided "
        "methods" + ("; ERM itself, not fine-tuned, is a candidate of every guided cell: `baseline` where no "
                     "fine-tuning beat it" if study.baseline_candidate else "") +
        ("; +dfr of a guided method: the setting whose DFR fit scores best on DFR's own validation half (every "
           "candidate fitted), which may differ from the guided row's" if study.dfr_chooses else
           "; +dfr retrains the chosen run") + "); only the chosen setting's test numbers are reported. DFR chooses "
        "its regularisation on half of the validation split. Test split, %, mean ± std over seeds. mean: accuracy "
        "over the (group-balanced) test split; train-weighted: test group accuracies weighted by the training "
        "split's group proportions (DFR's average). group labels: images whose group label the method trains on "
        "(DFR: the validation split); box images: training images with boxes.\n",
        markdown_table(table, columns)])


def plot_study(path: Path, study: RobustnessStudy, rows: Sequence[dict[str, Any]]) -> None:
    """Worst-group test accuracy against the annotation count (group labels + box images, symlog axis), one panel
    per data variant, one marker per method and box fraction (error bars: std over seeds)."""
    variants = study.variants
    with figure(path, 1, len(variants), size=(6.0 * len(variants), 4.5),
                title="Worst-group accuracy (test) vs annotated images", sharey=True) as (_, axes):
        for ax, variant in zip(axes[0], variants):
            here = [r for r in rows if all(r[k] == v for k, v in asdict(variant).items())]
            for row in here:
                stat = row["worst_group_accuracy"]
                label = row["method"] + ("" if row["fraction"] is None else f" {100 * row['fraction']:g} %")
                ax.errorbar(row["group_labels"] + row["boxes"], 100 * stat["mean"], yerr=100 * (stat["std"] or 0),
                            marker="o", capsize=3, linestyle="none", label=label)
            ax.set_xscale("symlog", linthresh=max(1, math.ceil(min((r["boxes"] for r in here if r["boxes"]),
                                                                   default=1))))
            ax.set_title(study.label(variant))
            ax.set_xlabel("annotated images (group labels + boxes)")
            ax.set_ylabel("worst-group accuracy (%)")
            ax.set_ylim(0, 100)
        axes[0][0].legend(fontsize="x-small")
