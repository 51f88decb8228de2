"""Reading and writing weights files without ever executing pickled code.

:func:`load_weights` reads plain state dicts (``.pth``/``.pt``, through ``torch.load(weights_only=True)``) and
safetensors files, unwraps Lightning checkpoints (``{"state_dict": ...}``), strips the wrapper prefixes of the B-cos v2
and Model-Guidance releases (``0.``), of Lightning (``model.``) and EMA (``ema.module.``) and of DDP (``module.``), and
loads strictly: missing or unexpected keys and shape mismatches are errors that list them, never a partial load.

:func:`save_model` writes our own safetensors files, which carry the registry name and constructor arguments, so that
:func:`rightreasons.hub.factory.load_model` rebuilds the model from the file alone. Files are written atomically
(:func:`rightreasons.fileio.atomic_write`).
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from ..errors import CheckpointError
from ..fileio import atomic_write

__all__ = ["METADATA_KEY", "fitted_state", "load_weights", "read_state_dict", "save_model"]

WRAPPER_PREFIXES = ("0.", "model.", "ema.module.", "module.")
METADATA_KEY = "rightreasons_model"
"""The safetensors metadata entry of our model files: JSON ``{"name": registry name, "kwargs": constructor args}``."""


def _describe(model: nn.Module) -> str:
    args = getattr(model, "model_args", None)
    return args["name"] if args else type(model).__name__


def read_state_dict(path: str | Path) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Read a weights file into ``(state_dict, metadata)`` without executing code.

    Safetensors files are recognised by content, not name; everything else goes through
    ``torch.load(weights_only=True)``, which refuses pickles that would construct arbitrary objects.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint file not found: {path}")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            return {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    except (SafetensorError, OSError):
        pass
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a pickle that would construct objects, a truncated zip, not a checkpoint at all, ...
        refused = re.search(r"unsupported global:?\s*(?:GLOBAL\s+)?(\S+)", str(e), re.IGNORECASE)
        if isinstance(e, pickle.UnpicklingError) and refused:  # a class or function the pickle would call
            raise CheckpointError(f"{path}: refused to load: the file is not a plain weights file; it asks to call "
                                  f"{refused.group(1)}, and loading never executes code from a file") from None
        reason = (str(e).splitlines() or [type(e).__name__])[0][:200]
        raise CheckpointError(f"{path}: not a readable checkpoint (truncated or not a torch/safetensors "
                              f"file): {reason}") from e
    return _unwrap(obj, path), {}


def _unwrap(obj: Any, path: Path) -> dict[str, Tensor]:
    """Find the state dict inside a checkpoint (Lightning and training checkpoints nest it)."""
    for key in ("state_dict", "model_state_dict", "model", "module"):
        if isinstance(obj, Mapping) and isinstance(obj.get(key), Mapping):
            obj = obj[key]
            break
    if not isinstance(obj, Mapping) or not obj:
        raise CheckpointError(f"{path}: expected a state dict (a mapping of names to tensors), got {type(obj).__name__}")
    bad = [k for k, v in obj.items() if not isinstance(v, Tensor)]
    if bad:
        raise CheckpointError(f"{path}: entries that are not tensors: {bad[:5]}{' ...' if len(bad) > 5 else ''}")
    return dict(obj)


def _strip_wrappers(state: dict[str, Tensor], wanted: set[str], ema: bool) -> dict[str, Tensor]:
    """Strip the chain of wrapper prefixes that best matches the model's keys (handles ``model.0.`` and the like).

    Every chain is tried (stripping ``model.`` alone matches nothing in ``model.0.*``; only both together do). When a
    Lightning checkpoint holds both the model (``model.``) and its EMA (``ema.module.``), ``ema`` picks which.
    """
    best, best_score = state, len(wanted.intersection(state))
    for prefix in dict.fromkeys(("ema.module." if ema else "model.",) + WRAPPER_PREFIXES):
        candidate = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        if not candidate:
            continue
        candidate = _strip_wrappers(candidate, wanted, ema)
        score = len(wanted.intersection(candidate))
        if score > best_score:
            best, best_score = candidate, score
    return best


def _listing(keys: list[str]) -> str:
    return ", ".join(keys[:12]) + (f" ... (+{len(keys) - 12} more)" if len(keys) > 12 else "")


def _classifier_prefix(model: nn.Module) -> str | None:
    get = getattr(model, "get_classifier", None)
    if get is None:
        return None
    classifier = get()
    return next((name for name, m in model.named_modules() if m is classifier and name), None)


def load_weights(model: nn.Module, source: str | Path | Mapping[str, Tensor], *, strict: bool = True,
                 ema: bool = False, replace_classifier: bool = False) -> nn.Module:
    """Load weights into ``model`` in place and return it.

    Args:
        source: a file path (state dict, Lightning checkpoint, safetensors) or an in-memory state dict.
        strict: refuse missing or unexpected keys (default). Shape mismatches are always refused.
        ema: from a Lightning checkpoint holding model and EMA weights, take the EMA ones.
        replace_classifier: keep the model's own classifier when its shape differs from the checkpoint's
            (fine-tuning on another number of classes).

    Raises:
        CheckpointError: naming the file and the missing, unexpected or mis-shaped keys.
    """
    model.load_state_dict(fitted_state(model, source, strict=strict, ema=ema, replace_classifier=replace_classifier),
                          strict=False)
    return model


def fitted_state(model: nn.Module, source: str | Path | Mapping[str, Tensor], *, strict: bool = True,
                 ema: bool = False, replace_classifier: bool = False) -> dict[str, Tensor]:
    """The state dict :func:`load_weights` would load into ``model``, after every check (``model`` may live on the
    meta device: nothing is copied)."""
    name = str(source) if isinstance(source, (str, Path)) else "<state dict>"
    metadata: dict[str, str] = {}
    if isinstance(source, (str, Path)):
        state, metadata = read_state_dict(source)
    else:
        state = _unwrap(source, Path(name))
    own = model.state_dict()
    if ema and not any(k.startswith("ema.module.") for k in state):
        raise CheckpointError(f"{name}: ema=True, but the file holds no EMA weights (no 'ema.module.' keys)")
    state = _strip_wrappers(state, set(own), ema)

    dropped: list[str] = []
    prefix = _classifier_prefix(model) if replace_classifier else None
    if prefix is not None:
        for k in [k for k in state if k.startswith(prefix + ".") and k in own and state[k].shape != own[k].shape]:
            dropped.append(k)
            del state[k]

    origin = _origin(metadata.get(METADATA_KEY))
    shape_errors = [f"{k}: checkpoint {tuple(v.shape)} vs model {tuple(own[k].shape)}"
                    for k, v in state.items() if k in own and v.shape != own[k].shape]
    missing = [k for k in own if k not in state and k not in dropped]
    unexpected = [k for k in state if k not in own]
    problems = []
    if shape_errors:
        problems.append(f"shapes differ for {len(shape_errors)} keys: {_listing(shape_errors)}")
    if strict and missing:
        problems.append(f"missing keys ({len(missing)}): {_listing(missing)}")
    if strict and unexpected:
        problems.append(f"unexpected keys ({len(unexpected)}): {_listing(unexpected)}")
    if problems:
        raise CheckpointError(f"{name} does not fit the model {_describe(model)}{origin}: " + "; ".join(problems))
    return state


def _origin(metadata: str | None) -> str:
    """`` (the file holds NAME)`` from a file's model metadata, its excerpt when it is malformed, or nothing."""
    if metadata is None:
        return ""
    try:
        return f" (the file holds {json.loads(metadata)['name']})"
    except (json.JSONDecodeError, KeyError, TypeError):
        return f" (the file's malformed metadata: {metadata[:120]!r})"


def save_model(model: nn.Module, path: str | Path, metadata: Mapping[str, str] | None = None) -> Path:
    """Write ``model``'s weights and its registry name/arguments to a safetensors file, atomically."""
    args = getattr(model, "model_args", None)
    if args is None:
        raise ValueError("save_model needs a model built with rightreasons.create_model (it records name and args)")
    try:
        encoded = json.dumps(args)
    except TypeError as e:
        raise ValueError(f"constructor arguments of {args['name']} are not JSON-serialisable ({e}); "
                         "pass norms and other options by name") from e
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    metadata = {**(metadata or {}), METADATA_KEY: encoded}
    return atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=metadata))
