"""The model registry: every architecture registers itself under a name in its own model file.

``register_model(name, builder, family=..., bcos=..., **defaults)`` is called at the bottom of each file of
:mod:`rightreasons.models` (importing :mod:`rightreasons.models` registers the whole zoo); :func:`list_models` lists the
names and :func:`get_model_spec` returns what was registered. Building a model with weights is the job of
:func:`rightreasons.models.factory.create_model`, which reads this table.

Like timm's ``_registry.py``, this module imports no model code (only the error classes and the config rules), so that
model files can import it without a cycle and the table can be read without building anything.
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from ..config import FieldError, convert_arguments
from ..errors import ConfigError, UnknownNameError, UsageError

__all__ = ["MAX_PARAMETERS", "ModelSpec", "checked_arguments", "get_model_spec", "list_models", "name_hint",
           "register_model"]


@dataclass(frozen=True)
class ModelSpec:
    """A registered architecture.

    Attributes:
        name: the registry name, e.g. ``"bcos_resnet50"``.
        builder: ``builder(**defaults, **kwargs) -> nn.Module`` (a class or a function).
        family: ``"resnet"``, ``"densenet"``, ``"vgg"``, ``"convnext"``, ``"vit"`` or ``"holistic_vit"``.
        bcos: whether the built model is a B-cos network (dynamic linear, with ``W(x)`` explanations); lets
            :func:`list_models` filter without building. :func:`rightreasons.models.capabilities` reads the same fact
            off a built model, and a test checks that both agree for every name.
        defaults: constructor arguments fixed by the name (e.g. the block layout of ResNet-50).
    """

    name: str
    builder: Callable[..., Any]
    family: str
    bcos: bool
    defaults: dict[str, Any] = field(default_factory=dict)

    def check_arguments(self, kwargs: dict[str, Any]) -> None:
        """Refuse constructor arguments the builder does not take (before anything is built), with a
        :class:`~rightreasons.errors.UsageError` that lists the accepted ones. (Configs also check the values'
        types: :func:`checked_arguments`.)"""
        try:
            inspect.signature(self.builder).bind(**{**self.defaults, **kwargs})
        except TypeError as e:
            accepted = list(inspect.signature(self.builder).parameters)
            raise UsageError(f"{self.name}: invalid constructor arguments {sorted(kwargs)} ({e}); it accepts "
                             f"{accepted}") from None

    def arguments(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """Every constructor argument the builder would receive with ``kwargs``, defaults filled in (to compare two
        sets of arguments)."""
        signature = inspect.signature(self.builder)
        bound = signature.bind(**{**self.defaults, **kwargs})
        bound.apply_defaults()
        out = {}
        for key, value in bound.arguments.items():
            is_rest = signature.parameters[key].kind is inspect.Parameter.VAR_KEYWORD
            out.update(value if is_rest else {key: value})
        return out

    def parameter_count(self, kwargs: dict[str, Any]) -> int:
        """Parameters of the architecture built with ``kwargs`` on the ``meta`` device (shapes only: no memory, well
        under a second for any model of the zoo). Whatever the builder raises for these arguments becomes a
        :class:`~rightreasons.errors.UsageError` naming them, since the values are the user's and the builder is the
        judge of them."""
        key = (self.name, repr(sorted(kwargs.items())))  # a study validates the same model in every config
        if key not in _PARAMETER_COUNTS:
            import torch  # only here: reading the table must not load torch

            try:
                with torch.device("meta"):
                    model = self.build(**kwargs)
            except Exception as e:  # noqa: BLE001 - any refusal of the builder is a refusal of these arguments
                raise UsageError(f"{self.name}: cannot build with {kwargs} ({type(e).__name__}: {e})") from None
            _PARAMETER_COUNTS[key] = sum(p.numel() for p in model.parameters())
        return _PARAMETER_COUNTS[key]

    def build(self, **kwargs: Any) -> Any:
        """The architecture with fresh (random) weights: ``builder(**defaults, **kwargs)``."""
        return self.builder(**{**self.defaults, **kwargs})


MAX_PARAMETERS = 10 ** 10
"""Most parameters a config's model may have (40 GB of float32 weights before gradients and optimiser state): beyond
it a constructor argument is a typo (``inplanes: 100000``), which would otherwise fail deep in an allocation."""

_REGISTRY: dict[str, ModelSpec] = {}
_PARAMETER_COUNTS: dict[tuple[str, str], int] = {}
""":meth:`ModelSpec.parameter_count` by model name and arguments (their ``repr``): built once per process."""


def register_model(name: str, builder: Callable[..., Any], *, family: str, bcos: bool,
                   **defaults: Any) -> ModelSpec:
    """Register ``builder(**defaults, **kwargs)`` under ``name``; names are unique."""
    if name in _REGISTRY:
        raise ValueError(f"model name {name!r} is already registered")
    spec = ModelSpec(name, builder, family, bcos, dict(defaults))
    _REGISTRY[name] = spec
    return spec


def list_models(pattern: str = "*", *, bcos: bool | None = None, family: str | None = None) -> list[str]:
    """Sorted registered names matching a shell-style ``pattern``, optionally only B-cos (or standard) models or
    one family."""
    return sorted(n for n, s in _REGISTRY.items() if fnmatch.fnmatch(n, pattern)
                  and (bcos is None or s.bcos == bcos) and (family is None or s.family == family))


def get_model_spec(name: str) -> ModelSpec:
    """The spec registered under ``name``; an unknown name raises :class:`~rightreasons.errors.UnknownNameError`
    listing close matches."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownNameError(f"unknown model {name!r}{name_hint(name)}") from None


def name_hint(name: str) -> str:
    """The end of a message about an unknown model ``name``: ``"; did you mean ..."`` with up to five close registered
    names, else where to find them all."""
    close = difflib.get_close_matches(name, list(_REGISTRY), n=5, cutoff=0.5)
    return f"; did you mean {', '.join(close)}?" if close else \
        f"; see rightreasons.list_models() or `rightreasons models` ({len(_REGISTRY)} models)"


def checked_arguments(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments ``kwargs`` of a config's model ``name`` (which may carry a weights tag,
    ``arch.tag``), checked when the config is read rather than when the model is built, and converted as every config
    value is (:func:`~rightreasons.config.convert_arguments`). A :class:`~rightreasons.config.FieldError` on ``name``
    when it is not registered, on ``kwargs`` when the architecture does not take one of them
    (:meth:`ModelSpec.check_arguments`), a value does not fit its annotation, the builder refuses the values or the
    model would have more than :data:`MAX_PARAMETERS` parameters (:meth:`ModelSpec.parameter_count`)."""
    try:
        spec = get_model_spec(name.partition(".")[0])
    except UnknownNameError as e:
        raise FieldError("name", str(e)) from None
    try:
        spec.check_arguments(kwargs)
    except UsageError as e:
        raise FieldError("kwargs", str(e)) from None
    try:
        converted = convert_arguments(spec.builder, kwargs)
        parameters = spec.parameter_count(converted)
    except ConfigError as e:
        raise FieldError("kwargs", f"{spec.name}: {e}") from None
    except UsageError as e:
        raise FieldError("kwargs", str(e)) from None
    if parameters > MAX_PARAMETERS:
        raise FieldError("kwargs", f"{spec.name} with {converted} has {parameters:,} parameters, more than "
                                   f"{MAX_PARAMETERS:,} (the zoo's largest has about 200 million); expected "
                                   "constructor arguments of a model that fits in memory")
    return converted
