"""Where does box guidance help? A baseline and guided fine-tunings of it over a grid of data variants, with seeds:
:class:`GuidanceRecipe` (how one cell trains), :class:`GuidanceStudy` (the grid, loadable from YAML) and
:func:`run_study` (``rightreasons study guidance``).

The benchmark is ``synthetic-birds`` (:mod:`rightreasons.data.synthetic`). A *data variant* fixes its shortcut
``correlation``, ``difficulty``, data ``seed`` and image size. Per variant and training seed a baseline is trained;
per annotated fraction and guided method a fine-tuning of that baseline. Every training validates each epoch on the
group-balanced validation split and exports the checkpoint with the best ``recipe.select`` metric (worst-group
accuracy by default); the test split is only scored, never used to choose. With few boxes (``fraction · batch_size <
min_annotated_per_batch``) the guided runs compose every batch of ``min_annotated_per_batch`` annotated images
(``guidance.annotated_per_batch``), so that the boxes act at every step.

Results are written as each run finishes (``<run>/test.json`` beside its ``summary.json``), so an interrupted study
resumes where it stopped; the tables are mean ± sample std over the seeds, and the worst-group gain over the baseline
is paired by seed.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..config import FieldError, expect
from ..data import AnnotatedDataset, SyntheticConfig, load_dataset, transforms_for
from ..engine.schema import GuidanceConfig
from ..errors import ConfigError, UsageError
from ..evaluation import classifier_evaluators, evaluate
from ..fileio import writable_directory, write_json_atomic, write_text_atomic
from ..hub import load_model
from ..plotting import figure
from ..reporting import markdown_table, write_csv
from .training import TrainingRun, run_training

__all__ = ["DataVariant", "GuidanceRecipe", "GuidanceStudy", "GuidedVariant", "TEST_METRICS", "run_study",
           "test_metrics"]

DATASET = "synthetic-birds"
#: what every model is scored on in the test split (fractions in [0, 1])
TEST_METRICS = ("accuracy", "worst_group_accuracy", "epg", "iou")
#: the validation metrics a recipe can select checkpoints by (validation during a study scores classification only)
SELECTABLE = ("score", "accuracy", "worst_group_accuracy")


@dataclass(frozen=True)
class GuidedVariant:
    """One guided fine-tuning: localisation ``loss`` with weight λ = ``weight`` on boxes dilated by ``dilation``;
    ``annotated_fraction`` (when set) overrides the share of training images with boxes (the demo's few-boxes
    variant; a study takes its fractions from its own axis)."""

    name: str
    loss: str
    weight: float
    dilation: float = 0.0
    annotated_fraction: float | None = None

    def __post_init__(self) -> None:
        expect(self.annotated_fraction is None or 0 < self.annotated_fraction <= 1, "annotated_fraction",
               self.annotated_fraction, "a fraction in (0, 1] or null")
        expect(self.name != "baseline" and bool(self.name.strip()), "name", self.name, "a name other than 'baseline'")
        expect(self.weight >= 0, "weight", self.weight, "a loss weight >= 0")
        expect(self.dilation >= 0, "dilation", self.dilation, "a fraction >= 0")


@dataclass(frozen=True)
class DataVariant:
    """A variant of the benchmark: shortcut ``correlation`` in training, ``difficulty``, ``data_seed`` (which images
    are drawn), ``image_size``."""

    correlation: float = 1.0
    difficulty: float = 0.5
    data_seed: int = 0
    image_size: int = 64

    @property
    def label(self) -> str:
        return f"corr{self.correlation:g}-diff{self.difficulty:g}-data{self.data_seed}-{self.image_size}px"


@dataclass
class GuidanceRecipe:
    """How one cell trains: the baseline from scratch, then guided fine-tunings of it (B-cos contributions at the
    input), each selecting its exported checkpoint on validation by ``select``.

    ``train_images`` (when set) fixes the size of the training and validation splits, ``test_images`` the test split's.
    """

    model: str = "bcos_resnet18"
    model_kwargs: dict[str, Any] = field(default_factory=lambda: {"inplanes": 16})
    batch_size: int = 64
    crop_scale: list[float] = field(default_factory=lambda: [0.5, 1.0])
    baseline_epochs: int = 10
    baseline_lr: float = 1e-3
    guided_epochs: int = 4
    guided_lr: float = 2e-3
    train_images: int | None = None
    test_images: int = 1000
    select: str = "worst_group_accuracy"
    min_annotated_per_batch: int = 2

    def __post_init__(self) -> None:
        for key in ("batch_size", "baseline_epochs", "guided_epochs", "test_images"):
            expect(getattr(self, key) >= 1, key, getattr(self, key), "an integer >= 1")
        expect(self.train_images is None or self.train_images >= self.batch_size, "train_images", self.train_images,
               "null or at least one batch")
        expect(0 <= self.min_annotated_per_batch < self.batch_size, "min_annotated_per_batch",
               self.min_annotated_per_batch, "an integer in [0, batch_size)")
        expect(self.select in SELECTABLE, "select", self.select,
               f"one of {', '.join(SELECTABLE)} (validation scores classification only)")

    def data_options(self, variant: DataVariant, split: str) -> dict[str, Any]:
        """``load_dataset`` options of ``split`` (train, val or test) of ``variant``."""
        count = self.test_images if split == "test" else self.train_images
        return {"correlation": variant.correlation, "difficulty": variant.difficulty, "seed": variant.data_seed,
                "size": variant.image_size, **({"n": count} if count else {})}

    def annotated_per_batch(self, fraction: float) -> int:
        """Annotated images put into every batch at ``fraction`` boxes: ``min_annotated_per_batch`` when a batch
        would hold fewer on average, else 0 (batches drawn without regard to boxes)."""
        return self.min_annotated_per_batch if 0 < fraction * self.batch_size < self.min_annotated_per_batch else 0

    def run(self, variant: DataVariant, seed: int, output_dir: Path, guided: GuidedVariant | None = None,
            fraction: float = 1.0, baseline: Path | None = None) -> TrainingRun:
        """The baseline (``guided=None``) or the fine-tuning of ``baseline`` with ``guided`` on ``fraction`` boxes."""
        if guided is not None and baseline is None:
            raise ValueError(f"guided variant {guided.name!r} needs the baseline's model file to fine-tune")
        guidance = None if guided is None else GuidanceConfig(
            method="bcos", layer="input", loss=guided.loss, weight=guided.weight, dilation=guided.dilation,
            annotated_per_batch=self.annotated_per_batch(fraction))
        return TrainingRun(
            output_dir=str(output_dir), seed=seed, model=self.model, model_kwargs=dict(self.model_kwargs),
            checkpoint=None if baseline is None else str(baseline), data=DATASET,
            data_options=self.data_options(variant, "train"), image_size=variant.image_size,
            batch_size=self.batch_size, crop_scale=list(self.crop_scale),
            epochs=self.guided_epochs if guided else self.baseline_epochs,
            lr=self.guided_lr if guided else self.baseline_lr, guidance=guidance,
            annotated_fraction=fraction if guided else 1.0,
            overrides={"eval": {"every_epochs": 1, "select": self.select}, "checkpoint": {"export": "best"}})


def test_metrics(model_file: str | Path, dataset: AnnotatedDataset, image_size: int,
                 device: torch.device | str = "cpu", batch_size: int = 64) -> dict[str, float]:
    """Accuracy, worst-group and per-group accuracy (``accuracy/<group name>``), and EPG / IoU of B-cos contributions
    at the input for the ground-truth class, of a model file on ``dataset`` (its transform is set for the model, at
    ``image_size``)."""
    model = load_model(model_file).to(device)
    dataset.transform = transforms_for(model, image_size, crop_fraction=1.0)
    r = evaluate(model, dataset, classifier_evaluators(dataset, "bcos", "input", batch_size=batch_size),
                 batch_size=batch_size, device=device)
    keys = [*TEST_METRICS, *(f"accuracy/{name}" for name in dataset.group_names)]
    return {k: float(r[k]) for k in keys}


@dataclass
class GuidanceStudy:
    """A grid of data variants × annotated fractions × guided methods × seeds (YAML: ``configs/studies/``).

    Every list is an axis; the study trains ``len(variants) × seeds`` baselines and ``len(variants) × seeds ×
    len(annotated_fraction) × len(methods)`` guided fine-tunings.
    """

    recipe: GuidanceRecipe = field(default_factory=GuidanceRecipe)
    seeds: int = 3
    correlation: list[float] = field(default_factory=lambda: [1.0])
    difficulty: list[float] = field(default_factory=lambda: [0.5])
    data_seed: list[int] = field(default_factory=lambda: [0])
    image_size: list[int] = field(default_factory=lambda: [64])
    annotated_fraction: list[float] = field(default_factory=lambda: [0.1])
    methods: list[GuidedVariant] = field(default_factory=lambda: [GuidedVariant("energy", "energy", 5.0),
                                                                  GuidedVariant("l1", "l1", 5.0)])

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
                for fraction in self.annotated_fraction:
                    try:
                        self.recipe.run(variant, 0, unused, method, fraction, baseline=unused).config()
                    except ConfigError as e:
                        raise FieldError(f"methods[{i}]", f"its fine-tunings would not train: {e}") from None

    @property
    def variants(self) -> list[DataVariant]:
        return [DataVariant(c, d, s, size) for c in self.correlation for d in self.difficulty
                for s in self.data_seed for size in self.image_size]

    @property
    def trainings(self) -> int:
        """How many trainings the study runs."""
        return len(self.variants) * self.seeds * (1 + len(self.annotated_fraction) * len(self.methods))


def _cached(run_dir: Path, train: Callable[[bool], Path], score: Callable[[Path], dict[str, float]]) -> dict[str, float]:
    """The metrics of the run in ``run_dir``: ``validation``, the selection metric's validation score of the exported
    checkpoint (from ``summary.json``), and the test metrics, read from ``test.json`` or trained (unless
    ``summary.json`` says it is done; ``train(resume)`` continues an interrupted training from its newest checkpoint)
    and scored, then written there."""
    result = run_dir / "test.json"
    if result.is_file():
        metrics = json.loads(result.read_text())
    else:
        model_file = run_dir / "model.safetensors" if (run_dir / "summary.json").is_file() else \
            train((run_dir / "checkpoints").is_dir())
        metrics = score(model_file)
        write_json_atomic(result, metrics)
    return {"validation": json.loads((run_dir / "summary.json").read_text())["best"]["score"], **metrics}


def run_study(study: GuidanceStudy, out: str | Path, log: Callable[[str], None] = lambda _: None,
              device: torch.device | str = "cpu") -> dict[str, Any]:
    """Train and score every cell of ``study`` into ``out`` (resuming finished runs) and write ``study.json``,
    ``study.md``, ``study.csv`` and ``study.png``; returns the results (``rows`` as in the table)."""
    out, recipe = writable_directory(out), study.recipe
    records: list[dict[str, Any]] = []
    done, total = 0, study.trainings
    for variant in study.variants:
        test_set = load_dataset(DATASET, None, "test", **recipe.data_options(variant, "test"))

        def score(model_file: Path) -> dict[str, float]:
            return test_metrics(model_file, test_set, variant.image_size, device, recipe.batch_size)

        for seed in range(study.seeds):
            folder = out / variant.label / f"seed-{seed}"
            baseline_dir = folder / "baseline"
            metrics = _cached(baseline_dir, lambda resume: Path(run_training(recipe.run(variant, seed, baseline_dir),
                                                                            resume)["model_file"]), score)
            records.append({**asdict(variant), "seed": seed, "method": "baseline", "fraction": None, **metrics})
            done += 1
            log(f"[{done}/{total}] {variant.label} seed {seed} baseline: worst group "
                f"{metrics['worst_group_accuracy']:.3f}")
            for fraction in study.annotated_fraction:
                for method in study.methods:
                    run_dir = folder / f"{method.name}-boxes{fraction:g}"
                    metrics = _cached(run_dir, lambda resume: Path(run_training(recipe.run(
                        variant, seed, run_dir, method, fraction, baseline_dir / "model.safetensors"), resume)
                        ["model_file"]), score)
                    records.append({**asdict(variant), "seed": seed, "method": method.name, "fraction": fraction,
                                    **metrics})
                    done += 1
                    log(f"[{done}/{total}] {variant.label} seed {seed} {method.name} boxes {fraction:g}: worst "
                        f"group {metrics['worst_group_accuracy']:.3f}")
    rows = summarize_study(records)
    results = {"study": asdict(study), "records": records, "rows": rows}
    write_json_atomic(out / "study.json", results)
    fixed = [*asdict(DataVariant()), "seed", "method", "fraction"]
    write_csv(out / "study.csv", records, [*fixed, *dict.fromkeys(k for r in records for k in r if k not in fixed)])
    write_text_atomic(out / "study.md", study_markdown(study, rows))
    plot_study(out / "study.png", study, rows)
    return results


def _stat(values: Sequence[float]) -> dict[str, Any]:
    return {"mean": statistics.fmean(values), "std": statistics.stdev(values) if len(values) > 1 else None,
            "n": len(values)}


def summarize_study(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (data variant, method, fraction): mean ± std over seeds of the validation score that selected
    each checkpoint (``validation``) and of :data:`TEST_METRICS`, and of the worst-group gain over the same seed's
    baseline (``gain``)."""
    variant_keys = tuple(asdict(DataVariant()))
    baselines = {(tuple(r[k] for k in variant_keys), r["seed"]): r for r in records if r["method"] == "baseline"}
    cells: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in records:
        cells.setdefault((*(r[k] for k in variant_keys), r["method"], r["fraction"]), []).append(r)
    rows = []
    for key, members in cells.items():
        row: dict[str, Any] = dict(zip((*variant_keys, "method", "fraction"), key))
        row["seeds"] = len(members)
        for metric in ("validation", *TEST_METRICS):
            row[metric] = _stat([m[metric] for m in members])
        gains = [m["worst_group_accuracy"] - baselines[(key[:len(variant_keys)], m["seed"])]["worst_group_accuracy"]
                 for m in members]
        row["gain"] = _stat(gains)
        rows.append(row)
    return rows


def _pp(stat: dict[str, Any], signed: bool = False) -> str:
    mean = f"{100 * stat['mean']:+.1f}" if signed else f"{100 * stat['mean']:.1f}"
    return mean if stat["std"] is None else f"{mean} ± {100 * stat['std']:.1f}"


def study_markdown(study: GuidanceStudy, rows: Sequence[dict[str, Any]]) -> str:
    """The study's table: per variant, method and fraction, test metrics in % and the worst-group gain in p.p."""
    r = study.recipe
    table = [{"correlation": row["correlation"], "difficulty": row["difficulty"], "data seed": row["data_seed"],
              "size": row["image_size"], "method": row["method"],
              "boxes": "" if row["fraction"] is None else f"{100 * row['fraction']:g} %",
              f"val. {r.select}": _pp(row["validation"]), "worst group": _pp(row["worst_group_accuracy"]),
              "gain (p.p.)": "" if row["method"] == "baseline" else _pp(row["gain"], signed=True),
              "overall": _pp(row["accuracy"]), "EPG": _pp(row["epg"]), "IoU": _pp(row["iou"])} for row in rows]
    columns = ["correlation", "difficulty", "data seed", "size", "method", "boxes", f"val. {r.select}",
               "worst group", "gain (p.p.)", "overall", "EPG", "IoU"]
    methods = "; ".join(f"{m.name}: {m.loss}, λ = {m.weight:g}" + (f", boxes dilated by {m.dilation:.0%}"
                                                                   if m.dilation else "") for m in study.methods)
    return "\n".join([
        "# Guidance study on synthetic-birds\n",
        f"{study.trainings} trainings: {len(study.variants)} data variant(s) × {study.seeds} seed(s) × (baseline + "
        f"{len(study.annotated_fraction)} box fraction(s) × {len(study.methods)} method(s)). Baseline: {r.model} "
        f"({r.model_kwargs}), {r.baseline_epochs} epochs, lr {r.baseline_lr:g}; guided: fine-tunings of it for "
        f"{r.guided_epochs} epochs, lr {r.guided_lr:g} ({methods}); with fewer than {r.min_annotated_per_batch} "
        f"annotated images per batch on average, every batch holds {r.min_annotated_per_batch}. Every training "
        f"exports its checkpoint with the best validation {r.select} (group-balanced validation split); the test "
        f"split is only reported. val. {r.select}: the validation score that chose the checkpoint; the other columns: "
        "test split, %, mean ± std over seeds; gain = worst-group accuracy minus that of the same seed's baseline.\n",
        markdown_table(table, columns)])


def plot_study(path: Path, study: GuidanceStudy, rows: Sequence[dict[str, Any]]) -> None:
    """Worst-group accuracy against the box fraction, one panel per (correlation, difficulty), a line per method
    (error bars: std over seeds and data seeds pooled by mean), the baseline as a dashed line."""
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
                points = sorted((r["fraction"], r["worst_group_accuracy"]) for r in here if r["method"] == method.name)
                ax.errorbar([100 * f for f, _ in points], [100 * s["mean"] for _, s in points],
                            yerr=[100 * (s["std"] or 0) for _, s in points], marker="o", capsize=3,
                            label=method.name)
            ax.set_xscale("log")
            ax.set_title(f"correlation {c:g}, difficulty {d:g}")
            ax.set_xlabel("boxes on % of training images")
            ax.set_ylabel("worst-group accuracy (%)")
            ax.set_ylim(0, 100)
        axes[0][0].legend(fontsize="small")
