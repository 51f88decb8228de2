"""Fuzzed experiment configs: values of the wrong type at every key of the schema, misspelt keys, random YAML
documents and random ``key=value`` overrides.

Every case ends in a valid :class:`GuideConfig` (holding exactly the value given, with every typed number finite) or
in a :class:`ConfigError` naming the key; never another exception and never a NaN or infinity in a number field.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
import typing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rightreasons.config import from_dict, load_config, to_dict
from rightreasons.guidance import GuideConfig
from rightreasons.errors import ConfigError

FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def schema_keys(cls: type, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every leaf key path of a config dataclass and its annotation."""
    out: dict[tuple[str, ...], Any] = {}
    for name, tp in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(tp):
            out.update(schema_keys(tp, prefix + (name,)))
        else:
            out[prefix + (name,)] = tp
    return out


KEYS = schema_keys(GuideConfig)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 6, 10 ** 6), st.just(10 ** 400),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
                    st.sampled_from(["1e-4", "adam", "bcos", "auto", "input", "0.5", "true", "null", ".nan"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                      max_leaves=6)


def nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    for key in reversed(path):
        value = {key: value}
    return value


def holds(resolved: Any, given: Any) -> bool:
    """Whether a config value is the value given (ints where floats are expected and numeric strings convert)."""
    if isinstance(given, float) and math.isnan(given):
        return isinstance(resolved, float) and math.isnan(resolved)
    if isinstance(given, (list, tuple)):
        return len(resolved) == len(given) and all(holds(r, g) for r, g in zip(resolved, given))
    if isinstance(given, dict):
        return resolved.keys() == given.keys() and all(holds(resolved[k], v) for k, v in given.items())
    if isinstance(given, str) and isinstance(resolved, float):
        return resolved == float(given)
    return resolved == given and type(resolved) is not bool or resolved is given


def typed_numbers(config: GuideConfig) -> list[float]:
    """The values of all number fields whose annotation is float (not the free-form ``dict[str, Any]`` ones)."""
    flat = to_dict(config)
    out = []
    for path, tp in KEYS.items():
        value = flat
        for key in path:
            value = value[key]
        if float in typing.get_args(tp) + (tp,) and isinstance(value, float):
            out.append(value)
        elif typing.get_origin(tp) is list and typing.get_args(tp) == (float,):
            out += value
    return out


@FUZZ
@given(path=st.sampled_from(sorted(KEYS)), value=st.one_of(VALUES, st.integers(0, 64), st.floats(0, 1)))
def test_any_value_at_any_key_is_accepted_exactly_or_refused_naming_the_key(path, value):
    dotted = ".".join(path)
    try:
        config = from_dict(GuideConfig, nested(path, value))
    except ConfigError as e:
        assert dotted in str(e), f"message does not name {dotted}: {e}"
        event("refused with ConfigError")
        return
    event("accepted")
    resolved = to_dict(config)
    for key in path:
        resolved = resolved[key]
    assert holds(resolved, value), (resolved, value)
    assert all(math.isfinite(v) for v in typed_numbers(config))


def misspell(key: str, how: str, at: int) -> str:
    at %= len(key)
    return {"drop": key[:at] + key[at + 1:], "double": key[:at] + key[at] * 2 + key[at + 1:],
            "swap": key[:at] + key[at + 1:at + 2] + key[at:at + 1] + key[at + 2:], "upper": key.upper(),
            "plural": key + "s", "dash": key.replace("_", "-"), "space": key + " "}[how]


@FUZZ
@given(path=st.sampled_from(sorted(KEYS)), how=st.sampled_from(["drop", "double", "swap", "upper", "plural", "dash",
                                                                "space"]),
       at=st.integers(0, 30), depth=st.integers(0, 2))
def test_misspelt_keys_are_refused_naming_the_key_and_the_valid_ones(path, how, at, depth):
    depth = min(depth, len(path) - 1)  # misspell a section name or the leaf
    wrong = misspell(path[depth], how, at)
    siblings = {p[depth] for p in KEYS if p[:depth] == path[:depth]}
    if wrong in siblings:
        return
    bad = path[:depth] + (wrong,)
    with pytest.raises(ConfigError, match="unknown config key") as info:
        from_dict(GuideConfig, nested(bad, 1))
    assert repr(".".join(bad)) in str(info.value) and "valid keys here" in str(info.value)


@FUZZ
@given(document=st.one_of(st.text(max_size=120), st.binary(max_size=120).map(lambda b: b.decode("latin-1")),
                          st.sampled_from(["- a\n- b\n", "a: [1\n", "&a [*a]", "optim: {lr: .nan}\n",
                                           "data: {batch_size: 1e3}\n", "model: 3\n", "\t x: 1", "? [a]\n: 1\n",
                                           "seed: 0x10\n", "{}\n", "output_dir: !!binary aGk=\n"])),
       raw=st.booleans())
def test_random_yaml_documents_give_a_config_or_a_config_error(document, raw):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.yaml"
        path.write_bytes(document.encode("latin-1" if raw else "utf-8", errors="replace"))
        try:
            config = load_config(GuideConfig, path)
        except ConfigError as e:
            assert str(path) in str(e)
            event("refused with ConfigError")
            return
    event("accepted")
    assert all(math.isfinite(v) for v in typed_numbers(config))


@FUZZ
@given(override=st.one_of(st.text(max_size=30),
                          st.tuples(st.sampled_from(sorted(".".join(p) for p in KEYS)),
                                    st.one_of(st.text(max_size=10),
                                              st.sampled_from(["[1", "{a: 1", ".inf", "-.nan", "!!float x",
                                                               "!!python/name:os.system", "*x", "&a 1"])))
                          .map("=".join)))
def test_random_overrides_give_a_config_or_a_config_error(override):
    try:
        config = load_config(GuideConfig, None, [override])
    except ConfigError:
        event("refused with ConfigError")
        return
    event("accepted")
    assert all(math.isfinite(v) for v in typed_numbers(config))


def test_missing_config_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match=r"config file not found: .*nowhere\.yaml"):
        load_config(GuideConfig, tmp_path / "nowhere.yaml")
