"""The guidance study end to end on a tiny grid: every cell trained, chosen on validation, scored on test; the
tables and the figure written; an interrupted study resumes without retraining what is done; the CLI runs it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml

import rightreasons.engine.grid as grid_module
import rightreasons.guidance.study as study_module
from rightreasons.apps.cli import main
from rightreasons.config import from_dict
from rightreasons.errors import ConfigError
from rightreasons.guidance.recipe import GuidanceRecipe
from rightreasons.guidance.study import GuidanceStudy, run_study

TINY = {"recipe": {"model_kwargs": {"inplanes": 4}, "batch_size": 8, "baseline_epochs": 1, "guided_epochs": 1,
                   "train_images": 24, "test_images": 16, "min_annotated_per_batch": 2},
        "seeds": 1, "correlation": [1.0], "difficulty": [0.5], "image_size": [32],
        "annotated_fraction": [0.125, 1.0], "methods": [{"name": "energy", "loss": "energy", "weight": 1.0}],
        "baseline_candidate": False}  # every cell's one setting chosen and scored (the λ grid test has the baseline)


def run_tiny_study(out: Path) -> dict:
    """The tiny study into ``out`` on one thread (results depend on the thread count)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_study(from_dict(GuidanceStudy, TINY), out)
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("study")
    return out, run_tiny_study(out)


def test_every_cell_is_trained_selected_on_validation_and_scored_on_test(tiny_study):
    out, results = tiny_study
    assert [(r["method"], r["fraction"]) for r in results["records"]] == [("baseline", None), ("energy", 0.125),
                                                                          ("energy", 1.0)]
    folder = out / "corr1-diff0.5-data0-32px" / "seed-0"
    for run in ("baseline", "energy-boxes0.125", "energy-boxes1"):
        summary = json.loads((folder / run / "summary.json").read_text())
        assert summary["config"]["eval"]["select"] == "worst_group_accuracy"
        assert summary["config"]["checkpoint"]["export"] == "best"
        assert summary["config"]["data"]["val_split"] == "val" and summary["best"]["metric"] == "worst_group_accuracy"
        test = json.loads((folder / run / "test.json").read_text())
        assert set(test) >= {"accuracy", "worst_group_accuracy", "epg", "iou", "accuracy/G2 landbird/water"}
        record = next(r for r in results["records"] if run.startswith(r["method"]) and
                      (r["fraction"] is None or run.endswith(f"{r['fraction']:g}")))
        assert record["validation"] == summary["best"]["score"]  # what chose the checkpoint, beside what it scored
    few = json.loads((folder / "energy-boxes0.125" / "summary.json").read_text())["config"]
    assert few["guidance"]["annotated_per_batch"] == 2  # 12.5 % of a batch of 8 is one image on average
    assert few["model"]["checkpoint"] == str(folder / "baseline" / "model.safetensors")
    full = json.loads((folder / "energy-boxes1" / "summary.json").read_text())["config"]
    assert full["guidance"]["annotated_per_batch"] == 0


def test_tables_report_mean_std_and_the_paired_gain(tiny_study):
    out, results = tiny_study
    rows = {(r["method"], r["fraction"]): r for r in results["rows"]}
    baseline = results["records"][0]["worst_group_accuracy"]
    guided = results["records"][1]["worst_group_accuracy"]
    assert rows[("energy", 0.125)]["gain"]["mean"] == pytest.approx(guided - baseline)
    assert rows[("baseline", None)]["worst_group_accuracy"]["std"] is None  # one seed
    table = (out / "study.md").read_text()
    assert "| energy | 12.5 % |" in table and "| val. worst_group_accuracy |" in table
    assert (out / "study.png").stat().st_size > 0
    assert (out / "study.csv").read_text().splitlines()[0].startswith("correlation,difficulty,data_seed,image_size,"
                                                                      "seed,method,setting,fraction")


def test_the_weight_and_the_guided_epochs_are_chosen_on_validation_and_only_the_choice_is_tested(tmp_path,
                                                                                                  monkeypatch):
    """λ ∈ {0, 1} with 2 seeds and early stopping, the baseline itself a candidate: every candidate trains, the best
    mean validation worst-group accuracy chooses (never below λ = 0's nor the baseline's; here the baseline wins),
    the curve is in study.json and study.md, and the test split scores each seed's baseline and chosen run once."""
    calls, score = [], study_module.score_on_test

    def counted(model_file, *args, **kwargs):
        calls.append(Path(model_file).parent.name)
        return score(model_file, *args, **kwargs)

    monkeypatch.setattr(study_module, "score_on_test", counted)
    config = {**TINY, "seeds": 2, "annotated_fraction": [1.0], "grid": {"energy": {"weight": [0.0, 1.0]}},
              "recipe": {**TINY["recipe"], "guided_epochs": 3, "patience": 1}, "baseline_candidate": True}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        results = run_study(from_dict(GuidanceStudy, config), tmp_path)
    finally:
        torch.set_num_threads(threads)
    folder = tmp_path / "corr1-diff0.5-data0-32px"
    summaries = {(seed, w): json.loads((folder / f"seed-{seed}" / f"energy-weight{w}-boxes1" / "summary.json")
                                       .read_text()) for seed in (0, 1) for w in (0, 1)}
    assert all(s["config"]["eval"]["patience"] == 1 and s["config"]["optim"]["epochs"] == 3
               for s in summaries.values())
    (selection,) = [s for s in results["selection"] if s["method"] == "energy"]
    curve = {p["setting"]: p for p in selection["curve"]}
    assert list(curve) == ["baseline", "weight0", "weight1"]  # the baseline itself, not fine-tuned, first
    for w in (0, 1):
        assert curve[f"weight{w}"]["values"] == [summaries[(seed, w)]["best"]["score"] for seed in (0, 1)]
    baselines = [json.loads((folder / f"seed-{seed}" / "baseline" / "summary.json").read_text()) for seed in (0, 1)]
    assert curve["baseline"]["values"] == [b["best"]["score"] for b in baselines]
    chosen = selection["chosen"]
    assert curve[chosen]["mean"] >= max(curve["weight0"]["mean"], curve["baseline"]["mean"])
    assert curve[chosen]["mean"] == max(p["mean"] for p in curve.values())
    run = "baseline" if chosen == "baseline" else f"energy-{chosen}-boxes1"
    assert sorted(calls) == sorted(["baseline", "baseline", *([] if run == "baseline" else [run, run])])
    for seed in (0, 1):
        for w in (0, 1):
            assert (folder / f"seed-{seed}" / f"energy-weight{w}-boxes1" / "test.json").is_file() == (
                f"weight{w}" == chosen)
    records = [r for r in results["records"] if r["method"] == "energy"]
    assert [r["setting"] for r in records] == [chosen, chosen]
    exported = baselines if run == "baseline" else [summaries[(seed, int(chosen[-1]))] for seed in (0, 1)]
    assert [r["epoch"] for r in records] == [next(h["epoch"] for h in s["history"] if h["step"] == s["best"]["step"])
                                             for s in exported]
    base = [r for r in results["records"] if r["method"] == "baseline"]
    if run == "baseline":  # the cell reports the baseline's own runs: no gain, and the cell holds
        assert [r["worst_group_accuracy"] for r in records] == [r["worst_group_accuracy"] for r in base]
    report = (tmp_path / "study.md").read_text()
    assert f"**{chosen}: {100 * curve[chosen]['mean']:.1f} ± " in report.split("## Chosen on validation")[1]
    (row,) = [r for r in results["rows"] if r["method"] == "energy"]
    held = 100 * row["gain"]["mean"] >= -1
    assert results["helps"] == [{"method": "energy", "boxes": "100 %", "cells": 1, "held": f"{int(held)} of 1",
                                 "mean gain": f"{100 * row['gain']['mean']:+.1f}",
                                 "min gain": f"{100 * row['gain']['mean']:+.1f}",
                                 "max gain": f"{100 * row['gain']['mean']:+.1f}"}]
    assert "## Where guidance helps" in report


def test_the_figure_pools_the_data_seeds_of_a_panel_per_box_share(tmp_path, monkeypatch):
    """Two data seeds give two rows per method and box share in a panel. Before: sorting them compared their
    statistics (dicts) and the study ended in a TypeError after every training had finished."""
    study = from_dict(GuidanceStudy, {**TINY, "data_seed": [0, 1]})
    stat = lambda mean, std: {"mean": mean, "std": std}  # noqa: E731
    rows = [{"correlation": 1.0, "difficulty": 0.5, "method": method, "fraction": fraction,
             "worst_group_accuracy": stat(mean, 0.1)}
            for method, fraction, mean in [("baseline", None, 0.2), ("baseline", None, 0.4),
                                           ("energy", 0.125, 0.3), ("energy", 0.125, 0.5), ("energy", 1.0, 0.6),
                                           ("energy", 1.0, 0.8)]]
    drawn = []
    monkeypatch.setattr("matplotlib.axes.Axes.errorbar",
                        lambda self, x, y, yerr, **kw: drawn.append((list(x), list(y), list(yerr))))
    study_module.plot_study(tmp_path / "study.png", study, rows)
    (x, y, err), = drawn
    assert x == [12.5, 100.0] and y == pytest.approx([40.0, 70.0]) and err == pytest.approx([10.0, 10.0])
    assert (tmp_path / "study.png").stat().st_size > 0


def test_an_interrupted_study_resumes_without_retraining(tiny_study, monkeypatch):
    out, results = tiny_study
    monkeypatch.setattr(grid_module, "run", lambda config, resume: pytest.fail(f"retrained {config.output_dir}"))
    (out / "corr1-diff0.5-data0-32px" / "seed-0" / "energy-boxes1" / "test.json").unlink()  # scored again, not trained
    again = run_study(from_dict(GuidanceStudy, TINY), out)
    assert again["records"] == results["records"]


def test_the_test_split_can_be_scored_against_the_masks_of_a_finished_study_without_training(tmp_path, monkeypatch):
    """``recipe.test_regions: masks`` scores EPG and IoU of the same chosen runs against the objects' pixels: nothing
    trains, the scores are those of ``score_model(..., regions="masks")`` and go to ``test-masks.json`` beside the
    boxes' ``test.json`` (untouched); a hand-written ``test-masks.json`` lacking metrics is scored again; the table
    says what it scored against. Regions made of points alone are refused, named by key."""
    from rightreasons.data import load_dataset
    from rightreasons.metrics.evaluation import score_model

    out = tmp_path / "study"
    boxes = run_tiny_study(out)["records"]
    run = out / "corr1-diff0.5-data0-32px" / "seed-0" / "energy-boxes1"
    before = (run / "test.json").read_text()
    (run / "test-masks.json").write_text('{"epg": 0.5}')  # e.g. an earlier ad hoc score: EPG alone
    monkeypatch.setattr(grid_module, "run", lambda config, resume: pytest.fail(f"retrained {config.output_dir}"))
    config = {**TINY, "recipe": {**TINY["recipe"], "test_regions": "masks"}}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        masks = run_study(from_dict(GuidanceStudy, config), out)["records"]
        test = load_dataset("synthetic-birds", None, "test", n=16, size=32, seed=0, difficulty=0.5, correlation=1.0)
        direct = score_model(run / "model.safetensors", test, image_size=32, method="bcos", regions="masks",
                             batch_size=8)
    finally:
        torch.set_num_threads(threads)
    assert (run / "test.json").read_text() == before
    scored = json.loads((run / "test-masks.json").read_text())
    assert scored["epg"] == pytest.approx(float(direct["epg"])) and scored["iou"] == pytest.approx(float(direct["iou"]))
    assert [(r["method"], r["accuracy"]) for r in masks] == [(r["method"], r["accuracy"]) for r in boxes]
    assert all(m["epg"] != b["epg"] for m, b in zip(masks, boxes))  # the masks are smaller than the boxes
    assert "| EPG (masks) | IoU (masks) |" in (out / "study.md").read_text()
    with pytest.raises(ConfigError, match=r"recipe\.test_regions: 'points' is not one of 'boxes' \| 'masks'"):
        from_dict(GuidanceStudy, {**TINY, "recipe": {**TINY["recipe"], "test_regions": "points"}})


def test_a_training_killed_before_it_finished_resumes_from_its_checkpoint(tmp_path):
    """A study stopped inside a training leaves checkpoints but no model file: the next start continues that
    training (it used to stop with 'already holds checkpoints; pass --resume') and scores the same weights."""
    results = run_tiny_study(tmp_path / "study")
    run = tmp_path / "study" / "corr1-diff0.5-data0-32px" / "seed-0" / "energy-boxes0.125"
    for name in ("summary.json", "model.safetensors", "test.json"):
        (run / name).unlink()
    assert any((run / "checkpoints").iterdir())
    again = run_tiny_study(tmp_path / "study")
    assert again["records"] == results["records"]


def test_the_cli_runs_a_study_file_and_refuses_bad_ones(tmp_path, capsys):
    grid = tmp_path / "study.yaml"
    grid.write_text(json.dumps(TINY))
    assert main(["study", "guidance", str(grid), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith("3 trainings: 1 data variant(s) × 1 seed(s)")  # 1 × 1 × (1 + 2 × 1)
    grid.write_text(json.dumps({**TINY, "annotated_fraction": [0.0]}))
    assert main(["study", "guidance", str(grid), "--out", str(tmp_path / "out")]) == 2
    assert "annotated_fraction" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="min_annotated_per_batch"):
        from_dict(GuidanceRecipe, {"batch_size": 8, "min_annotated_per_batch": 8})


@pytest.mark.parametrize("setting, named", [
    ("recipe.model=bcos_resnet81", "recipe: the baselines would not train: model.name: unknown model"),
    ("recipe.model_kwargs.b=nan", "model.kwargs: bcos_resnet18: b: expected a number, got 'nan'"),
    ("recipe.guided_lr=-1", "methods[0]: its fine-tunings would not train: optim.lr"),
    ("recipe.crop_scale=[0.9, 0.1]", "data.crop_scale"),
    ("recipe.select=epg", "recipe.select"),
    ("methods=[{name: x, loss: lasso, weight: 1}]", "methods[0]: its fine-tunings would not train: guidance.loss"),
    ("data_seed=[-1]", "data_seed"),
])
def test_a_dry_run_refuses_what_would_stop_a_training_later(tmp_path, capsys, setting, named):
    """A dry run used to accept these; the study then trained its first baseline (or all baselines) before a
    training refused the value. ``select: epg`` is refused because the study's validation scores classification
    only."""
    assert main(["study", "guidance", "configs/studies/guidance.yaml", "--out", str(tmp_path / "out"), "--dry-run",
                 "--set", setting]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rightreasons study: error: configs/studies/guidance.yaml: ") and named in err, err
    assert err.count("\n") == 1 and not (tmp_path / "out").exists()


def test_the_cli_reports_progress_through_logging(tiny_study, tmp_path, capsys):
    """Progress lines go through the ``rightreasons`` loggers, so ``--quiet`` silences them (they used to be printed
    whatever the verbosity); the finished study is only read back here, not trained."""
    out, _ = tiny_study
    grid = tmp_path / "study.yaml"
    grid.write_text(json.dumps(TINY))
    assert main(["study", "guidance", str(grid), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "[1/3] corr1-diff0.5-data0-32px seed 0 baseline: worst group" in captured.err
    assert captured.out.startswith(f"wrote {out / 'study.md'} (3 runs scored)")
    assert main(["--quiet", "study", "guidance", str(grid), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.startswith("wrote ")


STUDIES = sorted(p for p in (Path(__file__).resolve().parents[2] / "configs" / "studies").glob("*.yaml")
                 if "robust" not in yaml.safe_load(p.read_text()))  # robustness studies: tests/robustness


@pytest.mark.parametrize("path", STUDIES, ids=[p.stem for p in STUDIES])
def test_shipped_study_files_are_valid(path, tmp_path, capsys):
    assert main(["study", "guidance", str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    assert "trainings:" in capsys.readouterr().out and not (tmp_path / "out").exists()


def test_the_demo_trains_as_the_study_that_chose_its_weights():
    """The demo's λ candidates come from ``configs/studies/demo_selection.yaml``: its recipe (but for the demo's early
    stopping) and data must stay the demo's, and every non-zero demo weight must be one of the candidates it
    compared."""
    from rightreasons.config import load_config
    from rightreasons.apps.demo.settings import DemoSettings

    study = load_config(GuidanceStudy, [p for p in STUDIES if p.stem == "demo_selection"][0])
    demo = DemoSettings.full()
    assert study.recipe == replace(demo.recipe, patience=None) and study.variants == [demo.data]
    assert set(demo.weights) - {0.0} <= {m.weight for m in study.methods}
    assert {v.annotated_fraction or demo.annotated_fraction for v in demo.variants} <= set(study.annotated_fraction)
