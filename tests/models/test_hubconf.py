"""Ecosystem conventions (issue 14, item 11): `torch.hub.load` through the repository's `hubconf.py`, released weights
that carry their transform, class names and metadata as torchvision's do, and timm's `features_only` refused clearly."""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

import rightreasons as rr
from rightreasons.data.transforms import base_view
from rightreasons.encoding import encode
from rightreasons.errors import UsageError
from rightreasons.models.pretrained import PRETRAINED, PretrainedWeights, get_pretrained, imagenet_categories

ROOT = Path(__file__).resolve().parents[2]
TINY = {"inplanes": 4}


@pytest.fixture
def release_file(tmp_path, monkeypatch):
    """Registers a local 1000-class tiny `bcos_resnet18` as the released weights `name` (hub directory, hash in the
    file name); returns the source model."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    monkeypatch.setattr(torch.hub, "download_url_to_file", lambda *a, **k: pytest.fail("download attempted"))
    source = rr.create_model("bcos_resnet18", **TINY).eval()
    directory = tmp_path / "torch" / "hub" / "checkpoints"
    directory.mkdir(parents=True)

    def install(name: str) -> torch.nn.Module:
        path = tmp_path / "weights.pth"
        torch.save(source.state_dict(), path)
        stem = name.replace(".", "_")
        entry = PretrainedWeights("bcos_resnet18", stem, f"test/{stem}",
                                  f"{stem}-{hashlib.sha256(path.read_bytes()).hexdigest()[:10]}.pth", 0.0)
        monkeypatch.setitem(PRETRAINED, name, entry)
        path.rename(directory / entry.file_name)
        return source

    return install


def test_torch_hub_load_builds_the_model_with_released_weights_and_class_names(release_file):
    source = release_file("bcos_resnet18")
    model = torch.hub.load(str(ROOT), "bcos_resnet18", source="local", pretrained=True, **TINY).eval()
    for key, value in source.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    assert model.classes == imagenet_categories() and len(model.classes) == 1000 and model.classes[0] == "tench"
    assert rr.capabilities(model).classes == model.classes
    fresh = torch.hub.load(str(ROOT), "bcos_resnet18", source="local", num_classes=3, **TINY)
    assert rr.capabilities(fresh).num_classes == 3 and rr.capabilities(fresh).classes is None


def test_torch_hub_load_with_a_weights_tag(release_file):
    source = release_file("bcos_resnet18.long")
    model = torch.hub.load(str(ROOT), "bcos_resnet18", source="local", pretrained="long", **TINY)
    assert torch.equal(model.conv1.linear.weight, source.conv1.linear.weight)
    weights = torch.hub.load(str(ROOT), "get_weights", source="local", name="bcos_resnet18.long")
    assert weights is PRETRAINED["bcos_resnet18.long"]


def test_every_registered_model_has_an_entry_point():
    hubconf = torch.hub._import_module("hubconf", str(ROOT / "hubconf.py"))
    assert {n for n in rr.list_models() if callable(getattr(hubconf, n, None))} == set(rr.list_models())
    assert set(hubconf.dependencies) >= {"torch", "torchvision"}


def test_released_weights_carry_transform_categories_and_metadata():
    weights = get_pretrained("bcos_resnet50.long")
    meta = weights.meta
    assert meta["categories"] == list(imagenet_categories()) and meta["num_classes"] == 1000
    assert meta["_metrics"]["ImageNet-1K"]["acc@1"] == weights.top1 and meta["recipe"] == weights.experiment
    assert meta["resize_size"] == 232 and meta["crop_size"] == 224 and meta["loss"] == "bce"
    assert meta["logit_bias"] == pytest.approx(-np.log(999))
    image = Image.fromarray(np.random.default_rng(0).integers(0, 256, (300, 400, 3), dtype=np.uint8))
    x = weights.transforms()(image)
    assert x.shape == (6, 224, 224) and x.dtype == torch.float32
    # the same view as the data package's evaluation preset: shorter side to 232, centre crop 224, B-cos encoding
    expected = v2.Compose([base_view(224, crop_fraction=224 / 232), encode("bcos")])(
        v2.ToDtype(torch.float32, scale=True)(v2.ToImage()(image)))
    torch.testing.assert_close(x, expected)
    standard = get_pretrained("simple_vit_ti_patch16_224")
    assert standard.transforms()(image).shape == (3, 224, 224) and standard.meta["encoding"] == "normalize"


def test_timm_features_only_fails_with_a_clear_message():
    timm = pytest.importorskip("timm")
    rr.register_timm_models()
    with pytest.raises(UsageError, match=r"bcos_resnet18: timm's feature extraction \(features_only\) is not "
                                         r"supported.*forward_features.*capture_outputs"):
        timm.create_model("bcos_resnet18", features_only=True, **TINY)


def test_every_torch_hub_load_names_the_repository_of_the_project_metadata():
    """Issue 35, item 6: the docs said `torch.hub.load("<owner>/rightreasons", ...)`; the owner is the one of
    pyproject.toml's Repository URL, wherever `hubconf.py` or the docs name it."""
    url = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["urls"]["Repository"]
    repository = url.removeprefix("https://github.com/")
    files = [ROOT / "hubconf.py", ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = {(f.name, m) for f in files for m in re.findall(r'torch\.hub\.load\(\s*"([^"]+)"', f.read_text())}
    assert {f for f, _ in named} >= {"hubconf.py", "cli.md", "index.md"}
    assert {m for _, m in named} == {repository}, named
