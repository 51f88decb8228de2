"""The e²KD objective's gradients: the explanation term reaches every student parameter with the exact gradient
(float64 finite differences, B-cos W(x) and GradCAM), the teacher gets none; teacher outputs carry no graph."""

import pytest
import torch
from torch import nn

from rightreasons.bcos import BcosConv2d
from rightreasons.distill import DistillObjective, resolve_explanation, teacher_outputs
from rightreasons.encoding import reencode
from rightreasons.errors import UsageError
from rightreasons.explain import layer_for, resolve_layer


class TinyBcos(nn.Module):
    """Two B-cos convs and mean pooling: logits [N, 3] from six-channel inputs."""

    stage_names = {"final": "conv2"}

    def __init__(self):
        super().__init__()
        self.conv1 = BcosConv2d(6, 4, 3, padding=1)
        self.conv2 = BcosConv2d(4, 3, 3, padding=1)

    def forward(self, x):
        return self.conv2(self.conv1(x)).mean((2, 3))


class TinyCNN(nn.Module):
    """A standard conv net with a named last stage for GradCAM (positive features and head weights, so that the
    GradCAM maps are positive rather than cut to zero by the ReLU)."""

    stage_names = {"final": "features"}

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(6, 5, 3, padding=1), nn.Tanh(), nn.Conv2d(5, 4, 3, padding=1),
                                      nn.Softplus())
        self.head = nn.Linear(4, 3)
        nn.init.uniform_(self.head.weight, 0.5, 1.0)

    def forward(self, x):
        return self.head(self.features(x).mean((2, 3)))


def make(cls, seed):
    torch.manual_seed(seed)
    return cls().double()


def images():
    rgb = torch.rand(3, 3, 8, 8, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    return torch.cat([rgb, 1 - rgb], 1)


@pytest.mark.parametrize("cls, method", [(TinyBcos, "bcos_weights"), (TinyCNN, "gradcam")])
def test_explanation_term_gradient_is_exact_and_never_reaches_the_teacher(cls, method):
    teacher, student = make(cls, 1).eval().requires_grad_(False), make(cls, 2)
    x = images()
    t_out = teacher_outputs(teacher, x, method, layer_for(method, "final"))
    assert t_out.explanations.grad_fn is None and not t_out.explanations.requires_grad
    objective = DistillObjective(method=method, logit_weight=0.0, explanation_weight=1.0)
    out = objective(student, x, t_out)
    assert set(out.terms) == {"kd", "explanation"}
    out.total.backward()
    assert all(p.grad is None for p in teacher.parameters())
    first = next(student.parameters())
    for name, p in student.named_parameters():
        if p.dim() > 1:  # every weight; a bias of the last layer cannot move a GradCAM map
            assert p.grad is not None and p.grad.abs().sum() > 0, name

    def loss_at(value, index):
        with torch.no_grad():
            saved = first.view(-1)[index].item()
            first.view(-1)[index] = value
        loss = objective(student, x, t_out).total.item()
        with torch.no_grad():
            first.view(-1)[index] = saved
        return loss

    eps = 1e-6
    for index in torch.randperm(first.numel(), generator=torch.Generator().manual_seed(0))[:5].tolist():
        value = first.view(-1)[index].item()
        numeric = (loss_at(value + eps, index) - loss_at(value - eps, index)) / (2 * eps)
        assert first.grad.view(-1)[index].item() == pytest.approx(numeric, rel=1e-4, abs=1e-8)


def test_logits_of_the_explanation_forward_feed_kd_and_ground_truth():
    teacher, student = make(TinyBcos, 1).eval().requires_grad_(False), make(TinyBcos, 2)
    x = images()
    labels = torch.eye(3, dtype=torch.float64)
    seen = []
    objective = DistillObjective(method="bcos_weights", temperature=2.0, gt_weight=0.5,
                                 classification=lambda z, y: seen.append(z) or ((z - y) ** 2).mean())
    out = objective(student, x, teacher_outputs(teacher, x, "bcos_weights", "input"), labels)
    assert seen[0] is not None and out.logits.grad_fn is not None
    expected = out.terms["kd"] + out.terms["explanation"] + 0.5 * out.terms["classification"]
    torch.testing.assert_close(out.total, expected)
    torch.testing.assert_close(out.logits, student(x))


def test_objective_refuses_inconsistent_settings():
    with pytest.raises(UsageError, match="needs an explanation method"):
        DistillObjective(method="none", explanation_weight=1.0)
    with pytest.raises(ValueError, match=">= 0"):
        DistillObjective(method="bcos_weights", logit_weight=-1.0)
    with pytest.raises(ValueError, match="classification loss"):
        DistillObjective(method="bcos_weights", gt_weight=1.0)
    with pytest.raises(UsageError, match="mixed pair|one family"):
        resolve_explanation("auto", teacher_bcos=True, student_bcos=False)
    assert resolve_explanation("auto", teacher_bcos=False, student_bcos=False) == "gradcam"
    assert resolve_explanation("auto", teacher_bcos=True, student_bcos=True) == "bcos_weights"


def test_gradcam_layer_resolves_inside_a_ddp_style_wrapper():
    inner = make(TinyCNN, 1).eval().requires_grad_(False)
    wrapped = nn.DataParallel(inner)  # the DDP-style ``.module`` wrapper that runs on CPU
    assert resolve_layer(inner, "final") is inner.features
    assert resolve_layer(wrapped, "final") is inner.features
    x = images()
    plain, through = teacher_outputs(inner, x, "gradcam"), teacher_outputs(wrapped, x, "gradcam")
    torch.testing.assert_close(through.explanations, plain.explanations)


def test_reencode_converts_between_encodings_exactly():
    rgb = torch.rand(2, 3, 4, 4, dtype=torch.float64)
    six = torch.cat([rgb, 1 - rgb], 1)
    normalized = reencode(six, "bcos", "normalize")
    torch.testing.assert_close(reencode(normalized, "normalize", "bcos"), six)
    torch.testing.assert_close(reencode(six, "bcos", "none"), rgb)
    assert reencode(six, "bcos", "bcos") is six
    with pytest.raises(ValueError, match="unknown encoding"):
        reencode(six, "bcos", "rgb")
