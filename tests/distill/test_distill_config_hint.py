"""The command that ``configs/distill/synthetic.yaml`` suggests for distilling a trained teacher runs as written
(issue 14: it failed unless ``teacher.kwargs={}`` was added)."""

import json
import re
import shlex
from pathlib import Path

import rightreasons
from rightreasons.apps.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "distill" / "synthetic.yaml"


def test_the_synthetic_config_hint_distils_a_teacher_trained_by_rightreasons(tmp_path, monkeypatch):
    comment = "\n".join(line[1:] for line in CONFIG.read_text().splitlines() if line.startswith("#"))
    (command,) = re.findall(r"^ *(rightreasons distill .*?(?:\\\n.*?)*)$", comment, re.MULTILINE)
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:4] == ["rightreasons", "distill", "--config", "configs/distill/synthetic.yaml"]
    teacher = rightreasons.create_model("bcos_cifar10_resnet20", num_classes=2)
    rightreasons.save_model(teacher, tmp_path / "runs" / "teacher" / "model.safetensors")
    monkeypatch.chdir(tmp_path)
    argv = [str(CONFIG) if a == "configs/distill/synthetic.yaml" else a.replace("<teacher>", "teacher")
            for a in argv[1:]]
    assert main(argv) == 0
    summary = json.loads((tmp_path / "runs" / "distill-synthetic" / "summary.json").read_text())
    # the run directory names the teacher; its architecture comes from the file (the config's kwargs agree with it)
    assert summary["config"]["teacher"] == {"name": None, "checkpoint": "runs/teacher", "pretrained": False,
                                            "kwargs": {"num_classes": 2}}
    assert summary["steps"] == 4 and "agreement" in summary["history"][-1]
