"""A stand-in for ``huggingface_hub`` (its ``HfApi``) that records the calls ``push_to_hub`` makes, so that no test
reaches the network. A module rather than a ``conftest.py`` fixture because tests in several folders use it."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest


class FakeApi:
    """``HfApi`` recording ``(method, args, kwargs)``; ``upload_folder`` answers with a commit URL, as the Hub does."""

    def __init__(self, calls: list[tuple[str, tuple, dict]]) -> None:
        self.calls = calls

    def create_repo(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("create_repo", args, kwargs))

    def upload_folder(self, *args: Any, **kwargs: Any) -> str:
        self.calls.append(("upload_folder", args, kwargs))
        return f"https://huggingface.co/{kwargs['repo_id']}/commit/0123abc"


def install_fake_hub(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple, dict]]:
    """Make ``import huggingface_hub`` give the fake; returns the list its calls are recorded in."""
    calls: list[tuple[str, tuple, dict]] = []
    monkeypatch.setitem(sys.modules, "huggingface_hub", types.SimpleNamespace(HfApi=lambda: FakeApi(calls)))
    return calls
