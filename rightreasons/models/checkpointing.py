"""Activation checkpointing by stage: each checkpointed stage of a model stores only its input for the backward and
recomputes its activations when a backward needs them (``torch.utils.checkpoint``, non-reentrant, which supports
``torch.autograd.grad``, ``create_graph=True`` and second-order gradients): a recomputation of each stage's forward per
backward pass, for the memory of its activations. For a B-cos ResNet-50 at 224 px a plain step and guidance at
``final`` need 31 % less peak memory per image, guidance at ``mid2`` 39 % less; guidance at the input gains nothing,
since the explanation's differentiable backward keeps every recomputed activation for the second backward
(``make bench``, ``stage-checkpointing``).

:func:`checkpoint_stages` applies it to the guidance stages of a model (its capabilities' ``stages``: ``mid1``–``mid3``
and ``final``, the stage modules of ResNets, DenseNets and ConvNeXts); ``model.activation_checkpointing`` of the
classification config (``train``, ``guide``, ``distill``) calls it. A stage is checkpointed in training mode with
gradients enabled only; in evaluation or without gradients it runs as it is.

A recomputation must repeat the forward exactly and change nothing a forward changes. torch's checkpoint restores the
random state (dropout) and autocast; here:

* every buffer of the stage (BatchNorm running statistics, ``num_batches_tracked``) is restored after each
  recomputation, so a training step updates the running statistics once, as without checkpointing;
* shared batch statistics (:func:`~rightreasons.bcos.norms.shared_batch_statistics`: recording or replaying the
  whole batch's statistics) are reinstated as they were when the stage ran forward, whether or not the block has been
  left when the backward recomputes;
* forward hooks of modules inside a stage run again in a recomputation; :func:`recomputing` tells them so (the output
  recorder of :func:`~rightreasons.explain.capture_outputs` records nothing then). Hooks of the stage module itself run
  once, around the checkpointed forward.

Under ``torch.compile`` the traced stages are checkpointed by AOTAutograd (the forward graph updates the buffers,
once); with synchronised BatchNorm a recomputation takes its statistics over the processes again. The stage's
``forward`` is replaced on the instance (the class is untouched; a deep copy or pickle of the model keeps it): module
names, state-dict keys and layer resolution (:func:`~rightreasons.explain.resolve_layer`) stay those of the model.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from ..bcos.norms import SharingState, reinstated_statistics_sharing, statistics_sharing
from ..errors import UsageError
from .capabilities import capabilities, unwrap_model

__all__ = ["checkpoint_stages", "checkpointed_stages", "recomputing"]

_state = threading.local()  # a recomputation runs in the thread of the backward that needs it


def recomputing() -> bool:
    """Whether the current thread is recomputing a checkpointed stage's forward (for forward hooks that record)."""
    return getattr(_state, "depth", 0) > 0


class _CheckpointedForward:
    """A stage's own forward under ``torch.utils.checkpoint`` (training mode with gradients only), set as the stage's
    ``forward``; an object holding its stage, so that a deep copy or a pickle of the model keeps it, for the copy."""

    def __init__(self, stage: nn.Module) -> None:
        self.stage = stage

    def __call__(self, *args, **kwargs):
        stage = self.stage
        forward = type(stage).forward
        if not (stage.training and torch.is_grad_enabled()):
            return forward(stage, *args, **kwargs)
        if torch.compiler.is_compiling():  # traced: the compiled backward recomputes, the forward graph updates buffers
            return checkpoint(forward, stage, *args, use_reentrant=False, **kwargs)
        return checkpoint(forward, stage, *args, use_reentrant=False, context_fn=lambda: _contexts(stage), **kwargs)


def _contexts(stage: nn.Module):
    """torch's checkpoint calls this as the stage runs forward: a context for that forward (none) and one for each
    recomputation, which repeats the forward's shared-statistics state and restores the buffers afterwards."""
    return nullcontext(), _Recomputation(stage, statistics_sharing(stage))


class _Recomputation:
    """The context of each recomputation of one checkpointed forward (one per backward pass that needs it, so it is
    entered again): the forward's shared-statistics state, the stage's buffers restored afterwards."""

    def __init__(self, stage: nn.Module, sharing: SharingState) -> None:
        self.stage, self.sharing = stage, sharing
        self.entered: list[tuple[list[tuple[Tensor, Tensor]], AbstractContextManager]] = []

    def __enter__(self) -> None:
        buffers = [(b, b.clone()) for b in self.stage.buffers()]
        sharing = reinstated_statistics_sharing(self.sharing)
        sharing.__enter__()
        self.entered.append((buffers, sharing))
        _state.depth = getattr(_state, "depth", 0) + 1

    def __exit__(self, *exc: object) -> None:
        _state.depth -= 1
        buffers, sharing = self.entered.pop()
        sharing.__exit__(*exc)
        with torch.no_grad():
            for buffer, value in buffers:
                buffer.copy_(value)


def _is_block(module: nn.Module) -> bool:
    """A stage that holds layers (whose activations checkpointing saves), not a single layer."""
    return next(module.children(), None) is not None


def checkpoint_stages(model: nn.Module, stages: Sequence[str] | None = None) -> list[str]:
    """Checkpoint the stages of ``model`` named by ``stages`` (guidance stage names, e.g. ``["mid2", "mid3"]``;
    ``None``: every stage that is a block of layers) from now on; returns the module paths checkpointed.

    Raises:
        UsageError: the model declares no stages; a name that is not one of its stages; a named stage, or with
            ``None`` every stage, is a single layer (e.g. the pooling layers that end a VGG's stages), whose
            checkpointing would save nothing.
    """
    inner = unwrap_model(model)
    caps = capabilities(inner)
    if not caps.stages:
        raise UsageError(f"{caps.name} declares no stages (mid1-mid3, final) to checkpoint; activation checkpointing "
                         "by stage needs a ResNet, DenseNet or ConvNeXt")
    names = [s.lower() for s in stages] if stages is not None else list(caps.stages)
    unknown = [s for s in names if s not in caps.stages]
    if unknown:
        raise UsageError(f"{caps.name} has no stage {unknown[0]!r}; its stages are {list(caps.stages)}")
    paths = list(dict.fromkeys(caps.stages[s] for s in names))  # two names may share a module (final = mid3)
    single = [p for p in paths if not _is_block(inner.get_submodule(p))]
    if single and (stages is not None or len(single) == len(paths)):
        raise UsageError(f"stage module {single[0]!r} of {caps.name} is a single layer "
                         f"({type(inner.get_submodule(single[0])).__name__}), not a block of layers: checkpointing it "
                         "would save nothing")
    paths = [p for p in paths if p not in single]
    for path in paths:
        module = inner.get_submodule(path)
        module.forward = _CheckpointedForward(module)
    return paths


def checkpointed_stages(model: nn.Module) -> list[str]:
    """The module paths of ``model`` whose forward :func:`checkpoint_stages` checkpoints."""
    return [name for name, module in unwrap_model(model).named_modules()
            if isinstance(module.__dict__.get("forward"), _CheckpointedForward)]
