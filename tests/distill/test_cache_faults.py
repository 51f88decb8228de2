"""Faults of the e²KD cache met through the real commands (``rightreasons cache`` and ``distill --frozen`` on the tiny
synthetic distillation config: a B-cos CIFAR ResNet-20 teacher file, ``synthetic-birds`` at 32 px), each a case of
issue 36 that once ended badly:

* a rerun over a complete cache with a deleted or damaged shard said success and repaired nothing — it now verifies
  every shard against its record and rewrites the bad ones;
* a crafted 11 MB ``compact`` shard inflated to 13.7 GB before its error — inflation is bounded by the map's shape;
* shards truncated while ``distill --frozen`` read them killed it with ``SIGBUS`` — shards are read without a memory
  map, and a short read names the shard;
* Ctrl-C during ``cache`` gave a traceback — one line and exit code 130, and the rerun finishes the cache;
* a disk filled by another process during ``cache`` ended in a raw ``SafetensorError`` — one ``error:`` line naming
  the shard and the cause, and the rerun finishes the cache;
* a cache with NaN scales or logits was reported as diverged training — refused when read, naming shard and field.

The cases that need a process of their own (a signal, a file truncated under a reader, a disk filled meanwhile) run the
command in a subprocess and act on what it wrote (a shard's record, a logged step), never on elapsed time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from rightreasons import create_model, save_model
from rightreasons.data import eval_transform, load_dataset
from rightreasons.distill import CacheCorruptError, ExplanationCache, write_cache
from rightreasons.errors import CacheError
from rightreasons.fileio import file_record

from cli_outcomes import clear_error

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "distill" / "synthetic.yaml"
DATA = "data.options={n: 16, size: 32}"


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    return save_model(create_model("bcos_cifar10_resnet20", num_classes=2),
                      tmp_path_factory.mktemp("teacher") / "model.safetensors")


def cache_argv(teacher: Path, out: Path, *extra: str, shard_size: int = 4, data: str = DATA) -> list[str]:
    """``rightreasons cache`` of the tiny config into ``out``."""
    return ["cache", "--config", str(CONFIG), "--teacher", str(teacher), "--out", str(out), "--shard-size",
            str(shard_size), *extra, data]


def distill_argv(teacher: Path, cache: Path, run: Path, *overrides: str) -> list[str]:
    """``rightreasons distill --frozen CACHE`` of the tiny config into ``run``."""
    return ["distill", "--config", str(CONFIG), "--frozen", str(cache), "teacher.name=null",
            f"teacher.checkpoint={teacher}", DATA, f"output_dir={run}", *overrides]


def subprocess_cli(argv: list[str], **options: object) -> subprocess.Popen:
    """``python -m rightreasons ARGV`` in a process of its own (stderr piped, unbuffered), with Ctrl-C's default
    action as in a terminal: a suite started in the background (``nohup``, ``&``) would hand SIGINT on ignored."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "rightreasons", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **options)


def shard_bytes(cache: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(cache.glob("shard-*.safetensors"))}


def replace_shard(cache: Path, index: int, change: Callable[[dict[str, torch.Tensor]], None]) -> Path:
    """Rewrite shard ``index`` with ``change`` applied to its tensors and update its records (its JSON and the
    manifest's), as a crafted or faithfully written shard would have them: only the contents are wrong."""
    path = cache / f"shard-{index:05d}.safetensors"
    with safe_open(str(path), framework="pt") as f:
        tensors, metadata = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    change(tensors)
    save_file(tensors, str(path), metadata=metadata)
    record_path = cache / f"shard-{index:05d}.json"
    record = {**json.loads(record_path.read_text()), **file_record(path)}
    record_path.write_text(json.dumps(record))
    manifest = json.loads((cache / "manifest.json").read_text())
    manifest["shards"][index] = record
    (cache / "manifest.json").write_text(json.dumps(manifest))
    return path


def wait_for(condition: Callable[[], bool], process: subprocess.Popen, what: str) -> None:
    """Wait until ``condition()`` holds; fail when ``process`` ends first."""
    while not condition():
        assert process.poll() is None, f"the command ended before {what}: {process.communicate()[1][-3000:]}"
        time.sleep(0.005)


# ---------------------------------------------------------------------------------------------- rerun repairs
@pytest.mark.parametrize("damage", ["deleted", "overwritten"])
def test_a_rerun_over_a_complete_cache_rewrites_a_deleted_or_damaged_shard(tmp_path, run_cli, teacher, damage):
    """Before: the rerun found ``complete: true`` in the manifest, said success and left the shard missing."""
    cache = tmp_path / "cache"
    assert run_cli(*cache_argv(teacher, cache)).returncode == 0
    written = shard_bytes(cache)
    shard = cache / "shard-00001.safetensors"
    if damage == "deleted":
        shard.unlink()
    else:
        shard.write_bytes(written[shard.name][:-64] + bytes(64))
    done = run_cli(*cache_argv(teacher, cache))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "shard-00001" in done.stderr and ("missing" in done.stderr or "SHA-256" in done.stderr), done.stderr
    assert shard_bytes(cache) == written
    assert len(ExplanationCache(cache, verify=True)) == 16


# ---------------------------------------------------------------------------------------------- crafted shards
def test_a_crafted_compact_shard_is_refused_without_inflating_it(tmp_path, run_cli, teacher):
    """A map whose levels deflate to 100 MB (its shape needs 6 KB). Before: inflated in full (13.7 GB for an 11 MB
    shard), then a reshape error."""
    cache = tmp_path / "cache"
    assert run_cli(*cache_argv(teacher, cache, "--format", "compact")).returncode == 0
    bomb = zlib.compress(bytes(100 * 2 ** 20), 9)

    def inflate_first_map(tensors: dict[str, torch.Tensor]) -> None:
        steps = bytes(4)  # one 32-px tile: one float32 step
        first = int(tensors["lengths"][0])
        codes = steps + bomb + tensors["codes"][first:].numpy().tobytes()
        tensors["codes"] = torch.frombuffer(bytearray(codes), dtype=torch.uint8)
        tensors["lengths"][0] = len(steps) + len(bomb)

    shard = replace_shard(cache, 0, inflate_first_map)
    clear_error(run_cli(*distill_argv(teacher, cache, tmp_path / "run", "distill.cache_format=compact")),
                rf"{re.escape(str(shard))}: .*map .* of sample .*inflates to more than")
    opened = ExplanationCache(cache)
    tracemalloc.start()
    try:
        with pytest.raises(CacheCorruptError, match="inflates to more than"):
            opened[opened.ids[0]]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 ** 20, f"{peak:,} bytes allocated to refuse the map"


def test_a_compact_shard_whose_lengths_overrun_its_codes_is_refused_when_opened(tmp_path, run_cli, teacher):
    """A map length pointing 1 GB past the shard's bytes: refused before any map is read."""
    cache = tmp_path / "cache"
    assert run_cli(*cache_argv(teacher, cache, "--format", "compact")).returncode == 0
    shard = replace_shard(cache, 2, lambda tensors: tensors["lengths"][1:2].add_(2 ** 30))
    with pytest.raises(CacheCorruptError, match=rf"{re.escape(str(shard))}: 'codes' has shape \[\d+\], expected"):
        ExplanationCache(cache)


@pytest.mark.parametrize("field", ["scales", "logits"])
def test_a_cache_with_non_finite_numbers_is_refused_naming_shard_and_field(tmp_path, run_cli, teacher, field):
    """Before: NaN scales trained to a NaN loss, reported as diverged training ('lower the lr')."""
    cache = tmp_path / "cache"
    assert run_cli(*cache_argv(teacher, cache)).returncode == 0
    shard = replace_shard(cache, 1, lambda tensors: tensors[field].view(-1)[1:2].fill_(float("nan")))
    clear_error(run_cli(*distill_argv(teacher, cache, tmp_path / "run")),
                rf"{re.escape(str(shard))}: '{field}' holds 1 non-finite value")


# ---------------------------------------------------------------------------------------------- reading
def test_shards_truncated_while_distill_reads_them_are_named_not_a_crash(tmp_path, run_cli, teacher):
    """Every shard cut to half its size after the first training step. Before: ``SIGBUS`` (memory-mapped reads), no
    message."""
    cache = tmp_path / "cache"
    assert run_cli(*cache_argv(teacher, cache)).returncode == 0
    with subprocess_cli(distill_argv(teacher, cache, tmp_path / "run", "max_steps=null", "optim.epochs=50")) as run:
        lines = []
        for line in run.stderr:
            lines.append(line)
            if line.startswith("step 1/"):
                break
        assert lines and lines[-1].startswith("step 1/"), "".join(lines)[-3000:]
        for shard in cache.glob("shard-*.safetensors"):
            os.truncate(shard, shard.stat().st_size // 2)
        rest = run.stderr.read()
        run.wait(timeout=600)
    done = subprocess.CompletedProcess(run.args, run.returncode, "", "".join(lines) + rest)
    clear_error(done, r"shard-0000\d\.safetensors: .*truncated")


# ---------------------------------------------------------------------------------------------- interrupted writing
def test_ctrl_c_during_cache_ends_in_one_line_and_the_rerun_finishes(tmp_path, run_cli, teacher):
    """SIGINT once the first of 24 shards is written. Before: a ``KeyboardInterrupt`` traceback."""
    cache = tmp_path / "cache"
    argv = cache_argv(teacher, cache, shard_size=1, data="data.options={n: 24, size: 32}")
    with subprocess_cli(argv) as writer:
        wait_for(lambda: (cache / "shard-00000.json").is_file(), writer, "its first shard was written")
        writer.send_signal(signal.SIGINT)
        _, stderr = writer.communicate(timeout=600)
    assert writer.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert re.fullmatch(r"rightreasons cache: interrupted; the \d+ shards written so far are kept: run the same "
                        r"command again to finish the cache", stderr.splitlines()[-1]), stderr[-3000:]
    assert not json.loads((cache / "manifest.json").read_text())["complete"]
    done = run_cli(*argv)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(ExplanationCache(cache, verify=True)) == 24


@pytest.fixture
def small_disk(tmp_path) -> Path:
    """A 4 MB tmpfs mounted at ``tmp_path/disk`` (needs the right to mount: root)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if shutil.which("mount") is None or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                                                       capture_output=True).returncode:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


def test_a_disk_filled_by_another_process_during_cache_names_the_shard_and_the_cause(tmp_path, run_cli, teacher,
                                                                                      small_disk):
    """Another process fills the disk once the first of 24 shards is written. Before: a raw ``SafetensorError``."""
    cache = small_disk / "cache"
    argv = cache_argv(teacher, cache, shard_size=1, data="data.options={n: 24, size: 32}")
    filler = small_disk / "filler"
    with subprocess_cli(argv) as writer:
        wait_for(lambda: (cache / "shard-00000.json").is_file(), writer, "its first shard was written")
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(bytes(2 ** 16))
                    f.flush()
            except OSError:
                pass
        stdout, stderr = writer.communicate(timeout=600)
    clear_error(subprocess.CompletedProcess(argv, writer.returncode, stdout, stderr),
                rf"could not write shard shard-\d{{5}} of {re.escape(str(cache))}: no space left on device.*rerun")
    filler.unlink()
    done = run_cli(*argv)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(ExplanationCache(cache, verify=True)) == 24


@pytest.mark.parametrize("output", ["logits", "explanations"])
def test_cache_refuses_to_write_a_shard_of_non_finite_teacher_outputs(tmp_path, output):
    """A teacher whose output for one image is NaN: the shard holding it is refused before it is written (naming the
    shard, the field and the image); the shard before it stays, so a rerun with a repaired teacher resumes there."""
    dataset = load_dataset("synthetic-birds", None, "train", n=6, size=16,
                           transform=eval_transform(16, encoding="bcos", crop_fraction=1.0))
    poisoned = dataset[3]["image"]  # the 4th image: the second shard of two images each

    def teacher(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits, maps = torch.stack([images.mean((1, 2, 3)), -images.std((1, 2, 3))], 1), images - 0.5
        hit = (images == poisoned).flatten(1).all(1)
        (logits if output == "logits" else maps)[hit] = float("nan")
        return logits, maps

    setting = {"teacher": {"name": "fake", "kwargs": {}, "weights_sha256": "abc"},
               "data": {"name": "synthetic-birds", "root": None, "split": "train", "options": {"n": 6}},
               "transform": {"image_size": 16, "crop_fraction": 1.0, "encoding": "bcos"},
               "explanation": {"method": "bcos_weights", "layer": "input"}}
    with pytest.raises(CacheError, match=rf"shard-00001 holds non-finite values \(images \['{dataset.ids[3]}'\]\)"):
        write_cache(teacher, dataset, tmp_path / "cache", setting, batch_size=2, shard_size=2)
    assert (tmp_path / "cache" / "shard-00000.safetensors").is_file()
    assert not (tmp_path / "cache" / "shard-00001.safetensors").exists()
