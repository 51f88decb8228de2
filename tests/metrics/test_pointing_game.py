"""Grid pointing game: confident-image selection, grid construction, and scores of attributions with known answers
(the true tile → 1, uniform → 1/n²)."""

import pytest
import torch
from torch import nn

from rightreasons.metrics import (GridPointingGame, build_grids, grid_pointing_game, pointing_game_scores,
                                  select_confident, smooth_attributions, tile_masks)

K = 5


class ValueClassifier(nn.Module):
    """Classifies a constant image by its value: logit_k = -10 · (mean(x) - k)², k = 0..K (class K is unused, so
    that every used class has a neighbour above it)."""

    def forward(self, x):
        return -10 * (x.mean((1, 2, 3))[:, None] - torch.arange(K + 1, dtype=x.dtype)) ** 2


def dataset():
    """Two images per class (value k, most confident, and k + 0.05), a mislabelled and an ambiguous image."""
    values = [float(k) for k in range(K)] + [k + 0.05 for k in range(K)] + [2.0, 1.5]
    labels = list(range(K)) + list(range(K)) + [1, 1]
    images = torch.tensor(values).view(-1, 1, 1, 1).expand(-1, 1, 4, 4).contiguous()
    return images, torch.tensor(labels)


def true_tile(model, x, target):
    """Attribution = 1 on the tile whose value rounds to the target class, 0 elsewhere."""
    return (x[:, 0].round() == target[:, None, None]).float()


def uniform(model, x, target):
    return torch.ones(x.shape[0], *x.shape[-2:])


def test_select_confident_keeps_correct_confident_images_most_confident_first():
    images, labels = dataset()
    indices, confidences = select_confident(ValueClassifier(), images, labels, threshold=0.9, batch_size=4)
    assert sorted(indices.tolist()) == list(range(2 * K))      # the mislabelled (10) and ambiguous (11) are out
    assert (confidences[:-1] >= confidences[1:]).all() and (confidences >= 0.9).all()
    assert set(indices[:K].tolist()) == set(range(K))           # exact values are the most confident


def test_build_grids_tiles_distinct_classes_most_confident_first():
    images, labels = dataset()
    indices, _ = select_confident(ValueClassifier(), images, labels, threshold=0.9)
    grids = build_grids(images, labels, indices, n=2, generator=torch.Generator().manual_seed(0))
    assert grids.images.shape == (2, 1, 8, 8) and grids.classes.shape == (2, 4)   # 10 images -> 2 grids of 4
    assert all(len(set(row.tolist())) == 4 for row in grids.classes)
    assert len(set(grids.sources.flatten().tolist())) == 8
    assert torch.equal(grids.classes, labels[grids.sources])
    for g in range(2):
        for tile in range(4):
            r, c = divmod(tile, 2)
            assert torch.equal(grids.images[g, :, 4 * r:4 * r + 4, 4 * c:4 * c + 4], images[grids.sources[g, tile]])
    assert (grids.sources[0] < K).all()                          # the first grid uses each class's best image
    again = build_grids(images, labels, indices, n=2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again.sources, grids.sources)
    with pytest.warns(UserWarning, match="only 2 of 3 grids"):
        assert build_grids(images, labels, indices, n=2, num_grids=3).images.shape[0] == 2
    with pytest.raises(ValueError, match="needs confident images of 9 distinct classes"):
        build_grids(images, labels, indices, n=3)


def test_scores_of_known_attributions():
    images, labels = dataset()
    grids = build_grids(images, labels, torch.arange(2 * K), n=2, generator=torch.Generator().manual_seed(1))
    model = ValueClassifier()
    perfect = grid_pointing_game(model, grids, true_tile, batch_size=3)
    assert perfect.shape == (2, 4) and torch.equal(perfect, torch.ones(2, 4))
    flat = grid_pointing_game(model, grids, uniform, batch_size=5)
    torch.testing.assert_close(flat, torch.full((2, 4), 0.25))
    with_negatives = grid_pointing_game(model, grids, lambda m, x, t: 2 * true_tile(m, x, t) - 1)
    assert torch.equal(with_negatives, torch.ones(2, 4))        # negative evidence elsewhere does not count


def test_pointing_game_scores_hand_computed_and_metric_accumulation():
    assert tile_masks(torch.tensor([1]), 2, 4, 4)[0].nonzero().tolist() == [[0, 2], [0, 3], [1, 2], [1, 3]]
    maps = torch.zeros(3, 6, 6)
    maps[0, :2, :2] = 1.0          # all in tile 0 of a 3x3 grid
    maps[1] = 1.0                  # uniform: 1/9
    maps[2, 2, 2] = 3.0            # tile 4 (centre) holds 3 of 3 + 1
    maps[2, 0, 0] = 1.0
    tiles = torch.tensor([0, 8, 4])
    scores = pointing_game_scores(maps, tiles, 3)
    assert scores.tolist() == pytest.approx([1.0, 1 / 9, 0.75])
    assert pointing_game_scores(torch.zeros(1, 6, 6), torch.tensor([0]), 3).item() == 0.0
    metric = GridPointingGame(n=3)
    metric.update(maps[:1], tiles[:1])
    metric.update(maps[1:], tiles[1:])
    assert metric.compute().item() == pytest.approx(scores.mean().item())
    with pytest.raises(ValueError, match=r"tiles must be \[P\]"):
        pointing_game_scores(maps, torch.tensor([0, 9, 1]), 3)


def test_smoothing_is_a_same_size_box_filter():
    delta = torch.zeros(1, 5, 5)
    delta[0, 2, 2] = 9.0
    smooth = smooth_attributions(delta, 3)
    assert smooth.shape == (1, 5, 5)
    assert torch.allclose(smooth[0, 1:4, 1:4], torch.ones(3, 3)) and smooth[0, 0].abs().sum() == 0
    assert torch.equal(smooth_attributions(delta, 0), delta)
    with pytest.raises(ValueError, match="must be odd"):
        smooth_attributions(delta, 4)


def test_runs_on_a_real_cnn_with_input_x_gradient():
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, K, 3, padding=1),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()

    def input_x_gradient(model, x, target):
        x = x.clone().requires_grad_(True)
        (grad,) = torch.autograd.grad(model(x).gather(1, target[:, None]).sum(), x)
        return (grad * x).sum(1)

    images, labels = dataset()
    grids = build_grids(images, labels, torch.arange(2 * K), n=2)
    scores = grid_pointing_game(model, grids, input_x_gradient, batch_size=4, smoothing=3)
    assert scores.shape == (2, 4) and ((scores >= 0) & (scores <= 1)).all()
