"""Reading and writing weights files without ever executing pickled code.

:func:`load_weights` reads plain state dicts (``.pth``/``.pt``, through ``torch.load(weights_only=True)``) and
safetensors files, unwraps Lightning checkpoints (``{"state_dict": ...}``), strips the wrapper prefixes of the B-cos v2
and Model-Guidance releases (``0.``), of Lightning (``model.``) and EMA (``ema.module.``) and of DDP (``module.``), and
loads strictly: missing or unexpected keys and shape mismatches are errors that list them, never a partial load.

:func:`save_model` writes our own safetensors files, which carry the registry name and constructor arguments, so that
:func:`rightreasons.models.factory.load_model` rebuilds the model from the file alone. Files are written atomically
(:func:`rightreasons.fileio.atomic_write`).

The fixed logit layers (:class:`~rightreasons.bcos.layers.LogitLayer`, ``z / T + b``) hold no tensors, so a state
dict cannot carry their bias ``b`` and temperature ``T``. Our files store them in the metadata entry
:data:`LOGITS_KEY`, and loading such a file restores them: the logits of a loaded model equal those of the saved one,
whatever the constructor's default (``−log(C − 1)``). Constructor arguments given explicitly (``logit_bias=...``,
``logit_temperature=...``) win over the file. Other files (the B-cos v2 and Model-Guidance releases, Lightning
checkpoints) do not record the values; when such a file's classifier is loaded into a model whose logit bias is not the
releases' ``−log(999)``, loading warns (:class:`LogitBiasWarning`) with the shift and how to set the bias: the
Model-Guidance checkpoints, for one, were trained with ``−log(999)`` on 20 or 80 classes, and our default
``−log(19)`` would shift every logit by +3.96 (explanations are unaffected: the bias is a constant).

Our files may also name the classes (:data:`CLASSES_KEY`); :func:`rightreasons.models.factory.load_model` puts them on
the model as ``model.classes``, and their input — size, encoding, transform (:mod:`.preprocessing`) — which loading
puts on the model as ``model.input_config``. A finished training run writes its model file as :data:`RUN_MODEL_FILE`
into its directory; :func:`model_file` turns a config's weights file, run directory or model directory (an export of
:func:`~rightreasons.models.hub.save_pretrained`, a Hub snapshot: :func:`~rightreasons.model_layout.model_directory`)
into the file.
"""

from __future__ import annotations

import json
import math
import pickle
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Mapping

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn

from ..bcos.layers import LogitLayer
from ..errors import CheckpointError
from ..fileio import atomic_write
from ..model_layout import model_directory
from .preprocessing import INPUT_KEY, InputConfig, recorded_input, restore_input_config

__all__ = ["CLASSES_KEY", "LOGITS_KEY", "LogitBiasWarning", "METADATA_KEY", "RELEASE_LOGIT_BIAS", "RUN_MODEL_FILE",
           "fitted_state", "load_weights", "logit_arguments", "model_file", "model_metadata", "read_metadata",
           "read_state_dict", "restore_classes", "restore_logit_layers", "save_model"]

WRAPPER_PREFIXES = ("0.", "model.", "ema.module.", "module.")
METADATA_KEY = "rightreasons_model"
"""The safetensors metadata entry of our model files: JSON ``{"name": registry name, "kwargs": constructor args}``."""
LOGITS_KEY = "rightreasons_logit_layers"
"""Metadata entry of our model files: JSON ``{module name: {"bias": b, "temperature": T or null}}`` per logit layer."""
CLASSES_KEY = "rightreasons_classes"
"""Metadata entry of our model files: JSON list of the class names, in logit order (optional)."""
RELEASE_LOGIT_BIAS = -math.log(999)
"""The logit bias of every classifier of the B-cos v2 and Model-Guidance releases (``−log(1000 − 1)``)."""
RUN_MODEL_FILE = "model.safetensors"
"""The model file a finished training run writes into its directory."""


class LogitBiasWarning(UserWarning):
    """A weights file that does not record its logit bias was loaded into a model whose bias differs from the
    releases' ``−log(999)``: the logits may be shifted against those the file was trained with."""


def _describe(model: nn.Module) -> str:
    args = getattr(model, "model_args", None)
    return args["name"] if args else type(model).__name__


def read_metadata(path: str | Path) -> dict[str, str]:
    """The metadata of a safetensors weights file, read from its header alone (``{}`` for other formats, which have
    none); :class:`CheckpointError` when there is no such file."""
    if not Path(path).is_file():
        raise CheckpointError(f"checkpoint file not found: {path}")
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            return dict(f.metadata() or {})
    except (SafetensorError, OSError):
        return {}


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

    From a file whose classifier is loaded (not replaced), the logit layers are restored (our files) or checked
    (files that do not record them), and the class names of our files become ``model.classes`` (module docstring).

    Raises:
        CheckpointError: naming the file and the missing, unexpected or mis-shaped keys.
    """
    state, metadata = (read_state_dict(source) if isinstance(source, (str, Path))
                       else (_unwrap(source, Path("<state dict>")), {}))
    name = str(source) if isinstance(source, (str, Path)) else "<state dict>"
    fitted, replaced = _fit(model, state, name, metadata, strict=strict, ema=ema,
                            replace_classifier=replace_classifier)
    model.load_state_dict(fitted, strict=False)
    if isinstance(source, (str, Path)):
        restore_input_config(model, metadata, name)
    if not replaced and isinstance(source, (str, Path)):
        restore_logit_layers(model, metadata, name)
        restore_classes(model, metadata, name)
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
    return _fit(model, state, name, metadata, strict=strict, ema=ema, replace_classifier=replace_classifier)[0]


def _fit(model: nn.Module, state: dict[str, Tensor], name: str, metadata: Mapping[str, str], *, strict: bool,
         ema: bool, replace_classifier: bool) -> tuple[dict[str, Tensor], bool]:
    """:func:`fitted_state` of a state dict already read, and whether the model's classifier was kept (not loaded)."""
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
    return state, bool(dropped)


def _origin(metadata: str | None) -> str:
    """`` (the file holds NAME)`` from a file's model metadata, its excerpt when it is malformed, or nothing."""
    if metadata is None:
        return ""
    try:
        return f" (the file holds {json.loads(metadata)['name']})"
    except (json.JSONDecodeError, KeyError, TypeError):
        return f" (the file's malformed metadata: {metadata[:120]!r})"


def _logit_layers(model: nn.Module) -> dict[str, LogitLayer]:
    return {name: m for name, m in model.named_modules() if isinstance(m, LogitLayer)}


def logit_arguments(model: nn.Module) -> dict[str, float]:
    """``{"logit_bias": b}``: the constructor argument that rebuilds the bias of ``model``'s logit layer — given
    explicitly, it is kept when a weights file that does not record its bias (a training checkpoint's) is loaded, and
    nothing warns. ``{}`` for a model without a logit layer or with several."""
    layers = list(_logit_layers(model).values())
    return {"logit_bias": layers[0].bias} if len(layers) == 1 else {}


def _explicit_logit_arguments(model: nn.Module) -> bool:
    """Whether the model's constructor was given its logit bias or temperature (those win over a file)."""
    kwargs = (getattr(model, "model_args", None) or {}).get("kwargs", {})
    return any(kwargs.get(key) is not None for key in ("logit_bias", "logit_temperature"))


def restore_logit_layers(model: nn.Module, metadata: Mapping[str, str], source: str) -> None:
    """Set the logit layers of ``model`` from a file's :data:`LOGITS_KEY` metadata; without it in a file we did not
    write, warn when the model's bias is not the releases' ``−log(999)`` (files of ours from before the logit layers
    were recorded are described by their constructor arguments). Explicit constructor arguments win and silence the
    warning (module docstring)."""
    layers = _logit_layers(model)
    if not layers or _explicit_logit_arguments(model):
        return
    if LOGITS_KEY not in metadata:
        if METADATA_KEY in metadata:  # ours, written before logit layers were recorded: the arguments describe them
            return
        shifted = {n: m.bias for n, m in layers.items() if abs(m.bias - RELEASE_LOGIT_BIAS) > 1e-6}
        if shifted:
            bias = next(iter(shifted.values()))
            warnings.warn(
                f"{source} does not record its logit bias; {_describe(model)} adds {bias:.3f} to its logits (its "
                f"default), the B-cos v2 and Model-Guidance releases trained with −log(999) = "
                f"{RELEASE_LOGIT_BIAS:.3f}: if the file comes from them, its logits shift by "
                f"{bias - RELEASE_LOGIT_BIAS:+.2f}. Pass logit_bias={RELEASE_LOGIT_BIAS:.6f} (config: "
                "model.kwargs.logit_bias) to reproduce them, or the bias you trained with to silence this; "
                "explanations do not depend on it", LogitBiasWarning, stacklevel=3)
        return
    try:
        stored = json.loads(metadata[LOGITS_KEY])
        values = {n: (float(v["bias"]), None if v["temperature"] is None else float(v["temperature"]))
                  for n, v in stored.items()}
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{source}: malformed {LOGITS_KEY!r} metadata ({type(e).__name__}: {e})") from None
    if set(values) != set(layers):
        raise CheckpointError(f"{source}: the file records logit layers {sorted(values)}, the model "
                              f"{_describe(model)} has {sorted(layers)}")
    for name, (bias, temperature) in values.items():
        if not math.isfinite(bias) or (temperature is not None and not temperature > 0):
            raise CheckpointError(f"{source}: logit layer {name!r}: bias {bias!r} must be finite and temperature "
                                  f"{temperature!r} positive or null")
        layers[name].bias, layers[name].temperature = bias, temperature


def restore_classes(model: nn.Module, metadata: Mapping[str, str], source: str) -> None:
    """Set ``model.classes`` from a file's :data:`CLASSES_KEY` metadata (nothing when the file names none)."""
    if CLASSES_KEY not in metadata:
        return
    try:
        classes = json.loads(metadata[CLASSES_KEY])
        if not isinstance(classes, list) or not all(isinstance(c, str) for c in classes):
            raise TypeError("expected a list of strings")
    except (json.JSONDecodeError, TypeError) as e:
        raise CheckpointError(f"{source}: malformed {CLASSES_KEY!r} metadata ({type(e).__name__}: {e})") from None
    model.classes = tuple(classes)


def model_metadata(model: nn.Module, classes: Sequence[str] | None = None,
                   input_config: InputConfig | None = None) -> dict[str, str]:
    """What our model files record of ``model`` besides its tensors, by metadata key (JSON text): registry name and
    arguments, logit layers, and (when given, or set as ``model.classes`` / ``model.input_config``) class names and
    input (:mod:`.preprocessing`)."""
    args = getattr(model, "model_args", None)
    if args is None:
        raise ValueError("save_model needs a model built with rightreasons.create_model (it records name and args)")
    try:
        metadata = {METADATA_KEY: json.dumps(args)}
    except TypeError as e:
        raise ValueError(f"constructor arguments of {args['name']} are not JSON-serialisable ({e}); "
                         "pass norms and other options by name") from e
    layers = _logit_layers(model)
    if layers:
        metadata[LOGITS_KEY] = json.dumps({n: {"bias": m.bias, "temperature": m.temperature}
                                           for n, m in layers.items()})
    classes = getattr(model, "classes", None) if classes is None else classes
    if classes is not None:
        metadata[CLASSES_KEY] = json.dumps([str(c) for c in classes])
    input_config = input_config or recorded_input(model)
    if input_config is not None:
        metadata[INPUT_KEY] = json.dumps(input_config.as_dict())
    return metadata


def save_model(model: nn.Module, path: str | Path, metadata: Mapping[str, str] | None = None, *,
               classes: Sequence[str] | None = None, input_config: InputConfig | None = None) -> Path:
    """Write ``model``'s weights and :func:`model_metadata` (with ``metadata`` besides) to a safetensors file,
    atomically."""
    recorded = {**(metadata or {}), **model_metadata(model, classes, input_config)}
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    return atomic_write(path, lambda tmp: save_file(tensors, str(tmp), metadata=recorded))


def model_file(path: str | Path | None, key: str = "model.checkpoint") -> str | None:
    """The weights file config ``key`` names: ``path`` itself, or for a directory — a run's, an export of
    :func:`~rightreasons.models.hub.save_pretrained`, a Hub cache repository or snapshot
    (:func:`~rightreasons.model_layout.model_directory`) — its :data:`RUN_MODEL_FILE`. A path that does not exist,
    or a run directory without a model file (the run has not finished), is a :class:`CheckpointError` that says what
    to run first."""
    if path is None or Path(path).is_file():
        return None if path is None else str(path)
    if Path(path).is_dir():
        path = model_directory(path)
    if not Path(path).exists():
        raise CheckpointError(f"{key}={path}: no such weights file or run directory; when it names the run of "
                              "another config (the shipped guided configs start from their dataset's baseline run, "
                              "written by configs/guidance/<dataset>_baseline.yaml), run that training first")
    found = Path(path) / RUN_MODEL_FILE
    if not found.is_file():
        state = "it holds checkpoints but has not finished (continue it with --resume)" \
            if (Path(path) / "checkpoints").is_dir() else "it holds no finished run"
        raise CheckpointError(f"{key}={path}: a run directory without {RUN_MODEL_FILE}: {state}; run the training "
                              f"that writes to {path} first, or name a weights file")
    return str(found)
