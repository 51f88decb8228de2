"""The distillation recipe: loadable from YAML, validated like every config, and building the full distillation
config section by section."""

from __future__ import annotations

import pytest

from rightreasons.config import load_config
from rightreasons.distill import DistillationRun
from rightreasons.errors import ConfigError


def test_a_distillation_recipe_loads_from_yaml_and_expands(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("teacher: runs/t/model.safetensors\nmode: e2kd_frozen\noutput_dir: runs/seeds/s0\n"
                    "student: bcos_resnet18\nstudent_kwargs: {inplanes: 8}\nepochs: 3\n"
                    "shots: 5\nlocalization: false\n")
    run = load_config(DistillationRun, path)
    config = run.config()
    assert (config.model.name, config.model.kwargs, config.optim.epochs) == ("bcos_resnet18", {"inplanes": 8}, 3)
    assert config.teacher.checkpoint == "runs/t/model.safetensors" and config.distill.explanation_weight == 5.0
    assert config.distill.frozen == "runs/seeds/teacher-cache" and config.distill.shots == 5
    assert not config.eval.localization and config.data.name == "synthetic-birds"
    kd = DistillationRun(teacher="t.safetensors", mode="kd", output_dir="o").config()
    assert kd.distill.explanation_weight == 0.0 and kd.distill.frozen is None


@pytest.mark.parametrize("text, key", [("teacher: t\nmode: kd\noutput_dir: o\nepoch: 3\n", "epoch"),
                                       ("teacher: t\nmode: distil\noutput_dir: o\n", "mode"),
                                       ("teacher: t\nmode: kd\noutput_dir: o\nepochs: 0\n", "epochs")])
def test_bad_recipes_are_refused_naming_the_key(tmp_path, text, key):
    path = tmp_path / "run.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=key):
        load_config(DistillationRun, path).config()
