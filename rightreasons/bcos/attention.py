"""Self-attention as a dynamic-linear map: the attention matrix is the dynamic weight applied to the values.

For tokens ``x`` a head computes ``A(x) · v(x)`` with ``A = softmax(q kᵀ / sqrt(d))``. Holding ``A`` constant turns the
head into a linear map of the values, so the attention matrix joins the explanation ``W(x)`` exactly like the
``|cos|^(B-1)`` scale of a B-cos unit: :class:`AttentionMixing` applies it through
:meth:`~rightreasons.bcos.dynamic.DynamicLinear.dynamic` with ``product="matmul"``. In explanation mode the input
gradient therefore treats queries and keys as constants (the release's "detach q and k"), while a loss on the explanation still
back-propagates through ``A`` into the query/key weights exactly.

Optional learnt attention priors (Holistically Explainable ViTs, §3.5) give a transformer positional information without
an additive embedding, so that it stays dynamic *linear*: one ``[heads, T, T]`` matrix ``P`` per layer, either added to
the logits before the softmax, ``A = softmax(q kᵀ / sqrt(d) + P)``, or multiplied with the attention after it,
``A = softmax(q kᵀ / sqrt(d)) ⊙ softmax(P)`` (the paper's best variant).
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from .dynamic import DynamicLinear

__all__ = ["AttentionMixing", "PRIORS", "merge_heads", "split_heads"]

Prior = Literal["additive", "multiplicative"]
PRIORS: tuple[str, ...] = ("additive", "multiplicative")


def split_heads(x: Tensor, heads: int) -> Tensor:
    """``[N, T, heads·d] -> [N, heads, T, d]`` (feature index ``h·d + i`` goes to head ``h``)."""
    n, t, c = x.shape
    if c % heads:
        raise ValueError(f"split_heads: {c} features cannot be split into {heads} heads")
    return x.reshape(n, t, heads, c // heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``[N, heads, T, d] -> [N, T, heads·d]``, the inverse of :func:`split_heads`."""
    n, h, t, d = x.shape
    return x.transpose(1, 2).reshape(n, t, h * d)


class AttentionMixing(DynamicLinear):
    """Mix values with softmax attention; the attention matrix is a dynamic weight.

    Args:
        dim_head: features per head ``d``; logits are scaled by ``d ** -0.5``.
        heads: number of heads (needed for a prior).
        prior: ``None``, ``"additive"`` (added to the logits) or ``"multiplicative"`` (softmax of the prior multiplied
            with the attention); a learnt parameter ``prior`` of shape ``[heads, num_tokens, num_tokens]``,
            zero-initialised.
        num_tokens: token count ``T`` the prior is learnt for (required with a prior).

    Shapes: ``q, k, v [N, heads, T, d] -> [N, heads, T, d]``.
    """

    def __init__(self, dim_head: int, heads: int, prior: Prior | None = None, num_tokens: int | None = None) -> None:
        super().__init__()
        self.scale = dim_head ** -0.5
        self.prior_mode = prior
        if prior is None:
            self.prior = None
        elif prior in PRIORS:
            if not (isinstance(num_tokens, int) and num_tokens >= 1):
                raise ValueError(f"AttentionMixing: a {prior} prior needs num_tokens >= 1, got {num_tokens!r}")
            self.prior = nn.Parameter(torch.zeros(heads, num_tokens, num_tokens))
        else:
            raise ValueError(f"AttentionMixing: unknown prior {prior!r}; expected None or one of {PRIORS}")

    def attention(self, q: Tensor, k: Tensor) -> Tensor:
        """The attention matrix ``[N, heads, T, T]`` (rows: queries, columns: keys)."""
        dots = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        if self.prior is not None and dots.shape[-2:] != self.prior.shape[-2:]:
            raise ValueError(f"AttentionMixing: the attention prior is learnt for {self.prior.shape[-1]} tokens, "
                             f"got {dots.shape[-1]}")
        if self.prior_mode == "additive":
            dots = dots + self.prior
        attn = dots.softmax(dim=-1)
        if self.prior_mode == "multiplicative":
            attn = attn * self.prior.softmax(dim=-1)
        return attn

    def forward(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """``A(q, k) @ v`` with ``A`` applied as the dynamic weight."""
        return self.dynamic(self.attention(q, k), v, product="matmul")

    def extra_repr(self) -> str:
        return f"scale={self.scale:.4g}" + (f", prior={self.prior_mode}" if self.prior_mode else "")
