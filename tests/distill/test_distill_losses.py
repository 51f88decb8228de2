"""The distillation losses against direct implementations of their formulas (docs/science.md, e²KD, thesis eq. 8.1, 8.3,
E.1, and attention transfer), in float64."""

import math

import pytest
import torch
import torch.nn.functional as F

from rightreasons.distill import attention_transfer_loss, explanation_loss, kd_loss, multilabel_kd_loss


def logits_pair(n=5, k=4, scale=3.0):
    g = torch.Generator().manual_seed(7)
    return (scale * torch.randn(n, k, generator=g, dtype=torch.float64),
            scale * torch.randn(n, k, generator=g, dtype=torch.float64))


def direct_kd(zs, zt, tau):
    loss = 0.0
    for s, t in zip(zs.tolist(), zt.tolist()):
        ps = [math.exp(v / tau) for v in s]
        pt = [math.exp(v / tau) for v in t]
        ps = [p / sum(ps) for p in ps]
        pt = [p / sum(pt) for p in pt]
        loss += sum(b * math.log(b / a) for a, b in zip(ps, pt))
    return tau ** 2 * loss / len(zs)


@pytest.mark.parametrize("tau", [1.0, 4.0])
def test_kd_loss_matches_tau_squared_kl(tau):
    zs, zt = logits_pair()
    assert kd_loss(zs, zt, tau).item() == pytest.approx(direct_kd(zs, zt, tau), rel=1e-6)


@pytest.mark.parametrize("tau", [1.0, 5.0])
def test_kd_gradient_is_tau_times_probability_difference(tau):
    # d/dz_S [τ² KL(p_T ‖ p_S)] = τ (p_S − p_T): the τ² keeps the gradient on the scale of τ = 1
    zs, zt = logits_pair()
    zs.requires_grad_(True)
    kd_loss(zs, zt, tau).backward()
    expected = tau * (F.softmax(zs.detach() / tau, 1) - F.softmax(zt / tau, 1)) / len(zs)
    torch.testing.assert_close(zs.grad, expected)


def test_kd_loss_is_zero_for_identical_logits_and_refuses_bad_input():
    _, zt = logits_pair()
    assert kd_loss(zt.clone(), zt, 2.0).item() == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="temperature"):
        kd_loss(zt, zt, 0.0)
    with pytest.raises(ValueError, match="same shape|one shape"):
        kd_loss(zt, zt[:, :3])


def direct_multilabel(zs, zt, tau):
    sig = lambda v: 1 / (1 + math.exp(-v))  # noqa: E731
    loss = 0.0
    for s, t in zip(zs.tolist(), zt.tolist()):
        for a, b in zip(s, t):
            q, p = sig(a / tau), sig(b / tau)
            loss += p * math.log(p / q) + (1 - p) * math.log((1 - p) / (1 - q))
    return tau * loss / len(zs)


@pytest.mark.parametrize("tau", [1.0, 3.0])
def test_multilabel_kd_matches_binary_kl_per_class(tau):
    zs, zt = logits_pair()
    assert multilabel_kd_loss(zs, zt, tau).item() == pytest.approx(direct_multilabel(zs, zt, tau), rel=1e-6)


def test_multilabel_kd_is_finite_for_saturated_logits():
    zs = torch.tensor([[300.0, -300.0, 0.0]], requires_grad=True)
    zt = torch.tensor([[-300.0, 300.0, 0.0]])
    loss = multilabel_kd_loss(zs, zt, 1.0)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(zs.grad).all()
    assert loss.item() == pytest.approx(600.0, rel=1e-3)  # KL ≈ |z| = 300 for each opposed class, 0 for the third


def test_explanation_loss_is_one_minus_cosine_per_sample():
    g = torch.Generator().manual_seed(3)
    et = torch.randn(3, 6, 5, 5, generator=g, dtype=torch.float64)
    es = torch.randn(3, 6, 5, 5, generator=g, dtype=torch.float64)
    cos = [(a * b).sum() / (a.norm() * b.norm()) for a, b in zip(et, es)]
    expected = sum(1 - c.item() for c in cos) / 3
    assert explanation_loss(es, et).item() == pytest.approx(expected, rel=1e-6)
    # scale-invariant, zero for equal maps, finite (loss 1) for an all-zero student map
    assert explanation_loss(7.5 * et, et).item() == pytest.approx(0.0, abs=1e-6)
    zero = explanation_loss(torch.zeros_like(es), et)
    assert zero.item() == pytest.approx(1.0)


def direct_at(s, t):
    def attention(x):
        a = x.pow(2).mean(1).reshape(x.shape[0], -1)
        return a / a.norm(dim=1, keepdim=True)
    return 0.5 * (attention(s) - attention(t)).pow(2).mean()


def test_attention_transfer_matches_the_original_formula():
    g = torch.Generator().manual_seed(5)
    s1, t1 = torch.randn(2, 4, 6, 6, generator=g), torch.randn(2, 8, 6, 6, generator=g)
    s2, t2 = torch.randn(2, 4, 3, 3, generator=g), torch.randn(2, 8, 6, 6, generator=g)
    expected = direct_at(s1, t1) + direct_at(s2, F.avg_pool2d(t2, 2))
    assert attention_transfer_loss([s1, s2], [t1, t2]).item() == pytest.approx(expected.item(), rel=1e-5)
    with pytest.raises(ValueError, match="same, non-zero number"):
        attention_transfer_loss([s1], [t1, t2])
