"""The demo's judging stage: every model of the demo on the same few test images, its report section (table,
figure, where the metrics disagree) and its numbers in ``results.json``."""

from __future__ import annotations

import math
from dataclasses import replace

import torch

from rightreasons.apps.demo import STAGES, DemoSettings
from rightreasons.apps.demo.judging import JUDGED_IMAGES, judge_explanations
from rightreasons.apps.demo.pipeline import DemoContext
from rightreasons.models import create_model
from rightreasons.models.weights import save_model


def test_the_stage_judges_every_model_on_the_same_images(tmp_path):
    quick = DemoSettings.quick()
    settings = replace(quick, recipe=replace(quick.recipe, test_images=12))
    ctx = DemoContext(tmp_path, settings)
    for seed, name in enumerate(("baseline", "energy", "e2kd")):
        torch.manual_seed(seed)
        model = create_model("bcos_resnet18", num_classes=2, inplanes=4)
        ctx.models[name] = [save_model(model, tmp_path / f"{name}.safetensors")]
    judge_explanations(ctx)
    judged = ctx.results["judging"]
    assert judged["images"] == min(JUDGED_IMAGES, 12) and list(judged["models"]) == ["baseline", "energy", "e2kd"]
    assert "insertion" in judged["metrics"] and "deletion" in judged["metrics"]
    for scores in judged["models"].values():
        assert all(s["low"] <= s["mean"] <= s["high"] for s in scores.values())
    assert judged["rank_correlations"] and all(-1 <= v <= 1 and math.isfinite(v)
                                               for v in judged["rank_correlations"].values())
    title, body = ctx.sections[-1]
    assert "metrics disagree" in title and "| e2kd | bcos | input | 12 |" in body and "In conflict:" in body
    assert (tmp_path / "figures" / "judging" / "figure.png").stat().st_size > 0
    assert STAGES[-1] is judge_explanations
