"""rightreasons.apps.sweep and ``rightreasons sweep``: the commands of a dry run, running runs through a launcher (skip,
resume), the Pareto report collected from run folders (front and representative against hand-computed ones), and
user errors as ``error:`` lines."""

import csv
import json
import shlex
import sys
from pathlib import Path

import pytest

from rightreasons.apps import sweep
from rightreasons.apps.cli import build_parser, main
from rightreasons.config import load_config
from rightreasons.guidance import GuideConfig
from rightreasons.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def test_dry_run_prints_one_valid_command_per_run(capsys):
    grid = ROOT / "configs" / "guidance" / "grids" / "dilated.yaml"
    assert main(["sweep", str(grid), "--dry-run", "--launcher", "python"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 18
    parser = build_parser()
    seen = set()
    for line in lines:
        argv = shlex.split(line)
        assert argv[:3] == ["python", "-m", "rightreasons"]
        args = parser.parse_args(argv[3:])  # what `rightreasons ...` would parse
        assert args.command == "guide" and not args.resume
        config = load_config(GuideConfig, args.config, args.overrides)
        assert config.guidance.layer == "input"
        seen.add((config.guidance.loss, config.guidance.dilation, config.guidance.weight))
    assert len(seen) == 18


def test_only_filters_runs_by_name(capsys):
    grid = ROOT / "configs" / "guidance" / "grids" / "baselines.yaml"
    assert main(["sweep", str(grid), "--dry-run", "--only", "coco2014/"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3 and all("output_dir=runs/coco2014/baseline-lr" in line for line in lines)


def test_set_overrides_every_run_after_the_grid(capsys):
    grid = ROOT / "configs" / "guidance" / "grids" / "dilated.yaml"
    runs = sweep.load_grid(grid, ["data.root=/scratch/voc", "guidance.layer=final", "model.kwargs={inplanes: 8}"])
    assert len(runs) == 18
    for run in runs:
        config = run.config
        assert config.data.root == "/scratch/voc" and config.model.kwargs == {"inplanes": 8}
        assert config.guidance.layer == "final"  # --set wins over the grid's fixed overrides
    assert main(["sweep", str(grid), "--dry-run", "--only", "dilated0.5/l1-w0.01", "--set", "data.root=/d"]) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.split()[-2:] == ["data.root=/d", "output_dir=runs/voc2007/dilated0.5/l1-w0.01"]
    with pytest.raises(ConfigError, match="override 'data.root' is not of the form key.path=value"):
        sweep.load_grid(grid, ["data.root"])


def _grid(tmp_path, weights=(0.1, 0.2, 0.3), layers=("input", "final")):
    base = tmp_path / "base.yaml"
    base.write_text("model: {name: bcos_resnet18}\ndata: {name: synthetic-birds}\n")
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"command: guide\nbase: base.yaml\noutput_root: {tmp_path / 'runs'}\n"
                    "name: '{guidance.layer}-w{guidance.weight}'\ngroup: '{guidance.layer}'\n"
                    f"grid:\n  - guidance.layer: {list(layers)}\n    guidance.weight: {list(weights)}\n")
    return grid


FAKE_LAUNCHER = """
import json, sys
from pathlib import Path
assert sys.argv[1:4] == ["-m", "rightreasons", "guide"] and sys.argv[4] == "--config", sys.argv
out = Path(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("output_dir=")))
weight = float(next(a.split("=", 1)[1] for a in sys.argv if a.startswith("guidance.weight=")))
out.mkdir(parents=True, exist_ok=True)
history = [{"step": 1, "epoch": 1, "score": 1 - weight, "epg": weight, "iou": 0.1}]
(out / "summary.json").write_text(json.dumps({"history": history, "resumed": "--resume" in sys.argv}))
"""


def test_runs_execute_in_order_skip_finished_and_resume_partial(tmp_path, capsys):
    grid = _grid(tmp_path, weights=(0.1, 0.2), layers=("input",))
    launcher = tmp_path / "fake_launcher.py"
    launcher.write_text(FAKE_LAUNCHER)
    partial = tmp_path / "runs" / "input-w0.2" / "checkpoints" / "step-000004"
    partial.mkdir(parents=True)
    command = ["sweep", str(grid), "--launcher", f"{sys.executable} {launcher}", "--report", str(tmp_path / "report")]
    assert main(command) == 0
    err = capsys.readouterr().err  # progress is status: the log on stderr
    assert err.index("input-w0.1") < err.index("input-w0.2")
    summaries = {w: json.loads((tmp_path / "runs" / f"input-w{w}" / "summary.json").read_text()) for w in (0.1, 0.2)}
    assert not summaries[0.1]["resumed"] and summaries[0.2]["resumed"]
    assert main(command) == 0
    assert capsys.readouterr().err.count("done, skipped") == 2


def test_a_failing_run_is_reported_and_the_others_still_run(tmp_path, capsys):
    grid = _grid(tmp_path, weights=(0.1, 0.2), layers=("input",))
    launcher = tmp_path / "fake_launcher.py"
    launcher.write_text(FAKE_LAUNCHER.replace("weight = float", "assert 'w0.1' not in str(out)\nweight = float"))
    assert main(["sweep", str(grid), "--launcher", f"{sys.executable} {launcher}",
                 "--report", str(tmp_path / "report")]) == 1
    assert "1 run(s) failed: input-w0.1" in capsys.readouterr().err
    assert (tmp_path / "runs" / "input-w0.2" / "summary.json").is_file()


def _summary(folder, history):
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text(json.dumps({"history": history}))


def test_collect_writes_fronts_and_representatives_per_group(tmp_path, capsys):
    grid = _grid(tmp_path)
    runs = tmp_path / "runs"
    # input: three runs, two evaluations each; (score, epg, iou)
    _summary(runs / "input-w0.1", [{"step": 10, "epoch": 1, "score": 0.90, "epg": 0.40, "iou": 0.10},
                                   {"step": 20, "epoch": 2, "score": 0.80, "epg": 0.30, "iou": 0.05}])
    _summary(runs / "input-w0.2", [{"step": 10, "epoch": 1, "score": 0.86, "epg": 0.60, "iou": 0.10},
                                   {"step": 20, "epoch": 2, "score": 0.84, "epg": 0.70, "iou": 0.20}])
    _summary(runs / "input-w0.3", [{"step": 10, "epoch": 1, "score": 0.70, "epg": 0.90, "iou": 0.30},
                                   {"step": 20, "epoch": 2, "score": 0.60, "epg": 0.50, "iou": 0.10}])
    # final: one run with an evaluation lacking EPG/IoU (ignored); w0.2 and w0.3 never finished
    _summary(runs / "final-w0.1", [{"step": 10, "epoch": 1, "score": 0.5},
                                   {"step": 20, "epoch": 2, "score": 0.6, "epg": 0.2, "iou": 0.1}])
    (runs / "final-w0.1" / "checkpoints" / "step-000020").mkdir(parents=True)
    report = tmp_path / "report"
    assert main(["sweep", str(grid), "--collect-only", "--report", str(report)]) == 0
    rows = list(csv.DictReader((report / "pareto.csv").open()))
    flags = {(r["setting"], int(r["step"])): (r["on_front"] == "True", r["representative"] == "True") for r in rows}
    # dominated: input-w0.1@20 (by w0.1@10) and input-w0.3@20 (by w0.2@20); the representative is the highest EPG
    # within 0.05 of the best score 0.90: w0.2@20 (0.84 < 0.85 is out), so w0.2@10 (0.86, EPG 0.60)
    assert flags == {("input-w0.1", 10): (True, False), ("input-w0.1", 20): (False, False),
                     ("input-w0.2", 10): (True, True), ("input-w0.2", 20): (True, False),
                     ("input-w0.3", 10): (True, False), ("input-w0.3", 20): (False, False),
                     ("final-w0.1", 20): (True, True)}
    by_id = {(r["setting"], int(r["step"])): r for r in rows}
    assert by_id[("input-w0.2", 10)]["guidance.weight"] == "0.2" and by_id[("input-w0.2", 10)]["seeds"] == "1"
    text = (report / "pareto.md").read_text()
    assert "input-w0.2@10" in text and "final-w0.2" in text and "final-w0.3" in text  # the pick; missing runs
    # the picks cannot be scored on test: one kept no checkpoint, the other's is not a complete checkpoint
    assert "input-w0.2@10: its checkpoint was not kept" in text
    assert "final-w0.1@20: " in text and "not an intact checkpoint" in text
    assert (report / "pareto.png").stat().st_size > 0
    assert "2 runs without a summary" in capsys.readouterr().out


def test_the_representative_is_chosen_on_validation_over_seeds_and_scored_once_on_test(tmp_path):
    """Issue 25: seeds of one setting are one point (mean ± std); the pick uses validation numbers only, however the
    test numbers fall; each seed of the pick is scored once (kept beside the run) and the table gives mean ± std."""
    base = tmp_path / "base.yaml"
    base.write_text("model: {name: bcos_resnet18}\ndata: {name: synthetic-birds}\n")
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"command: guide\nbase: base.yaml\noutput_root: {tmp_path / 'runs'}\n"
                    "name: 'w{guidance.weight}-s{seed}'\ngroup: 'energy'\n"
                    "grid:\n  - guidance.weight: [0.1, 0.2]\n    seed: [0, 1]\n")
    runs = sweep.load_grid(grid)
    validation = {"w0.1-s0": (0.90, 0.40), "w0.1-s1": (0.88, 0.50), "w0.2-s0": (0.87, 0.70), "w0.2-s1": (0.85, 0.60)}
    for run in runs:
        score, epg = validation[run.name]
        run.output_dir.mkdir(parents=True)
        (run.output_dir / "checkpoints" / "step-000010").mkdir(parents=True)
        (run.output_dir / "summary.json").write_text(json.dumps(
            {"exported_step": 10, "history": [{"step": 10, "epoch": 1, "score": score, "epg": epg, "iou": 0.1}]}))
    points, missing = sweep.collect(runs)
    marked = sweep.mark_fronts(sweep.aggregate(points))
    assert not missing and len(marked) == 2 and all(p["seeds"] == 2 for p in marked)
    means = {p["setting"]: [p["score"], p["epg"]] for p in marked}
    assert sorted(means) == ["energy (guidance.weight=0.1)", "energy (guidance.weight=0.2)"]
    assert means["energy (guidance.weight=0.1)"] == pytest.approx([0.89, 0.45])
    assert means["energy (guidance.weight=0.2)"] == pytest.approx([0.86, 0.65])
    (pick,) = [p for p in marked if p["representative"]]
    assert pick["id"] == "energy (guidance.weight=0.2)@10"  # highest mean EPG within 5 p.p. of the best mean score
    calls = []

    def score(run, artefact, split):  # the test split disagrees with validation: it must not change the pick
        calls.append((run.name, artefact.name, split))
        return {"split": split, "score": {"w0.2-s0": 0.5, "w0.2-s1": 0.7}[run.name], "epg": 0.2, "iou": 0.1,
                "worst_group_accuracy": 0.4, "accuracy/G1": 0.4}

    tests = sweep.score_representatives(marked, runs, None, score)
    assert sorted(calls) == [("w0.2-s0", "step-000010", "test"), ("w0.2-s1", "step-000010", "test")]
    sweep.score_representatives(marked, runs, None, score)
    assert len(calls) == 2  # scored once: the second report reads test-test-step-000010.json
    paths = sweep.write_report(marked, missing, tmp_path / "report", tests=tests)
    text = paths["markdown"].read_text()
    row = next(line for line in text.splitlines() if line.startswith("| energy |"))
    assert "energy (guidance.weight=0.2)@10" in row and "60.0 ± 14.1" in row and "86.0 ± 1.4" in row
    assert "| test worst_group_accuracy | test accuracy/G1 |" in text


def test_collect_refuses_a_broken_summary(tmp_path):
    grid = _grid(tmp_path, weights=(0.1,), layers=("input",))
    folder = tmp_path / "runs" / "input-w0.1"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text("{\"steps\": 3}")
    with pytest.raises(ConfigError, match="history"):
        sweep.collect(sweep.load_grid(grid))


def test_user_errors_are_one_error_line_with_exit_code_2(tmp_path, capsys):
    assert main(["sweep", str(tmp_path / "nowhere.yaml"), "--dry-run"]) == 2
    assert "error: grid file not found" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("command: guide\nbase: base.yaml\nname: n\ngroup: g\ngrid: []\n")
    assert main(["sweep", str(bad), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "non-empty list" in err and "Traceback" not in err
    assert issubclass(sweep.GridError, ConfigError)


def test_quiet_silences_the_sweep_progress(tmp_path, capsys):
    """Progress is status (logging), so ``--quiet`` leaves only the command's result on stdout and nothing on stderr."""
    grid = _grid(tmp_path, weights=(0.1,), layers=("input",))
    launcher = tmp_path / "fake_launcher.py"
    launcher.write_text(FAKE_LAUNCHER)
    command = ["sweep", str(grid), "--launcher", f"{sys.executable} {launcher}", "--report", str(tmp_path / "report")]
    assert main(["--quiet", *command]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out.startswith("report: ")
    assert main(command) == 0
    assert "[1/1] input-w0.1: done, skipped" in capsys.readouterr().err


@pytest.mark.parametrize("label, expected", [("../../x", "not a plain name"), ("b/../a", "not a plain name"),
                                             ("..", "not a plain name"), ("", "not a plain name")])
def test_a_label_that_is_not_a_plain_name_is_refused(tmp_path, capsys, label, expected):
    """``../../x`` put a run outside the sweep's root, and ``a`` and ``b/../a`` shared one directory."""
    (tmp_path / "base.yaml").write_text("model: {name: bcos_resnet18}\ndata: {name: synthetic-birds}\n")
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"command: guide\nbase: base.yaml\noutput_root: {tmp_path / 'runs'}\nname: '{{variant}}'\n"
                    f"group: g\ngrid:\n  - variant:\n      a: {{guidance.weight: 0.1}}\n"
                    f"      '{label}': {{guidance.weight: 0.2}}\n")
    assert main(["sweep", str(grid), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and expected in err and repr(label) in err and "Traceback" not in err, err


def test_a_name_rendered_from_a_config_value_may_not_leave_the_output_root(tmp_path, capsys):
    (tmp_path / "base.yaml").write_text("model: {name: bcos_resnet18}\ndata: {name: synthetic-birds}\n")
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"command: guide\nbase: base.yaml\noutput_root: {tmp_path / 'runs'}\nname: 'x/{{data.root}}'\n"
                    "group: g\ngrid:\n  - data.root: ['../../../elsewhere']\n")
    assert main(["sweep", str(grid), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "'x/../../../elsewhere'" in err and "Traceback" not in err, err
