"""``rightreasons guide`` choosing its own settings on validation (:mod:`rightreasons.guidance.choosing`), through
the real command line on the tiny guided run of ``tests/run_configs.py`` (synthetic-birds at 32 px, a width-4 B-cos
ResNet-18): a baseline trained first, then a guided run fine-tuning it with ``--grid guidance.weight=0,1``. Every
candidate trains, the starting model is a candidate, the best mean validation score is chosen, the chosen model is
exported where a plain run's is and scored once on test, and ``evaluate`` reads the output like any run's; a grid
the config would refuse is one error line, exit code 2, before any training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from run_configs import tiny_guided_config

import rightreasons.engine.grid as grid_module
from rightreasons.apps.cli import main
from rightreasons.config import from_dict
from rightreasons.engine import run
from rightreasons.errors import ConfigError
from rightreasons.guidance import GuideConfig

OPTIONS = {"data.options": {"n": 16, "size": 32}, "eval": {"num_images": 0, "select": "accuracy"}}


def _write(path: Path, config: dict) -> Path:
    path.write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def selected(tmp_path_factory) -> tuple[Path, Path, dict]:
    """The baseline's directory, the selecting run's directory and its summary."""
    root = tmp_path_factory.mktemp("choosing")
    baseline = tiny_guided_config(output_dir=str(root / "baseline"), **OPTIONS)
    del baseline["guidance"]
    guided = tiny_guided_config(output_dir=str(root / "guided"), **OPTIONS)
    guided["model"]["checkpoint"] = str(root / "baseline")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert main(["train", "--config", str(_write(root / "baseline.json", baseline))]) == 0
        assert main(["guide", "--config", str(_write(root / "guided.json", guided)),
                     "--grid", "guidance.weight=0,1"]) == 0
    finally:
        torch.set_num_threads(threads)
    return root / "baseline", root / "guided", json.loads((root / "guided" / "summary.json").read_text())


def test_every_candidate_and_the_starting_model_compete_on_validation(selected):
    baseline, out, summary = selected
    selection = summary["selection"]
    assert [p["setting"] for p in selection["curve"]] == ["baseline", "guidance.weight0", "guidance.weight1"]
    scores = {p["setting"]: p["values"] for p in selection["curve"]}
    for w in (0, 1):
        run = json.loads((out / "candidates" / f"guidance.weight{w}" / "summary.json").read_text())
        assert run["config"]["guidance"]["weight"] == w and run["config"]["model"]["checkpoint"] == str(baseline)
        assert scores[f"guidance.weight{w}"] == [run["best"]["score"]]  # the score of the checkpoint it exported
    # the starting model scored as a training validates: the baseline's own exported validation accuracy
    assert scores["baseline"] == [json.loads((baseline / "summary.json").read_text())["best"]["score"]]
    means = {p["setting"]: p["mean"] for p in selection["curve"]}
    best = max(means.values())
    assert selection["chosen"] == next(s for s, m in means.items() if m == best)  # the first of equal maxima
    assert selection["values"] == ({} if selection["chosen"] == "baseline" else
                                   {"guidance.weight": int(selection["chosen"][-1])})


def test_the_chosen_model_is_exported_where_a_plain_run_has_it_and_scored_once_on_test(selected, capsys):
    _, out, summary = selected
    chosen = Path(summary["selection"]["model_file"])
    assert chosen.parent.parent == out / "candidates"
    assert (out / "model.safetensors").read_bytes() == chosen.read_bytes()
    assert summary["task"] == "guide" and summary["config"]["selection"]["grid"] == {"guidance.weight": [0, 1]}
    assert summary["test"]["split"] == "test" and 0 <= summary["test"]["accuracy"] <= 1
    report = (out / "selection.md").read_text()
    assert f"**{summary['selection']['chosen']}: " in report and "Test split (test), scored once" in report
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out)]) == 0
    evaluated = json.loads(capsys.readouterr().out)
    assert evaluated["split"] == "test" and evaluated["accuracy"] == summary["test"]["accuracy"]


def test_a_finished_selection_is_kept_on_resume_and_never_overwritten(selected, monkeypatch, capsys):
    _, out, summary = selected
    config = out.parent / "guided.json"
    monkeypatch.setattr(grid_module, "run", lambda config, resume: pytest.fail(f"retrained {config.output_dir}"))
    capsys.readouterr()
    assert main(["guide", "--config", str(config), "--grid", "guidance.weight=0,1", "--resume"]) == 0
    assert json.loads(capsys.readouterr().out)["chosen"] == summary["selection"]["chosen"]
    assert main(["guide", "--config", str(config), "--grid", "guidance.weight=0,1"]) == 2
    assert "holds a finished run" in capsys.readouterr().err
    assert main(["guide", "--config", str(config), "--grid", "guidance.weight=0,2", "--resume"]) == 2
    assert "holds a finished selection of another config (selection.grid" in capsys.readouterr().err


def test_a_config_with_a_grid_is_never_trained_as_one_run(tmp_path):
    """Only ``guide``'s selection trains a config with a grid; the engine (a sweep, a script) refuses it."""
    config = from_dict(GuideConfig, tiny_guided_config(output_dir=str(tmp_path / "out"),
                                                       selection={"grid": {"guidance.weight": [0, 1]}}))
    with pytest.raises(ConfigError, match="chooses among candidate settings, which `rightreasons guide` trains"):
        run(config)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("grid, message", [
    ("guidance.wieght=0,1", "selection.grid.guidance.wieght: guidance.wieght=0: unknown config key "
                            "'guidance.wieght' (did you mean 'weight'?)"),
    ("guidance.weight=0,-5", "selection.grid.guidance.weight: guidance.weight=-5: guidance.weight: expected a loss "
                             "weight >= 0"),
    ("eval.select=accuracy,score", "selection.grid.eval.select: expected a config key outside selection, "
                                   "output_dir, seed, eval"),
    ("guidance.weight", "--grid 'guidance.weight' is not of the form KEY=V1,V2,..."),
])
def test_a_bad_grid_is_one_error_line_before_any_training(tmp_path, capsys, grid, message):
    config = _write(tmp_path / "guided.json", tiny_guided_config(output_dir=str(tmp_path / "out"), **OPTIONS))
    assert main(["guide", "--config", str(config), "--grid", grid]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_the_grid_of_a_config_file_and_of_the_command_line_are_one_section(tmp_path, capsys):
    config = tiny_guided_config(output_dir=str(tmp_path / "out"), selection={"grid": {"guidance.dilation": [0, 0.5]},
                                                                           "seeds": 2})
    path = _write(tmp_path / "guided.json", config)
    assert main(["guide", "--config", str(path), "--grid", "guidance.weight=0,5,25", "--print-config"]) == 0
    printed = capsys.readouterr().out
    assert "guidance.dilation:\n    - 0\n    - 0.5\n" in printed and "guidance.weight:\n    - 0\n    - 5\n    - 25\n" \
        in printed and "seeds: 2" in printed
    config["selection"] = {"seeds": 2}  # seeds without a grid: nothing to average over
    assert main(["guide", "--config", str(_write(path, config))]) == 2
    assert "selection.seeds: expected 1 without a grid" in capsys.readouterr().err
