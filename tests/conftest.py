"""Shared fixtures: deterministic seeds and a quiet, single-threaded-enough torch for 2-core CI."""

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
