"""``distill.explanation_every`` K: the e²KD term (and the teacher's explanation) only on optimiser steps that are
multiples of K, the KD term on every step; on both kinds of step the gradient is the one of the formula."""

import json
from pathlib import Path

import pytest
import torch

from rightreasons.config import ConfigError, load_config
from rightreasons.distill import DistillConfig, DistillObjective, DistillationTask, teacher_outputs
from rightreasons.distill import task as distillation_task
from rightreasons.distill.losses import explanation_loss, kd_loss
from rightreasons.engine import Trainer
from rightreasons.explain import attribute

from test_distill_objective import TinyBcos, images, make

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "distill" / "synthetic.yaml"


@pytest.mark.parametrize("explain", [True, False])
def test_gradient_of_a_step_with_and_without_the_explanation_term_is_the_formula(explain):
    teacher, student = make(TinyBcos, 1).eval().requires_grad_(False), make(TinyBcos, 2)
    x = images()
    t_out = teacher_outputs(teacher, x, "bcos_weights", "input")
    objective = DistillObjective(method="bcos_weights", layer="input", temperature=2.0, explanation_weight=5.0)
    out = objective(student, x, t_out, explain=explain)
    assert ("explanation" in out.terms) is explain
    got = torch.autograd.grad(out.total, list(student.parameters()))

    result = attribute(student, x, t_out.logits.argmax(1), "bcos_weights", "input", create_graph=True)
    formula = kd_loss(result.logits, t_out.logits, 2.0)
    if explain:
        formula = formula + 5.0 * explanation_loss(result.explanation, t_out.explanations)
    expected = torch.autograd.grad(formula, list(student.parameters()))
    torch.testing.assert_close(out.total, formula)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e)


def test_explanation_term_only_on_multiples_of_k_and_the_teacher_explains_only_then(tmp_path, monkeypatch):
    calls = []

    def counted(teacher, images, method="none", *args, **kwargs):
        calls.append(method)
        return teacher_outputs(teacher, images, method, *args, **kwargs)

    monkeypatch.setattr(distillation_task, "teacher_outputs", counted)
    config = load_config(DistillConfig, CONFIG, [f"output_dir={tmp_path}", "distill.test_split=null",
                                                 "distill.explanation_every=2"])
    Trainer(DistillationTask(config)).fit()
    train = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
             if '"train"' in line]
    assert [r["step"] for r in train] == [1, 2, 3, 4]             # logged after optimiser steps 0 ... 3
    assert [("explanation" in r) for r in train] == [True, False, True, False]
    assert all("kd" in r for r in train)
    assert calls[:4] == ["bcos_weights", "none", "bcos_weights", "none"]  # then the validation's teacher


def test_explanation_every_must_be_positive(tmp_path):
    with pytest.raises(ConfigError, match="explanation_every"):
        load_config(DistillConfig, CONFIG, [f"output_dir={tmp_path}", "distill.explanation_every=0"])
