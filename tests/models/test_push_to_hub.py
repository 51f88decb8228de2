"""``push_to_hub`` (issue 35, item 2): a model directory goes to a Hub repository through ``huggingface_hub``'s
``HfApi`` (created when missing, one upload of the folder); tested against a fake ``HfApi``, never the network."""

from __future__ import annotations

import inspect
import sys

import pytest

import rightreasons as rr
from rightreasons.errors import CheckpointError
from rightreasons.models.hub import push_to_hub, save_pretrained
from fake_hub import install_fake_hub


@pytest.fixture
def fake_hub(monkeypatch):
    return install_fake_hub(monkeypatch)


@pytest.fixture
def directory(tmp_path):
    return save_pretrained(rr.create_model("bcos_cifar10_resnet20", num_classes=2), tmp_path / "model")


def test_the_directory_is_uploaded_to_the_repository_created_when_missing(fake_hub, directory):
    url = push_to_hub(directory, "someone/tiny", private=True)
    assert url == "https://huggingface.co/someone/tiny/commit/0123abc"
    assert fake_hub == [
        ("create_repo", ("someone/tiny",), {"repo_type": "model", "private": True, "exist_ok": True}),
        ("upload_folder", (), {"folder_path": str(directory), "repo_id": "someone/tiny", "repo_type": "model",
                               "revision": None, "commit_message": "Upload model (rightreasons)"})]


def test_the_calls_fit_the_api_of_huggingface_hub(monkeypatch, directory):
    """The fake's calls bind to the real ``HfApi`` methods' signatures (when huggingface_hub is installed)."""
    hub = pytest.importorskip("huggingface_hub", reason="huggingface_hub is not installed")
    calls = install_fake_hub(monkeypatch)
    push_to_hub(directory, "someone/tiny", revision="v1")
    assert [name for name, _, _ in calls] == ["create_repo", "upload_folder"]
    for name, args, kwargs in calls:
        inspect.signature(getattr(hub.HfApi, name)).bind(None, *args, **kwargs)


def test_what_cannot_be_pushed_is_refused_before_any_call(fake_hub, directory, tmp_path):
    with pytest.raises(CheckpointError, match=r"not a model directory \(no config.json of rightreasons\)"):
        push_to_hub(tmp_path, "someone/tiny")
    with pytest.raises(CheckpointError, match=r"repo_id 'tiny': expected a Hub repository id OWNER/NAME"):
        push_to_hub(directory, "tiny")
    assert fake_hub == []


def test_without_huggingface_hub_the_error_says_how_to_install_it(monkeypatch, directory):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import fails as for a missing package
    expected = r"to the Hub repository someone/tiny needs huggingface_hub, which is not installed \(pip install"
    with pytest.raises(CheckpointError, match=expected):
        push_to_hub(directory, "someone/tiny")
