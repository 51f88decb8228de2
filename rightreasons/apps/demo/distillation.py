"""The e²KD stage of the demo: distil each seed's guided teacher into a smaller B-cos student on the biased training
split with KD, live e²KD and e²KD with frozen explanations, and ask whether the students follow the teacher where the
background contradicts the bird.

Each run is a :class:`~rightreasons.distill.DistillationRun` (``out/runs/seed-<k>/distill/<mode>``; the frozen
runs share one teacher cache per seed). Every student is scored on the guidance stage's test split: its accuracy per
group, EPG/IoU (:func:`~rightreasons.apps.demo.guidance.evaluate_model`), and its top-1 agreement and explanation
similarity with the teacher (:class:`~rightreasons.distill.FidelityEvaluator`), overall and on the in-distribution
(G1, G4) and out-of-distribution (G2, G3) groups. Results: ``ctx.results["distillation"]``,
``ctx.models[<mode>]`` and a figure of teacher and students explaining the same images.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from torch import nn

from ...console import count
from ...data import GROUP_NAMES
from ...distill import MODE_LABELS, DistillationRun, EvalDataConfig, FidelityEvaluator, distill_in_process
from ...engine.grid import GridRun, run_grid
from ...models import load_model
from ...reporting import cell, markdown_table, summarize
from .figures import draw_explanations
from .guidance import GROUP_KEYS, score_on_test
from .pipeline import DATASET, DemoContext

__all__ = ["DISTILL_METRICS", "distill_and_evaluate", "distillation_checks", "evaluate_student"]

logger = logging.getLogger(__name__)

#: the metrics of every student on the test split, in table order
DISTILL_METRICS = ("accuracy", "ood_accuracy", "worst_group_accuracy", "agreement", "id_agreement", "ood_agreement",
                   *(f"agreement/{g}" for g in GROUP_KEYS), "explanation_similarity", "epg")
HEADERS = ("accuracy", "OOD accuracy", "worst group", "agreement", "ID agreement", "OOD agreement",
           *(f"agr. {g}" for g in GROUP_KEYS), "expl. similarity", "EPG")


def evaluate_student(model_file: Path, teacher: nn.Module, ctx: DemoContext) -> dict[str, float]:
    """Test-split metrics of a student against its ``teacher`` (on ``ctx.device``), in one pass of the scorer:
    :data:`DISTILL_METRICS`, fractions; similarity in [-1, 1]."""
    fidelity = FidelityEvaluator(teacher, method="bcos_weights", layer="input", group_names=list(GROUP_NAMES))
    r = score_on_test(model_file, ctx, extra=[fidelity])
    r.update({f"agreement/{key}": r[f"agreement/{name}"] for key, name in zip(GROUP_KEYS, GROUP_NAMES)})
    return {k: float(r[k]) for k in DISTILL_METRICS}


def distillation_checks(summary: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The result the stage is meant to show, from the means, in percentage points: e²KD students agree
    with the teacher on the out-of-distribution groups at least 5 p.p. more often than KD students, and e²KD with
    frozen explanations still more often than KD."""
    def ood(mode: str) -> float:
        return 100 * summary[mode]["ood_agreement"]["mean"]

    checks = []
    if "kd" in summary and "e2kd" in summary:
        gain = ood("e2kd") - ood("kd")
        checks.append({"check": "e²KD: OOD agreement with the teacher >= KD + 5 p.p.", "value": gain,
                       "passed": gain >= 5})
    if "kd" in summary and "e2kd_frozen" in summary:
        gain = ood("e2kd_frozen") - ood("kd")
        checks.append({"check": "e²KD (frozen): OOD agreement with the teacher > KD", "value": gain,
                       "passed": gain > 0})
    return checks


def _section(ctx: DemoContext, summary: dict[str, dict[str, Any]], teacher: dict[str, Any],
             checks: list[dict[str, Any]], figure: Path) -> str:
    d = ctx.settings.distillation
    kwargs = ", ".join(f"{k}={v}" for k, v in d.student_kwargs.items())
    rows = [{"model": MODE_LABELS[m], **{k: cell(summary[m][k]) for k in DISTILL_METRICS}} for m in d.modes]
    text = [f"Teacher: the `{d.teacher}` model of each seed (test accuracy {cell(teacher['accuracy'])}, OOD groups "
            f"G2/G3 {cell(teacher['G2'])} / {cell(teacher['G3'])} %). Student: {d.student} ({kwargs}), trained "
            f"from scratch on the biased training split for {count(d.epochs, 'epoch')} (Adam, lr {d.lr:g}, cosine) "
            "with KD "
            f"(τ = {d.temperature:g}) and, for e²KD, λ = {d.explanation_weight:g} · (1 − cos) between the "
            "teacher's and the student's B-cos explanations W(x) of the teacher's top-1 class; the frozen run "
            "reads them from a cache written once on the un-augmented images and crops and flips them with the "
            "image. Test split, in % (explanation similarity: mean cosine × 100):\n",
            markdown_table(rows, ["model", *DISTILL_METRICS], ["student", *HEADERS]),
            "\nAgreement: the student predicts the teacher's top-1 class. ID: G1, G4 (background matches the bird, "
            "as in training); OOD: G2, G3.\n", ctx.benchmark(checks)]
    text += ["\nB-cos explanations of the ground-truth class by the teacher and the students (seed 0), predicted "
             f"class and probability (green: correct):\n\n![teacher and students]({figure.relative_to(ctx.out)})"]
    return "\n".join(text)


def distill_and_evaluate(ctx: DemoContext) -> None:
    """Stage: every distillation mode for every seed, evaluated on the test split; table, checks and figure."""
    s, d = ctx.settings, ctx.settings.distillation
    runs: list[dict[str, dict[str, float]]] = []
    seconds: dict[str, list[float]] = {m: [] for m in d.modes}
    ctx.models.update({m: [] for m in d.modes})
    validation = EvalDataConfig(DATASET, split="val", options={**s.dataset_options("val"), "n": d.val_images})
    for seed in range(s.seeds):
        folder = ctx.out / "runs" / f"seed-{seed}" / "distill"
        teacher = ctx.models[d.teacher][seed]
        teacher_model = load_model(teacher).to(ctx.device)
        recipes = {mode: DistillationRun(
            teacher=str(teacher), mode=mode, output_dir=str(folder / mode), student=d.student,
            student_kwargs=dict(d.student_kwargs), data_options=s.dataset_options("train"),
            data_split_options={"test": s.dataset_options("test")}, image_size=s.image_size,
            batch_size=s.recipe.batch_size, epochs=d.epochs, lr=d.lr, temperature=d.temperature,
            explanation_weight=d.explanation_weight, seed=seed, cache_dir=str(folder / "teacher-cache"),
            test_split=None, cpu=ctx.device.type == "cpu", localization=False, eval_data=validation)
            for mode in d.modes}
        trained = run_grid([GridRun(f"seed {seed} {mode}", recipe.config()) for mode, recipe in recipes.items()],
                           distill_in_process)
        metrics: dict[str, dict[str, float]] = {}
        for mode, recipe in recipes.items():
            began = time.time()
            ctx.models[mode].append(recipe.model_file)
            metrics[mode] = evaluate_student(recipe.model_file, teacher_model, ctx)
            seconds[mode].append(round(trained[f"seed {seed} {mode}"].seconds + time.time() - began, 1))
            logger.info("seed %d %s: accuracy %.3f, OOD agreement %.3f (%.0f s)", seed, mode,
                        metrics[mode]["accuracy"], metrics[mode]["ood_agreement"], seconds[mode][-1])
        runs.append(metrics)
    summary = summarize(runs, d.modes, DISTILL_METRICS)
    checks = distillation_checks(summary)
    teacher_summary = ctx.results["guidance"]["summary"][d.teacher]
    figure, images = draw_explanations(
        ctx, {f"teacher ({d.teacher})": ctx.models[d.teacher][0],
              **{MODE_LABELS[m]: ctx.models[m][0] for m in d.modes}},
        "distillation.png")
    ctx.results["distillation"] = {
        "teacher": d.teacher, "modes": list(d.modes), "metrics": list(DISTILL_METRICS),
        "runs": {f"seed-{k}": run for k, run in enumerate(runs)}, "summary": summary, "checks": checks,
        "seconds": seconds, "figure": str(figure.relative_to(ctx.out)), "images": images,
        "model_files": {m: [str(p) for p in ctx.models[m]] for m in d.modes}}
    ctx.add_section("e²KD: distilling the guided teacher", _section(ctx, summary, teacher_summary, checks, figure))
