"""The deterministic meters of :mod:`rightreasons.measure`: every way to read a device tensor on the host counts as a
sync (and names its line), reads of host tensors and work on the device do not; operations and kernel launches are
counted exactly; the memory meter counts known bytes exactly."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from rightreasons.measure import CudaSyncs, PeakMemory, StepCounter

READS = {
    "item": lambda t: t.sum().item(),
    "bool": lambda t: bool(t.sum() > 0),
    "float": lambda t: float(t[0]),
    "int": lambda t: int(t[0]),
    "if any": lambda t: 1 if (t > 0).any() else 0,
    "tolist": lambda t: t.tolist(),
    "cpu": lambda t: t.cpu(),
    "numpy": lambda t: t.numpy(),
    "nonzero": lambda t: t.nonzero(),
    "boolean mask": lambda t: t[t > 0],
    "masked assignment": lambda t: t.clone().__setitem__(t > 0, 0.0),
    "unique": lambda t: torch.unique(t),
    "allclose": lambda t: torch.allclose(t, t),
    "one_hot without a class count": lambda t: F.one_hot(t.long().clamp(min=0)),
}


def test_every_read_of_a_device_tensor_is_a_sync_that_names_its_line():
    for name, read in READS.items():
        device = torch.tensor([1.0, -2.0, 3.0])
        with StepCounter([device]) as counter:
            read(device)
        assert len(counter.counts.syncs) >= 1, name
        assert all(s.site.startswith("test_measure.py:") for s in counter.counts.syncs), (name, counter.counts.syncs)


def test_reads_of_host_tensors_and_work_on_the_device_are_not_syncs():
    device, host = torch.tensor([1.0, -2.0, 3.0]), torch.tensor([True, False, True])
    with StepCounter([device]) as counter:
        (device * 2).exp().sum(0, keepdim=True)  # device work: no read
        host.nonzero(), host.tolist(), bool(host.any()), host.cpu()  # host decisions: free
        index = host.nonzero()[:, 0]
        device[index].sum()  # indices made on the host, used on the device
        torch.where(device > 0, device, 0.0)
    assert counter.counts.syncs == [], counter.counts.sync_sites()
    with StepCounter([device]) as counter:
        (device * 2).exp().sum().item()  # a tensor computed from a device tensor is one
        device.add_(host.float()).tolist()
    assert [s.op for s in counter.counts.syncs] == ["_local_scalar_dense", "tolist"]


def test_operations_and_launches_are_counted_exactly():
    x = torch.rand(4, 3)
    with StepCounter([x]) as counter:
        y = x.view(12).exp()  # a view (no kernel) and a kernel
        y.t() if y.dim() == 2 else y.unsqueeze(0).mul(2)  # a view and a kernel
    counts = counter.counts
    assert (counts.ops, counts.launches) == (4, 2)
    assert counts.by_op == {"view": 1, "exp": 1, "unsqueeze": 1, "mul": 1}


def test_peak_memory_counts_each_live_storage_once_and_sees_through_checkpointing():
    held = torch.empty(2**18, dtype=torch.uint8)
    with PeakMemory([held, held[:5]]) as memory:  # a view of a held tensor adds nothing
        first = torch.empty(2**20, dtype=torch.uint8)
        second = torch.ones(2**21, dtype=torch.uint8)
        second[:10].view(torch.int8).add_(1)  # views and in-place results add nothing
        del first
        torch.empty(2**19, dtype=torch.uint8)  # freed at once
        kept = torch.empty(2**19, dtype=torch.uint8)
    assert (memory.peak, memory.live) == (2**18 + 2**20 + 2**21, 2**18 + 2**21 + 2**19)
    del kept
    assert memory.live == 2**18 + 2**21

    block = 4 * 2**16
    for checkpointed, kept_blocks in ((False, 3), (True, 2)):  # exp saves its output; checkpoint keeps the input only
        x = torch.rand(2**16, requires_grad=True)
        with PeakMemory([x]) as memory:
            y = checkpoint(lambda v: v.exp().exp(), x, use_reentrant=False) if checkpointed else x.exp().exp()
        assert (memory.peak, memory.live) == (3 * block, kept_blocks * block), checkpointed
        del y


def test_cuda_syncs_count_the_synchronising_calls_and_not_the_modes_prototype_notice():
    """``set_sync_debug_mode`` prints a notice the first time it is set ("... does not yet detect all synchronizing
    operations"), which once counted as a sync of the first step measured on a GPU; it passes through, uncounted."""
    with pytest.warns(UserWarning, match="prototype feature"), CudaSyncs() as cuda:
        warnings.warn("Synchronization debug mode is a prototype feature and does not yet detect all synchronizing "
                      "operations (Triggered internally at Module.cpp:1003.)")
        warnings.warn("called a synchronizing CUDA operation (Triggered internally at CUDAFunctions.cpp:153.)")
    assert len(cuda.syncs) == 1 and cuda.syncs[0].op.startswith("called a synchronizing CUDA operation")
