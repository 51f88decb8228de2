"""The training engine: configs, DDP equivalence, kill-and-resume equivalence, bad input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rightreasons.config import from_dict, load_config
from rightreasons.classification import ClassificationConfig, ClassificationTask
from rightreasons.engine import Trainer, run
from rightreasons.errors import ConfigError, DivergenceError, TrainingError
from rightreasons.guidance import GuidanceTask, GuideConfig

BASE = """
cpu: true
seed: 3
log_every: 1
model: {name: bcos_cifar10_resnet20, kwargs: {norm_layer: pnu}}
data: {name: synthetic-birds, image_size: 32, batch_size: 8, eval_batch_size: 32, options: {n: 48, seed: 1}}
optim: {epochs: 2, lr: 0.001, schedule: cosine, warmup_epochs: 0.5}
guidance: {weight: 1.0, layer: mid2}
eval: {num_images: 1}
checkpoint: {every_steps: 2, keep_last: 10}
"""


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(BASE)
    return path


def _run(args: list[str], cwd: Path, code: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable] + (["-c", code] if code else ["-m", "rightreasons"]) + args
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"{command} failed ({result.returncode}):\n{result.stdout[-3000:]}\n"
                             f"{result.stderr[-3000:]}")
    return result


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_file(run / "model.safetensors")


def _max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


# ---------------------------------------------------------------------------------------------------------- configs
def test_unknown_key_is_an_error_with_a_suggestion(config_file):
    with pytest.raises(ConfigError, match=r"optim\.lrr.*did you mean 'lr'"):
        load_config(GuideConfig, config_file, ["optim.lrr=0.1"])


def test_wrong_type_names_the_key(config_file):
    with pytest.raises(ConfigError, match=r"data\.batch_size: expected an integer"):
        load_config(GuideConfig, config_file, ["data.batch_size=eight"])
    with pytest.raises(ConfigError, match=r"guidance\.loss: 'energie' is not one of"):
        load_config(GuideConfig, config_file, ["guidance.loss=energie"])


def test_sync_bn_is_on_by_default_and_must_be_true_or_false(config_file):
    assert load_config(GuideConfig, config_file).model.sync_bn is True
    assert load_config(GuideConfig, config_file, ["model.sync_bn=false"]).model.sync_bn is False
    with pytest.raises(ConfigError, match=r"model\.sync_bn: expected true or false, got 'maybe'"):
        load_config(GuideConfig, config_file, ["model.sync_bn=maybe"])


def test_overrides_are_parsed_as_yaml_scalars(config_file):
    config = load_config(GuideConfig, config_file, ["optim.lr=1e-4", "guidance.weight=2", "max_steps=7"])
    assert config.optim.lr == 1e-4 and config.guidance.weight == 2.0 and config.max_steps == 7
    assert config.model.kwargs == {"norm_layer": "pnu"}


def test_yaml_is_read_with_a_safe_loader(tmp_path):
    path = tmp_path / "evil.yaml"
    path.write_text("output_dir: !!python/object/apply:os.system ['touch pwned']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(ClassificationConfig, path)
    assert not (tmp_path / "pwned").exists()


# ---------------------------------------------------------------------------------------------------------- bad input
def test_unknown_model_lists_close_matches_when_the_config_is_read(tmp_path):
    with pytest.raises(ConfigError, match=r"model\.name: unknown model 'bcos_resnet81'; did you mean bcos_resnet18"):
        from_dict(ClassificationConfig, {"output_dir": str(tmp_path / "r"), "model": {"name": "bcos_resnet81"}})
    assert not (tmp_path / "r").exists()


def test_guide_without_annotated_images_is_an_error(tmp_path):
    config = from_dict(GuideConfig, {"output_dir": str(tmp_path / "r"), "cpu": True,
                                     "model": {"name": "bcos_cifar10_resnet20"},
                                     "data": {"image_size": 32, "annotated_fraction": 0.0, "options": {"n": 16}}})
    with pytest.raises(TrainingError, match="none of the .* training images .* has boxes"):
        Trainer(GuidanceTask(config))


def test_non_finite_losses_are_skipped_then_training_stops(tmp_path, monkeypatch):
    config = from_dict(ClassificationConfig, {"output_dir": str(tmp_path / "r"), "cpu": True,
                                              "model": {"name": "bcos_cifar10_resnet20"},
                                              "data": {"image_size": 32, "batch_size": 4, "options": {"n": 32}}})
    trainer = Trainer(ClassificationTask(config))
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}

    def nan_loss(model, batch, step):
        loss = torch.tensor(float("nan"), requires_grad=True)
        return {"classification": loss}, loss

    monkeypatch.setattr(trainer.task, "losses", nan_loss)
    with pytest.warns(UserWarning, match=r"non-finite loss at epoch 1, batch [123] .*step skipped"):
        with pytest.raises(DivergenceError, match=r"training diverged at step 3 \(epoch 1\): 3 steps in a row had a "
                                                  "non-finite loss"):  # a skipped step is a step of the schedule
            trainer.fit()
    assert all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())


def test_unwritable_output_directory_fails_before_training(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    config = from_dict(ClassificationConfig, {"output_dir": str(blocker / "run"), "cpu": True,
                                              "model": {"name": "bcos_cifar10_resnet20"},
                                              "data": {"options": {"n": 16}}})
    with pytest.raises(TrainingError, match="not writable"):
        Trainer(ClassificationTask(config))


# ---------------------------------------------------------------------------------------------------------- runs
@pytest.fixture(scope="module")
def reference_run(tmp_path_factory, run_cli) -> Path:
    """One uninterrupted 1-process guided run (2 epochs × 6 steps, checkpoints every 2 steps), with ``--verbose``;
    its console output (stderr, not a terminal) is kept in ``stderr.txt``."""
    folder = tmp_path_factory.mktemp("reference")
    (folder / "config.yaml").write_text(BASE)
    done = run_cli("--verbose", "guide", "--config", "config.yaml", "output_dir=run", cwd=folder)
    assert done.returncode == 0, done.stderr[-3000:]
    (folder / "stderr.txt").write_text(done.stderr)
    return folder


def test_run_writes_model_metrics_checkpoints_and_explanations(reference_run):
    run = reference_run / "run"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["epochs"] == 2 and len(summary["history"]) == 2
    assert summary["task"] == "guide" and summary["config"]["guidance"]["layer"] == "mid2"
    assert summary["provenance"]["rightreasons"]
    assert {"git_commit", "torch", "argv"} <= summary["provenance"].keys()
    state = json.loads((run / "checkpoints" / "step-000012" / "trainer_state.json").read_text())
    assert state["config"] == summary["config"] and state["provenance"]["argv"]
    for record in summary["history"]:
        assert 0.0 <= record["accuracy"] <= 1.0 and 0.0 <= record["epg"] <= 1.0 and 0.0 <= record["iou"] <= 1.0
        assert "accuracy/G1 landbird/land" in record and "worst_group_accuracy" in record
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert {r["split"] for r in lines} == {"train", "val"}
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in lines if r["split"] == "train")
    done = sorted(p.name for p in (run / "checkpoints").iterdir())
    assert done[-1] == "step-000012" and not [d for d in done if d.startswith(".tmp")]
    assert list((run / "explanations").rglob("*.png"))
    assert any((run / "tensorboard").rglob("events.out.tfevents*"))
    from rightreasons import load_model

    model = load_model(run / "model.safetensors")
    assert model.num_classes == 2


STEP_LINE = re.compile(r"step (\d+)/12 \(epoch (\d)/2\): (.*), lr=(\S+), ([\d.]+) img/s, ETA ([\d:]+)$")


def test_every_logged_step_is_a_console_line_and_epochs_count_from_one(reference_run):
    """Issue 25: ``--verbose log_every=1`` printed no loss; step 1 was epoch 0 in the train record of metrics.jsonl
    and epoch 1 in the validation record. Now each logged step (here every step) is one line outside a terminal —
    step/total, epoch/total, every loss term, learning rate, images/s and ETA — and every record, line and the
    summary count epochs from 1: a step's epoch is the one it belongs to, a validation's the epoch it ends."""
    run = reference_run / "run"
    records = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 13))
    assert [r["epoch"] for r in train] == [1] * 6 + [2] * 6
    assert [(r["step"], r["epoch"]) for r in records if r["split"] == "val"] == [(6, 1), (12, 2)]
    assert {r["split"] for r in records} == {"train", "val"}  # a guided run has no final evaluations
    summary = json.loads((run / "summary.json").read_text())
    assert summary["epochs"] == 2 and [r["epoch"] for r in summary["history"]] == [1, 2]
    lines = [m for m in map(STEP_LINE.search, (reference_run / "stderr.txt").read_text().splitlines()) if m]
    assert len(lines) == len(train)
    for line, record in zip(lines, train):
        step, epoch, terms, lr, speed, _ = line.groups()
        assert (int(step), int(epoch)) == (record["step"], record["epoch"])
        assert float(lr) == pytest.approx(record["lr"], rel=1e-3) and float(speed) > 0
        shown = dict(term.split("=") for term in terms.split(", "))
        assert shown.keys() == record.keys() - {"split", "step", "epoch", "lr"} and "localization" in shown
        assert all(float(v) == pytest.approx(record[k], rel=1e-3, abs=1e-12) for k, v in shown.items())
    validations = re.findall(r"validation at step (\d+) \(epoch (\d+)\)", (reference_run / "stderr.txt").read_text())
    assert validations == [("6", "1"), ("12", "2")]


def test_two_processes_match_one_process(tmp_path, launch, run_cli):
    """2 processes (gloo) with half the global batch each follow the 1-process run: the weights after 4 steps agree.
    The gradients differ in the last bits (DDP sums the halves in another order); with SGD that stays in the last
    bits. (Adam's normalised update turns it into up to ``lr`` for the weights whose gradient is near zero, which
    compounds: 12 % of the weights beyond 1e-5 after 4 steps of this config, so Adam cannot tell a wrong gradient.)"""
    (tmp_path / "config.yaml").write_text(BASE)
    settings = ["max_steps=4", "optim.name=sgd", "optim.lr=0.05"]
    done = run_cli("guide", "--config", "config.yaml", "output_dir=one", *settings, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    launch(["guide", "--config", "config.yaml", "output_dir=ddp", *settings], processes=2, cwd=tmp_path)
    assert _max_difference(_weights(tmp_path / "one"), _weights(tmp_path / "ddp")) < 1e-5


KILL_DURING_STEP = """
import os, signal, sys
from rightreasons.engine import trainer as T
original = T.Trainer.train_step
def dying_step(self, batch):
    if self.position.step == 5 and self.position.batch == 5:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(self, batch)
T.Trainer.train_step = dying_step
from rightreasons.apps.cli import main
sys.exit(main(sys.argv[1:]))
"""

KILL_DURING_CHECKPOINT = """
import os, signal, sys
from rightreasons.engine import checkpointing as C
original = C.CheckpointManager.save
def dying_save(self, step, state, protect=()):
    if step == 8:
        self.accelerator.save_state(str(self.root / ".tmp-step-000008"))
        os.kill(os.getpid(), signal.SIGKILL)
    return original(self, step, state, protect)
C.CheckpointManager.save = dying_save
from rightreasons.apps.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.exhaustive  # test_kill_points and test_distill_crash kill runs in the suite
@pytest.mark.parametrize("killer", [KILL_DURING_STEP, KILL_DURING_CHECKPOINT], ids=["during-step", "during-checkpoint"])
def test_sigkill_then_resume_ends_with_the_same_weights(reference_run, tmp_path, killer):
    (tmp_path / "config.yaml").write_text(BASE)
    killed = _run(["guide", "--config", "config.yaml", "output_dir=run"], tmp_path, code=textwrap.dedent(killer),
                  check=False)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (tmp_path / "run" / "model.safetensors").exists()
    with pytest.raises(AssertionError, match="already holds checkpoints"):
        _run(["guide", "--config", "config.yaml", "output_dir=run"], tmp_path)
    _run(["guide", "--config", "config.yaml", "output_dir=run", "--resume"], tmp_path)
    assert _max_difference(_weights(reference_run / "run"), _weights(tmp_path / "run")) < 1e-6
    resumed = json.loads((tmp_path / "run" / "summary.json").read_text())["history"]
    reference = json.loads((reference_run / "run" / "summary.json").read_text())["history"]
    assert [r["accuracy"] for r in resumed] == pytest.approx([r["accuracy"] for r in reference])
    assert [r["epg"] for r in resumed] == pytest.approx([r["epg"] for r in reference], abs=1e-6)


def test_resume_with_another_config_names_the_differing_keys(reference_run, tmp_path):
    config = load_config(GuideConfig, reference_run / "config.yaml",
                         [f"output_dir={reference_run / 'run'}", "optim.lr=0.01"])
    with pytest.raises(TrainingError, match=r"optim\.lr: 0\.001 != 0\.01"):
        run(config, resume=True)


def test_evaluate_command_writes_all_metrics(reference_run, run_cli):
    out = reference_run / "test.json"
    done = run_cli("evaluate", "--config", "config.yaml", "--checkpoint", "run/model.safetensors", "--split", "test",
                   "--out", out, cwd=reference_run)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["split"] == "test" and results["method"] == "bcos" and results["layer"] == "mid2"
    assert {"accuracy", "worst_group_accuracy", "epg", "iou"} <= results.keys()
    assert sum(k.startswith("accuracy/G") for k in results) == 4  # the balanced test split has all four groups
