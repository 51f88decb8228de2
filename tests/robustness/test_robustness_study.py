"""The robustness study end to end on a tiny grid (every method, one seed) through the CLI: every training selected on
validation and scored on test, DFR on ERM and on the guided runs, the annotation cost of every method, the
training-weighted average, the tables and the figure; --dry-run lists every training; the shipped study loads."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
import yaml

from rightreasons.apps.cli import main
from rightreasons.config import load_config
from rightreasons.data import load_dataset
from rightreasons.errors import ConfigError
from rightreasons.robustness.study import RobustnessStudy

TINY = {"recipe": {"model_kwargs": {"inplanes": 4}, "batch_size": 8, "baseline_epochs": 1, "guided_epochs": 1,
                   "train_images": 32, "test_images": 16, "min_annotated_per_batch": 2},
        "seeds": 1, "correlation": [0.75], "difficulty": [0.5], "image_size": [32], "annotated_fraction": [0.125],
        "robust": [{"name": "reweight", "method": "reweight"}, {"name": "subsample", "method": "subsample"},
                   {"name": "groupdro", "method": "groupdro", "adjustment": 1.0},
                   {"name": "jtt", "method": "jtt", "first_stage_epochs": 1, "upweight": 3.0}],
        "methods": [{"name": "energy", "loss": "energy", "weight": 1.0}, {"name": "l1", "loss": "l1", "weight": 1.0}],
        "grid": {"groupdro": {"step_size": [0.01, 1.0]}, "energy": {"weight": [0.0, 1.0]}}, "dfr_retrains": 2}


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory) -> tuple[Path, dict]:
    folder = tmp_path_factory.mktemp("robustness-study")
    (folder / "study.yaml").write_text(yaml.safe_dump(TINY))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["--quiet", "study", "robustness", str(folder / "study.yaml"), "--out", str(folder / "out")]) == 0
    finally:
        torch.set_num_threads(threads)
    return folder / "out", json.loads((folder / "out" / "study.json").read_text())


def test_every_method_is_trained_selected_on_validation_and_scored(tiny_study):
    out, results = tiny_study
    methods = [(r["method"], r["fraction"]) for r in results["records"]]
    assert methods == [("baseline", None), ("baseline+dfr", None), ("reweight", None), ("subsample", None),
                       ("groupdro", None), ("jtt", None), ("energy", 0.125), ("energy+dfr", 0.125), ("l1", 0.125),
                       ("l1+dfr", 0.125)]
    folder = out / "corr0.75-diff0.5-data0-32px" / "seed-0"
    stage1 = json.loads((folder / "jtt-stage1-1ep" / "summary.json").read_text())["config"]
    jtt = json.loads((folder / "jtt" / "summary.json").read_text())["config"]
    assert stage1["checkpoint"]["export"] == "last" and "robustness" not in stage1
    assert jtt["robustness"] == {**jtt["robustness"], "method": "upweight", "upweight": 3.0,
                                 "error_set_from": str(folder / "jtt-stage1-1ep")}
    for record in results["records"]:
        assert record["worst_group_accuracy"] <= record["weighted_accuracy"] + 1e-9
        assert record["worst_group_accuracy"] <= record["accuracy"] + 1e-9
    dfr = json.loads((folder / "baseline" / "dfr.json").read_text())
    assert str(dfr["c"]) in dfr["selection"] and "accuracy/G3 waterbird/land" in dfr


def test_every_grid_setting_trains_and_only_the_one_best_on_validation_is_reported(tiny_study):
    """Each candidate of the grid trains; the setting with the best validation worst-group accuracy (of the exported
    checkpoint, mean over seeds) is chosen, and only its run is scored on the test split and reported. ERM, which
    the guided runs fine-tune, is a candidate of their cells (not of GroupDRO's, which trains from scratch)."""
    out, results = tiny_study
    folder = out / "corr0.75-diff0.5-data0-32px" / "seed-0"
    candidates = {"groupdro": {"step_size0.01": "groupdro-step_size0.01", "step_size1": "groupdro-step_size1"},
                  "energy": {"baseline": "baseline", "weight0": "energy-weight0-boxes0.125",
                             "weight1": "energy-weight1-boxes0.125"}}
    selection = {r["method"]: r for r in results["selection"]}
    for method, runs in candidates.items():
        validation = {label: json.loads((folder / run / "summary.json").read_text())["best"]["score"]
                      for label, run in runs.items()}
        curve = {p["setting"]: p["mean"] for p in selection[method]["curve"]}
        assert curve == pytest.approx(validation) and selection[method]["metric"] == "worst_group_accuracy"
        assert list(curve) == list(runs)  # in grid order, the baseline first
        chosen = max(validation, key=validation.__getitem__)
        assert selection[method]["chosen"] == chosen
        assert [(folder / run / "test.json").is_file() for label, run in runs.items() if label != "baseline"] == [
            label == chosen for label in runs if label != "baseline"]  # (the baseline is scored as ERM anyway)
        (record,) = [r for r in results["records"] if r["method"] == method]
        assert record["setting"] == chosen and record["validation"] == validation[chosen]
        (row,) = [r for r in results["rows"] if r["method"] == method]
        assert (row["setting"], row["candidates"]) == (chosen, len(runs))
    report = (out / "study.md").read_text()
    assert f"| {selection['groupdro']['chosen']} (of 2) |" in report and f"| {selection['energy']['chosen']} (of 3) |" \
        in report
    assert f"**{selection['energy']['chosen']}: " in report.split("## Chosen on validation")[1]


def test_annotation_cost_and_training_weighted_average(tiny_study):
    out, results = tiny_study
    cost = {r["method"]: (r["group_labels"], r["boxes"]) for r in results["records"]}
    assert cost["baseline"] == (0, 0) and cost["jtt"] == (0, 0)  # JTT trains without group labels
    assert cost["reweight"] == cost["groupdro"] == cost["subsample"] == (32, 0)
    assert cost["baseline+dfr"] == (32, 0)  # DFR trains on the validation split's group labels (32 images)
    assert cost["energy"] == (0, 4) and cost["energy+dfr"] == (32, 4)
    folder = out / "corr0.75-diff0.5-data0-32px" / "seed-0"
    test = json.loads((folder / "baseline" / "test.json").read_text())
    train = load_dataset("synthetic-birds", None, "train", n=32, correlation=0.75, difficulty=0.5, seed=0, size=32)
    p = torch.bincount(train.groups, minlength=4).double() / len(train)
    expected = sum(p[g].item() * test[f"accuracy/{name}"] for g, name in enumerate(train.group_names))
    assert results["records"][0]["weighted_accuracy"] == pytest.approx(expected)
    table = (out / "study.md").read_text()
    assert "| worst group | mean | train-weighted | EPG | group labels | box images |" in table
    assert "| baseline+dfr |" in table and "n/a" in table
    assert (out / "study.png").stat().st_size > 0 and (out / "study.csv").is_file()


def test_dry_run_lists_every_training_and_the_shipped_study_loads(tmp_path, capsys):
    shipped = Path(__file__).resolve().parents[2] / "configs" / "studies" / "robustness.yaml"
    study = load_config(RobustnessStudy, shipped)
    trainings, fits = study.dry_run()
    # ERM, reweight, subsample, GroupDRO × 2 step sizes, JTT: a first stage per T (2) and a second per (T, λ_up)
    # (4), 2 losses × 3 weights (0 among them) × 2 box shares; DFR on ERM and on the chosen setting of every loss and
    # box share
    per_seed = 1 + 1 + 1 + 2 + 2 + 4 + 2 * 3 * 2
    assert len(trainings) == 2 * 3 * per_seed and len(fits) == 2 * 3 * (1 + 4)
    assert sum("jtt stage 1" in t for t in trainings) == 2 * 3 * 2
    assert main(["study", "robustness", str(shipped), "--out", str(tmp_path), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"{len(trainings)} trainings and {len(fits)} DFR fits:")
    assert all(line in printed for line in trainings + fits) and not any(tmp_path.iterdir())


def test_the_study_runs_on_the_waterbirds100_layout(tmp_path, write_waterbirds):
    """A Waterbirds-100 folder as the data: every method trains on it and DFR sees every group of the validation
    split."""
    rows = [(f"img/{split}-{i}.jpg", g // 2, g % 2, split, (4, 4, 20, 16))
            for split, n in ((0, 16), (1, 16), (2, 8)) for i, g in enumerate(list(range(4)) * (n // 4))]
    root = write_waterbirds(tmp_path / "waterbirds", rows)
    study = {**TINY, "waterbirds_root": str(root), "recipe": {**TINY["recipe"], "train_images": None},
             "robust": [{"name": "groupdro", "method": "groupdro"}, {"name": "jtt", "method": "jtt"}],
             "methods": [TINY["methods"][0]], "grid": {}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    assert main(["--quiet", "study", "robustness", str(tmp_path / "study.yaml"), "--out", str(tmp_path / "out")]) == 0
    results = json.loads((tmp_path / "out" / "study.json").read_text())
    assert [r["method"] for r in results["records"]] == ["baseline", "baseline+dfr", "groupdro", "jtt", "energy",
                                                         "energy+dfr"]
    folder = tmp_path / "out" / "waterbirds100-32px" / "seed-0"
    config = json.loads((folder / "groupdro" / "summary.json").read_text())["config"]["data"]
    assert config["name"] == "waterbirds100" and config["root"] == str(root)
    assert config["options"] == {"train_like_val": False}
    assert "accuracy/G3 waterbird/land" in json.loads((folder / "baseline" / "dfr.json").read_text())


@pytest.mark.parametrize("grid, message", [
    ({"dro": {"step_size": [0.1]}}, "grid.dro: expected the name of a method of the study"),
    ({"groupdro": {"stepsize": [0.1]}}, "'stepsize'] are not hyper-parameters of groupdro"),
    ({"groupdro": {"step_size": []}}, "grid.groupdro.step_size: expected a non-empty list"),
    ({"groupdro": {"step_size": [0.1, -1.0]}}, "robustness.step_size: expected a step size > 0 (GroupDRO's η, e.g. "
                                                "0.01), got -1.0"),
    ({"energy": {"weight": ["heavy"]}}, "grid.energy.weight"),
])
def test_a_grid_that_would_not_train_is_refused_before_anything_runs(tmp_path, grid, message):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({**TINY, "grid": grid}))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(RobustnessStudy, tmp_path / "study.yaml")


def test_guidance_followed_by_dfr_trains_what_the_guidance_study_trained():
    """``guidance_selected_dfr.yaml`` adds DFR to the grid of ``guidance_selected.yaml`` (docs/studies/guidance.md
    reports them side by side): the same recipe, cells, seeds and λ grid, no group-robustness method, DFR on guided."""
    studies = Path(__file__).resolve().parents[2] / "configs" / "studies"
    guided, with_dfr = (yaml.safe_load((studies / name).read_text())
                        for name in ("guidance_selected.yaml", "guidance_selected_dfr.yaml"))
    assert {key: value for key, value in with_dfr.items() if key not in ("robust", "dfr_on_guided", "dfr_retrains")} \
        == guided
    study = load_config(RobustnessStudy, studies / "guidance_selected_dfr.yaml")
    trainings, fits = study.dry_run()
    assert with_dfr["robust"] == [] and with_dfr["dfr_on_guided"]
    assert len(trainings) == 8 * 3 * (1 + 2 * 3) and len(fits) == 8 * 3 * (1 + 2)


def test_dfr_can_choose_what_it_follows_by_its_own_validation_score(tmp_path):
    """``dfr_chooses``: DFR is fitted on every candidate of a guided cell (ERM itself among them) and the one whose
    fit scores best on DFR's own validation half is the guided + DFR row — never below ERM + DFR on validation."""
    study = {**TINY, "robust": [], "methods": [TINY["methods"][0]], "grid": {"energy": {"weight": [0.0, 1.0]}},
             "dfr_chooses": True}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    assert main(["--quiet", "study", "robustness", str(tmp_path / "study.yaml"), "--out", str(tmp_path / "out")]) == 0
    results = json.loads((tmp_path / "out" / "study.json").read_text())
    folder = tmp_path / "out" / "corr0.75-diff0.5-data0-32px" / "seed-0"
    candidates = {"baseline": "baseline", "weight0": "energy-weight0-boxes0.125",
                  "weight1": "energy-weight1-boxes0.125"}
    fits = {label: json.loads((folder / run / "dfr.json").read_text()) for label, run in candidates.items()}
    after_dfr = {label: fit["selection"][str(fit["c"])] for label, fit in fits.items()}
    chosen = max(after_dfr, key=after_dfr.__getitem__)
    (choice,) = [c for c in results["selection"] if c.get("after_dfr")]
    assert choice["chosen"] == chosen and {p["setting"]: p["mean"] for p in choice["curve"]} == pytest.approx(after_dfr)
    records = {r["method"]: r for r in results["records"]}
    assert records["energy+dfr"]["setting"] == chosen
    assert records["energy+dfr"]["worst_group_accuracy"] == fits[chosen]["worst_group_accuracy"]
    assert records["energy+dfr"]["validation"] >= records["baseline+dfr"]["validation"]
    assert "## Guided + DFR chosen on validation after DFR" in (tmp_path / "out" / "study.md").read_text()
    trainings, dfr_fits = load_config(RobustnessStudy, tmp_path / "study.yaml").dry_run()
    assert len(dfr_fits) == 1 + 2 and len(trainings) == 3   # ERM and both guided candidates (ERM's fit is shared)


def test_dfr_chooses_needs_dfr_on_guided(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({**TINY, "dfr_on_guided": False, "dfr_chooses": True}))
    with pytest.raises(ConfigError, match="dfr_chooses"):
        load_config(RobustnessStudy, tmp_path / "study.yaml")
