"""`rightreasons judge` and :mod:`rightreasons.judging`: a tiny guided run (and its exported model directory) judged
on its own test images; the numbers are those of the metric functions called directly on the same images."""

from __future__ import annotations

import csv
import math

import pytest
import torch
import yaml
from run_configs import tiny_guided_config

from rightreasons.apps.cli import main
from rightreasons.apps.cli.judge import judge_runs
from rightreasons.apps.tasks import load_trained
from rightreasons.boxes import class_masks
from rightreasons.data import collate, load_dataset, transforms_for
from rightreasons.explain import attribute
from rightreasons.judging import (SUITE, Interval, JudgedModel, bootstrap_interval, conflicts, disagreement_text,
                                  explanations, judge, rank_correlations)
from rightreasons.judging.report import csv_columns
from rightreasons.metrics import epg, sparseness

TEST_IMAGES = 6


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A tiny guided run whose config gives its test split 6 images, and its exported model directory."""
    root = tmp_path_factory.mktemp("judge")
    config = tiny_guided_config(**{"data.split_options": {"test": {"n": TEST_IMAGES}}})
    (root / "config.yaml").write_text(yaml.safe_dump(config))
    assert main(["guide", "--config", str(root / "config.yaml"), f"output_dir={root / 'run'}"]) == 0
    assert main(["export", str(root / "run"), "--out", str(root / "exported")]) == 0
    return root


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_the_command_judges_a_run_and_its_export_on_the_run_s_test_images(runs, capsys):
    out = runs / "judged"
    assert main(["judge", str(runs / "run"), str(runs / "exported"), "--out", str(out), "--metrics",
                 "epg,iou,pointing_game,sparseness", "--batch-size", "4"]) == 0
    table = _rows(out / "table.csv")
    columns = {"epg": True, "iou": True, "pointing_game": True, "sparseness": True}
    assert list(table[0]) == csv_columns(columns)
    assert [(r["model"], r["method"], r["layer"], r["images"]) for r in table] == [
        ("run", "bcos", "input", str(TEST_IMAGES)), ("exported", "bcos", "input", str(TEST_IMAGES))]
    for row in table:
        assert float(row["epg_low"]) <= float(row["epg"]) <= float(row["epg_high"])
    markdown = (out / "table.md").read_text()
    assert "| model | method | layer | images | epg ↑ | iou ↑ | pointing_game ↑ | sparseness ↑ |" in markdown
    assert markdown.count("| bcos | input | 6 |") == 2
    assert (out / "figure.png").stat().st_size > 0 and len(_rows(out / "scores.csv")) == 2 * TEST_IMAGES
    # the exported model is the run's model: the same scores
    scores = _rows(out / "scores.csv")
    assert [r["epg"] for r in scores[:TEST_IMAGES]] == [r["epg"] for r in scores[TEST_IMAGES:]]
    assert "| metric | epg | iou | pointing_game | sparseness |" in (out / "disagreement.md").read_text()


def test_the_numbers_are_the_metric_functions_on_the_same_images(runs):
    paths = judge_runs([runs / "run"], runs / "direct", metrics="epg,sparseness", device="cpu")
    scores = _rows(paths["scores"])
    model, config = load_trained(runs / "run")
    dataset = load_dataset(config.data.name, None, "test", **config.data.options_for("test"))
    dataset.transform = transforms_for(model, config.data.image_size, crop_fraction=1.0)
    batch = collate([dataset[i] for i in range(len(dataset))])
    target = batch["labels"].argmax(1)
    maps = attribute(model.eval(), batch["image"], target, "bcos", "input").maps
    masks = class_masks(batch["boxes"], batch["box_labels"], target, size=tuple(maps.shape[-2:]))
    has_box = masks.flatten(1).any(1)
    expected_epg = torch.where(has_box, epg(maps, masks), torch.nan)
    assert [r["image"] for r in scores] == [str(i) for i in batch["id"]]
    got = torch.tensor([float(r["epg"]) for r in scores])
    assert torch.allclose(got, expected_epg, atol=1e-6, equal_nan=True)
    assert torch.allclose(torch.tensor([float(r["sparseness"]) for r in scores]), sparseness(maps), atol=1e-6)
    mean = float(_rows(paths["csv"])[0]["epg"])
    assert math.isclose(mean, expected_epg[has_box].mean().item(), rel_tol=1e-6)


def test_the_opt_in_metrics_fill_their_columns(runs):
    model, config = load_trained(runs / "run")
    dataset = load_dataset(config.data.name, None, "test", **config.data.options_for("test"))
    opt_in = [name for name, metric in SUITE.items() if not metric.cheap]
    judgement = judge([JudgedModel("run", model, 32)], dataset, explanations(["bcos"], [None]), opt_in, images=2)
    assert set(judgement.columns) == {"insertion", "deletion", "faithfulness_correlation", "max_sensitivity",
                                      "avg_sensitivity", "infidelity", "randomisation", "road_morf", "road_lerf",
                                      "irof", "grid_pointing_game"}
    assert len(judgement.scores) == 2
    # the grid pointing game needs confident images of four classes in a batch: NaN for these two (test_constructed)
    assert all(math.isfinite(row[c]) for row in judgement.scores for c in judgement.columns
               if c != "grid_pointing_game")


def test_the_bootstrap_interval_leaves_out_nan_and_is_seeded():
    scores = torch.tensor([0.0, 1.0, float("nan"), 1.0, 0.0, 1.0])
    interval = bootstrap_interval(scores, seed=3)
    assert interval.n == 5 and interval.mean == pytest.approx(0.6)
    assert 0 <= interval.low < 0.6 < interval.high <= 1 and interval == bootstrap_interval(scores, seed=3)
    constant = bootstrap_interval(torch.full((4,), 0.25))
    assert constant.low == constant.high == constant.mean == 0.25
    assert bootstrap_interval(torch.tensor([float("nan")])).n == 0


def test_metrics_that_order_the_models_oppositely_are_in_conflict():
    """EPG rises over three models while the complexity (lower is better) rises too: they conflict; EPG and IoU
    agree."""
    def row(epg, iou, complexity):
        return {c: Interval(v, v, v, 1) for c, v in (("epg", epg), ("iou", iou), ("complexity", complexity))}

    rows = [row(0.2, 0.1, 1.0), row(0.5, 0.3, 2.0), row(0.9, 0.4, 3.0)]
    correlations = rank_correlations(rows, {"epg": True, "iou": True, "complexity": False})
    assert correlations == pytest.approx({("epg", "iou"): 1.0, ("epg", "complexity"): -1.0,
                                          ("iou", "complexity"): -1.0})
    assert conflicts(correlations) == [("epg", "complexity", pytest.approx(-1.0)),
                                       ("iou", "complexity", pytest.approx(-1.0))]
    text = disagreement_text(rows, {"epg": True, "iou": True, "complexity": False})
    assert "- epg vs complexity: -1.00" in text and "epg vs iou" not in text


@pytest.mark.parametrize(("argv", "named"), [
    (["--metrics", "epg,accuracy"], "--metrics epg,accuracy: unknown accuracy"),
    (["--methods", "gradcam,attention"], "--methods gradcam,attention: attention gives no maps"),
    (["--option", "n=3"], "--root and --option describe --dataset"),
    (["--dataset", "synthetic-birds", "--option", "colour=red"], "colour"),
])
def test_bad_input_is_one_error_line_naming_the_argument(runs, capsys, argv, named):
    assert main(["judge", str(runs / "run"), "--out", str(runs / "bad"), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rightreasons judge: error:") and named in err[0], err
