"""The explanations e²KD compares, the teacher's side of a distillation step, and input re-encoding.

Explanation kinds (SCIENCE.md §7):

* ``"bcos"`` — the dynamic linear map ``W(x)`` for the explained class, all input channels: ``[N, C_in, H, W]``
  (six channels for B-cos CNNs and ViTs);
* ``"gradcam"`` — positive GradCAM of the last stage (``layer="final"``), bilinearly upsampled to the input:
  ``[N, 1, H, W]`` (works for any CNN with named stages, standard or B-cos).

On the student side (``create_graph=True``) the explanation stays differentiable and a loss on it reaches every
parameter exactly (B-cos: through explanation mode, see :mod:`rightreasons.bcos.dynamic`); the same forward pass
gives the logits for the KD term. On the teacher side nothing keeps a graph and no parameter gradient exists (the
teacher is frozen, :func:`freeze`).

Teacher and student may use different input encodings (a B-cos teacher reads ``[r, g, b, 1−r, 1−g, 1−b]``, a standard
student mean/std-normalised RGB); :func:`reencode` converts a batch from one encoding to the other exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Literal

import torch
from torch import Tensor, nn

from ..data.transforms import ENCODINGS, IMAGENET_MEAN, IMAGENET_STD
from ..explain import compute_attribution, explain
from ..explain.layers import stage_names
from ..registry import get_model_spec

__all__ = ["EXPLANATION_KINDS", "TeacherOutputs", "capture_features", "freeze", "is_bcos", "model_explanation",
           "reencode", "resolve_kind", "teacher_outputs", "unwrap"]

ExplanationKind = Literal["bcos", "gradcam", "none"]
EXPLANATION_KINDS = ("auto", "bcos", "gradcam", "none")


def unwrap(model: nn.Module) -> nn.Module:
    """The model inside a DDP (or similar ``.module``) wrapper; the model itself otherwise."""
    inner = getattr(model, "module", None)
    return inner if isinstance(inner, nn.Module) else model


def is_bcos(model: nn.Module) -> bool:
    """Whether a model built by the registry (``model.model_args``) is a B-cos model."""
    args = getattr(unwrap(model), "model_args", None)
    if args is None:
        raise ValueError(f"{type(unwrap(model)).__name__} was not built by rightreasons.create_model; cannot tell "
                         "whether it is a B-cos model")
    return get_model_spec(args["name"]).bcos


def freeze(model: nn.Module) -> nn.Module:
    """Put a teacher in eval mode with no parameter gradients (returns the model)."""
    return model.eval().requires_grad_(False)


def resolve_kind(kind: str, teacher_bcos: bool, student_bcos: bool | None = None) -> ExplanationKind:
    """The concrete explanation kind for ``kind`` (one of :data:`EXPLANATION_KINDS`).

    ``auto``: ``bcos`` when teacher and student are B-cos models, ``gradcam`` when both are standard; a mixed pair
    must choose (``gradcam`` works for both families' CNNs, ``none`` distils logits only). ``student_bcos=None``
    decides by the teacher alone (a cache of teacher explanations)."""
    if kind not in EXPLANATION_KINDS:
        raise ValueError(f"unknown explanation kind {kind!r}; expected one of {list(EXPLANATION_KINDS)}")
    if kind != "auto":
        return kind  # type: ignore[return-value]
    if student_bcos is not None and student_bcos != teacher_bcos:
        raise ValueError("distill.explanation=auto needs teacher and student of one family (both B-cos or both "
                         "standard); for a mixed pair set distill.explanation to 'gradcam' or 'none'")
    return "bcos" if teacher_bcos else "gradcam"


def _layer_path(model: nn.Module, layer: str) -> str:
    """``layer`` as a module path of ``model`` itself, also when it is DDP-wrapped (stage names live on the inner
    model, and the wrapped forward must run so that gradients are synchronised)."""
    inner = unwrap(model)
    path = stage_names(inner).get(layer.lower(), layer)
    return path if inner is model else f"module.{path}"


def model_explanation(model: nn.Module, images: Tensor, target: Tensor | None, kind: ExplanationKind,
                      layer: str = "final", create_graph: bool = False) -> tuple[Tensor, Tensor]:
    """Logits ``[N, K]`` and explanations ``[N, C, H, W]`` of ``model`` on ``images [N, C_in, H, W]`` for ``target``
    (``[N]`` classes; ``None`` = each sample's top-1 class), from one forward and one input-gradient pass.

    ``create_graph=True`` keeps both differentiable (student side); otherwise both are detached.
    Gradients are enabled inside, so this also works in an evaluation loop under ``torch.no_grad()``."""
    with torch.enable_grad():
        if kind == "bcos":
            result = explain(model, images, target, create_graph=create_graph)
            return result.logits, result.weights
        if kind == "gradcam":
            attribution = compute_attribution(model, images, target, "gradcam", _layer_path(model, layer),
                                              create_graph=create_graph)
            return attribution.logits, attribution.maps[:, None]
    raise ValueError(f"model_explanation: kind must be 'bcos' or 'gradcam', got {kind!r}")


@contextmanager
def capture_features(model: nn.Module, layers: Sequence[str]) -> Iterator[list[Tensor]]:
    """Collect the outputs of ``layers`` (stage names or module paths of the inner model) during the forward passes
    run inside the block, in the order of ``layers`` (nothing when ``layers`` is empty)."""
    inner = unwrap(model)
    names = stage_names(inner)
    captured: dict[int, Tensor] = {}
    handles = []
    try:
        for i, layer in enumerate(layers):
            path = names.get(layer.lower(), layer)
            try:
                module = inner.get_submodule(path)
            except AttributeError:
                raise ValueError(f"unknown layer {layer!r} for {type(inner).__name__}; stage names: "
                                 f"{sorted(names)} or a module path") from None
            handles.append(module.register_forward_hook(
                lambda _m, _i, output, i=i: captured.__setitem__(i, output)))
        features: list[Tensor] = []
        yield features
        features.extend(captured[i] for i in sorted(captured))
    finally:
        for handle in handles:
            handle.remove()


@dataclass
class TeacherOutputs:
    """What the teacher contributes to a step (all detached).

    Attributes:
        logits: ``[N, K]`` teacher logits.
        explanations: ``[N, C, H, W]`` explanations for the teacher's top-1 classes, or ``None``.
        features: outputs of the attention-transfer layers (empty unless requested).
    """

    logits: Tensor
    explanations: Tensor | None = None
    features: list[Tensor] = field(default_factory=list)

    @property
    def target(self) -> Tensor:
        """``[N]`` the teacher's top-1 class per sample (the highest-scoring class for multi-label tasks)."""
        return self.logits.argmax(1)


def teacher_outputs(teacher: nn.Module, images: Tensor, kind: ExplanationKind = "none", layer: str = "final",
                    at_layers: Sequence[str] = ()) -> TeacherOutputs:
    """Run the (frozen, eval-mode) teacher on ``images`` encoded for it: logits, the explanation of its top-1 class
    when ``kind`` is not ``"none"``, and the features of ``at_layers``. No graph is kept."""
    with capture_features(teacher, at_layers) as features:
        if kind == "none":
            with torch.no_grad():
                logits, explanations = teacher(images), None
        else:
            logits, explanations = model_explanation(teacher, images, None, kind, layer, create_graph=False)
    return TeacherOutputs(logits.detach(), None if explanations is None else explanations.detach(),
                          [f.detach() for f in features])


def _rgb(images: Tensor, encoding: str) -> Tensor:
    if encoding == "bcos":
        return images[:, :3]
    if encoding == "normalize":
        mean = images.new_tensor(IMAGENET_MEAN)[:, None, None]
        std = images.new_tensor(IMAGENET_STD)[:, None, None]
        return images * std + mean
    return images


def reencode(images: Tensor, source: str, target: str) -> Tensor:
    """Convert a batch ``[N, C, H, W]`` from input encoding ``source`` to ``target`` (``bcos``: six channels
    ``[rgb, 1 − rgb]``; ``normalize``: ImageNet mean/std; ``none``: RGB in [0, 1]); identity when they agree."""
    for name in (source, target):
        if name not in ENCODINGS:
            raise ValueError(f"unknown encoding {name!r}; expected one of {list(ENCODINGS)}")
    if source == target:
        return images
    rgb = _rgb(images, source)
    if target == "bcos":
        return torch.cat([rgb, 1 - rgb], dim=1)
    if target == "normalize":
        mean = rgb.new_tensor(IMAGENET_MEAN)[:, None, None]
        std = rgb.new_tensor(IMAGENET_STD)[:, None, None]
        return (rgb - mean) / std
    return rgb
