"""Deterministic measurements of a training step on any device: what decides its speed on a GPU, counted on a CPU.

On a GPU two things make a step wait on Python: a **host sync** — reading a device tensor's value on the host
(``.item()``, ``bool(t)``, ``float(t)``, ``.tolist()``, ``.cpu()``, ``nonzero()``, boolean-mask indexing, ``if
t.any():``), which waits until the device has finished everything queued before it — and many small **kernel
launches**, each a few microseconds of host time however little work it carries. Both can be counted exactly by
watching the operations a step dispatches, so a CPU-only machine measures them as well as a GPU would, and the counts
do not depend on load:

* :class:`StepCounter` counts the aten operations a block dispatches (every operation, and the ``launches``: those
  that are not views or metadata) and the host syncs it makes. Which tensors count as *device* tensors is said by the
  caller (:meth:`StepCounter.on_device`: a model's parameters and buffers, a batch after its move to the device) and
  follows the data: a tensor computed from a device tensor is one, a tensor built on the host from host values (a
  batch's labels before they moved, a mask made from its boxes) is not, and reading it costs nothing. On a CUDA device
  the tensors' own device says it. Each sync is recorded with the line of code that made it.
* :class:`PeakMemory` is the peak of the live tensor storages while a block runs: what
  ``torch.cuda.max_memory_allocated`` reports on CUDA, less the allocator's rounding and cache.

* :class:`CudaSyncs` counts the syncs a real CUDA device reports (``torch.cuda.set_sync_debug_mode``), the check of
  the first two on a GPU (``make gpu-check``); the counters above are what the test suite and ``make bench``
  (sections ``host-syncs`` and ``launches``) assert on every machine.
"""

from __future__ import annotations

import traceback
import warnings
import weakref
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

__all__ = ["CudaSyncs", "PeakMemory", "StepCounter", "Sync"]

_aten = torch.ops.aten
#: operations that read a device tensor's value on the host (``.item()``, ``bool(t)``, ``float(t)`` and ``int(t)``
#: reach ``_local_scalar_dense``) or whose output's shape depends on the values (the host waits for it)
_READS = {_aten._local_scalar_dense.default, _aten.nonzero.default, _aten.masked_select.default,
          _aten.equal.default, _aten.allclose.default, _aten.bincount.default, _aten.unique_consecutive.default, _aten._unique.default,
          _aten._unique2.default, _aten.unique_dim.default, _aten.repeat_interleave.Tensor}
#: indexing operations that turn a boolean mask into indices (``nonzero``) inside their kernel
_MASK_INDEXING = {_aten.index.Tensor, _aten.index_put.default, _aten.index_put_.default,
                  _aten._index_put_impl_.default}
#: operations that launch no kernel: they make a view, or allocate without writing
_NO_KERNEL = {_aten.empty.memory_format, _aten.empty_like.default, _aten.empty_strided.default,
              _aten._unsafe_view.default, _aten.lift_fresh.default, _aten.set_.source_Storage_storage_offset}
#: Tensor methods that copy a device tensor's values to the host (``tolist``) or need them there (``numpy`` fails on
#: a GPU tensor: counted, so that it shows)
_HOST_METHODS = {Tensor.tolist: "tolist", Tensor.cpu: "cpu", Tensor.numpy: "numpy"}


@dataclass(frozen=True)
class Sync:
    """One host sync: the operation (``_local_scalar_dense`` for ``.item()``/``bool()``/``float()``, ``nonzero``,
    ``tolist``, ...) and the line of code that made it (``path:line in function``)."""

    op: str
    site: str


def _site() -> str:
    """The innermost frame outside torch and this module: the line of code that caused the sync."""
    for frame in reversed(traceback.extract_stack()[:-2]):
        path = Path(frame.filename)
        if "torch" in path.parts or path.name == "measure.py" or frame.filename.startswith("<"):
            continue
        return f"{path.name}:{frame.lineno} in {frame.name}"
    return "?"


@dataclass
class Counts:
    """What a :class:`StepCounter` saw: ``ops`` (every aten operation), ``launches`` (those that are not views or
    allocations: about one kernel each on a GPU), ``by_op`` (operation name -> count) and the host ``syncs``."""

    ops: int = 0
    launches: int = 0
    by_op: Counter = field(default_factory=Counter)
    syncs: list[Sync] = field(default_factory=list)

    def sync_sites(self) -> str:
        """The syncs one per line (for an assertion's message)."""
        return "\n".join(f"{s.op} at {s.site}" for s in self.syncs) or "none"


class _HostMethods(TorchFunctionMode):
    """The Tensor methods of :data:`_HOST_METHODS` on device tensors, which reach no aten operation that tells."""

    def __init__(self, counter: StepCounter) -> None:
        super().__init__()
        self.counter = counter

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: D105
        name = _HOST_METHODS.get(func)
        if name is not None and args and self.counter.is_device(args[0]):
            self.counter.counts.syncs.append(Sync(name, _site()))
        return func(*args, **(kwargs or {}))


class StepCounter(TorchDispatchMode):
    """Count the aten operations and host syncs of a block (module docstring); ``counts`` holds the result.

    ``device`` lists the tensors that live on the accelerator (parameters, buffers, the moved batch); more can be
    added inside the block with :meth:`on_device`. On a CPU-only machine this is how a host read is told from a
    device read; tensors on a non-CPU device are device tensors whatever was said.

    Example::

        with StepCounter([*model.parameters(), *model.buffers(), images]) as counter:
            loss(model, images).backward()
        assert not counter.counts.syncs, counter.counts.sync_sites()
    """

    def __init__(self, device: Iterable[Tensor] = ()) -> None:
        super().__init__()
        self.counts = Counts()
        self._device: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._methods = _HostMethods(self)
        self.on_device(*device)

    def __enter__(self) -> StepCounter:
        self._methods.__enter__()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        self._methods.__exit__(*exc)

    def on_device(self, *tensors: Any) -> None:
        """Mark the tensors among ``tensors`` (nested lists and dicts too) as device tensors."""
        for t in tree_leaves(list(tensors)):
            if isinstance(t, Tensor) and t.layout == torch.strided:
                self._device[t.untyped_storage()] = True

    def is_device(self, t: Any) -> bool:
        """Whether ``t`` is a device tensor: on a non-CPU device, marked, or computed from one."""
        if not isinstance(t, Tensor):
            return False
        if t.device.type != "cpu":
            return True
        return t.layout == torch.strided and t.untyped_storage() in self._device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: D105
        kwargs = kwargs or {}
        counts = self.counts
        counts.ops += 1
        counts.by_op[str(func.overloadpacket).removeprefix("aten.")] += 1
        if not (func.is_view or func in _NO_KERNEL):
            counts.launches += 1
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)]
        if func in _READS and inputs and self.is_device(inputs[0]):
            counts.syncs.append(Sync(func.__name__.split(".")[0], _site()))
        elif func in _MASK_INDEXING and any(t.dtype in (torch.bool, torch.uint8) and self.is_device(t)
                                            for t in tree_leaves(args[1])):
            counts.syncs.append(Sync(f"{func.__name__.split('.')[0]} with a boolean mask", _site()))
        out = func(*args, **kwargs)
        if any(self.is_device(t) for t in inputs):
            self.on_device(out)
        return out


class PeakMemory(TorchDispatchMode):
    """The peak bytes of live tensor storages while the block runs, on any device: what
    ``torch.cuda.max_memory_allocated`` reports on CUDA, less the allocator's rounding and cache, measurable on the CPU.
    Every tensor an operation returns is counted once per storage (views and in-place results add nothing) until its
    storage is freed, so it sees what saved-tensor hooks cannot: tensors ``torch.utils.checkpoint`` keeps,
    recomputations, gradients and temporaries. Tensors that exist before the block (weights, inputs) count from the
    start when passed as ``held``. Deterministic; storages resized in place (``UntypedStorage.resize_``) are not
    followed. torch's ``torch.distributed._tools.mem_tracker.MemTracker`` counts the same way, but its module hooks
    fail in ``torch.autograd.grad`` with leaf inputs, which every explanation takes."""

    def __init__(self, held: Iterable[Tensor] = ()) -> None:
        super().__init__()
        self.live = self.peak = 0
        self._counted: WeakIdKeyDictionary = WeakIdKeyDictionary()
        for t in held:
            self._count(t)

    def _count(self, t: Tensor) -> None:
        storage = t.untyped_storage()
        if storage in self._counted:
            return
        nbytes = storage.nbytes()
        self._counted[storage] = nbytes
        weakref.finalize(storage, self._free, nbytes)
        self.live += nbytes
        self.peak = max(self.peak, self.live)

    def _free(self, nbytes: int) -> None:
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: D105
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, Tensor) and t.device.type != "meta":
                self._count(t)
        return out


class CudaSyncs:
    """The host syncs CUDA reports while the block runs (``torch.cuda.set_sync_debug_mode("warn")``: every
    synchronising CUDA call warns), as :class:`Sync` records in :attr:`syncs`; nothing without CUDA."""

    def __init__(self) -> None:
        self.syncs: list[Sync] = []

    def __enter__(self) -> CudaSyncs:
        self._previous = torch.cuda.get_sync_debug_mode() if torch.cuda.is_available() else None
        self._warnings = warnings.catch_warnings(record=True)
        self._record = self._warnings.__enter__()
        warnings.simplefilter("always")
        if self._previous is not None:
            torch.cuda.set_sync_debug_mode("warn")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            torch.cuda.set_sync_debug_mode(self._previous)
        self._warnings.__exit__(*exc)
        for w in self._record:
            if "called a synchronizing" in str(w.message):  # not the prototype notice that the mode prints
                self.syncs.append(Sync(str(w.message).split(".")[0], f"{Path(w.filename).name}:{w.lineno}"))
            else:  # not ours to swallow
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
