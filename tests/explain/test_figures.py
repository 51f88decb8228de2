"""Figures that explain themselves (issue 14, item 9): class name and probability in the title, the ground-truth boxes
on every panel, a colour bar for the contribution map; probabilities through the link of the training loss."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
import torch
from matplotlib.patches import Rectangle

import rightreasons as rr
from rightreasons.bcos import AddInverse
from rightreasons.classification.loss import class_probabilities
from rightreasons.errors import ConfigError
from rightreasons.explain import class_name, explain, prediction_caption, save_explanation
from rightreasons.explain import visualize
from rightreasons.explain.visualize import contribution_limits


@pytest.fixture
def drawn(monkeypatch):
    """Keeps the matplotlib figure of each ``figure(...)`` block (it is still written)."""
    figures = []
    real = visualize.figure

    @contextmanager
    def keep(path, *args, **kwargs):
        with real(path, *args, **kwargs) as (fig, axes):
            figures.append((fig, axes))
            yield fig, axes

    monkeypatch.setattr(visualize, "figure", keep)
    return figures


def test_the_figure_has_the_title_the_boxes_and_a_symmetric_colour_bar(tmp_path, drawn):
    model = rr.create_model("bcos_cifar10_resnet20", num_classes=3).eval()
    image = AddInverse()(torch.rand(1, 3, 16, 16))
    e = explain(model, image)
    boxes = torch.tensor([[2.0, 3.0, 10.0, 12.0], [0.0, 0.0, 4.0, 4.0]])
    path = save_explanation(tmp_path / "x.png", image[0], e.weights[0], title="bird p=0.9", boxes=boxes)
    assert path.read_bytes()[:4] == b"\x89PNG"
    fig, axes = drawn[0]
    assert fig._suptitle.get_text() == "bird p=0.9"
    for ax in axes.flat:
        rectangles = [p for p in ax.patches if isinstance(p, Rectangle)]
        assert [(r.get_x(), r.get_y(), r.get_width(), r.get_height()) for r in rectangles] == \
            [(1.5, 2.5, 8.0, 9.0), (-0.5, -0.5, 4.0, 4.0)]  # pixel edges: centres at integer coordinates
    colour_bars = [ax for ax in fig.axes if ax not in list(axes.flat)]
    assert len(colour_bars) == 1
    limit = contribution_limits((image[0] * e.weights[0]).sum(0))
    low, high = axes[0, 2].images[0].get_clim()
    assert low == pytest.approx(-limit) and high == pytest.approx(limit)


def test_without_boxes_nothing_is_outlined(tmp_path, drawn):
    model = rr.create_model("bcos_cifar10_resnet20", num_classes=3).eval()
    image = AddInverse()(torch.rand(1, 3, 16, 16))
    save_explanation(tmp_path / "x.png", image[0], explain(model, image).weights[0], boxes=torch.zeros(0, 4))
    assert all(not ax.patches for ax in drawn[0][1].flat)


def test_caption_names_the_class_and_the_prediction():
    probabilities = torch.tensor([0.10, 0.7, 0.2])
    assert prediction_caption(probabilities, 1, ["cat", "dog", "bird"]) == "dog p=0.700"
    assert prediction_caption(probabilities, 2, ["cat", "dog", "bird"]) == "bird p=0.200 (predicted: dog p=0.700)"
    assert prediction_caption(probabilities, 0) == "class 0 p=0.100 (predicted: class 1 p=0.700)"
    # near chance (tiny logits, as in briefly trained B-cos networks): the logit says how near, and which way
    assert prediction_caption(torch.tensor([0.50004, 0.4999]), 0, logits=torch.tensor([1.6e-4, -4e-4])) == \
        "class 0 p=0.500, logit +0.00016"
    assert class_name(1, ("a", "b")) == "b" and class_name(4, None) == "class 4"


def test_probabilities_follow_the_link_of_the_training_loss():
    logits = torch.tensor([[2.0, -1.0, 0.5]])
    torch.testing.assert_close(class_probabilities(logits, "bce"), 1 / (1 + torch.exp(-logits)))
    expected = torch.exp(logits) / torch.exp(logits).sum()
    torch.testing.assert_close(class_probabilities(logits, "ce"), expected)
    with pytest.raises(ConfigError, match="resolve 'auto' first"):
        class_probabilities(logits, "auto")
