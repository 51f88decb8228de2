"""Shared test settings: deterministic seeds, and one torch thread per pytest-xdist worker.

``make test`` runs two xdist workers on the two CI cores; with torch's default of one thread per core each worker
would oversubscribe the machine, which makes the many small tensor operations of these tests several times slower.
"""

import os

import pytest
import torch

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
