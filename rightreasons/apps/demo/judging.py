"""Stage: the explanation-quality metrics of every model of the demo — baseline, guided and distilled — on the same
few test images (B-cos contributions at the input, seed 0), and where the metrics disagree about their order
(:mod:`rightreasons.judging`). Writes ``figures/judging/`` (table, per-image scores, figure), adds
``ctx.results["judging"]`` (per model and metric the mean and its 95 % bootstrap interval; the rank correlations
between the metrics) and a report section.
"""

from __future__ import annotations

from ...judging import DEFAULT_METRICS, JudgedModel, disagreement_text, judge, rank_correlations, write_report
from ...models import load_model
from .pipeline import DemoContext

__all__ = ["JUDGED_IMAGES", "JUDGED_METRICS", "judge_explanations"]

JUDGED_IMAGES = 16
"""Test images judged: few, so that the stage takes seconds (insertion and deletion cost most: 42 forward passes of
the images per model); the intervals say how far to trust them."""
JUDGED_METRICS = (*DEFAULT_METRICS, "insertion_deletion")
"""The cheap metrics and, for faithfulness, insertion and deletion."""


def judge_explanations(ctx: DemoContext) -> None:
    """Stage: judge seed 0's model of every name in ``ctx.models`` on the first :data:`JUDGED_IMAGES` test images."""
    models = [JudgedModel(name, load_model(files[0]), ctx.settings.image_size) for name, files in ctx.models.items()]
    judgement = judge(models, ctx.test_set(), [("bcos", "input")], JUDGED_METRICS, images=JUDGED_IMAGES,
                      device=ctx.device)
    paths = write_report(judgement, ctx.out / "figures" / "judging")
    rows = judgement.summary()
    ctx.results["judging"] = {
        "images": min(JUDGED_IMAGES, len(ctx.test_set())), "metrics": list(judgement.columns),
        "models": {r["model"]: {c: {"mean": r[c].mean, "low": r[c].low, "high": r[c].high}
                                for c in judgement.columns if r[c].n} for r in rows},
        "rank_correlations": {f"{a} vs {b}": v for (a, b), v in rank_correlations(rows, judgement.columns).items()}}
    table = paths["table"].read_text(encoding="utf-8")
    ctx.add_section("Explanation quality and where the metrics disagree", (
        f"B-cos contributions at the input of seed 0's models on the first {ctx.results['judging']['images']} test "
        "images, scored by the explanation-quality metrics (docs/metrics.md; `rightreasons judge` does the same for "
        f"any runs). {table}\n![metrics](figures/judging/figure.png)\n\n"
        + disagreement_text(rows, judgement.columns)))
