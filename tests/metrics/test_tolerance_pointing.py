"""Pointing game with a tolerance: hand-built maps with a known maximum inside / outside the tolerance disc, the
tie, sign and degenerate rules, and a brute-force distance check on random maps."""

import math

import pytest
import torch

from rightreasons.metrics import PointingGame, pointing_game


def one_point(h, w, point, mask_pixels):
    """A map whose unique maximum is ``point`` and a mask holding ``mask_pixels``."""
    attributions = torch.zeros(1, h, w)
    attributions[0, point[0], point[1]] = 1.0
    mask = torch.zeros(1, h, w, dtype=torch.bool)
    for r, c in mask_pixels:
        mask[0, r, c] = True
    return attributions, mask


def brute_force(attributions, masks, tolerance):
    """Hit iff some maximal pixel of a non-constant map is at distance < tolerance from some mask pixel."""
    hits = []
    for a, m in zip(attributions, masks):
        peaks = (a == a.max()).nonzero().double() if a.max() > a.min() else torch.empty(0, 2, dtype=torch.float64)
        objects = m.nonzero().double()
        hit = len(peaks) > 0 and len(objects) > 0 and bool((torch.cdist(peaks, objects) < tolerance).any())
        hits.append(float(hit))
    return torch.tensor(hits, dtype=torch.float64)


@pytest.mark.parametrize("point, tolerance, expected", [
    ((20, 34), 15, 1.0),      # 14 px right of the mask pixel (20, 20)
    ((20, 35), 15, 0.0),      # 15 px: TorchRay's acceptance is strict (distance < tolerance)
    ((29, 32), 15, 0.0),      # diagonal 9, 12: distance exactly 15
    ((29, 31), 15, 1.0),      # diagonal 9, 11: distance 14.2
    ((20, 20), 1, 1.0),       # tolerance 1: the point itself must be in the mask
    ((20, 21), 1, 0.0),
    ((21, 21), 1.5, 1.0),     # a fractional tolerance: distance 1.41 < 1.5
    ((22, 21), 1.5, 0.0),
])
def test_hand_built_point_inside_and_outside_the_disc(point, tolerance, expected):
    attributions, mask = one_point(40, 40, point, [(20, 20)])
    assert pointing_game(attributions, mask, tolerance).item() == expected


def test_disc_is_clipped_at_the_image_border():
    attributions, mask = one_point(8, 8, (0, 7), [(0, 0), (7, 7)])
    assert pointing_game(attributions, mask, tolerance=1).item() == 0.0
    assert pointing_game(attributions, mask, tolerance=7.1).item() == 1.0      # (7, 7) is 7 px below (0, 7)


def test_ties_sign_scale_and_degenerate_maps():
    attributions, mask = one_point(20, 20, (2, 2), [(15, 15)])
    attributions[0, 14, 14] = 1.0                                            # a second maximum, near the object
    assert pointing_game(attributions, mask, 3).item() == 1.0                # any maximal pixel counts
    assert pointing_game(attributions, mask, 1).item() == 0.0
    negative = attributions - 5.0                                            # all negative, same maxima
    assert pointing_game(negative, mask, 3).item() == 1.0
    assert pointing_game(1e-9 * attributions, mask, 3).item() == 1.0         # scale-free
    for constant in (torch.zeros(1, 20, 20), torch.full((1, 20, 20), -3.0)):
        assert pointing_game(constant, mask, 100).item() == 0.0              # a constant map points nowhere
    empty = torch.zeros_like(mask)
    assert pointing_game(attributions, empty, 100).item() == 0.0             # an empty mask is a miss


def test_random_maps_match_brute_force_and_batch_equals_one_by_one():
    g = torch.Generator().manual_seed(0)
    attributions = torch.randint(0, 4, (12, 9, 11), generator=g).double()   # small integers: many ties
    attributions[3] = 0.0
    masks = torch.rand(12, 9, 11, generator=g) > 0.9
    masks[5] = False
    for tolerance in (1, 1.5, 2.0, 3.7, 15):
        batched = pointing_game(attributions, masks, tolerance)
        assert batched.dtype == torch.float64
        torch.testing.assert_close(batched, brute_force(attributions, masks, tolerance), rtol=0, atol=0)
        singles = torch.cat([pointing_game(attributions[i:i + 1], masks[i:i + 1], tolerance) for i in range(12)])
        assert torch.equal(batched, singles)


def test_metric_accumulates_the_hit_rate():
    g = torch.Generator().manual_seed(1)
    attributions, masks = torch.randn(10, 16, 16, generator=g), torch.rand(10, 16, 16, generator=g) > 0.8
    metric = PointingGame(tolerance=2)
    metric.update(attributions[:3], masks[:3].long())
    metric.update(attributions[3:], masks[3:])
    torch.testing.assert_close(metric.compute(), pointing_game(attributions, masks, 2).mean())


@pytest.mark.parametrize("tolerance", [0, -1, math.nan, math.inf, "15", True])
def test_bad_tolerance_is_rejected(tolerance):
    maps, masks = one_point(4, 4, (0, 0), [(0, 0)])
    with pytest.raises(ValueError, match="tolerance must be a finite number of pixels > 0"):
        pointing_game(maps, masks, tolerance)
    with pytest.raises(ValueError, match="tolerance"):
        PointingGame(tolerance)


def test_bad_maps_and_masks_are_rejected():
    maps, masks = one_point(4, 4, (0, 0), [(0, 0)])
    with pytest.raises(ValueError, match="masks must be binary"):
        pointing_game(maps, masks.float() * 2)
    with pytest.raises(ValueError, match=r"same shape"):
        pointing_game(maps, masks[:, :3])
