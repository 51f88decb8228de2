"""Shared test settings: deterministic seeds and one torch thread.

``make test`` runs two xdist workers on the two CI cores; with torch's default of one thread per core each worker
would oversubscribe the machine, and the tests' many small tensor operations are slower with intra-op threads anyway.
"""

import pytest
import torch

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield
