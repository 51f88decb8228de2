"""The ImageNet rehearsal at tiny scale, through the real CLI: an ImageNet-layout folder written by the benchmark's
writer, ``rightreasons cache --format compact``, ``cache --check``, and ``distill --frozen`` (refused when the cache's
format is not the configured one, then trained)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from guards import GUARD_S

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "distill" / "synthetic.yaml"


def bench_module():
    spec = importlib.util.spec_from_file_location("bench", ROOT / "scripts" / "bench.py")
    module = sys.modules["bench"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def cli(*args):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "rightreasons", *map(str, args)], capture_output=True, text=True,
                          env=env, timeout=GUARD_S)


@pytest.mark.exhaustive
def test_imagenet_folder_cache_check_and_frozen_distillation_through_the_cli(tmp_path):
    root = bench_module().write_imagenet_folder(tmp_path / "imagenet", classes=10, per_class=2, size=32)
    assert len(list((root / "train").glob("n*/*.JPEG"))) == 20
    setting = ["--config", CONFIG, "data.name=imagenet", f"data.root={root}", "data.options={}",
               "teacher.kwargs={num_classes: 10}", "distill.crop_fraction=0.875"]
    cache = tmp_path / "cache"
    written = cli("cache", *setting, "--out", cache, "--format", "compact")
    assert written.returncode == 0, written.stderr
    manifest = json.loads((cache / "manifest.json").read_text())
    assert manifest["explanation_format"] == "compact" and manifest["num_images"] == 20

    checked = cli("cache", *setting, "--out", cache, "--check", "--num-images", "6")
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout.splitlines()[-1])
    assert report["images"] == 6 and report["explanation_format"] == "compact"
    for pair in ("cached_vs_live", "exact_vs_live", "cached_vs_exact"):
        assert -1 <= report["cosine"][pair]["worst"] <= report["cosine"][pair]["mean"] <= 1 + 1e-6
    assert report["e2kd_loss"]["cached"] == pytest.approx(1 - report["cosine"]["cached_vs_live"]["mean"], abs=1e-5)

    train = [*setting, f"output_dir={tmp_path / 'run'}", "max_steps=2", "distill.test_split=null"]
    refused = cli("distill", *train, "--frozen", cache)
    assert refused.returncode != 0
    assert "stores its explanations as 'compact', but 'float16' was asked for" in refused.stderr
    assert "Traceback" not in refused.stderr
    trained = cli("distill", *train, "distill.cache_format=compact", "--frozen", cache)
    assert trained.returncode == 0, trained.stderr
    assert json.loads(trained.stdout.splitlines()[-1])["steps"] == 2
