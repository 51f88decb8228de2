"""The one rule that chooses hyper-parameters on validation (:mod:`rightreasons.engine.selection`), on fake
validation scores: seeds averaged, the first in grid order on a tie, non-finite scores and uneven seeds refused, the
starting model a candidate of fine-tunings; and the grids it chooses from refused when empty, repeated or out of
range."""

from __future__ import annotations

import math
import random

import pytest

from rightreasons.config import FieldError
from rightreasons.engine.selection import START, check_grid, choose, choose_cells, curves_markdown, with_start
from rightreasons.guidance.recipe import GuidedVariant, check_weight_grid


def test_the_best_mean_over_seeds_is_chosen_and_the_curve_kept():
    selection = choose({"weight0": [0.5, 0.7], "weight1": [0.9, 0.4], "weight5": [0.6, 0.8]}, "worst_group_accuracy")
    assert selection.chosen == "weight5"  # mean 0.7 beats 0.6 and 0.65, though weight1 has the best single seed
    assert [p["setting"] for p in selection.curve] == ["weight0", "weight1", "weight5"]
    point = selection.curve[2]
    assert point["mean"] == pytest.approx(0.7) and point["std"] == pytest.approx(math.sqrt(0.02))
    assert point["values"] == [0.6, 0.8]
    assert selection.to_dict()["curve"][0] == {"setting": "weight0", "mean": pytest.approx(0.6),
                                               "std": pytest.approx(math.sqrt(0.02)), "values": [0.5, 0.7]}
    assert "**weight5: 70.0 ± 14.1**" in selection.describe()


def test_one_seed_has_no_spread():
    selection = choose({"weight0": [0.4], "weight1": [0.3]}, "score")
    assert selection.chosen == "weight0" and selection.curve[0]["std"] is None
    assert selection.describe() == "**weight0: 40.0**, weight1: 30.0"


def test_a_tie_keeps_the_first_setting_in_grid_order():
    assert choose({"weight0": [0.5, 0.7], "weight1": [0.7, 0.5]}, "score").chosen == "weight0"
    assert choose({"weight1": [0.7, 0.5], "weight0": [0.5, 0.7]}, "score").chosen == "weight1"


@pytest.mark.parametrize("bad", [math.nan, math.inf, None])
def test_a_non_finite_score_is_refused_naming_the_setting(bad):
    with pytest.raises(ValueError, match=rf"energy: setting 'weight5' has a non-finite validation score {bad}"):
        choose({"weight0": [0.5, 0.6], "weight5": [0.7, bad]}, "score", where="energy")


def test_uneven_seeds_and_an_empty_choice_are_refused():
    with pytest.raises(ValueError, match=r"the same number \(>= 1\) of seeds' scores, got \{'a': 2, 'b': 1\}"):
        choose({"a": [0.5, 0.6], "b": [0.7]}, "score")
    with pytest.raises(ValueError, match="no candidate settings"):
        choose({}, "score")


def test_with_no_guidance_in_the_grid_the_chosen_weight_is_never_worse_on_validation():
    """λ = 0 is a candidate, so the chosen λ's mean validation score is at least λ = 0's, whatever the scores."""
    rng = random.Random(0)
    for _ in range(200):
        seeds = rng.randint(1, 4)
        scores = {f"weight{w:g}": [rng.choice([0.25, 0.5, rng.random()]) for _ in range(seeds)]
                  for w in rng.sample([0.0, 1.0, 5.0, 25.0], 4)}
        selection = choose(scores, "worst_group_accuracy")
        means = {p["setting"]: p["mean"] for p in selection.curve}
        assert means[selection.chosen] >= means["weight0"]
        assert means[selection.chosen] == max(means.values())


def test_the_starting_model_wins_where_every_fine_tuning_is_worse_on_validation():
    """A measured cell: every fine-tuning, λ = 0 included, below the baseline it started from. Without the starting
    model the best of them is handed back; with it, the baseline is chosen, first in the curve."""
    scores = {"weight0": [0.40, 0.50], "weight5": [0.45, 0.35], "weight25": [0.30, 0.55]}
    assert choose(scores, "worst_group_accuracy").chosen == "weight0"
    selection = choose(scores, "worst_group_accuracy", start=[0.60, 0.52])
    assert selection.chosen == START == "baseline"
    assert [p["setting"] for p in selection.curve] == ["baseline", "weight0", "weight5", "weight25"]
    assert selection.curve[0]["values"] == [0.60, 0.52] and selection.curve[0]["mean"] == pytest.approx(0.56)
    assert selection.describe().startswith("**baseline: 56.0 ± 5.7**, weight0: 45.0")
    # a fine-tuning better on validation is still chosen; a tie keeps the starting model
    assert choose(scores, "score", start=[0.1, 0.2]).chosen == "weight0"
    assert choose(scores, "score", start=[0.45, 0.45]).chosen == START
    with pytest.raises(ValueError, match="the same number"):
        choose(scores, "score", start=[0.5])
    with pytest.raises(ValueError, match="a trained setting is labelled 'baseline'"):
        choose({START: [0.5]}, "score", start=[0.4])


def test_a_study_s_baseline_joins_every_cell_of_its_fine_tunings_and_wins_there():
    """:func:`with_start` puts the run a fine-tuning starts from into its cell (per seed, once, first), relabelled;
    choosing then picks it where it is best, and the chosen run is the baseline's own (test scores that run)."""
    runs = [(f"base{seed}", {"method": "baseline", "fraction": None, "setting": "", "seed": seed, "validation": 0.6})
            for seed in (0, 1)]
    runs += [(f"{m}-w{w}-{seed}", {"method": m, "fraction": 0.1, "setting": f"weight{w}", "seed": seed,
                                   "validation": v})
             for seed in (0, 1) for m, w, v in [("energy", 0, 0.5), ("energy", 5, 0.55), ("l1", 0, 0.7)]]
    start_of = {seed: runs[seed] for seed in (0, 1)}
    joined = with_start(runs, ("method", "fraction"),
                        lambda f: None if f["method"] == "baseline" else start_of[f["seed"]])
    energy = [(r, f["setting"]) for r, f in joined if f["method"] == "energy"]
    assert energy == [("base0", START), ("energy-w0-0", "weight0"), ("energy-w5-0", "weight5"),
                      ("base1", START), ("energy-w0-1", "weight0"), ("energy-w5-1", "weight5")]
    choices = choose_cells([f for _, f in joined], ("method", "fraction"), "score")
    assert choices[("energy", 0.1)].chosen == START and choices[("l1", 0.1)].chosen == "weight0"
    assert choices[("baseline", None)].chosen == ""  # the baseline's own cell is unchanged
    chosen = [r for r, f in joined if f["method"] == "energy" and f["setting"] == choices[("energy", 0.1)].chosen]
    assert chosen == ["base0", "base1"]
    assert [f["fraction"] for r, f in joined if r == "base0"] == [None, 0.1, 0.1]  # relabelled into each cell


def test_every_cell_chooses_on_its_own_runs():
    records = [{"method": m, "fraction": f, "setting": s, "seed": seed, "validation": v}
               for m, f, s, seed, v in [("energy", 0.1, "weight0", 0, 0.5), ("energy", 0.1, "weight1", 0, 0.6),
                                        ("energy", 0.1, "weight0", 1, 0.5), ("energy", 0.1, "weight1", 1, 0.2),
                                        ("energy", 1.0, "weight0", 0, 0.1), ("energy", 1.0, "weight1", 0, 0.2),
                                        ("baseline", None, "", 0, 0.3)]]
    choices = choose_cells(records, ("method", "fraction"), "score")
    assert {k: c.chosen for k, c in choices.items()} == {("energy", 0.1): "weight0", ("energy", 1.0): "weight1",
                                                          ("baseline", None): ""}
    text = curves_markdown(choices, ("method", "fraction"))
    assert "- method energy, fraction 0.1: **weight0: 50.0 ± 0.0**, weight1: 40.0 ± 28.3" in text
    assert "method baseline" not in text  # one candidate: nothing was chosen


@pytest.mark.parametrize("grid, message", [
    ({"energy": {"weight": []}}, "grid.energy.weight: expected a non-empty list"),
    ({"energy": {"weight": [0.0, 1.0, 1]}}, "grid.energy.weight: expected distinct values (repeated: [1])"),
    ({"energy": {"weight": [0.0, -1.0]}}, "grid.energy.weight: expected a loss weight >= 0, got -1.0"),
    ({"energy": {"weight": [1.0, 5.0]}}, "grid.energy.weight: expected λ values that include 0"),
    ({"energy": {"weight": 0.0}}, "grid.energy.weight: expected a non-empty list"),
    ({"enrgy": {"weight": [0.0]}}, "grid.enrgy: expected the name of a method of the study (energy)"),
    ({"energy": {"wieght": [0.0]}}, "grid.energy: ['wieght'] are not hyper-parameters of energy"),
])
def test_a_bad_grid_is_refused_naming_the_key_and_value(grid, message):
    methods = [GuidedVariant("energy", "energy", 5.0)]
    with pytest.raises(FieldError) as caught:
        check_grid(grid, methods)
        check_weight_grid(grid, methods)
    assert message in str(caught.value)
