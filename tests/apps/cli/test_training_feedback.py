"""What ``rightreasons train`` shows and records while it trains (issue 25, point 3): on a terminal the progress bar
carries loss, learning rate, images/s and the ETA; ``log_with`` chooses accelerate's trackers, refusing unknown and
uninstalled ones before any work; the explanation images of each validation reach TensorBoard as well as the PNGs.

One run of the command line (in this process: no second start of torch) with stderr on a pseudo-terminal (synthetic
birds, a B-cos ResNet-18 of width 4 at 32 px, 2 epochs of 2 steps) serves the terminal and TensorBoard tests."""

from __future__ import annotations

import fcntl
import importlib.util
import io
import os
import pty
import re
import struct
import sys
import termios
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from rightreasons.apps.cli import main

CONFIG = """\
output_dir: run
cpu: true
model: {name: bcos_resnet18, kwargs: {inplanes: 4}}
data: {name: synthetic-birds, image_size: 32, batch_size: 4, eval_batch_size: 8, options: {n: 8, seed: 1}}
optim: {epochs: 2, lr: 0.001}
eval: {num_images: 2}
checkpoint: {keep_last: 1}
log_with: [tensorboard]
"""


@pytest.fixture(scope="module")
def terminal_run(tmp_path_factory) -> tuple[Path, str]:
    """The run's directory and what the command line showed on its stderr, a 200-column pseudo-terminal."""
    folder = tmp_path_factory.mktemp("feedback")
    (folder / "config.yaml").write_text(CONFIG)
    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
    shown = bytearray()

    def read() -> None:
        while True:
            try:
                chunk = os.read(parent, 65536)
            except OSError:  # the terminal was closed
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    stderr, sys.stderr = sys.stderr, open(child, "w", buffering=1)
    try:
        code = main(["train", "--config", str(folder / "config.yaml"), f"output_dir={folder / 'run'}"])
    finally:
        sys.stderr.close()
        sys.stderr = stderr
        reader.join(timeout=10)
        os.close(parent)
    text = shown.decode(errors="replace")
    assert code == 0, text[-3000:]
    return folder / "run", text


def test_the_progress_bar_shows_loss_learning_rate_speed_and_eta(terminal_run):
    """Issue 25: the bar showed steps only; outside a terminal lines say the same (tests/engine/test_engine.py)."""
    _, shown = terminal_run
    states = [s for s in re.split(r"[\r\n]", shown) if s.startswith("train:")]
    assert states, shown[-2000:]
    last = states[-1]
    match = re.search(r"\| 4/4 \[\d+:\d\d<(\d+:\d\d), .*loss=([\d.e+-]+), lr=([\d.e+-]+), ([\d.]+) img/s\]", last)
    assert match, last
    remaining, loss, lr, speed = match.groups()
    assert remaining == "00:00" and float(loss) > 0 and float(lr) == pytest.approx(1e-3) and float(speed) > 0
    assert any(re.search(r"\| [123]/4 \[\d+:\d\d<\d+:\d\d, .*loss=", s) for s in states)  # the ETA while training
    assert not re.search(r"^step \d+/4", shown, re.MULTILINE)  # the bar stands for the lines of a log
    validations = [m.start() for m in re.finditer("validation at step", shown)]
    assert len(validations) == 2 and all(shown[i - 1] in "\r\n" for i in validations)  # above the bar, not through it


def test_explanation_images_reach_tensorboard(terminal_run):
    """Issue 25: the validation explanations were PNGs only; each is also an image of TensorBoard's event file, with
    the PNG's pixels, at the step of its validation."""
    from tensorboard.backend.event_processing.event_accumulator import IMAGES, SCALARS, EventAccumulator

    run, _ = terminal_run
    (events,) = (run / "tensorboard").rglob("events.out.tfevents*")
    log = EventAccumulator(str(events), size_guidance={IMAGES: 0, SCALARS: 0})
    log.Reload()
    pngs = sorted((run / "explanations").rglob("*.png"))
    assert len(pngs) == 4  # two images at each of the two validations
    assert sorted(log.Tags()[IMAGES]) == sorted({f"explanations/{p.stem}" for p in pngs})
    for png in pngs:
        step = int(png.parent.name.removeprefix("step-"))
        (image,) = [e for e in log.Images(f"explanations/{png.stem}") if e.step == step]
        with Image.open(png) as written, Image.open(io.BytesIO(image.encoded_image_string)) as logged:
            assert (image.width, image.height) == written.size
            assert np.array_equal(np.asarray(logged.convert("RGB")), np.asarray(written.convert("RGB")))
    assert [e.step for e in log.Scalars("train/loss")] == [1, 2, 4]  # log_every 10: the first step, each epoch's last


@pytest.mark.parametrize("tracker", ["wandb", "mlflow"])
def test_a_tracker_that_is_not_installed_is_refused_before_any_work(tracker, tmp_path, monkeypatch, capsys):
    if importlib.util.find_spec(tracker) is not None:
        pytest.skip(f"{tracker} is installed here")
    (tmp_path / "config.yaml").write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", "config.yaml", f"log_with=[tensorboard, {tracker}]"]) == 2
    error = capsys.readouterr().err
    assert f"log_with: the tracker {tracker} needs the package {tracker}, which is not installed" in error
    assert f"pip install {tracker}" in error and "Traceback" not in error
    assert not (tmp_path / "run").exists()


def test_an_unknown_tracker_is_a_config_error_naming_the_known_ones(tmp_path, monkeypatch, capsys):
    (tmp_path / "config.yaml").write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", "config.yaml", "log_with=[tensorbord]"]) == 2
    error = capsys.readouterr().err
    assert "log_with: expected list[" in error and "got ['tensorbord']" in error
    assert "'tensorboard' | " in error and "'wandb'" in error and "'all'" not in error
    assert not (tmp_path / "run").exists()


def test_a_resume_may_change_the_trackers_but_not_what_is_logged():
    """The trackers change no result, so ``--resume`` may add one (``log_with`` is a resumable key); ``log_every``
    changes ``metrics.jsonl`` and stays fixed."""
    from rightreasons.classification import ClassificationConfig
    from rightreasons.config import from_dict, to_dict
    from rightreasons.engine.trainer import config_differences

    saved = to_dict(from_dict(ClassificationConfig, {}))
    assert config_differences(saved, from_dict(ClassificationConfig, {"log_with": ["tensorboard"]})) == []
    assert config_differences(saved, from_dict(ClassificationConfig, {"log_every": 1})) == ["log_every: 10 != 1"]
