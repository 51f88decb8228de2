"""Typed, validated configs: dataclasses filled from YAML files and ``key=value`` overrides.

Every config is read through this module: the engine's run config (:mod:`rightreasons.engine.config`), the configs
each task extends it to, the typed recipes, studies and the demo settings.

Every section is a dataclass; :func:`from_dict` checks every key against its fields (an unknown or misspelt key is an
error that names the key and suggests the closest valid one) and every value against its annotation (``int``, ``float``,
``str``, ``bool``, ``Literal[...]``, ``X | None``, ``list[...]``, ``dict[str, ...]``, nested dataclasses). YAML is read
with ``yaml.safe_load``; overrides like ``optim.lr=1e-4`` or ``guidance.layer=mid2`` are parsed as YAML scalars.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, TypeVar, Union

import yaml

from .errors import ConfigError

__all__ = ["FieldError", "MAX_DEPTH", "MAX_SEED", "apply_overrides", "construct", "convert_arguments", "diff_configs",
           "excerpt", "expect", "from_dict", "load_config", "read_config", "read_yaml", "to_dict", "type_name",
           "yaml_document", "yaml_value"]

T = TypeVar("T")
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")

MAX_DEPTH = 32
"""Deepest nesting of mappings and lists a config may have (real configs use four levels)."""
MAX_SEED = 2 ** 32 - 1
"""Largest seed a run may have: numpy's global seed (which accelerate's ``set_seed`` sets) takes 0 to 2³² − 1."""
MAX_VALUES = 100_000
"""Most values a config may hold once its YAML aliases are expanded (a few hundred bytes of nested aliases can stand
for billions of values, which every later traversal — validation, error messages, saving — would expand)."""

#: what ``yaml.safe_load`` raises on bad input: YAMLError, and ValueError / TypeError / IndexError from its scalar
#: constructors (e.g. for ``!!float x`` or an empty ``!!float``)
_YAML_ERRORS = (yaml.YAMLError, ValueError, TypeError, IndexError)


def excerpt(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: error messages quote a bad value, never all of a huge one."""
    text = repr(value) if not isinstance(value, (list, dict)) or len(value) < 64 else \
        f"<{type(value).__name__} of {len(value)} items>"
    return text if len(text) <= limit else text[:limit - 4] + " ..."


class FieldError(ValueError):
    """A config field with a value out of its range; :func:`from_dict` prefixes the field's full key path."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key, self.message = key, message


def expect(ok: bool, key: str, value: Any, what: str) -> None:
    """Refuse field ``key`` of a config section with :class:`FieldError` unless ``ok``; ``what`` says what was
    expected (the message quotes an excerpt of ``value``). Called from the sections' ``__post_init__``."""
    if not ok:
        raise FieldError(key, f"expected {what}, got {excerpt(value)}")


class _ConfigLoader(yaml.SafeLoader):
    """The safe loader, refusing nesting deeper than :data:`MAX_DEPTH` (which would exhaust the recursion of the
    parser) and a key given twice in one mapping (YAML keeps the last silently: ``lr`` given twice trained at the
    second value)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *base``: the keys beside it override on purpose
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = lines.setdefault(key, line)
            except TypeError:  # an unhashable key: the constructor below refuses it
                continue
            if first != line:
                raise ConfigError(f"key {key!r} is given twice in one mapping, on line {first} and on line {line}; "
                                  "keep one of them")
        return super().construct_mapping(node, deep)

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise ConfigError(f"line {mark.line + 1}: nested deeper than {MAX_DEPTH} levels")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _expanded_size(value: Any, sizes: dict[int, int | None]) -> int:
    """Values in ``value`` with every shared (aliased) part counted each time it appears; linear in the distinct
    parts, however large the expansion. A part that contains itself (``&a [*a]``) is refused."""
    if not isinstance(value, (dict, list)):
        return 1
    if id(value) in sizes:
        if sizes[id(value)] is None:
            raise ConfigError("the YAML holds a value that contains itself (an alias inside its own anchor)")
        return sizes[id(value)]
    sizes[id(value)] = None
    items = value.values() if isinstance(value, dict) else value
    sizes[id(value)] = 1 + sum(_expanded_size(item, sizes) for item in items)
    return sizes[id(value)]


def read_yaml(text: str) -> Any:
    """Parse YAML text safely for configs: plain data only (no Python objects), nesting at most :data:`MAX_DEPTH`
    deep, at most :data:`MAX_VALUES` values once aliases are expanded."""
    data = yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 - a SafeLoader subclass
    size = _expanded_size(data, {})
    if size > MAX_VALUES:
        raise ConfigError(f"the YAML holds {size:,} values once its aliases are expanded, more than {MAX_VALUES:,}")
    return data


def type_name(tp: Any) -> str:
    """Annotation ``tp`` as a config's reader names it: ``int | null``, ``'no' | 'bf16'``, ``list[float]``."""
    origin = typing.get_origin(tp)
    if origin is Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(type_name(a) for a in typing.get_args(tp))
    if origin is not None:
        return f"{origin.__name__}[{', '.join(type_name(a) for a in typing.get_args(tp))}]"
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _convert(value: Any, tp: Any, path: str) -> Any:
    """Check ``value`` against annotation ``tp`` and convert it (ints are accepted where floats are expected)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return _checked(value, path)
        return from_dict(tp, value, path)
    if origin is Literal:
        if not isinstance(value, (str, int, float, bool, type(None))) or value not in typing.get_args(tp):
            raise ConfigError(f"{path}: {excerpt(value)} is not one of {type_name(tp)}")
        return value
    if origin in (Union, types.UnionType):
        for option in typing.get_args(tp):
            try:
                return _convert(value, option, path)
            except ConfigError:
                continue
        raise ConfigError(f"{path}: expected {type_name(tp)}, got {excerpt(value)} ({type(value).__name__})")
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{path}: expected a list, got {excerpt(value)}")
        (item,) = typing.get_args(tp)[:1]
        return [_convert(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {excerpt(value)}")
        _, item = typing.get_args(tp)
        return {str(k): _convert(v, item, f"{path}.{k}") for k, v in value.items()}
    if tp is type(None):
        if value is not None:
            raise ConfigError(f"{path}: expected null, got {excerpt(value)}")
        return None
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {excerpt(value)}")
        return value
    if tp is float:
        if isinstance(value, str) and _FLOAT.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads "1e-4" (no dot) as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{path}: expected a number, got {excerpt(value)} ({type(value).__name__})")
        try:
            number = float(value)
        except OverflowError:  # an int beyond the float range
            number = math.inf
        if not math.isfinite(number):  # .nan / .inf would only surface later, as NaN losses
            raise ConfigError(f"{path}: expected a finite number, got {excerpt(value)}")
        return number
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {excerpt(value)} ({type(value).__name__})")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {excerpt(value)} ({type(value).__name__})")
        return value
    raise TypeError(f"unsupported annotation {tp!r} at {path}")


def _holds(tp: Any) -> bool:
    """Whether a config value can stand for annotation ``tp`` (what :func:`_convert` checks): scalars, ``None``,
    literals, dataclasses and lists, tuples, dicts and unions of these — not callables, classes or modules."""
    if tp is Any or tp in (bool, int, float, str, type(None)) or dataclasses.is_dataclass(tp):
        return True
    origin = typing.get_origin(tp)
    if origin is Literal:
        return True
    if origin in (Union, types.UnionType, list, tuple, dict):
        return all(_holds(arg) for arg in typing.get_args(tp) if arg is not Ellipsis)
    return False


def convert_arguments(target: Callable[..., Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``target`` (a class, function or ``functools.partial`` of one) from a config: each value
    checked against the parameter's annotation and converted by the rules of :func:`from_dict` (an int where a float
    belongs, ``"1e-4"``; not NaN); parameters annotated with what a config cannot hold (callables, classes), or whose
    annotations do not resolve, are passed as they are for ``target`` to judge. Raises :class:`ConfigError` naming the
    argument, e.g. ``b: expected a number, got 'nan' (str)`` (YAML reads ``nan`` as a string)."""
    while isinstance(target, functools.partial):
        target = target.func
    try:
        hints = typing.get_type_hints(target.__init__ if isinstance(target, type) else target)
    except (NameError, TypeError):  # names imported only for type checking: nothing to check against
        hints = {}
    return {key: _convert(value, hints[key], key) if key in hints and _holds(hints[key]) else value
            for key, value in values.items()}


def from_dict(cls: type[T], data: Any, path: str = "") -> T:
    """Build dataclass ``cls`` from a mapping, refusing unknown keys and ill-typed values."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path or 'config'}: expected a mapping of keys for {cls.__name__}, got {data!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in data.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown config key {where!r}{hint}; valid keys here: {sorted(fields)}")
        kwargs[key] = _convert(value, hints[key], where)
    missing = [n for n, f in fields.items() if n not in kwargs and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{path or 'config'}: missing required keys {missing}")
    try:
        return cls(**kwargs)
    except FieldError as e:
        raise ConfigError(f"{f'{path}.{e.key}' if path else e.key}: {e.message}") from None
    except ValueError as e:
        raise ConfigError(f"{path or 'config'}: {e}") from e


def construct(cls: Callable[..., T], *args: Any, key: str | None = None, **kwargs: Any) -> T:
    """``cls(*args, **kwargs)``: a config dataclass built in code (a typed recipe builds the config it stands for
    section by section; ``cls`` may also be a function that builds one), checked and converted as :func:`from_dict`
    checks a mapping — every value against its annotation (nested sections too), then the section's own rules. A
    value out of range is a :class:`FieldError` on ``key.field`` when ``key`` names the section being built; for the
    whole config (``key=None``) every error is a :class:`~rightreasons.errors.ConfigError` naming the field."""
    if dataclasses.is_dataclass(cls):
        names = [f.name for f in dataclasses.fields(cls)]
        hints = typing.get_type_hints(cls)
        values = {**dict(zip(names, args)), **kwargs}
        values = {name: _convert(value, hints[name], f"{key}.{name}" if key else name)
                  for name, value in values.items()}
        args, kwargs = (), values
    try:
        built = cls(*args, **kwargs)
    except FieldError as e:
        if key is not None:
            raise FieldError(f"{key}.{e.key}", e.message) from None
        raise ConfigError(f"{e.key}: {e.message}") from None
    return built if dataclasses.is_dataclass(cls) else _checked(built, key or "")


def _checked(config: T, path: str) -> T:
    """``config``, a dataclass built in code, with every field checked against its annotation and converted as
    :func:`from_dict` would (nested sections too); a :class:`ConfigError` names the first field that does not fit."""
    hints = typing.get_type_hints(type(config))
    for f in dataclasses.fields(config):
        value = getattr(config, f.name)
        converted = _convert(value, hints[f.name], f"{path}.{f.name}" if path else f.name)
        if converted is not value:
            object.__setattr__(config, f.name, converted)
    return config


def to_dict(config: Any) -> dict[str, Any]:
    """A plain, YAML/JSON-serialisable dict of a config dataclass."""
    return dataclasses.asdict(config)


def yaml_value(value: Any) -> str:
    """``value`` as the YAML text that ``key=value`` overrides parse back to the same value (one line)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=math.inf).strip()
    return text[:-3].strip() if text.endswith("\n...") else text


def yaml_document(value: Any) -> str:
    """``value`` (a plain config dict) as block YAML, keys in their order, that :func:`read_config` reads back to the
    same value (``--print-config``)."""
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, width=math.inf)


def _set_path(data: dict[str, Any], dotted: str, value: Any) -> None:
    keys = dotted.split(".")
    node = data
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise ConfigError(f"override {dotted!r}: {k!r} is not a section")
    node[keys[-1]] = value


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``key.path=value`` overrides (values parsed as YAML scalars) to a raw config dict, in place."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} is not of the form key.path=value")
        try:
            value = read_yaml(raw) if raw.strip() else None
        except _YAML_ERRORS as e:  # malformed, or a tag such as !!python/object that the safe loader refuses
            raise ConfigError(f"override {item!r}: value is not a valid YAML scalar: {e}") from e
        _set_path(data, key.strip(), value)
    return data


def read_config(path: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """The raw config of a YAML file (safe loader; a mapping at the top level) with ``overrides`` applied; errors
    name the file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        data = read_yaml(path.read_text(encoding="utf-8"))
    except _YAML_ERRORS as e:  # UnicodeDecodeError is a ValueError
        raise ConfigError(f"{path}: not valid YAML: {e}") from e
    if data is None or data == {}:  # every default would run: 10 epochs into runs/train, nothing the user chose
        raise ConfigError(f"{path}: the file holds no keys (it is empty, null or {{}}); expected a mapping of config "
                          "sections")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return apply_overrides(data, overrides or [])


def load_config(cls: type[T], path: str | Path | None = None, overrides: list[str] | None = None) -> T:
    """Read a YAML file (safe loader) into ``cls``, applying ``overrides``; errors name the file and key."""
    data = read_config(path, overrides) if path is not None else apply_overrides({}, overrides or [])
    try:
        return from_dict(cls, data)
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}" if path is not None else str(e)) from None


def diff_configs(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two config dicts (for refusing a resume from another config)."""
    keys = sorted(set(a) | set(b))
    out = []
    for k in keys:
        where = f"{prefix}{k}"
        va, vb = a.get(k), b.get(k)
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out += diff_configs(va, vb, where + ".")
        elif va != vb:
            out.append(f"{where}: {va!r} != {vb!r}")
    return out
