"""``--print-config`` (issue 35, item 6): every command that reads a ``--config`` prints the resolved config (the file,
its overrides and every default) as YAML and exits 0 without running; that YAML given back as ``--config`` resolves
to the same config."""

from __future__ import annotations

from pathlib import Path

import pytest

from rightreasons.apps.cli import main
from rightreasons.apps.tasks import load_task_config
from rightreasons.config import read_yaml, to_dict

ROOT = Path(__file__).resolve().parents[3]
ROBUST = "data: {name: synthetic-birds, image_size: 32}\nrobustness: {method: groupdro}\n"

CASES = {
    "train": ("configs/guidance/voc2007_baseline.yaml", ["optim.lr=0.0025"], []),
    "guide": ("configs/guidance/voc2007.yaml", ["guidance.weight=0.004"], []),
    "robust": (None, ["optim.lr=0.0025"], []),
    "distill": ("configs/distill/synthetic.yaml", ["distill.temperature=3.5"], []),
    "evaluate": ("configs/guidance/voc2007.yaml", ["optim.lr=0.0025"], ["--checkpoint", "no-such-run"]),
    "cache": ("configs/distill/synthetic.yaml", ["distill.temperature=3.5"], ["--out", "cache"]),
}


def _printed(capsys, argv: list[str]) -> str:
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    return captured.out


@pytest.mark.parametrize("command", CASES)
def test_print_config_prints_the_resolved_config_which_reads_back_to_itself(command, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    source, overrides, extra = CASES[command]
    if source is None:
        Path("robust.yaml").write_text(ROBUST)
        config = Path("robust.yaml")
    else:
        config = ROOT / source
    overrides = [*overrides, f"output_dir={tmp_path / 'run'}"]
    text = _printed(capsys, [command, "--config", str(config), *overrides, *extra, "--print-config"])
    printed = read_yaml(text)
    task = None if command == "evaluate" else "distill" if command == "cache" else command
    assert printed == to_dict(load_task_config(task, config, overrides))
    assert printed["output_dir"] == str(tmp_path / "run") and "seed" in printed  # overrides and defaults
    assert sorted(p.name for p in tmp_path.iterdir()) == (["robust.yaml"] if source is None else [])  # no work done
    Path("printed.yaml").write_text(text)
    assert _printed(capsys, [command, "--config", "printed.yaml", *extra, "--print-config"]) == text
