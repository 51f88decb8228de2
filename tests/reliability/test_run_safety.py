"""What a training command never does to its output directory, through the real command line (``rightreasons guide``
on the tiny guide config: ``bcos_resnet18`` width 8, ``synthetic-birds`` at 32 px), in the test's process unless a
case needs a process of its own (a file size limit, a directory changed while the run goes on).

* **Divergence** — a step whose gradients overflow is skipped (checked before the optimiser step); training that
  diverges stops with one ``error:`` line naming the step and what was non-finite, every checkpoint left holds finite
  weights, the last finite one is never pruned, and ``--resume`` loads it (not a non-finite one) and stops the same
  clear way.
* **Finished runs** — ``summary.json`` or ``model.safetensors`` in ``output_dir`` are never overwritten unless
  ``--overwrite`` asks for it, with or without ``--resume``, even when ``checkpoints/`` was deleted.
* **Symlinks** — deleting (pruning, crash leftovers) never follows a symlink out of the output directory.
* **Write failures** — a file size limit (``prlimit --fsize``: the kernel answers ``EFBIG`` as a full disk answers
  ``ENOSPC``) that stops safetensors (``SafetensorError``) or ``torch.save`` (``RuntimeError`` of its zip writer) ends
  in the one message saying that nothing was lost and how to resume; the resume ends like an uninterrupted run.
* **Data** — a run resumes only on the data it was started on.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from rightreasons.engine.checkpointing import MANIFEST
from cli_outcomes import clear_error
from guards import GUARD_S
from run_configs import tiny_guided_config

CONFIG = tiny_guided_config(**{"model.kwargs": {"inplanes": 8}, "checkpoint.keep_last": 3, "checkpoint.every_steps": 1})


@pytest.fixture(scope="module")
def guide(run_cli) -> Callable[..., subprocess.CompletedProcess]:
    """``guide(tmp_path, out, *args, config=CONFIG, prefix=(), command="guide")``: ``rightreasons guide --config C
    output_dir=OUT ARGS`` in this process, or, with a ``prefix`` (e.g. ``prlimit``), in a subprocess under it."""
    def run(tmp_path: Path, out: Path, *args: str, config: dict | None = None, prefix: tuple[str, ...] = (),
            command: str = "guide") -> subprocess.CompletedProcess:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config or CONFIG))
        argv = [command, "--config", str(path), f"output_dir={out}", *args]
        if not prefix:
            return run_cli(*argv)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
        return subprocess.run([*prefix, sys.executable, "-m", "rightreasons", *argv], capture_output=True, text=True,
                              env=env, timeout=GUARD_S)

    return run


def finite_checkpoints(out: Path) -> list[str]:
    """The checkpoints of ``out`` (each must hold a manifest and finite weights)."""
    names = []
    for step in sorted((out / "checkpoints").glob("step-*")):
        assert (step / MANIFEST).is_file(), step
        weights = load_file(step / "model.safetensors")
        assert all(t.isfinite().all() for t in weights.values() if t.is_floating_point()), f"{step}: non-finite"
        names.append(step.name)
    return names


def files(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in ("summary.json", "model.safetensors", "metrics.jsonl")}


# ---------------------------------------------------------------------------------------------------------- divergence
def test_an_overflowing_gradient_is_skipped_and_divergence_keeps_the_last_finite_checkpoint(tmp_path, guide):
    """``guidance.weight=1e38``: the loss is finite (about 7e37), its gradient overflows. Before: the step was taken,
    ``step-000002`` held NaN weights and verified, ``step-000001`` was pruned, and every resume died on
    ``ValueError: ... 'epg' must be finite, got nan``. Every image has boxes and the weight is far beyond what any
    gradient of the localisation loss survives, so that every step overflows, whatever the data's last bits (at 1e35
    with half the images annotated, a batch's gradient could stay finite and end the run of skipped steps)."""
    out = tmp_path / "run"
    args = ("guidance.weight=1e38", "data.annotated_fraction=1.0", "checkpoint.every_steps=1",
            "checkpoint.keep_last=1", "optim.epochs=3")
    done = guide(tmp_path, out, *args)
    clear_error(done, r"training diverged at step \d+ .*3 steps in a row had a non-finite gradient.*Nothing "
                      r"non-finite was saved: the newest checkpoint, step-\d+, holds finite weights and is kept")
    assert "non-finite gradient" in done.stderr  # each skipped step is a warning first
    kept = finite_checkpoints(out)
    assert kept, "the last finite checkpoint was pruned"
    resumed = guide(tmp_path, out, *args, "--resume")
    clear_error(resumed, r"training diverged at step \d+")
    assert finite_checkpoints(out) == kept


def test_a_non_finite_validation_metric_is_a_clear_error_and_the_checkpoint_is_kept(tmp_path, guide):
    """A standard ResNet-18 with SGD at lr 10: finite weights, NaN EPG at the first validation. Before: a
    ``ValueError`` traceback at every resume."""
    out = tmp_path / "run"
    args = ("model.name=resnet18", "model.kwargs={}", "guidance.method=ixg", "optim.name=sgd", "optim.lr=10",
            "checkpoint.every_steps=2")
    # finite weights whose outputs are not finite on the validation images (or a metric of them): divergence
    diverged = r"training diverged at step 3 .*validation(: .*outputs \(logits\) are not finite| gave non-finite)"
    clear_error(guide(tmp_path, out, *args), diverged)
    assert finite_checkpoints(out) == ["step-000002"]
    clear_error(guide(tmp_path, out, *args, "--resume"), diverged)
    assert finite_checkpoints(out) == ["step-000002"]
    assert not (out / "summary.json").exists()


@pytest.mark.parametrize("lr", [pytest.param("1e37", marks=pytest.mark.exhaustive), "1e39"])
def test_a_learning_rate_beyond_any_schedule_is_refused_before_training(tmp_path, guide, lr):
    """SGD at lr 1e37 used to end with logits exactly 0 and exit 0; 1e39 overflowed at step 1."""
    out = tmp_path / "run"
    clear_error(guide(tmp_path, out, "optim.name=sgd", f"optim.lr={lr}"),
                r"optim\.lr: expected a learning rate in \(0, 100\], got 1e\+3[79]")
    assert not out.exists()


# -------------------------------------------------------------------------------------------------------- finished runs
@pytest.fixture(scope="module")
def finished(tmp_path_factory, guide) -> Path:
    """A finished one-epoch run."""
    folder = tmp_path_factory.mktemp("finished")
    done = guide(folder, folder / "run")
    assert done.returncode == 0, done.stderr[-3000:]
    return folder / "run"


@pytest.mark.parametrize("resume", [False, pytest.param(True, marks=pytest.mark.exhaustive)], ids=["fresh", "resume"])
def test_a_finished_run_is_never_overwritten_without_overwrite(finished, tmp_path, guide, resume):
    """``checkpoints/`` deleted to save space, then the same directory with another learning rate. Before: a warning,
    then ``metrics.jsonl`` truncated and ``model.safetensors`` and ``summary.json`` replaced."""
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    shutil.rmtree(out / "checkpoints")
    before = files(out)
    args = ["optim.lr=1e-2"] + (["--resume"] if resume else [])
    if resume:
        clear_error(guide(tmp_path, out, *args), rf"{out} holds a finished run of another config \(optim\.lr: 0\.001 "
                                                 r"!= 0\.01\); pass --overwrite to replace it")
    else:
        clear_error(guide(tmp_path, out, *args), rf"{out / 'summary.json'} exists: .* holds a finished run, which "
                                                 r"this run would overwrite; pass --overwrite to replace it")
    assert files(out) == before
    (out / "summary.json").unlink()
    clear_error(guide(tmp_path, out, *args), rf"{out / 'model.safetensors'} exists: .*pass --overwrite")
    assert (out / "model.safetensors").read_bytes() == before["model.safetensors"]


def test_resuming_a_finished_run_changes_nothing_and_overwrite_replaces_it(finished, tmp_path, guide):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    before = files(out)
    done = guide(tmp_path, out, "--resume")
    assert done.returncode == 0, done.stderr[-3000:]
    assert files(out) == before
    done = guide(tmp_path, out, "optim.lr=1e-2", "--overwrite")
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((out / "summary.json").read_text())["config"]["optim"]["lr"] == 1e-2
    assert files(out)["model.safetensors"] != before["model.safetensors"]


# ---------------------------------------------------------------------------------------------------------- symlinks
def test_pruning_removes_a_symlinked_checkpoint_never_what_it_points_to(finished, tmp_path, guide):
    """A ``step-`` entry linking to another run's checkpoint, resumed from and then pruned (``keep_last`` lowered on
    resume), and a ``.tmp-step-`` leftover linking to another run. Before: pruning deleted the other run's manifest,
    then failed with ``OSError: Cannot call rmtree on a symbolic link``; the leftover link failed the start the same
    way."""
    other = tmp_path / "other"
    shutil.copytree(finished, other)
    target = other / "checkpoints" / "step-000001"
    manifest = (target / MANIFEST).read_bytes()
    out = tmp_path / "run"
    (out / "checkpoints").mkdir(parents=True)
    (out / "checkpoints" / "step-000001").symlink_to(target, target_is_directory=True)
    (out / "checkpoints" / ".tmp-step-000009").symlink_to(other, target_is_directory=True)  # a crash's leftover
    done = guide(tmp_path, out, "--resume", "checkpoint.keep_last=1")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (target / MANIFEST).read_bytes() == manifest and (other / "summary.json").is_file()
    assert not any(p.is_symlink() for p in (out / "checkpoints").iterdir())


def test_a_checkpoint_directory_linked_out_of_the_run_is_refused(finished, tmp_path, guide):
    other = tmp_path / "other"
    shutil.copytree(finished, other)
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoints").symlink_to(other / "checkpoints", target_is_directory=True)
    before = sorted(p.name for p in (other / "checkpoints").iterdir())
    clear_error(guide(tmp_path, out), rf"{out / 'checkpoints'} is a symlink to .*outside the output directory")
    assert sorted(p.name for p in (other / "checkpoints").iterdir()) == before


# ------------------------------------------------------------------------------------------------------- write failures
@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs prlimit (util-linux)")
@pytest.mark.parametrize("limit, raised", [(100_000, "SafetensorError"),
                                           pytest.param(1_000_000, "RuntimeError", marks=pytest.mark.exhaustive)],
                         ids=["safetensors", "torch-save"])
def test_a_write_failure_of_any_kind_says_nothing_was_lost_and_resume_finishes_the_run(finished, tmp_path, guide,
                                                                                       limit, raised):
    """Files larger than ``limit`` bytes cannot be written: the checkpoint's weights (about 0.7 MB, safetensors) or
    its optimiser state (about 1.4 MB, ``torch.save``). Before: raw tracebacks (only ``OSError`` ENOSPC was caught)."""
    out = tmp_path / "run"
    done = guide(tmp_path, out, prefix=("prlimit", f"--fsize={limit}"))
    clear_error(done, rf"could not write checkpoint step-000001 \({raised}: .*\)\. Nothing was lost: the newest "
                      r"complete checkpoint is none yet\. Free some disk space .* run the same command with --resume")
    assert not list((out / "checkpoints").glob(".tmp-*"))
    done = guide(tmp_path, out, "--resume")
    assert done.returncode == 0, done.stderr[-3000:]
    assert load_file(out / "model.safetensors").keys() == load_file(finished / "model.safetensors").keys()
    assert all((load_file(out / "model.safetensors")[k] == v).all()
               for k, v in load_file(finished / "model.safetensors").items())


def test_a_five_thousand_character_output_dir_is_a_clear_error(tmp_path, guide):
    out = tmp_path / ("x" * 5000)
    clear_error(guide(tmp_path, out), r"output directory .*…x+ \(5,\d{3} characters\) is not writable: File name too "
                                      "long")


# ---------------------------------------------------------------------------------------------------------- data
def test_resume_on_changed_data_is_refused_naming_the_change(tmp_path, guide, write_voc):
    """Two images added to VOC's ``train.txt`` between the start and the resume. Before: the run went on silently."""
    objects = {f"{i:06d}": (40, 48, [("dog" if i % 2 else "cat", 5, 5, 30, 35, 0)]) for i in range(14)}
    ids = sorted(objects)
    voc = write_voc(tmp_path / "voc", objects, {"train": ids[:8], "val": ids[10:]})
    config = {**CONFIG, "data": {**CONFIG["data"], "name": "voc2007", "root": str(voc), "options": {}}}
    out = tmp_path / "run"
    done = guide(tmp_path, out, config=config)
    assert done.returncode == 0, done.stderr[-3000:]
    (out / "summary.json").unlink()  # an interrupted run: its checkpoints remain
    (out / "model.safetensors").unlink()
    (voc / "ImageSets/Main/train.txt").write_text("".join(f"{i}\n" for i in ids[:10]))
    clear_error(guide(tmp_path, out, "--resume", config=config),
                r"cannot resume from .*step-000002: the data changed since it was written \(2 images added to "
                r"train, voc2007\); a run resumes only on the same data")


# ---------------------------------------------------------------------------------------------------------- locks
HOLD_LOCK = """\
import sys
from rightreasons.fileio import DirectoryLock
with DirectoryLock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()
"""
"""A process that holds the lock of the directory ``argv[1]`` until its stdin is closed."""


def test_a_cache_directory_in_use_is_refused(tmp_path, finished, guide):
    """Two ``cache`` writers on one directory (here: a process this test starts holds its lock). Before: both wrote,
    and the manifest could name one teacher over shards of the other."""
    cache = tmp_path / "cache"
    cache.mkdir()
    config = {**CONFIG, "teacher": {"checkpoint": str(finished / "model.safetensors")}}
    config.pop("guidance")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]),
                                                        os.environ.get("PYTHONPATH", "")])}
    with subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(cache)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True, env=env) as holder:
        try:
            assert holder.stdout.readline() == "locked\n"
            done = guide(tmp_path, cache, "--out", str(cache), config=config, command="cache")
        finally:
            holder.communicate("", timeout=GUARD_S)
    clear_error(done, rf"cache directory {cache} is in use by another run \(process {holder.pid} on host")
    assert sorted(p.name for p in cache.iterdir()) == [".lock"]


def _immutable_directories_work(tmp_path: Path) -> bool:
    """Whether ``chattr +i`` makes a directory refuse new entries here (as root, ``chmod`` does not)."""
    probe = tmp_path / "probe"
    probe.mkdir()
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(probe)], capture_output=True).returncode:
        return False
    try:
        (probe / "x").touch()
        return False
    except OSError:
        return True
    finally:
        subprocess.run(["chattr", "-i", str(probe)], check=True)


def test_an_output_directory_turned_read_only_mid_run_says_nothing_was_lost(tmp_path, guide):
    """The run's directories become read-only (``chattr +i``: what ``chmod a-w`` does for a user other than root)
    after its first steps. Before: a raw ``PermissionError`` traceback from the checkpoint writer."""
    if not _immutable_directories_work(tmp_path):
        pytest.skip("chattr +i is not available or has no effect here")
    out = tmp_path / "run"
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({**CONFIG, "optim": {**CONFIG["optim"], "epochs": 4}}))
    command = [sys.executable, "-m", "rightreasons", "guide", "--config", str(path), f"output_dir={out}"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    locked: list[Path] = []
    try:
        metrics = out / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().count("\n") >= 1) and process.poll() is None:
            time.sleep(0.02)
        locked = [d for d in (out / "checkpoints", out / "tensorboard", out) if d.is_dir()]
        for directory in locked:
            subprocess.run(["chattr", "+i", str(directory)], check=True)
        stdout, stderr = process.communicate(timeout=GUARD_S)
    finally:
        for directory in locked:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
        if process.poll() is None:
            process.kill()
    clear_error(subprocess.CompletedProcess(command, process.returncode, stdout, stderr),
                r"could not write .*\((PermissionError|OSError): .*Operation not permitted.*\)\. Nothing was lost: the "
                rf"newest complete checkpoint is (step-\d+|none yet)\. Free some disk space \(or make {out} writable "
                r"again\) and run the same command with --resume")
    finite_checkpoints(out)  # whatever was written before is intact
    done = guide(tmp_path, out, "--resume", config={**CONFIG, "optim": {**CONFIG["optim"], "epochs": 4}})
    assert done.returncode == 0, done.stderr[-3000:]
