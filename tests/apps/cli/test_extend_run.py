"""``rightreasons train --resume optim.epochs=M`` extends a finished run (issue 25), through the real command line on a
tiny Waterbirds-100 copy (eight training images, batches of four: two steps an epoch) and a B-cos ResNet-18 of width 4
at 32 px.

* With the ``constant`` schedule the extended run is the run trained for ``M`` epochs from the start: the same final
  weights bit for bit, the same ``summary.json`` (but wall-clock time and provenance) and the same ``metrics.jsonl``.
* With ``cosine`` the schedule is rebuilt for the new length and fast-forwarded: every step after the extension point
  has the learning rate of the longer run at that step; the steps before it kept the shorter schedule, so the weights
  differ from the longer run's — what "continued" means, stated and checked.
* Other differences are refused by name, a shorter schedule is refused, and an extension that fails leaves the
  finished run's ``model.safetensors`` and ``summary.json`` as they were.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from rightreasons.apps.cli import main
from run_configs import TINY_WATERBIRDS_ROWS

CONFIG = """\
output_dir: run
cpu: true
log_every: 1
model: {name: bcos_resnet18, kwargs: {inplanes: 4}}
data: {name: waterbirds100, root: ROOT, image_size: 32, batch_size: 4, eval_batch_size: 8}
optim: {epochs: 1, lr: 0.01}
eval: {num_images: 0}
checkpoint: {keep_last: 1}
"""
LR = 0.01


@pytest.fixture
def workdir(tmp_path, monkeypatch, write_waterbirds):
    root = write_waterbirds(tmp_path / "wb", TINY_WATERBIRDS_ROWS)
    (tmp_path / "config.yaml").write_text(CONFIG.replace("ROOT", str(root)))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def train(*args: str) -> int:
    return main(["train", "--config", "config.yaml", *args])


def outcome(run: Path) -> dict:
    """What a run leaves, but for wall-clock time, provenance and its directory."""
    summary = json.loads((run / "summary.json").read_text())
    for key in ("seconds", "provenance"):
        summary.pop(key)
    summary["config"].pop("output_dir")
    return {"weights": load_file(run / "model.safetensors"), "summary": summary,
            "metrics": [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]}


def learning_rates(run: Path) -> dict[int, float]:
    """The learning rate logged after each step (the one the next step uses)."""
    return {r["step"]: r["lr"] for r in outcome(run)["metrics"] if r["split"] == "train"}


def test_an_extended_run_is_the_longer_run(workdir, capsys):
    assert train() == 0
    capsys.readouterr()
    assert train("--resume", "optim.epochs=2") == 0
    assert "extending the finished run in run from 1 to 2 epochs (step 2 of 4)" in capsys.readouterr().err
    extended = outcome(workdir / "run")
    assert extended["summary"]["epochs"] == 2 and extended["summary"]["steps"] == 4
    assert [(r["split"], r["step"]) for r in extended["metrics"]] == [
        ("train", 1), ("train", 2), ("val", 2), ("train", 3), ("train", 4), ("val", 4)]
    assert train("optim.epochs=2", "output_dir=scratch") == 0
    scratch = outcome(workdir / "scratch")
    assert extended["weights"].keys() == scratch["weights"].keys()
    assert all(extended["weights"][k].equal(scratch["weights"][k]) for k in scratch["weights"])
    assert extended["summary"] == scratch["summary"] and extended["metrics"] == scratch["metrics"]
    # resumed again with the extended config: nothing to do
    capsys.readouterr()
    assert train("--resume", "optim.epochs=2") == 0
    assert "holds the finished run of this config: nothing to do" in capsys.readouterr().err


def test_a_cosine_schedule_is_rebuilt_for_the_new_length_and_fast_forwarded(workdir):
    assert train("optim.schedule=cosine") == 0
    assert train("--resume", "optim.schedule=cosine", "optim.epochs=2") == 0
    assert train("optim.schedule=cosine", "optim.epochs=2", "output_dir=scratch") == 0
    extended, scratch = learning_rates(workdir / "run"), learning_rates(workdir / "scratch")
    cosine = {total: [LR * (1 + math.cos(math.pi * k / total)) / 2 for k in range(total + 1)] for total in (2, 4)}
    # the first epoch was trained on the one-epoch schedule (to 0 at step 2) ...
    assert extended[1] == pytest.approx(cosine[2][1]) and extended[2] == pytest.approx(0, abs=1e-12)
    # ... after the extension point every step has the two-epoch schedule's learning rate, exactly as from the start
    assert extended[3] == scratch[3] == pytest.approx(cosine[4][3]) and extended[4] == scratch[4] == 0
    assert scratch[2] == pytest.approx(cosine[4][2])
    # so the weights differ from a run trained on the longer schedule from the start
    weights, reference = load_file(workdir / "run" / "model.safetensors"), load_file(workdir / "scratch" /
                                                                                        "model.safetensors")
    assert any(not weights[k].equal(reference[k]) for k in reference if reference[k].is_floating_point())


def test_only_a_longer_schedule_extends_and_a_failed_extension_keeps_the_finished_run(workdir, capsys, monkeypatch):
    assert train("optim.epochs=2") == 0
    run = workdir / "run"
    before = {name: (run / name).read_bytes() for name in ("summary.json", "model.safetensors")}
    capsys.readouterr()
    assert train("--resume", "optim.epochs=3", "optim.lr=0.5") == 2
    error = capsys.readouterr().err
    assert "holds a finished run of another config (optim.lr: 0.01 != 0.5)" in error and "optim.epochs:" not in error
    assert train("--resume", "optim.epochs=1") == 2
    assert ("optim.epochs=1 would shorten the finished run in run: it is at step 4 (epoch 2) and this schedule ends at "
            "step 2; a resume may lengthen the schedule") in capsys.readouterr().err
    assert train("--resume", "max_steps=3") == 2
    assert "max_steps=3 would shorten the finished run in run: it is at step 4" in capsys.readouterr().err
    # the summary cannot be written: the finished run's model file and summary stay as they were
    import rightreasons.engine.trainer as trainer

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(trainer, "json_text", full_disk)  # the new model file is written, the summary cannot be
    assert train("--resume", "optim.epochs=3") == 2
    assert "could not write the exported model" in capsys.readouterr().err
    assert {name: (run / name).read_bytes() for name in before} == before
    assert not any(p.name.endswith(".staged") for p in run.iterdir())
    monkeypatch.undo()
    monkeypatch.chdir(workdir)
    assert train("--resume", "optim.epochs=3") == 0
    assert json.loads((run / "summary.json").read_text())["epochs"] == 3
    # without its checkpoints a finished run cannot be extended, and the error says so
    shutil.rmtree(run / "checkpoints")
    capsys.readouterr()
    assert train("--resume", "optim.epochs=4") == 2
    assert "cannot extend the finished run in run: run/checkpoints holds no checkpoint to continue from" in \
        capsys.readouterr().err
