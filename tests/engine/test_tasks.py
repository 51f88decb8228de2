"""The task registry: every feature registers its task by command name, and a config finds its task by its class or,
read from a file, by its sections."""

from __future__ import annotations

import pytest

from rightreasons.apps.tasks import config_for_task
from rightreasons.classification import ClassificationConfig, ClassificationTask
from rightreasons.distill import DistillConfig, DistillationTask
from rightreasons.engine import get_task, register_task, task_for_config, task_for_keys, task_names
from rightreasons.errors import ConfigError, UnknownNameError
from rightreasons.guidance import GuidanceTask, GuideConfig


def test_each_feature_registers_its_task_under_its_command():
    assert {"train", "guide", "distill"} <= set(task_names())
    assert (get_task("train"), get_task("guide"), get_task("distill")) == (ClassificationTask, GuidanceTask,
                                                                           DistillationTask)
    assert GuidanceTask.name == "guide" and GuidanceTask.config_class is GuideConfig
    with pytest.raises(UnknownNameError, match="unknown task 'groupdro'; registered: .*'guide'"):
        get_task("groupdro")
    with pytest.raises(ValueError, match="already registered"):
        register_task("guide", ClassificationTask)


def test_a_config_finds_its_task_by_class_and_a_file_by_its_sections():
    assert task_for_config(GuideConfig()) is GuidanceTask
    assert task_for_config(ClassificationConfig()) is ClassificationTask
    assert task_for_keys({"model", "data", "optim"}) is ClassificationTask  # the fewest sections that take them
    assert task_for_keys({"model", "guidance"}) is GuidanceTask
    assert task_for_keys({"teacher", "distill", "data"}) is DistillationTask
    assert task_for_keys({"model", "optimm"}) is ClassificationTask  # the loader then names the unknown key


def test_a_config_of_another_task_names_the_command_that_runs_it():
    raw = {"model": {"name": "bcos_resnet18"}, "guidance": {"loss": "energy"}}
    with pytest.raises(ConfigError, match=r"x\.yaml: a config of `rightreasons guide` \(it has the section\(s\) "
                                          r"guidance\), not of `rightreasons train`; run it with `rightreasons guide`"):
        config_for_task("train", raw, "x.yaml")
    assert isinstance(config_for_task("guide", raw, "x.yaml"), GuideConfig)
    assert isinstance(config_for_task(None, raw, "x.yaml"), GuideConfig)
    assert isinstance(config_for_task("guide", {"model": {"name": "bcos_resnet18"}}, "x.yaml"), GuideConfig)
    with pytest.raises(ConfigError, match=r"x\.yaml: unknown config key 'optimm'"):
        config_for_task("train", {"optimm": {}}, "x.yaml")
    assert isinstance(config_for_task(None, {"teacher": {"name": "bcos_resnet18"}}, "y.yaml"), DistillConfig)
