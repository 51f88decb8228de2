"""When the main process of a two-process ``torchrun`` run fails to write (a file-size limit that only its files
exceed: the weights of a checkpoint), its error is the first line, and the other process's line says that process 0
left the run — not a misleading cause of its own."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from rightreasons.engine.launch import TIMEOUT_VARIABLE
from guards import GUARD_S

CONFIG = """
seed: 3
model: {name: bcos_resnet18, kwargs: {inplanes: 4}}
data: {name: synthetic-birds, image_size: 32, batch_size: 4, eval_batch_size: 8, options: {n: 16, size: 32}}
optim: {epochs: 1}
eval: {num_images: 0}
checkpoint: {every_steps: 1}
"""
#: bytes a process may write to one file: more than a process's random states (15 kB), less than the weights (190 kB)
FILE_LIMIT = 100_000


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))


@pytest.mark.slow
def test_the_other_process_says_that_the_main_process_failed(tmp_path):
    (tmp_path / "config.yaml").write_text(CONFIG)
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "rightreasons",
         "train", "--config", str(tmp_path / "config.yaml"), f"output_dir={tmp_path / 'run'}"],
        env={**os.environ, "PYTHONUNBUFFERED": "1", TIMEOUT_VARIABLE: "120"}, capture_output=True, text=True,
        preexec_fn=_limit_file_size, timeout=GUARD_S)
    errors = [line for line in result.stderr.splitlines() if "error: " in line]
    assert result.returncode != 0 and len(errors) == 2, result.stderr[-4000:]
    assert "error: could not write checkpoint step-000001" in errors[0], errors
    assert "error: process 1 of 2 lost another process of the run and stopped; process(es) that did not answer: 0. " \
           "A process that failed printed its own error (above)" in errors[1], errors
