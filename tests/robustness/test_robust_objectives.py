"""The group-robustness objectives against their formulas: GroupDRO's exponentiated-gradient update on a hand-computed
example, weighted means and GroupDRO split over processes equal one process, the balanced subset, DFR's halves."""

from __future__ import annotations

import math

import pytest
import torch

from rightreasons.data import load_dataset
from rightreasons.engine import Step
from rightreasons.models import create_model
from rightreasons.robustness import GroupDRO, balanced_subset, inverse_size_weights, weighted_mean
from rightreasons.robustness import dfr


def one_process(index: int = 0) -> Step:
    """One process at optimiser step ``index``."""
    return Step(torch.Generator(), 1, lambda t: t, index=index)


class TwoProcesses:
    """Two simulated processes: a first pass records what each process sums across processes (its local tensors,
    which do not depend on the other process); in the second pass a sum adds the other process's tensor of the same
    call."""

    def __init__(self) -> None:
        self.recorded: dict[str, list[torch.Tensor]] = {"a": [], "b": []}

    def recording(self, name: str) -> Step:
        def record(t: torch.Tensor) -> torch.Tensor:
            self.recorded[name].append(t.detach().clone())
            return t
        return Step(torch.Generator(), 2, record)

    def summing(self, name: str) -> Step:
        calls = iter(self.recorded["b" if name == "a" else "a"])
        return Step(torch.Generator(), 2, lambda t: t + next(calls))


def test_groupdro_follows_the_exponentiated_gradient_update_by_hand():
    counts = torch.tensor([4, 1, 0, 2])
    dro = GroupDRO(counts, step_size=0.5, adjustment=1.0)
    assert dro.q.tolist() == pytest.approx([1 / 3, 1 / 3, 0, 1 / 3])  # an empty training group never gets weight
    losses = torch.tensor([1.0, 3.0, 2.0, 0.5], requires_grad=True)
    groups = torch.tensor([0, 0, 1, 3])
    objective, group_losses = dro(losses, groups, one_process())
    assert group_losses.tolist() == pytest.approx([2.0, 2.0, 0.0, 0.5])
    # q_g ∝ q_g · exp(η (L_g + C / sqrt(n_g)))
    raw = [math.exp(0.5 * (2.0 + 1 / 2)), math.exp(0.5 * (2.0 + 1 / 1)), 0.0, math.exp(0.5 * (0.5 + 1 / math.sqrt(2)))]
    q = [r / sum(raw) for r in raw]
    assert dro.q.tolist() == pytest.approx(q)
    assert objective.item() == pytest.approx(q[0] * 2.0 + q[1] * 2.0 + q[3] * 0.5)
    objective.backward()
    assert losses.grad.tolist() == pytest.approx([q[0] / 2, q[0] / 2, q[1], q[3]])
    # the second step starts from the updated q; a group absent from the batch has L_g = 0 (only C / sqrt(n_g) acts)
    dro(torch.tensor([1.0]), torch.tensor([3]), one_process(1))
    raw2 = [q[0] * math.exp(0.5 * 0.5), q[1] * math.exp(0.5 * 1.0), 0.0, q[3] * math.exp(0.5 * (1 + 1 / math.sqrt(2)))]
    assert dro.q.tolist() == pytest.approx([r / sum(raw2) for r in raw2])


def test_groupdro_moves_q_once_per_optimiser_step_on_the_accumulated_batch():
    """With gradient accumulation (micro-batches sharing ``Step.index``) q takes one step per optimiser step on the
    group means of the whole accumulated batch, as one batch of their union would; each micro-batch minimises with q
    updated on the micro-batches seen so far (with one micro-batch: the authors' update-then-minimise)."""
    dro = GroupDRO(torch.tensor([4, 1]), step_size=0.5, adjustment=1.0)
    adjust = [1 / 2, 1.0]  # C / sqrt(n_g)

    def update(q: list[float], means: list[float]) -> list[float]:
        raw = [qg * math.exp(0.5 * (m + a)) for qg, m, a in zip(q, means, adjust)]
        return [r / sum(raw) for r in raw]

    first, _ = dro(torch.tensor([1.0, 3.0]), torch.tensor([0, 1]), one_process(0))
    q_first = update([0.5, 0.5], [1.0, 3.0])
    assert dro.q.tolist() == pytest.approx(q_first) and first.item() == pytest.approx(q_first[0] * 1 + q_first[1] * 3)
    second, _ = dro(torch.tensor([2.0, 1.0, 0.0]), torch.tensor([0, 1, 1]), one_process(0))
    # the step's group means over both micro-batches: group 0 (1 + 2) / 2, group 1 (3 + 1 + 0) / 3; C acts once
    q_step = update([0.5, 0.5], [1.5, 4 / 3])
    assert dro.q.tolist() == pytest.approx(q_step)
    assert second.item() == pytest.approx(q_step[0] * 2.0 + q_step[1] * 0.5)
    union = GroupDRO(torch.tensor([4, 1]), step_size=0.5, adjustment=1.0)
    union(torch.tensor([1.0, 3.0, 2.0, 1.0, 0.0]), torch.tensor([0, 1, 0, 1, 1]), one_process(0))
    assert dro.q.tolist() == pytest.approx(union.q.tolist())
    dro(torch.tensor([2.0]), torch.tensor([0]), one_process(1))  # the next optimiser step starts from the step's q
    assert dro.q.tolist() == pytest.approx(update(q_step, [2.0, 0.0]))


def test_groupdro_keeps_q_through_a_non_finite_loss():
    """A step the trainer skips (non-finite loss) leaves q as it was: q never becomes NaN."""
    dro = GroupDRO(torch.tensor([2, 2]), step_size=0.5)
    dro(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]), one_process())
    before = dro.q.clone()
    objective, _ = dro(torch.tensor([float("nan"), 1.0]), torch.tensor([0, 1]), one_process(1))
    assert not torch.isfinite(objective) and torch.equal(dro.q, before)
    dro(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]), one_process(2))
    assert torch.isfinite(dro.q).all()


def test_groupdro_state_round_trips_and_refuses_another_group_count():
    dro = GroupDRO(torch.tensor([3, 3]), 0.1)
    dro(torch.tensor([1.0, 0.0]), torch.tensor([0, 1]), one_process())
    other = GroupDRO(torch.tensor([3, 3]), 0.1)
    other.load_state_dict(dro.state_dict())
    assert torch.equal(other.q, dro.q)
    with pytest.raises(ValueError, match="2 groups, the data has 3"):
        GroupDRO(torch.tensor([1, 1, 1]), 0.1).load_state_dict(dro.state_dict())


@pytest.mark.parametrize("objective", ["weighted", "groupdro"])
def test_two_processes_train_as_one(objective):
    """DDP averages the processes' gradients: the mean of the two halves' gradients is the whole batch's."""
    losses = torch.tensor([0.3, 1.2, 0.7, 2.0, 0.1, 0.9])
    groups = torch.tensor([0, 0, 1, 2, 2, 2])
    weights = inverse_size_weights(torch.tensor([5, 2, 1]))[groups]

    def run(part: slice, step: Step, dro: GroupDRO | None) -> tuple[torch.Tensor, torch.Tensor]:
        x = losses[part].clone().requires_grad_()
        value = weighted_mean(x, weights[part], step) if dro is None else dro(x, groups[part], step)[0]
        value.backward()
        return value.detach(), x.grad

    make = (lambda: None) if objective == "weighted" else (lambda: GroupDRO(torch.tensor([5, 2, 1]), 0.3, 0.5))
    dro_whole, dro_a, dro_b = make(), make(), make()
    whole, grad = run(slice(None), one_process(), dro_whole)
    processes, parts = TwoProcesses(), {"a": slice(0, 3), "b": slice(3, None)}
    for name, part in parts.items():
        run(part, processes.recording(name), make())
    value_a, grad_a = run(parts["a"], processes.summing("a"), dro_a)
    value_b, grad_b = run(parts["b"], processes.summing("b"), dro_b)
    assert torch.cat([grad_a, grad_b]).div(2).tolist() == pytest.approx(grad.tolist())
    if objective == "weighted":
        assert ((value_a + value_b) / 2).item() == pytest.approx(whole.item())
    else:  # every process updates q from the global group losses: the same q as one process, the global value
        assert dro_a.q.tolist() == pytest.approx(dro_whole.q.tolist()) and torch.equal(dro_a.q, dro_b.q)
        assert (value_a / 2).item() == pytest.approx(whole.item()) == (value_b / 2).item()


def test_weighted_mean_is_the_normalised_weighted_sum():
    losses, weights = torch.tensor([1.0, 2.0, 4.0]), torch.tensor([0.5, 1.0, 0.25])
    assert weighted_mean(losses, weights, one_process()).item() == pytest.approx((0.5 + 2 + 1) / 1.75)
    assert inverse_size_weights(torch.tensor([4, 0, 2])).tolist() == [0.25, 0.0, 0.5]


def test_balanced_subset_keeps_the_smallest_groups_size_of_every_present_group_deterministically():
    groups = torch.tensor([0] * 10 + [3] * 3 + [1] * 6)
    subset = balanced_subset(groups, seed=7)
    assert torch.bincount(groups[subset], minlength=4).tolist() == [3, 3, 0, 3]
    assert torch.equal(subset, balanced_subset(groups, seed=7)) and len(set(subset.tolist())) == 9
    assert not torch.equal(subset, balanced_subset(groups, seed=8))


def test_dfr_fits_on_the_training_half_selects_on_the_other_and_retrains_on_all_of_validation(monkeypatch):
    torch.manual_seed(0)
    n, groups = 80, torch.arange(80) % 4
    labels = groups // 2
    features = torch.randn(n, 5) + labels[:, None].float()
    train_half, select_half = dfr.halves(n, seed=3)
    assert not set(train_half.tolist()) & set(select_half.tolist())
    assert sorted(train_half.tolist() + select_half.tolist()) == list(range(n))
    drawn: list[torch.Tensor] = []
    real = dfr.balanced
    monkeypatch.setattr(dfr, "balanced", lambda idx, g, gen: drawn.append(real(idx, g, gen)) or drawn[-1])
    grid = (1.0, 0.1)
    result = dfr.deep_feature_reweighting(features, labels, groups, 2, 4, c_grid=grid, retrains=3, seed=3,
                                          iterations=50)
    assert len(drawn) == len(grid) + 3
    for subset in drawn[:len(grid)]:  # selection: the last layer never sees the selection half
        assert set(subset.tolist()) <= set(train_half.tolist())
        assert torch.bincount(groups[subset], minlength=4).unique().numel() == 1  # group-balanced
    assert any(set(s.tolist()) & set(select_half.tolist()) for s in drawn[len(grid):])  # the final fits: all of val
    assert result.c in grid and set(result.selection) == set(grid)
    scores = dfr.score_last_layer(result.layer, features, labels, groups, ("a", "b", "c", "d"))
    assert scores["worst_group_accuracy"] == min(scores[f"accuracy/{g}"] for g in "abcd")


def test_fit_logistic_separates_separable_data_and_a_strong_l1_penalty_zeroes_the_weights():
    x = torch.tensor([[-2.0, 0.1], [-1.0, -0.3], [1.0, 0.2], [2.0, -0.1]])
    y = torch.tensor([0, 0, 1, 1])
    weight, bias = dfr.fit_logistic(x, y, 2, c=10.0, iterations=300)
    assert ((x @ weight.T + bias).argmax(1) == y).all()
    weight, _ = dfr.fit_logistic(x, y, 2, c=1e-4, iterations=300)
    assert torch.count_nonzero(weight) == 0


@pytest.mark.parametrize("name", ["resnet18", "bcos_cifar10_resnet20", "bcos_vgg11"])
def test_dfr_features_are_the_classifiers_pooled_input_of_every_family(name):
    model = create_model(name, num_classes=2).eval()
    images = load_dataset("synthetic-birds", None, "val", n=4, seed=1)
    features, labels, groups = dfr.extract_features(model, images, 32)
    last = [m for m in model.get_classifier().modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))][-1]
    assert features.shape == (4, getattr(last, "in_channels", getattr(last, "in_features", None)))  # VGG: 4096
    assert labels.tolist() == [g // 2 for g in groups.tolist()]  # group = 2·y + place
