"""Inputs that validated and then crashed, or were used silently, are refused up front with the documented error:
configs out of range and hostile YAML, huge images, symlinks out of a dataset, malformed model files and cache
manifests, pickles that would run code."""

from __future__ import annotations

import json
import struct
import time
import tracemalloc
import zlib

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file, save_file

import rightreasons
import rightreasons.apps.cli
from rightreasons.config import MAX_DEPTH, from_dict, load_config
from rightreasons.data import load_dataset
from rightreasons.data.io import open_image
from rightreasons.distill import ExplanationCache
from rightreasons.guidance import GuideConfig
from rightreasons.errors import CacheError, CheckpointError, ConfigError, DataError
from rightreasons.distill import DistillConfig

INVALID = [
    ({"eval": {"every_epochs": 0}}, "eval.every_epochs"),
    ({"log_every": 0}, "log_every"),
    ({"max_steps": -1}, "max_steps"),
    ({"max_steps": 0}, "max_steps"),
    ({"checkpoint": {"every_steps": -1}}, "checkpoint.every_steps"),
    ({"checkpoint": {"keep_last": 0}}, "checkpoint.keep_last"),
    ({"data": {"crop_scale": [2, 3]}}, "data.crop_scale"),
    ({"data": {"crop_scale": [0.5]}}, "data.crop_scale"),
    ({"optim": {"warmup_epochs": -1}}, "optim.warmup_epochs"),
    ({"optim": {"lr": 0}}, "optim.lr"),
    ({"optim": {"momentum": 1.5}}, "optim.momentum"),
    ({"output_dir": ""}, "output_dir"),
    ({"model": {"checkpoint": " "}}, "model.checkpoint"),
    ({"data": {"annotated_fraction": 1.5}}, "data.annotated_fraction"),
    ({"data": {"num_workers": -1}}, "data.num_workers"),
    ({"guidance": {"dilation": -0.1}}, "guidance.dilation"),
    ({"guidance": {"weight": -1}}, "guidance.weight"),
    ({"eval": {"iou_threshold": 2}}, "eval.iou_threshold"),
    ({"eval": {"num_images": -1}}, "eval.num_images"),
]


@pytest.mark.parametrize("raw, key", INVALID, ids=[key for _, key in INVALID])
def test_out_of_range_values_are_refused_naming_the_key(raw, key):
    with pytest.raises(ConfigError, match=f"^{key.replace('.', '[.]')}: expected"):
        from_dict(GuideConfig, raw)


@pytest.mark.parametrize("key, value", [("temperature", -1), ("temperature", 0), ("explanation_weight", -0.5),
                                        ("explanation_layer", " "), ("frozen", ""), ("crop_fraction", 0),
                                        ("crop_fraction", 1.5), ("shots", 0)])
def test_distillation_values_are_refused_naming_the_key(key, value):
    with pytest.raises(ConfigError, match=rf"^distill.{key}: expected"):
        from_dict(DistillConfig, {"teacher": {"name": "bcos_resnet18"}, "distill": {key: value}})


def test_error_messages_quote_only_an_excerpt_of_a_bad_value():
    with pytest.raises(ConfigError) as error:
        from_dict(GuideConfig, {"log_every": "x" * 1_000_000})
    assert len(str(error.value)) < 300


def _alias_bomb(levels: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\noutput_dir: *a{levels - 1}\n"


def test_a_yaml_alias_bomb_is_refused_fast_and_small(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb())
    assert path.stat().st_size < 1000
    tracemalloc.start()
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="aliases are expanded") as error:
        load_config(GuideConfig, path)
    seconds, (_, peak) = time.perf_counter() - start, tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert seconds < 1 and peak < 100 * 2**20 and len(str(error.value)) < 500


def test_deeply_nested_yaml_is_refused(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("data: {options: {x: " + "[" * 10_000 + "]" * 10_000 + "}}\n")
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_DEPTH}"):
        load_config(GuideConfig, path)
    with pytest.raises(ConfigError, match="nested deeper"):
        load_config(GuideConfig, None, ["data.options.x=" + "[" * 10_000 + "]" * 10_000])


def test_a_value_that_contains_itself_is_refused(tmp_path):
    path = tmp_path / "self.yaml"
    path.write_text("data: {options: &x {y: *x}}\n")
    with pytest.raises(ConfigError, match="contains itself"):
        load_config(GuideConfig, path)


def _png_header(width: int, height: int) -> bytes:
    """A PNG whose header declares ``width × height`` grey pixels, with almost no pixel data: 100 bytes."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + \
        chunk(b"IEND", b"")


@pytest.mark.parametrize("side", [12_000, 30_000])
def test_images_over_the_pixel_limit_are_refused_before_decoding(tmp_path, side):
    path = tmp_path / "bomb.png"
    path.write_bytes(_png_header(side, side))
    tracemalloc.start()
    with pytest.raises(DataError, match=f"{path.name}: .*(pixels, more than the limit|cannot decode)"):
        open_image(path)
    assert tracemalloc.get_traced_memory()[1] < 50 * 2**20
    tracemalloc.stop()


def test_the_pixel_limit_is_a_dataset_option(tmp_path):
    from rightreasons.data import write_synthetic
    from rightreasons.data.synthetic import SyntheticConfig

    root = write_synthetic(tmp_path / "birds", "synthetic-birds",
                           SyntheticConfig(size=32, sizes={"train": 2, "val": 2, "test": 2})).parent
    assert load_dataset("synthetic-birds", root, "train", max_pixels=32 * 32)[0]["image"].shape[-1] == 32
    with pytest.raises(DataError, match="more than the limit of 100"):
        load_dataset("synthetic-birds", root, "train", max_pixels=100)[0]


def test_the_explain_command_turns_image_bombs_into_an_error_line(tmp_path, capsys):
    path = tmp_path / "bomb.png"
    path.write_bytes(_png_header(30_000, 30_000))
    code = rightreasons.apps.cli.main(["explain", "--model", "bcos_resnet18", "--random-weights", "--num-classes", "2",
                                  str(path), "--out", str(tmp_path / "out"), "--size", "32"])
    assert code == 2 and "bomb.png" in capsys.readouterr().err


def test_a_symlink_out_of_the_dataset_is_refused(tmp_path):
    from rightreasons.data import write_synthetic
    from rightreasons.data.synthetic import SyntheticConfig

    root = write_synthetic(tmp_path / "birds", "synthetic-birds",
                           SyntheticConfig(size=32, sizes={"train": 2, "val": 2, "test": 2})).parent
    dataset = load_dataset("synthetic-birds", root, "train")
    target = root / dataset.records.files[0]
    outside = tmp_path / "secret.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(outside)
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(DataError, match="outside the dataset directory"):
        dataset[0]
    inside = root / dataset.records.files[1]
    (root / "alias.png").symlink_to(inside)  # a link that stays inside the dataset is fine
    assert dataset[1]["image"].shape[-1] == 32


@pytest.fixture
def model_file(tmp_path):
    path = tmp_path / "model.safetensors"
    rightreasons.save_model(rightreasons.create_model("bcos_resnet18", num_classes=3, inplanes=4), path)
    return path


@pytest.mark.parametrize("metadata, message", [
    ("{not json", "malformed"),
    (json.dumps({"kwargs": {}}), "malformed"),
    (json.dumps({"name": "bcos_resnet18", "kwargs": [1]}), "malformed"),
    (json.dumps({"name": "bcos_resnet81", "kwargs": {}}), "cannot be built"),
    (json.dumps({"name": "bcos_resnet18", "kwargs": {"inplanse": 4}}), "cannot be built"),
    (json.dumps({"name": "bcos_resnet18", "kwargs": {"num_classes": 10**9, "inplanes": 4}}), "do not fit"),
])
def test_malformed_model_files_are_checkpoint_errors(model_file, tmp_path, metadata, message):
    bad = tmp_path / "bad.safetensors"
    save_file(load_file(str(model_file)), str(bad), metadata={"rightreasons_model": metadata})
    tracemalloc.start()
    with pytest.raises(CheckpointError, match=message):
        rightreasons.load_model(bad)
    assert tracemalloc.get_traced_memory()[1] < 200 * 2**20  # the 10**9-class model is never allocated
    tracemalloc.stop()


def test_a_pickle_refused_for_its_globals_says_so(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("this would run",))

    path = tmp_path / "weights.pt"
    torch.save({"w": Payload()}, path)
    with pytest.raises(CheckpointError, match="refused to load: .* asks to call (builtins.)?print"):
        rightreasons.load_weights(rightreasons.create_model("bcos_resnet18", inplanes=4), path)


def test_a_cache_manifest_missing_a_key_names_it(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "rightreasons-explanation-cache", "version": 1,
                                                        "complete": True, "num_images": 0}))
    with pytest.raises(CacheError, match="missing key 'shards'"):
        ExplanationCache(tmp_path)
