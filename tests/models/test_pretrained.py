"""The B-cos v2 release table and ``pretrained=True``: hub-directory files with hash check, fast offline failure."""

import hashlib
import socket
import threading
from pathlib import Path

import pytest
import torch

from rightreasons import create_model, list_models
from rightreasons.errors import CheckpointError, UnknownNameError, UsageError, WeightsUnavailableError
from rightreasons.models import pretrained
from rightreasons.models.pretrained import (PRETRAINED, PretrainedWeights, download_pretrained, get_pretrained,
                                        pretrained_table)

# ImageNet top-1 as listed independently in docs/science.md, architectures, and the B-cos v2 paper (one decimal).
DOCUMENTED_TOP1 = {
    "bcos_resnet18": 68.7, "bcos_resnet34": 72.3, "bcos_resnet50": 75.9, "bcos_resnet101": 76.5, "bcos_resnet152": 76.5,
    "bcos_resnext50_32x4d": 75.8, "bcos_densenet121": 73.6, "bcos_densenet161": 76.6, "bcos_densenet169": 75.2,
    "bcos_densenet201": 75.5, "bcos_vgg11_bnu": 69.3, "bcos_convnext_tiny": 77.5, "bcos_convnext_base": 79.7,
    "bcos_convnext_tiny_bnu": 76.8, "bcos_convnext_base_bnu": 80.1, "bcos_resnet50.long": 79.5,
    "bcos_resnet152.long": 80.1, "bcos_densenet121.long": 77.3, "bcos_simple_vit_ti_patch16_224": 60.0,
    "bcos_simple_vit_s_patch16_224": 69.2, "bcos_simple_vit_b_patch16_224": 74.4, "bcos_simple_vit_l_patch16_224": 75.1,
    "bcos_vitc_ti_patch1_14": 67.3, "bcos_vitc_s_patch1_14": 74.5, "bcos_vitc_b_patch1_14": 77.2,
    "bcos_vitc_l_patch1_14": 77.8,
}


@pytest.fixture
def torch_home(tmp_path, monkeypatch) -> Path:
    """An empty torch home; returns its hub checkpoint directory."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    return tmp_path / "torch" / "hub" / "checkpoints"


@pytest.fixture
def no_download(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("download attempted")

    monkeypatch.setattr(torch.hub, "download_url_to_file", fail)


def test_table_matches_the_release():
    for key, top1 in DOCUMENTED_TOP1.items():
        assert round(PRETRAINED[key].top1, 1) == top1, key
    standard_vits = [k for k in PRETRAINED if not k.startswith("bcos_")]
    assert len(standard_vits) == 8 and len(PRETRAINED) == len(DOCUMENTED_TOP1) + 8
    for key, w in PRETRAINED.items():
        assert w.model == key.split(".")[0]
        assert w.url == f"https://github.com/B-cos/B-cos-v2/releases/download/v0.0.1-weights/{w.file_name}"
        assert len(w.sha256_prefix) == 10
    assert len({w.file_name for w in PRETRAINED.values()}) == len({w.hub_name for w in PRETRAINED.values()}) == \
        len(PRETRAINED)
    registered = set(list_models())
    assert [w.model for w in PRETRAINED.values() if w.model.startswith("bcos_") and w.model not in registered] == []
    long = PRETRAINED["bcos_resnet50.long"]  # the long recipe: same architecture, another file
    assert long.model == "bcos_resnet50" and long.file_name != PRETRAINED["bcos_resnet50"].file_name
    assert long.hub_name == "resnet50_long" and long.eval_resize == 232
    table = pretrained_table().splitlines()
    assert len(table) == len(PRETRAINED) + 2
    row = f"| `bcos_resnet50.long` | `resnet50_long` | `bcos_final_long/resnet_50` | [{long.file_name}]({long.url}) | 79.5 |"
    assert row in table


def test_table_matches_the_bcos_package():
    """Referee: the release's own URL table and torch.hub entry points (``bcos.models.pretrained``)."""
    release = pytest.importorskip("bcos.models.pretrained")
    assert {w.url for w in PRETRAINED.values()} == {url for urls in release.URLS.values() for url in urls.values()}
    for w in PRETRAINED.values():
        base, experiment = w.experiment.split("/")
        assert release.URLS[base][experiment] == w.url
    assert {w.hub_name for w in PRETRAINED.values()} == set(release.list_available())


def test_unknown_or_weightless_name_lists_the_names_with_weights():
    with pytest.raises(UnknownNameError, match="no released weights for 'resnet50'.*bcos_resnet50"):
        create_model("resnet50", pretrained=True)  # the standard twin has no release weights
    with pytest.raises(UnknownNameError, match="bcos_resnet50.long"):
        get_pretrained("bcos_resnet50.longer")


@pytest.mark.timeout(30)  # a hang fails the test instead of blocking the suite
def test_offline_fails_at_once_with_instructions(torch_home):
    weights = PRETRAINED["bcos_resnet18"]
    if pretrained._probe(weights.url, 3.0) is None:
        pytest.skip("the release server is reachable; this test needs a machine without internet")
    with pytest.raises(WeightsUnavailableError) as info:
        create_model("bcos_resnet18", pretrained=True)
    message = str(info.value)
    assert weights.url in message and str(torch_home / weights.file_name) in message


@pytest.mark.timeout(30)
@pytest.mark.parametrize("network", ["hangs", "refuses"])
def test_simulated_offline_network(torch_home, no_download, monkeypatch, network):
    release = threading.Event()

    def connect(address, timeout=None):
        if network == "hangs":  # e.g. a name lookup that never answers: the deadline must cut it short
            release.wait(60)
        raise OSError("network is unreachable")

    monkeypatch.setattr(socket, "create_connection", connect)
    monkeypatch.setattr(pretrained, "CONNECT_TIMEOUT_S", 0.2)
    try:
        with pytest.raises(WeightsUnavailableError, match="within 0.2 s" if network == "hangs" else "unreachable"):
            download_pretrained("bcos_resnet50.long")
    finally:
        release.set()


def _install_release_file(tmp_path: Path, torch_home: Path, monkeypatch: pytest.MonkeyPatch, weights_name: str,
                          model: torch.nn.Module, wrong_hash: bool = False) -> tuple[PretrainedWeights, str]:
    """Save ``model``'s state dict as a release-style file named with its SHA-256 prefix (or a wrong one), put it in
    the hub directory and register it under ``weights_name``; returns the entry and the file's real SHA-256."""
    path = tmp_path / "weights.pth"
    torch.save(model.state_dict(), path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    prefix = ("0123456789" if not digest.startswith("0123456789") else "9876543210") if wrong_hash else digest[:10]
    stem = weights_name.replace(".", "_")
    entry = PretrainedWeights(weights_name.split(".")[0], stem, f"test/{stem}", f"{stem}-{prefix}.pth", 0.0)
    monkeypatch.setitem(PRETRAINED, weights_name, entry)
    torch_home.mkdir(parents=True)
    path.rename(torch_home / entry.file_name)
    return entry, digest


def _assert_same_weights(loaded: torch.nn.Module, source: torch.nn.Module) -> None:
    for key, value in source.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key


def test_file_in_hub_directory_with_matching_hash_is_loaded(tmp_path, torch_home, no_download, monkeypatch):
    source = create_model("bcos_cifar10_resnet20")
    _install_release_file(tmp_path, torch_home, monkeypatch, "bcos_cifar10_resnet20", source)
    _assert_same_weights(create_model("bcos_cifar10_resnet20", pretrained=True), source)


def test_file_in_hub_directory_with_other_hash_is_refused(tmp_path, torch_home, no_download, monkeypatch):
    entry, digest = _install_release_file(tmp_path, torch_home, monkeypatch, "bcos_cifar10_resnet20",
                                          create_model("bcos_cifar10_resnet20"), wrong_hash=True)
    with pytest.raises(CheckpointError, match=f"SHA-256 {digest[:10]}.*prefix {entry.sha256_prefix}.*{entry.url}"):
        create_model("bcos_cifar10_resnet20", pretrained=True)


def test_weights_tag_in_the_name_picks_the_release_file(tmp_path, torch_home, no_download, monkeypatch):
    source = create_model("bcos_cifar10_resnet20")
    _install_release_file(tmp_path, torch_home, monkeypatch, "bcos_cifar10_resnet20.long", source)
    loaded = create_model("bcos_cifar10_resnet20.long", pretrained=True)
    assert loaded.model_args["name"] == "bcos_cifar10_resnet20"  # the architecture, rebuildable from a model file
    _assert_same_weights(loaded, source)
    with pytest.raises(UsageError, match="names published weights .* pass pretrained=True"):
        create_model("bcos_cifar10_resnet20.long")
    with pytest.raises(UnknownNameError, match="unknown model 'bcos_resnet5'"):
        create_model("bcos_resnet5.long", pretrained=True)
