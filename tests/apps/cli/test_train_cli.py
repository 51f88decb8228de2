"""``rightreasons train | guide | evaluate`` as a researcher meets them (issue 14): evaluation reads the run's config
from beside the model file, training without boxes reports no localisation metrics, every validation is one console
line naming every metric, ``train`` needs a config, and refused starts leave no TensorBoard runs behind.

All through the real command line (``rightreasons.apps.cli.main``) on a tiny Waterbirds-100 copy (the release's
``metadata.csv`` columns) and a B-cos ResNet-18 of width 4 at 32 px."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from PIL import Image

from rightreasons.apps.cli import main
from rightreasons.data import GROUP_NAMES

# Waterbirds-100: train and val hold G1 (landbird/land) and G4 (waterbird/water) only, test all four groups
ROWS = ([(f"002.Sparrow/train_{i}.jpg", 0, 0, 0, (2, 2, 20, 16)) for i in range(4)]
        + [(f"001.Albatross/train_{i}.jpg", 1, 1, 0, (8, 4, 30, 22)) for i in range(4)]
        + [("002.Sparrow/val_0.jpg", 0, 0, 1, (1, 1, 12, 12)), ("001.Albatross/val_0.jpg", 1, 1, 1, (4, 4, 20, 20))]
        + [(f"{'001.Albatross' if y else '002.Sparrow'}/test_{y}{p}.jpg", y, p, 2, (3, 3, 18, 18))
           for y in (0, 1) for p in (0, 1)])
CONFIG = """\
output_dir: run
cpu: true
model: {name: bcos_resnet18, kwargs: {inplanes: 4}}
data: {name: waterbirds100, root: ROOT, image_size: 32, batch_size: 4, eval_batch_size: 8}
optim: {epochs: 1}
eval: {num_images: 1}
checkpoint: {keep_last: 1}
"""


@pytest.fixture
def workdir(tmp_path, monkeypatch, write_waterbirds):
    """A working directory with ``wb/`` (Waterbirds-100 with boxes) and ``config.yaml`` (training into ``run/``)."""
    root = write_waterbirds(tmp_path / "wb", ROWS)
    (tmp_path / "config.yaml").write_text(CONFIG.replace("ROOT", str(root)))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _event_files(folder: Path) -> dict[str, int]:
    return {str(p): p.stat().st_size for p in folder.rglob("events.out.tfevents*")}


def test_evaluate_reads_the_config_from_the_summary_beside_the_model(workdir, capsys):
    assert main(["train", "--config", "config.yaml"]) == 0
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", "run/model.safetensors", "--out", "run/test.json"]) == 0
    results = json.loads((workdir / "run" / "test.json").read_text())
    assert json.loads(capsys.readouterr().out) == results
    # the run's Waterbirds test split (four images, one per group), not the default synthetic data
    assert results["config"] == str(Path("run") / "summary.json")
    assert results["split"] == "test" and results["images"] == 4
    assert {k for k in results if k.startswith("accuracy/")} == {f"accuracy/{g}" for g in GROUP_NAMES}
    assert results["worst_group"] in GROUP_NAMES and results["score_metric"] == "accuracy"
    assert results["worst_group_accuracy"] == results[f"accuracy/{results['worst_group']}"]
    assert {"epg", "iou"} <= results.keys()
    # overrides apply on top of the run's config
    assert main(["evaluate", "--checkpoint", "run/model.safetensors", "--split", "val", "eval.localization=false"]) == 0
    val = json.loads(capsys.readouterr().out)
    assert val["split"] == "val" and val["images"] == 2 and "epg" not in val
    # a model file without its run's summary: refused, with the way out
    (workdir / "moved").mkdir()
    shutil.copy(workdir / "run" / "model.safetensors", workdir / "moved" / "model.safetensors")
    assert main(["evaluate", "--checkpoint", "moved/model.safetensors"]) == 2
    error = capsys.readouterr().err
    assert "no summary.json beside moved/model.safetensors" in error and "--config FILE" in error
    assert main(["evaluate", "--checkpoint", "moved/model.safetensors", "--config", "config.yaml"]) == 0


def test_training_without_boxes_reports_no_localisation_metrics(workdir, caplog):
    caplog.set_level(logging.INFO, logger="rightreasons")
    assert main(["train", "--config", "config.yaml", "data.options.box_file=null", "data.annotated_fraction=0"]) == 0
    summary = json.loads((workdir / "run" / "summary.json").read_text())
    (record,) = summary["history"]
    assert record["accuracy"] >= 0 and not {"epg", "iou"} & record.keys()
    assert summary["pareto_front"] and not {"epg", "iou"} & summary["pareto_front"][0].keys()
    assert "validation reports no localisation metrics (EPG, IoU)" in caplog.text


def test_every_validation_is_one_console_line_and_the_best_score_names_its_metric(workdir, caplog, capsys):
    caplog.set_level(logging.INFO, logger="rightreasons")
    assert main(["train", "--config", "config.yaml", "optim.epochs=2"]) == 0
    final = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert final["best"]["metric"] == "accuracy" and final["steps"] == 4
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("validation at step")]
    history = json.loads((workdir / "run" / "summary.json").read_text())["history"]
    assert len(lines) == len(history) == 2
    for line, record in zip(lines, history):
        assert line.startswith(f"validation at step {record['step']} (epoch {record['epoch']}): score=")
        assert f"score={record['score']:.4f} (accuracy)" in line
        for key, value in record.items():  # every metric by name; the worst group by its name
            if key not in ("step", "epoch", "score_metric"):
                shown = f"{value:.4f}" if isinstance(value, float) else str(value)
                assert f"{key}={shown}" in line, key
        assert record["worst_group"] in GROUP_NAMES and f"worst_group={record['worst_group']}" in line


def test_a_run_shorter_than_an_epoch_validates_at_its_end_and_logs_its_loss(workdir, caplog, capsys):
    """Issue 25: with the default ``log_every`` (10) a run of fewer steps logged no loss at all; the last step of a run
    (and of every epoch) is always logged, and its epoch (1, the epoch it belongs to) is the validation's."""
    caplog.set_level(logging.INFO, logger="rightreasons")
    assert main(["train", "--config", "config.yaml", "max_steps=1"]) == 0  # an epoch has two steps
    summary = json.loads((workdir / "run" / "summary.json").read_text())
    assert summary["steps"] == 1 and [r["step"] for r in summary["history"]] == [1]
    assert summary["best"] == {"step": 1, "score": summary["history"][0]["score"], "metric": "accuracy"}
    records = [json.loads(line) for line in (workdir / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["split"], r["step"], r["epoch"]) for r in records][:2] == [("train", 1, 1), ("val", 1, 1)]
    assert summary["epochs"] == 1 and summary["history"][0]["epoch"] == 1
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("step ")]
    assert line.startswith(f"step 1/1 (epoch 1/1): loss={records[0]['loss']:.4g}, ") and " img/s, ETA " in line


def test_train_and_guide_need_a_config(workdir, capsys):
    for command in ("train", "guide"):
        with pytest.raises(SystemExit) as exit_:
            main([command])
        assert exit_.value.code == 2 and "the following arguments are required: --config" in capsys.readouterr().err
    assert not (workdir / "runs").exists()


def test_refused_starts_leave_no_tensorboard_runs(workdir, capsys):
    # a config refused when it is read: nothing is created
    assert main(["train", "--config", "config.yaml", "model.kwargs={inplanes: 4, num_classes: 3}"]) == 2
    error = capsys.readouterr().err
    assert "model.kwargs" in error and "without num_classes" in error and "TypeError" not in error
    assert not (workdir / "run").exists()
    # refused once the data or the weights are looked at
    assert main(["train", "--config", "config.yaml", "data.root=missing"]) == 2
    assert main(["train", "--config", "config.yaml", "model.checkpoint=nowhere.safetensors"]) == 2
    assert "model.checkpoint=nowhere.safetensors: no such weights file or run directory" in capsys.readouterr().err
    assert _event_files(workdir / "run") == {}
    # a finished run, started again without --resume: refused, and its TensorBoard log is left as it was
    assert main(["train", "--config", "config.yaml"]) == 0
    before = _event_files(workdir / "run")
    assert len(before) == 1
    capsys.readouterr()
    assert main(["train", "--config", "config.yaml"]) == 2
    error = capsys.readouterr().err
    assert "summary.json exists" in error and "pass --overwrite to replace it" in error
    assert _event_files(workdir / "run") == before


def test_a_run_directory_stands_for_its_model_file(workdir, capsys):
    assert main(["train", "--config", "config.yaml", "output_dir=base", "max_steps=1"]) == 0
    assert main(["guide", "--config", "config.yaml", "model.checkpoint=base", "max_steps=1"]) == 0
    guided = json.loads((workdir / "run" / "summary.json").read_text())
    assert guided["config"]["model"]["checkpoint"] == "base" and "epg" in guided["history"][0]
    # a run that has not finished cannot be started from, and the error says so
    (workdir / "unfinished" / "checkpoints").mkdir(parents=True)
    capsys.readouterr()
    assert main(["guide", "--config", "config.yaml", "model.checkpoint=unfinished", "output_dir=g2"]) == 2
    error = capsys.readouterr().err
    assert "model.checkpoint=unfinished: a run directory without model.safetensors" in error
    assert "has not finished (continue it with --resume)" in error


def test_an_override_after_resume_is_an_override_not_the_checkpoint(workdir, capsys):
    """argparse gives ``--resume``'s optional CHECKPOINT the next word; ``--resume optim.lr=0.5`` used to fail with
    "optim.lr=0.5 is not a complete checkpoint". Now the override is applied, and the check of the finished run's
    config names it."""
    assert main(["train", "--config", "config.yaml", "max_steps=1"]) == 0
    capsys.readouterr()
    assert main(["train", "--config", "config.yaml", "--resume", "optim.lr=0.5", "max_steps=1"]) == 2
    err = capsys.readouterr().err
    assert "holds a finished run of another config" in err and "optim.lr: 0.0001 != 0.5" in err, err
    checkpoint = next((workdir / "run" / "checkpoints").iterdir())
    assert main(["train", "--config", "config.yaml", "--resume", str(checkpoint), "max_steps=1"]) == 0


def test_evaluate_takes_every_artefact_of_a_run(workdir, capsys):
    """Issue 25: the checkpoint a sweep report names (``RUN/checkpoints/step-N``) and the run directory are scored
    like the exported model file: the checkpoint of the exported step gives the same numbers; an unfinished run's
    checkpoint is scored from its trainer state; a corrupt checkpoint is refused by name."""
    assert main(["train", "--config", "config.yaml", "optim.epochs=2", "checkpoint.keep_last=2"]) == 0
    summary = json.loads((workdir / "run" / "summary.json").read_text())
    best = workdir / "run" / "checkpoints" / f"step-{summary['exported_step']:06d}"
    assert best.is_dir()
    capsys.readouterr()
    scores = {}
    for name, path in (("file", "run/model.safetensors"), ("run", "run"), ("checkpoint", str(best)),
                       ("weights", str(best / "model.safetensors"))):
        assert main(["evaluate", "--checkpoint", path]) == 0, name
        scores[name] = {k: v for k, v in json.loads(capsys.readouterr().out).items() if k not in ("checkpoint",
                                                                                                   "config")}
    assert scores["run"] == scores["file"] == scores["checkpoint"] == scores["weights"]
    # a checkpoint of a run without a summary (not finished): its config comes from the trainer state
    (workdir / "run" / "summary.json").unlink()
    assert main(["evaluate", "--checkpoint", str(best)]) == 0
    assert json.loads(capsys.readouterr().out)["config"] == str(best / "trainer_state.json")
    assert main(["evaluate", "--checkpoint", "run"]) == 2  # the run dir still has its exported model, but no summary
    assert "no summary.json beside run" in capsys.readouterr().err
    (workdir / "run" / "model.safetensors").unlink()
    assert main(["evaluate", "--checkpoint", "run"]) == 2
    error = capsys.readouterr().err
    assert "the run has not finished" in error and best.name in error
    with open(best / "model.safetensors", "r+b") as f:
        f.seek(-1, 2)
        f.write(b"\x00" if f.read(1) != b"\x00" else b"\x01")
    assert main(["evaluate", "--checkpoint", str(best)]) == 2
    assert f"{best}: not an intact checkpoint: model.safetensors" in capsys.readouterr().err


def test_a_fine_tuning_takes_the_architecture_of_its_starting_run(workdir, capsys):
    """Issue 25: ``guide`` from a baseline run need not repeat ``model.name``/``model.kwargs`` (``model.name=null``);
    a config whose model differs from the baseline's file is refused with the differing argument and the way out."""
    assert main(["train", "--config", "config.yaml", "output_dir=base", "max_steps=1"]) == 0
    capsys.readouterr()
    assert main(["guide", "--config", "config.yaml", "model.checkpoint=base", "max_steps=1",
                 "model.kwargs={inplanes: 8}"]) == 2
    error = capsys.readouterr().err
    assert "model.checkpoint=base/model.safetensors holds a bcos_resnet18" in error
    assert "inplanes: 4 in the file, 8 in the config" in error and "set model.name=null" in error
    assert main(["guide", "--config", "config.yaml", "model.checkpoint=base", "max_steps=1", "model.name=null",
                 "model.kwargs={}"]) == 0
    summary = json.loads((workdir / "run" / "summary.json").read_text())
    assert summary["config"]["model"]["name"] is None
    assert main(["evaluate", "--checkpoint", "run/checkpoints/step-000001"]) == 0  # rebuilt via the baseline's file
    assert main(["train", "--config", "config.yaml", "model.name=null", "output_dir=x"]) == 2
    assert "model.name" in capsys.readouterr().err


def test_explain_uses_what_the_run_recorded(workdir, capsys):
    """Issue 25: ``explain`` of a run (directory or checkpoint) explains at the size the run trained at (32 px, not
    224), takes a class name for ``--target`` and the run's loss link for the probability."""
    assert main(["train", "--config", "config.yaml", "max_steps=1"]) == 0
    image = next((workdir / "wb").rglob("*.jpg"))
    for source in ("run", "run/checkpoints/step-000001"):
        capsys.readouterr()
        assert main(["explain", str(image), "--checkpoint", source, "--target", "waterbird", "--out", "figs"]) == 0
        line = capsys.readouterr().out
        assert "explained class 1 (waterbird" in line, line
        with Image.open(workdir / "figs" / f"{image.stem}_input.png") as png:
            assert png.size == (32, 32)
    assert main(["explain", str(image), "--checkpoint", "run", "--target", "heron", "--out", "figs"]) == 2
    assert "--target 'heron': expected a class index or one of its class names ['landbird', 'waterbird']" in \
        capsys.readouterr().err
    assert main(["train", "--config", "config.yaml", "max_steps=1", "loss.classification=ce", "output_dir=ce",
                 "model.kwargs={inplanes: 4, logit_bias: 2.0}"]) == 0  # the bias tells sigmoid and softmax apart
    capsys.readouterr()
    assert main(["explain", str(image), "--checkpoint", "ce", "--out", "figs"]) == 0
    from rightreasons.apps.cli.explain import load_images
    from rightreasons.explain import explain
    from rightreasons.models import load_model
    result = explain(load_model(workdir / "ce" / "model.safetensors").eval(), load_images([image], 32))
    target, logits = int(result.target[0]), result.logits[0]
    softmax, sigmoid = (f"p={float(p[target]):.3f})" for p in (logits.softmax(0), logits.sigmoid()))
    assert softmax != sigmoid and softmax in capsys.readouterr().out  # the run's CE link, not the default sigmoid
