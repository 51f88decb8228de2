"""Batched B-cos explanations: ``W(x)`` and contribution maps for one target class per sample, in one backward pass."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..bcos.dynamic import explanation_mode

__all__ = ["Explanation", "explain", "resolve_target"]


@dataclass
class Explanation:
    """What :func:`explain` returns.

    Attributes:
        logits: ``[N, K]`` model outputs (detached unless ``create_graph=True``).
        target: ``[N]`` explained class per sample.
        weights: ``[N, C, H, W]`` the dynamic linear map ``W_target(x)`` (the input gradient in explanation mode).
        contributions: ``[N, H, W]`` ``Σ_c W ⊙ x``; for a bias-free B-cos network they sum to ``logit − logit_bias``.
    """

    logits: Tensor
    target: Tensor
    weights: Tensor
    contributions: Tensor


def resolve_target(target: int | Tensor | None, logits: Tensor) -> Tensor:
    """Per-sample target classes ``[N]``: the argmax when ``None``, an int broadcast, or a tensor checked for shape/range."""
    n, k = logits.shape
    if target is None:
        return logits.detach().argmax(1)
    t = torch.as_tensor(target, device=logits.device)
    if t.is_floating_point() or t.is_complex():
        raise TypeError(f"target must hold integer class indices, got dtype {t.dtype}")
    t = t.long()
    if t.dim() == 0:
        t = t.expand(n)
    if t.shape != (n,):
        raise ValueError(f"target must be an int or a tensor of shape [N] = [{n}], got shape {tuple(t.shape)}")
    if ((t < 0) | (t >= k)).any():
        raise ValueError(f"target classes must lie in [0, {k - 1}] for logits of shape [{n}, {k}], "
                         f"got values {t.tolist()}")
    return t


def explain(model: nn.Module, x: Tensor, target: int | Tensor | None = None, create_graph: bool = False) -> Explanation:
    """Explain ``model``'s prediction for ``target`` on a batch ``x [N, C, H, W]`` with one backward pass.

    The logits of the target classes are summed and differentiated once w.r.t. ``x`` in explanation mode: samples do
    not interact (dynamic weights, batch statistics included, are constants there), so row ``n`` of the gradient is
    ``W_{target_n}(x_n)``. With ``create_graph=True`` the result stays differentiable: a loss on ``weights`` or
    ``contributions`` back-propagates exactly into every parameter (call ``backward`` after this function returns).
    The forward pass is an ordinary one (BatchNorm statistics update in train mode as usual), so the returned logits
    can also feed a classification loss when ``create_graph=True``.
    """
    x = x if x.requires_grad else x.detach().requires_grad_(True)
    with explanation_mode(model):
        logits = model(x)
        if logits.dim() != 2:
            raise ValueError(f"explain expects the model to return logits [N, K], got shape {tuple(logits.shape)}")
        target = resolve_target(target, logits)
        selected = logits.gather(1, target[:, None]).sum()
        (weights,) = torch.autograd.grad(selected, x, create_graph=create_graph)
    if not create_graph:
        logits, x = logits.detach(), x.detach()
    contributions = (weights * x).sum(1)
    return Explanation(logits=logits, target=target, weights=weights, contributions=contributions)
