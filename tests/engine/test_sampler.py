"""The epoch sampler: plain seeded permutations, and batches composed of ``k`` annotated images
(``guidance.annotated_per_batch``): every batch holds exactly ``k``, the annotated set is cycled through, the order is a
function of (seed, epoch) (so a resumed run skips batches of the same order), and splitting batches between processes
gives each process its share."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from rightreasons.engine.data import EpochSampler

N, B = 103, 8


def _flags(n: int = N, annotated: tuple[int, ...] = (3, 17, 40, 41, 99)) -> torch.Tensor:
    flags = torch.zeros(n, dtype=torch.bool)
    flags[list(annotated)] = True
    return flags


def _epoch(sampler: EpochSampler, epoch: int) -> list[int]:
    sampler.set_epoch(epoch)
    return list(sampler)


def test_the_plain_permutation_is_seeded_per_epoch():
    sampler = EpochSampler(N, seed=4)
    first, second = _epoch(sampler, 0), _epoch(sampler, 1)
    assert sorted(first) == list(range(N)) and first != second
    assert _epoch(EpochSampler(N, seed=4), 1) == second
    assert list(EpochSampler(5, seed=4, shuffle=False)) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_every_batch_holds_exactly_k_annotated_images(k):
    flags = _flags()
    sampler = EpochSampler(N, seed=0, annotated=flags, per_batch=k, batch_size=B)
    assert len(sampler) == N // B * B
    for epoch in range(3):
        order = _epoch(sampler, epoch)
        assert len(order) == len(sampler)
        for b in range(0, len(order), B):
            batch = torch.tensor(order[b:b + B])
            assert int(flags[batch].sum()) == k
            assert [i for i in range(B) if flags[batch[i]]] == [j * B // k for j in range(k)]


def test_the_annotated_set_is_cycled_through_evenly():
    flags = _flags()
    sampler = EpochSampler(N, seed=1, annotated=flags, per_batch=2, batch_size=B)
    used = [i for e in range(4) for i in _epoch(sampler, e) if flags[i]]
    # 4 epochs × 12 batches × 2 = 96 draws of 5 images: each image 19 or 20 times, each cycle a permutation
    assert set(Counter(used).values()) <= {19, 20}
    for c in range(len(used) // 5):
        assert sorted(used[5 * c:5 * c + 5]) == [3, 17, 40, 41, 99]
    unannotated = [i for e in range(4) for i in _epoch(sampler, e) if not flags[i]]
    assert max(Counter(unannotated).values()) - min(Counter(unannotated).values()) <= 1


def test_the_order_depends_on_seed_and_epoch_alone():
    """A resumed run builds a new sampler and skips the consumed batches: the rest must be the same."""
    make = lambda seed: EpochSampler(N, seed=seed, annotated=_flags(), per_batch=1, batch_size=B)  # noqa: E731
    live = make(0)
    orders = [_epoch(live, e) for e in range(3)]
    assert _epoch(make(0), 2) == orders[2]
    assert _epoch(make(1), 2) != orders[2]
    assert orders[0] != orders[1]


def test_split_batches_give_each_process_its_share():
    """accelerate's ``split_batches`` gives process r the r-th contiguous slice of every global batch."""
    flags = _flags()
    order = _epoch(EpochSampler(N, seed=0, annotated=flags, per_batch=2, batch_size=B), 0)
    for b in range(0, len(order), B):
        halves = [order[b:b + B // 2], order[b + B // 2:b + B]]
        assert [int(flags[torch.tensor(h)].sum()) for h in halves] == [1, 1]


@pytest.mark.parametrize("k", [2, 3])
def test_no_image_twice_in_a_batch_across_a_cycle_boundary(k):
    """10 annotated images (≥ 3k) consumed k per batch: cycles end inside batches, yet no batch repeats an image; the
    unannotated stream (93 images, 8 − k per batch) neither."""
    annotated = (3, 17, 40, 41, 50, 60, 66, 77, 88, 99)
    flags = _flags(annotated=annotated)
    sampler = EpochSampler(N, seed=2, annotated=flags, per_batch=k, batch_size=B)
    orders = [_epoch(sampler, e) for e in range(6)]
    for order in orders:
        for b in range(0, len(order), B):
            assert len(set(order[b:b + B])) == B, order[b:b + B]
    used = [i for order in orders for i in order if flags[i]]
    for c in range(len(used) // 10):  # still: every annotated image once per cycle
        assert sorted(used[10 * c:10 * c + 10]) == list(annotated)


@pytest.mark.parametrize("kwargs, message", [
    ({"per_batch": 8}, r"per_batch must lie in \[1, batch_size - 1\] = \[1, 7\], got 8"),
    ({"annotated": torch.zeros(N, dtype=torch.bool)}, "need annotated and unannotated images; 0 of 103"),
    ({"annotated": torch.ones(N, dtype=torch.bool)}, "need annotated and unannotated images; 103 of 103"),
    ({"annotated": torch.zeros(5, dtype=torch.bool)}, r"one flag per image \(103\)"),
])
def test_impossible_compositions_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EpochSampler(N, seed=0, **{"annotated": _flags(), "per_batch": 2, "batch_size": B, **kwargs})
