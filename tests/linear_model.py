"""A classifier whose explanations are known exactly, for the tests of faithfulness metrics."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class LinearTwoClass(nn.Module):
    """Two logits for ``x [N, C, H, W]``: ``Σ weight ⊙ x`` and 0. Removing or inserting a pixel changes logit 0 by
    exactly its Input×Gradient contribution ``Σ_c weight ⊙ x``, so curves and correlations follow by hand."""

    def __init__(self, weight: Tensor) -> None:
        super().__init__()
        self.weight = weight

    def forward(self, x: Tensor) -> Tensor:
        logit = (self.weight * x).flatten(1).sum(1)
        return torch.stack([logit, torch.zeros_like(logit)], 1)
