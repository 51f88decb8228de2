"""Checkpoints of the wrong architecture, truncated at any byte, filled with garbage, holding non-tensors, or missing.

Every case ends in a :class:`CheckpointError` (a missing file included) whose message names the file and the problem;
the model is never half-loaded.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save_file
from torch import nn

from rightreasons import create_model, load_weights
from rightreasons.errors import CheckpointError
from rightreasons.models import read_state_dict, save_model
from rightreasons.models.weights import METADATA_KEY

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def small_model() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(64, 2)).eval()


def _save(fmt: str, state: dict[str, torch.Tensor], path: Path) -> Path:
    if fmt == "safetensors":
        save_file({k: v.contiguous() for k, v in state.items()}, str(path))
    else:
        torch.save(state, path)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, bytes]:
    """The bytes of one small state dict saved as safetensors and as a torch zip checkpoint."""
    model = small_model()
    folder = tmp_path_factory.mktemp("checkpoints")
    return {fmt: _save(fmt, model.state_dict(), folder / f"m.{fmt}").read_bytes() for fmt in ("safetensors", "pth")}


def assert_refused(content: bytes, suffix: str) -> None:
    """``content`` saved as a checkpoint file is refused by read_state_dict and load_weights, naming the file, and
    leaves the model as it was."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"broken.{suffix}"
        path.write_bytes(content)
        with pytest.raises(CheckpointError, match=rf"{path}: (not a readable checkpoint|refused to load)"):
            read_state_dict(path)
        model = small_model()
        before = {k: v.clone() for k, v in model.state_dict().items()}
        with pytest.raises(CheckpointError, match=str(path)):
            load_weights(model, path)
        assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@FUZZ
@given(data=st.data(), fmt=st.sampled_from(["safetensors", "pth"]))
def test_truncated_checkpoints_are_refused(files, data, fmt):
    content = files[fmt]
    assert_refused(content[:data.draw(st.integers(0, len(content) - 1), label="cut")], fmt)


@FUZZ
@given(content=st.one_of(st.binary(max_size=600), st.text(max_size=200).map(str.encode),
                         st.sampled_from([b"PK\x03\x04" + b"\x00" * 60, b"\x80\x02}q\x00.", b"{}" * 8,
                                          b"\x08\x00\x00\x00\x00\x00\x00\x00{\"a\":1}"])),
       suffix=st.sampled_from(["pth", "safetensors", "bin", "ckpt"]))
def test_garbage_files_are_refused(content, suffix):
    """Random bytes and text, a zip header without entries, a pickle of an empty dict, a safetensors header that is
    not a table of tensors."""
    assert_refused(content, suffix)


@pytest.mark.parametrize("target, problem", [
    ("bcos_cifar10_resnet32", r"missing keys \(\d+\): layer1\.3\."),
    ("bcos_cifar10_densenet52", r"missing keys \(\d+\): features\..*unexpected keys \(\d+\): conv1\.linear\.weight"),
], ids=["deeper-model", "other-family"])
def test_checkpoint_of_another_architecture_is_refused_by_create_model(tmp_path, target, problem):
    """A plain torch state dict of a ResNet-20 given to ``create_model(target, checkpoint=...)`` (which, with
    ``num_classes``, may replace the classifier but nothing else). Key-level refusals of ``load_weights`` itself are
    in tests/models/test_weights.py."""
    path = tmp_path / "resnet20.pth"
    torch.save(create_model("bcos_cifar10_resnet20", num_classes=3).state_dict(), path)
    with pytest.raises(CheckpointError, match=rf"{path} does not fit the model {target}: .*{problem}"):
        create_model(target, checkpoint=path, num_classes=3)


@pytest.mark.parametrize("content, problem", [
    ({"weight": [1.0, 2.0]}, r"entries that are not tensors: \['weight'\]"),
    (123, "expected a state dict .* got int"),
    ({}, "expected a state dict .* got dict"),
], ids=["list-entry", "int", "empty"])
def test_weights_only_files_without_a_state_dict_are_refused(tmp_path, content, problem):
    path = tmp_path / "odd.pth"
    torch.save(content, path)
    with pytest.raises(CheckpointError, match=rf"{path}: {problem}"):
        read_state_dict(path)


def test_missing_checkpoint_or_a_directory_is_a_checkpoint_error(tmp_path):
    for path in (tmp_path / "nowhere.pth", tmp_path):
        with pytest.raises(CheckpointError, match=f"checkpoint file not found: {path}"):
            load_weights(small_model(), path)


@pytest.mark.parametrize("source", [{"pretrained_cfg_overlay": {"url": "http://127.0.0.1:9/weights.pth"}},
                                    {"checkpoint_path": "/elsewhere/weights.pth"}, {"pretrained": True}])
def test_a_model_files_metadata_can_never_turn_on_a_download(tmp_path, run_cli, source):
    """An untrusted model file records its architecture in its metadata; timm's ViTs pass their arguments on to
    ``timm.create_model``, where some choose weights to fetch or read. Such an argument is refused, naming it."""
    model = create_model("vit_tiny_patch16_224", img_size=32, patch_size=16, embed_dim=24, depth=1, num_heads=2,
                         num_classes=3)
    path = save_model(model, tmp_path / "model.safetensors")
    with safe_open(str(path), "pt") as f:
        metadata, state = dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}
    recorded = json.loads(metadata[METADATA_KEY])
    metadata[METADATA_KEY] = json.dumps({**recorded, "kwargs": {**recorded["kwargs"], **source}})
    save_file(state, str(path), metadata=metadata)
    Image.new("RGB", (32, 32), (10, 200, 30)).save(tmp_path / "image.png")
    done = run_cli("explain", "--checkpoint", path, tmp_path / "image.png", "--out", tmp_path / "out")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = [line for line in done.stderr.splitlines() if "error:" in line]
    assert str(path) in line and repr(sorted(source)) in line and "never where weights come from" in line, line
