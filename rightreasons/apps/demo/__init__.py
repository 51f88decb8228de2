"""The main job, ``rightreasons demo`` / ``make demo``: model guidance on the synthetic Waterbirds-like benchmark.

A thin app on the library: every run is a recipe of the features (:mod:`rightreasons.guidance.study`,
:mod:`rightreasons.distill.recipe`), every table and plot comes from :mod:`rightreasons.reporting`; this package only
decides what to run and writes the report.

Stages (:data:`STAGES`, run in order by :func:`run_demo` on a shared :class:`DemoContext`): train a baseline B-cos
model and fine-tune it with Energy and L1 guidance (tight and 50 %-dilated boxes on 10 % of the training images) for
every seed, evaluating each on the balanced test split; draw explanations of the same test images by every model;
plot the Pareto front; distil each seed's Energy-guided model into a smaller student with KD, e²KD and e²KD with
frozen explanations and compare how often the students follow the teacher on the out-of-distribution groups; judge
every model's explanations of a few test images with the explanation-quality metrics and show where the metrics
disagree. The result: ``DIR/results.json`` (every number) and ``DIR/report.md`` (tables and figures). Further stages
are appended to :data:`STAGES`.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .distillation import distill_and_evaluate
from .figures import explanation_figure, pareto_figure
from .guidance import train_and_evaluate
from .judging import judge_explanations
from .pipeline import DemoContext, Stage, run_stages
from .settings import DemoSettings, DistillationSettings, GuidedVariant

__all__ = ["STAGES", "DemoContext", "DemoSettings", "DistillationSettings", "GuidedVariant", "Stage", "run_demo"]

#: the demo's stages, in order
STAGES: list[Stage] = [train_and_evaluate, explanation_figure, pareto_figure, distill_and_evaluate,
                       judge_explanations]


def run_demo(out: str | Path, settings: DemoSettings, stages: Sequence[Stage] = STAGES) -> dict[str, Any]:
    """Run the demo's ``stages`` (default: all of :data:`STAGES`) and write ``out/results.json`` and
    ``out/report.md``; returns the results."""
    return run_stages(out, settings, stages)
