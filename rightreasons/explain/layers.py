"""Where to explain: layer names → modules, and the one forward-hook helper that captures their outputs.

A layer is ``"input"``, a guidance stage name (``mid1``–``mid3`` after stages 1–3, ``final`` the output of the last
stage; where each model's stages are is one of its capabilities, :func:`rightreasons.models.capabilities`) or any module
path of ``model.named_modules()`` (e.g. ``"layer3.1"``). Stage names are case-insensitive, so the Model-Guidance
spellings ``"Mid2"`` / ``"Final"`` work.

Every function here accepts a wrapped model (``DistributedDataParallel``, ``DataParallel``, ``torch.compile``): names
are resolved on the inner model (:func:`rightreasons.models.unwrap_model`) and hooks are registered there, while the
forward pass still runs through the wrapper (so DDP synchronises gradients as usual).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from torch import Tensor, nn

from ..errors import UsageError
from ..models.capabilities import GUIDANCE_LAYERS, capabilities, unwrap_model
from ..models.checkpointing import recomputing

__all__ = ["GUIDANCE_LAYERS", "capture_outputs", "resolve_layer"]


def resolve_layer(model: nn.Module, layer: str) -> nn.Module | None:
    """The module whose output ``layer`` names, or ``None`` for ``"input"``.

    Raises:
        UsageError: an unknown name; the message lists the model's stage names and top-level modules.
    """
    if not isinstance(layer, str):
        raise TypeError(f"layer must be a string (a guidance layer name or a module path), got {type(layer).__name__}")
    if layer.lower() == "input":
        return None
    inner = unwrap_model(model)
    stages = capabilities(inner).stages
    path = stages.get(layer.lower(), layer)
    try:
        return inner.get_submodule(path)
    except AttributeError:
        children = [name for name, _ in inner.named_children()]
        raise UsageError(f"unknown layer {layer!r} for {type(inner).__name__}: expected one of "
                         f"{['input', *stages]} or a module path from model.named_modules() (top-level modules: "
                         f"{children})") from None


def _recorder(store: list[Tensor], differentiable: bool):
    def hook(_module: nn.Module, _inputs: tuple, output: Tensor) -> None:
        if recomputing():  # the backward of a checkpointed stage repeats its forward: nothing new to record
            return
        if differentiable and isinstance(output, Tensor) and not output.requires_grad:
            output.requires_grad_(True)  # a frozen model on a plain input: the output becomes the graph's leaf
        store.append(output)
    return hook


@contextmanager
def capture_outputs(model: nn.Module, layers: Sequence[str], *,
                    differentiable: bool = False) -> Iterator[list[list[Tensor]]]:
    """Record the outputs of ``layers`` in the forward passes run inside the block.

    Yields one list per layer (in the order of ``layers``) that fills with that layer's outputs as they are
    computed (a recomputation by activation checkpointing, :mod:`rightreasons.models.checkpointing`, is not
    recorded again); ``"input"`` is not a module and is refused. With ``differentiable=True`` an output that does not
    require gradients (a frozen model on a plain input) is made to, before the rest of the forward pass uses it, so
    that gradients with respect to it can be taken. The hooks are removed on leaving the block.
    """
    modules = [resolve_layer(model, layer) for layer in layers]
    if any(m is None for m in modules):
        raise UsageError("capture_outputs: 'input' is not a layer output; use the input tensor itself")
    captured: list[list[Tensor]] = [[] for _ in layers]
    handles = [module.register_forward_hook(_recorder(store, differentiable))
               for module, store in zip(modules, captured)]
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()
