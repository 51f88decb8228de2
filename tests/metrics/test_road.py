"""ROAD: the noisy linear imputation against its defining equations (checked pixel by pixel with loops), its noise,
and the MoRF / LeRF curves on a linear model whose answer follows by hand."""

import pytest
import torch
from torch import nn

from rightreasons.metrics import ROAD, noisy_linear_imputation, road
from linear_model import LinearTwoClass

OFFSETS = {(-1, -1): 1 / 12, (-1, 0): 1 / 6, (-1, 1): 1 / 12, (0, -1): 1 / 6, (0, 1): 1 / 6, (1, -1): 1 / 12,
           (1, 0): 1 / 6, (1, 1): 1 / 12}


def equation_residuals(image, removed):
    """Σ_j w_ij (u_j − u_i) over the in-image 8-neighbours j of every removed pixel i, every channel (loops)."""
    c, h, w = image.shape
    out = []
    for i in range(h):
        for j in range(w):
            if removed[i, j]:
                for ch in range(c):
                    out.append(sum(weight * (image[ch, i + di, j + dj] - image[ch, i, j])
                                   for (di, dj), weight in OFFSETS.items() if 0 <= i + di < h and 0 <= j + dj < w))
    return torch.stack(out)


@pytest.mark.parametrize("size", [(9, 11), (37, 34)])     # below and above the side where the solver starts coarse
def test_imputation_solves_the_neighbour_average_system_and_keeps_the_other_pixels(size):
    g = torch.Generator().manual_seed(0)
    images = torch.rand(2, 3, *size, generator=g, dtype=torch.float64)
    removed = torch.rand(2, *size, generator=g) < 0.6
    removed[1, :size[0] // 2] = True                          # a large hole reaching the border
    out = noisy_linear_imputation(images, removed, noise=0.0, tolerance=1e-12)
    for n in range(2):
        kept = ~removed[n]
        assert torch.equal(out[n][:, kept], images[n][:, kept])
        assert equation_residuals(out[n], removed[n]).abs().max() < 1e-10
        assert not torch.allclose(out[n][:, removed[n]], images[n][:, removed[n]])


def test_imputation_reproduces_constant_and_linear_images():
    rows, cols = torch.meshgrid(torch.arange(12.0), torch.arange(12.0), indexing="ij")
    linear = (0.3 * rows - 0.2 * cols + 1).double()[None, None]
    removed = torch.zeros(1, 12, 12, dtype=torch.bool)
    removed[0, 3:9, 2:10] = True                              # off the border, where the weights are symmetric
    assert torch.allclose(noisy_linear_imputation(linear, removed, noise=0.0, tolerance=1e-12), linear, atol=1e-9)
    constant = torch.full((1, 2, 12, 12), 0.7, dtype=torch.float64)
    everywhere = torch.rand(1, 12, 12) < 0.9
    assert torch.allclose(noisy_linear_imputation(constant, everywhere, noise=0.0), constant, atol=1e-12)


def test_every_pixel_removed_fills_the_channel_means_and_nothing_removed_is_a_copy():
    images = torch.rand(2, 3, 5, 5, dtype=torch.float64)
    out = noisy_linear_imputation(images, torch.ones(2, 5, 5, dtype=torch.bool), noise=0.0)
    assert torch.allclose(out, images.mean((2, 3), keepdim=True).expand_as(images))
    assert torch.equal(noisy_linear_imputation(images, torch.zeros(2, 5, 5, dtype=torch.bool)), images)


def test_noise_only_on_removed_pixels_seeded_with_its_standard_deviation():
    images = torch.rand(4, 3, 32, 32, dtype=torch.float64)
    removed = torch.rand(4, 32, 32) < 0.5
    clean = noisy_linear_imputation(images, removed, noise=0.0, tolerance=1e-12)
    noisy = noisy_linear_imputation(images, removed, noise=0.05, generator=torch.Generator().manual_seed(3),
                                    tolerance=1e-12)
    again = noisy_linear_imputation(images, removed, noise=0.05, generator=torch.Generator().manual_seed(3),
                                    tolerance=1e-12)
    assert torch.equal(noisy, again)
    hole = removed[:, None].expand_as(images)
    assert torch.equal(noisy[~hole], images[~hole])
    assert (noisy - clean)[hole].std().item() == pytest.approx(0.05, rel=0.05)


def test_float32_images_and_shape_checks():
    images = torch.rand(1, 3, 16, 16)
    out = noisy_linear_imputation(images, torch.rand(1, 16, 16) < 0.5, noise=0.0)
    assert out.dtype == torch.float32 and out.isfinite().all()
    with pytest.raises(ValueError, match="removed"):
        noisy_linear_imputation(images, torch.zeros(1, 8, 8, dtype=torch.bool))


SQUARE = torch.zeros(1, 1, 16, 16, dtype=torch.float64)
SQUARE[..., 6:10, 6:10] = 1.0                                 # 16 bright pixels; the model weighs only these


class Shifted(nn.Module):
    """LinearTwoClass with logit 0 lowered by 8: class 0 wins while more than half the square is bright."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = LinearTwoClass(SQUARE)

    def forward(self, x):
        return self.linear(x) - torch.tensor([8.0, 0.0], dtype=x.dtype)


def test_curves_on_a_linear_model_by_hand():
    # MoRF removes the square first: its hole is surrounded by kept zeros, so it is imputed as 0 and the logit falls
    # to 0; LeRF removes background (up to 75 % < 240 px) and the square stays. At 100 % every pixel is the image's
    # mean 16/256, so the logit is 16 · 1/16 = 1.
    x, target, attribution = SQUARE, torch.tensor([0]), SQUARE[:, 0]
    curves = road(LinearTwoClass(SQUARE), x, target, attribution, num_steps=4, max_fraction=1.0, output="logit",
                  noise=0.0)
    assert curves.fractions.tolist() == [0, 0.25, 0.5, 0.75, 1]
    assert torch.allclose(curves.morf, torch.tensor([[16.0, 0, 0, 0, 1]], dtype=torch.float64), atol=1e-6)
    assert torch.allclose(curves.lerf, torch.tensor([[16.0, 16, 16, 16, 1]], dtype=torch.float64), atol=1e-6)
    assert curves.morf_area.item() == pytest.approx(0.25 * (8 + 0.5), abs=1e-6)
    assert curves.lerf_area.item() == pytest.approx(0.25 * (8 + 16 + 16 + 16 + 0.5), abs=1e-6)
    assert curves.area.item() == pytest.approx(12.0, abs=1e-6)
    accuracy = road(Shifted(), x, target, attribution, num_steps=4, max_fraction=1.0, noise=0.0)
    assert accuracy.morf.tolist() == [[1, 0, 0, 0, 0]] and accuracy.lerf.tolist() == [[1, 1, 1, 1, 0]]


def test_batch_scores_as_its_images_and_the_metric_averages():
    g = torch.Generator().manual_seed(1)
    weight = torch.randn(1, 3, 12, 12, generator=g, dtype=torch.float64)
    model = LinearTwoClass(weight)
    x = torch.rand(3, 3, 12, 12, generator=g, dtype=torch.float64)
    maps = (weight * x).sum(1)
    batch = road(model, x, torch.zeros(3, dtype=torch.long), maps, output="softmax", noise=0.0, batch_size=2)
    singles = [road(model, x[i:i + 1], torch.zeros(1, dtype=torch.long), maps[i:i + 1], output="softmax", noise=0.0)
               for i in range(3)]
    assert torch.allclose(batch.morf, torch.cat([s.morf for s in singles]), atol=1e-9)
    assert torch.allclose(batch.lerf, torch.cat([s.lerf for s in singles]), atol=1e-9)
    assert (batch.lerf_area > batch.morf_area).all()          # Input×Gradient of a linear model is faithful
    metric = ROAD()
    metric.update(batch.morf, batch.lerf)
    result = metric.compute()
    assert torch.allclose(result["morf"], batch.morf.mean(0).float())
    assert result["area"].item() == pytest.approx(batch.area.mean().item(), abs=1e-5)
    with pytest.raises(ValueError, match="morf and lerf"):
        metric.update(batch.morf[:, :3], batch.lerf)
