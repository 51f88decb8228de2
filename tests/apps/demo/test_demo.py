"""The demo: the quick run end to end through the command line (report, figures, finite numbers in range), the stage
mechanism later stages plug into, and the summary statistics and benchmark checks against hand-computed values."""

import json
import math
import statistics
from dataclasses import replace

import pytest

from rightreasons.apps.cli import main
from rightreasons.apps.demo import STAGES, DemoSettings, DistillationSettings, GuidedVariant, run_demo
from rightreasons.apps.demo.distillation import DISTILL_METRICS, distillation_checks
from rightreasons.apps.demo.guidance import METRICS, benchmark_checks, training_run
from rightreasons.reporting import summarize


def _numbers(value):
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _numbers(v)
    else:
        for v in value:
            yield from _numbers(v)


QUICK = DemoSettings.quick


def small_quick(seeds: int | None = None) -> DemoSettings:
    """The ``--quick`` preset at the scale of a test: ResNets of width 4, 32 training and 32 validation images (64 px,
    batches of 8), 40 test images, one epoch per training — every stage, model and file of the quick run."""
    quick = QUICK(seeds)
    return replace(quick, recipe=replace(quick.recipe, model_kwargs={"inplanes": 4}, train_images=32, batch_size=8,
                                         test_images=40, baseline_epochs=1),
                   distillation=replace(quick.distillation, student_kwargs={"inplanes": 4}, val_images=16))


@pytest.mark.parametrize("scale", ["small", pytest.param("quick", marks=pytest.mark.exhaustive)])
def test_quick_demo_writes_report_figures_and_finite_results(tmp_path, capsys, monkeypatch, scale):
    """``demo --quick`` end to end; ``make test`` runs it on the small preset, ``make test-all`` as users run it."""
    if scale == "small":
        monkeypatch.setattr(DemoSettings, "quick", staticmethod(small_quick))
    out = tmp_path / "demo"
    assert main(["demo", "--quick", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out / "report.md")
    results = json.loads((out / "results.json").read_text())
    guidance = results["guidance"]
    models = ["baseline", "energy", "l1", "energy-dilated50", "l1-dilated50", "energy-1pct"]
    assert guidance["models"] == models and list(guidance["runs"]) == ["seed-0"]
    for model in models:
        metrics = guidance["runs"]["seed-0"][model]
        assert set(metrics) == set(METRICS)
        assert all(0.0 <= metrics[k] <= 1.0 for k in METRICS), (model, metrics)
        assert metrics["worst_group_accuracy"] == min(metrics[g] for g in ("G1", "G2", "G3", "G4"))
        assert guidance["summary"][model]["accuracy"]["std"] is None  # one seed
    assert all(math.isfinite(x) for x in _numbers(results))
    assert len(guidance["checks"]) == 5
    shown = results["explanations"]["images"]
    assert "G3 waterbird/land" in [image["group"] for image in shown]
    assert all(set(image["predictions"]) == set(models) for image in shown)
    for prediction in (p for image in shown for p in image["predictions"].values()):  # the sigmoid of the logit
        assert prediction["probability"] == pytest.approx(1 / (1 + math.exp(-prediction["logit"])))
        assert 0.0 <= prediction["epg"] <= 1.0  # each panel's EPG, the figure's measure of where the evidence is
    mean_epg = results["explanations"]["mean_epg"]
    assert list(mean_epg) == models
    for m in models:
        assert mean_epg[m] == pytest.approx(statistics.mean(image["predictions"][m]["epg"] for image in shown))
    assert set(results["pareto"]["front"]) <= {f"{m}/seed-0" for m in models}
    for figure in (results["explanations"]["figure"], results["pareto"]["figure"]):
        assert (out / figure).stat().st_size > 10_000
    report = (out / "report.md").read_text()
    for text in ("## Model guidance", "| baseline |", "| energy-dilated50 |", "worst group", "EPG", "- energy: ",
                 "](figures/explanations.png)", "](figures/pareto.png)", "**Benchmark**", "*smoke run*",
                 "median |logit|"):
        assert text in report
    seed = out / "runs" / "seed-0"
    for run in ("baseline", *(f"{model}-weight25" for model in models[1:])):
        config = json.loads((seed / run / "summary.json").read_text())["config"]
        assert config["eval"]["select"] == "worst_group_accuracy" and config["checkpoint"]["export"] == "best"
    for fraction in ("0.1", "0.01"):  # λ = 0: one unguided fine-tuning per box share, a candidate of every variant
        unguided = json.loads((seed / f"unguided-boxes{fraction}" / "summary.json").read_text())["config"]
        assert unguided["guidance"]["weight"] == 0 and unguided["data"]["annotated_fraction"] == float(fraction)
    few = json.loads((seed / "energy-1pct-weight25" / "summary.json").read_text())["config"]
    assert few["data"]["annotated_fraction"] == 0.01 and few["guidance"]["annotated_per_batch"] == 2
    for model in models[1:]:
        selection = guidance["selection"][model]
        # the baseline itself (no fine-tuning) is a candidate, first: no variant is worse than it on validation
        assert [p["setting"] for p in selection["curve"]] == ["baseline", "weight0", "weight25"]
        assert selection["chosen"] == max(selection["curve"], key=lambda p: p["mean"])["setting"]
        unguided = "unguided-boxes" + ("0.01" if model == "energy-1pct" else "0.1")
        chosen = seed / {"baseline": "baseline", "weight0": unguided}.get(selection["chosen"], f"{model}-weight25")
        assert guidance["model_files"][model] == [str(chosen / "model.safetensors")]
        assert [p["values"] for p in selection["curve"][:2]] == [
            [json.loads((seed / run / "summary.json").read_text())["best"]["score"]] for run in ("baseline", unguided)]

    distillation = results["distillation"]
    modes = ["kd", "e2kd", "e2kd_frozen"]
    assert distillation["teacher"] == "energy" and distillation["modes"] == modes
    for mode in modes:
        metrics = distillation["runs"]["seed-0"][mode]
        assert set(metrics) == set(DISTILL_METRICS)
        assert all(0.0 <= metrics[k] <= 1.0 for k in DISTILL_METRICS if k != "explanation_similarity"), metrics
        assert -1.0 <= metrics["explanation_similarity"] <= 1.0
        # OOD agreement is the mean over the equally sized G2 and G3 test groups
        assert metrics["ood_agreement"] == pytest.approx((metrics["agreement/G2"] + metrics["agreement/G3"]) / 2)
        assert (out / "runs" / "seed-0" / "distill" / mode / "model.safetensors").is_file()
    assert (out / "runs" / "seed-0" / "distill" / "teacher-cache" / "manifest.json").is_file()
    assert [c["check"].split(":")[0] for c in distillation["checks"]] == ["e²KD", "e²KD (frozen)"]
    assert (out / distillation["figure"]).stat().st_size > 10_000
    assert all(set(image["predictions"]) == {"teacher (energy)", "KD", "e²KD", "e²KD (frozen)"}
               for image in distillation["images"])
    for text in ("## e²KD: distilling the guided teacher", "| KD |", "| e²KD (frozen) |", "OOD agreement",
                 "](figures/distillation.png)"):
        assert text in report


def test_stages_share_the_context_and_add_sections_in_order(tmp_path):
    def first(ctx):
        ctx.results["first"] = {"value": 1.5}
        ctx.models["teacher"] = [tmp_path / "teacher.safetensors"]
        ctx.add_section("First", "one")

    def second(ctx):
        ctx.results["second"] = {"teacher": str(ctx.models["teacher"][0]), "double": 2 * ctx.results["first"]["value"]}
        ctx.add_section("Second", "two")

    results = run_demo(tmp_path, DemoSettings.quick(), [first, second])
    assert results["second"]["double"] == 3.0
    assert list(results["timing"]["stages"]) == ["first", "second"]
    report = (tmp_path / "report.md").read_text()
    assert report.index("## First") < report.index("## Second") < report.index("## Run")
    assert json.loads((tmp_path / "results.json").read_text())["first"] == {"value": 1.5}
    assert [stage.__name__ for stage in STAGES] == ["train_and_evaluate", "explanation_figure", "pareto_figure",
                                                    "distill_and_evaluate", "judge_explanations"]


def test_non_finite_results_are_refused(tmp_path):
    def broken(ctx):
        ctx.results["broken"] = {"epg": [0.5, float("nan")]}

    with pytest.raises(ValueError, match=r"results.broken.epg\[1\]"):
        run_demo(tmp_path, DemoSettings.quick(), [broken])


def _runs(table):
    """Per seed: model -> metrics, from {model: (accuracy, worst group, epg) per seed}."""
    seeds = len(next(iter(table.values())))
    return [{m: {**dict.fromkeys(METRICS, 0.5), "accuracy": v[s][0], "worst_group_accuracy": v[s][1],
                 "epg": v[s][2]} for m, v in table.items()} for s in range(seeds)]


def test_summary_is_mean_and_sample_std_over_seeds():
    runs = _runs({"baseline": [(0.6, 0.1, 0.3), (0.7, 0.3, 0.4), (0.8, 0.2, 0.2)]})
    summary = summarize(runs, ("baseline",), METRICS)
    assert summary["baseline"]["accuracy"]["mean"] == pytest.approx(0.7)
    assert summary["baseline"]["accuracy"]["std"] == pytest.approx(statistics.stdev([0.6, 0.7, 0.8]))
    assert summary["baseline"]["worst_group_accuracy"]["values"] == [0.1, 0.3, 0.2]


def test_benchmark_checks_compare_means_in_percentage_points():
    table = {"baseline": [(0.70, 0.20, 0.40)], "energy": [(0.75, 0.40, 0.80)], "l1": [(0.69, 0.25, 0.70)],
             "energy-dilated50": [(0.74, 0.38, 0.76)], "l1-dilated50": [(0.68, 0.22, 0.50)],
             "energy-1pct": [(0.72, 0.30, 0.60)]}
    checks = benchmark_checks(summarize(_runs(table), tuple(table), METRICS))
    values = [(round(c["value"], 6), c["passed"]) for c in checks]
    # Energy: +20 p.p. worst group, +5 p.p. accuracy; L1: +5 p.p.; Energy on 1 % boxes: +10 p.p.;
    # EPG gain kept: Energy 36/40, L1 10/30
    assert values == [(20.0, True), (5.0, True), (5.0, True), (10.0, False),
                      (round(100 * (36 / 40 - 10 / 30), 6), True)]
    table["energy"] = [(0.69, 0.30, 0.80)]
    failed = [c["passed"] for c in benchmark_checks(summarize(_runs(table), tuple(table), METRICS))]
    assert failed == [False, False, True, False, True]


def test_distillation_checks_compare_ood_agreement_in_percentage_points():
    def runs(kd, e2kd, frozen):
        return [{"kd": {**dict.fromkeys(DISTILL_METRICS, 0.5), "ood_agreement": a},
                 "e2kd": {**dict.fromkeys(DISTILL_METRICS, 0.5), "ood_agreement": b},
                 "e2kd_frozen": {**dict.fromkeys(DISTILL_METRICS, 0.5), "ood_agreement": c}}
                for a, b, c in zip(kd, e2kd, frozen)]

    modes = ("kd", "e2kd", "e2kd_frozen")
    checks = distillation_checks(summarize(runs([0.50, 0.60], [0.60, 0.62], [0.52, 0.60]), modes, DISTILL_METRICS))
    # means: KD 55, e²KD 61 (+6), frozen 56 (+1)
    assert [(round(c["value"], 6), c["passed"]) for c in checks] == [(6.0, True), (1.0, True)]
    checks = distillation_checks(summarize(runs([0.50, 0.60], [0.58, 0.61], [0.50, 0.60]), modes, DISTILL_METRICS))
    assert [(round(c["value"], 6), c["passed"]) for c in checks] == [(4.5, False), (0.0, False)]


def test_settings_refuse_bad_values():
    with pytest.raises(ValueError, match="at least one seed"):
        DemoSettings(seeds=0)
    with pytest.raises(ValueError, match="unique"):
        DemoSettings(variants=(GuidedVariant("a", "energy", 1.0), GuidedVariant("a", "l1", 1.0)))
    with pytest.raises(ValueError, match=r"weights: expected λ values that include 0 .* got \[5.0, 25.0\]"):
        DemoSettings(weights=(5.0, 25.0))
    with pytest.raises(ValueError, match=r"weights: expected distinct values \(repeated: \[0.0\]\)"):
        DemoSettings(weights=(0.0, 0.0, 25.0))
    with pytest.raises(ValueError, match="baseline's model file"):
        training_run(DemoSettings.quick(), 0, "out", DemoSettings().variants[0])
    with pytest.raises(ValueError, match="distillation.teacher: expected one of the demo's models .* got 'lasso'"):
        DemoSettings(distillation=DistillationSettings(teacher="lasso"))
    with pytest.raises(ValueError, match=r"distillation.modes: expected a non-empty .* got \['kd', 'mixup'\]"):
        DistillationSettings(modes=("kd", "mixup"))


def test_guided_configs_fine_tune_the_baseline_with_limited_boxes(tmp_path):
    settings = DemoSettings()
    variant = settings.variants[2]
    config = training_run(settings, 1, tmp_path / "run", variant, tmp_path / "base.safetensors").config()
    assert config.model.checkpoint == str(tmp_path / "base.safetensors") and config.seed == 1
    assert config.guidance.loss == variant.loss
    assert config.guidance.dilation == 0.5 and config.data.annotated_fraction == 0.1
    baseline = training_run(settings, 1, tmp_path / "base").config()
    assert not hasattr(baseline, "guidance") and baseline.model.checkpoint is None
    assert baseline.data.options == settings.dataset_options("train")


def test_a_smoke_run_says_so_next_to_its_benchmark_marks(tmp_path):
    """Issue 14, item 9: the --quick report showed ✗ benchmark failures without saying it is a smoke run."""
    from rightreasons.apps.demo.pipeline import DemoContext

    checks = [{"check": "gain >= 15 p.p.", "value": 3.0, "passed": False},
              {"check": "not lower", "value": 1.0, "passed": True}]
    quick = DemoContext(tmp_path, DemoSettings.quick()).benchmark(checks)
    assert DemoSettings.quick().smoke and not DemoSettings.full().smoke
    assert "*smoke run*" in quick.splitlines()[0]
    assert "- ✗ gain >= 15 p.p.: +3.0 (smoke run)" in quick and "- ✓ not lower: +1.0\n" not in quick
    assert quick.endswith("- ✓ not lower: +1.0")
    full = DemoContext(tmp_path, DemoSettings.full()).benchmark(checks)
    assert "smoke" not in full and full.splitlines()[0] == "**Benchmark** (means, p.p.):"


def test_the_quick_demo_figure_says_on_itself_why_its_explanations_do_not_move():
    """Issue 35 item 5: the quick demo's explanation figure showed a blob at the image centre for every model; at its
    budget (24 baseline and 8 guided steps) guidance cannot move the explanations, so the figure says why."""
    from rightreasons.apps.demo.figures import smoke_note

    note = smoke_note(QUICK())
    assert "baseline trained 24 steps and each guided model 8" in note and "image centre" in note
    assert "make demo" in note and smoke_note(DemoSettings.full()) is None
