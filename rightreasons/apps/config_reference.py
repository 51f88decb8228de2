"""The config reference of the documentation site (``docs/config.md``), generated from the typed schema.

Every key of every config a command reads — the task configs of ``train``, ``guide`` and ``distill`` (taken from the
engine's task registry, so a new task appears by itself) and the guidance study — with its type, default, allowed
values and description. Each comes from one place in the code:

* type and default: the dataclass field (``Literal`` choices are part of the type);
* allowed values: the ``expect(ok, "key", value, "what")`` checks of the section's ``__post_init__`` (and of the
  sections it extends) whose expectation is a literal, quoted as the error message quotes them; the key may also be
  the variable of a loop over literal names;
* description: the field's attribute docstring, the string right below the field::

      lr: float = 1e-4
      \"\"\"Peak learning rate of the schedule.\"\"\"

The page ends with the options of each dataset's loader (``data.options``, not a dataclass: the loaders' keyword
parameters and their defaults). A key without a description is listed by :func:`undocumented`
(``tests/apps/test_config_reference.py`` fails on it). Regenerate the page with
``python -m rightreasons.apps.config_reference docs/config.md``; a test checks that it is up to date.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

from ..config import type_name, yaml_value
from ..data import COMMON_OPTIONS, DATASETS
from ..data.base import AnnotatedDataset
from ..engine import get_task, task_names
from ..engine.config import RESERVED_DATA_OPTIONS
from ..fileio import write_text_atomic
from ..guidance.study import GuidanceStudy
from . import tasks  # noqa: F401  (each feature registers its task)

__all__ = ["Key", "describe", "main", "reference", "undocumented"]

#: the configs of the page that no task registers: (heading, command, class)
STUDIES: tuple[tuple[str, str, type], ...] = (
    ("`rightreasons study guidance`", "rightreasons study guidance FILE --out DIR", GuidanceStudy),
)


@dataclass(frozen=True)
class Key:
    """One key of a config: its dotted ``path`` (``optim.lr``; ``[]`` marks the items of a list of sections), type,
    default (YAML text, or ``required``), allowed values, description (empty where the code has none) and the
    ``owner``, the qualified name of the field (``rightreasons.engine.config.OptimConfig.lr``)."""

    path: str
    type: str
    default: str
    allowed: str
    description: str
    owner: str


def _class_tree(cls: type) -> ast.ClassDef:
    source = textwrap.dedent(inspect.getsource(cls))
    return next(node for node in ast.parse(source).body if isinstance(node, ast.ClassDef))


def _field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of the fields ``cls`` itself declares."""
    body = _class_tree(cls).body
    docs = {}
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr) \
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
            docs[node.target.id] = inspect.cleandoc(after.value.value).replace("\n", " ")
    return docs


def _checks(cls: type) -> dict[str, list[str]]:
    """What the ``expect`` calls of the ``__post_init__`` that ``cls`` itself defines require of each key: the key
    and the expectation as literals, or the key a loop variable over a tuple of literal names."""
    post_init = next((node for node in _class_tree(cls).body
                      if isinstance(node, ast.FunctionDef) and node.name == "__post_init__"), None)
    if post_init is None:
        return {}
    loops = {node.target.id: [e.value for e in node.iter.elts if isinstance(e, ast.Constant)]
             for node in ast.walk(post_init) if isinstance(node, ast.For) and isinstance(node.target, ast.Name)
             and isinstance(node.iter, ast.Tuple)}
    found: dict[str, list[str]] = {}
    for node in sorted(ast.walk(post_init), key=lambda n: getattr(n, "lineno", 0)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "expect"
                and len(node.args) == 4 and isinstance(node.args[3], ast.Constant)):
            continue
        key = node.args[1]
        names = [key.value] if isinstance(key, ast.Constant) else loops.get(getattr(key, "id", None), [])
        for name in names:
            found.setdefault(name, []).append(node.args[3].value)
    return found


def _sections(tp: Any) -> list[type]:
    """The dataclasses an annotation holds: itself, in ``X | None`` or as the items of a list."""
    if dataclasses.is_dataclass(tp):
        return [tp]
    if typing.get_origin(tp) in (Union, types.UnionType, list, tuple):
        return [c for arg in typing.get_args(tp) for c in _sections(arg)]
    return []


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        value = f.default
    elif f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
    else:
        return "required"
    if dataclasses.is_dataclass(value):
        value = dataclasses.asdict(value)
    elif isinstance(value, (list, tuple)) and value and dataclasses.is_dataclass(value[0]):
        value = [dataclasses.asdict(v) for v in value]
    return yaml_value(value)


def describe(cls: type, prefix: str = "") -> list[Key]:
    """Every key of config dataclass ``cls``, sections expanded: a section (a dataclass field with a default) stands
    for its keys; an optional section or a list of sections has its own row and then its keys."""
    hints = typing.get_type_hints(cls)
    docs: dict[str, str] = {}
    checks: dict[str, list[str]] = {}
    owners: dict[str, str] = {}
    for base in reversed([c for c in cls.__mro__ if dataclasses.is_dataclass(c)]):
        owners.update((name, f"{base.__module__}.{base.__qualname__}.{name}") for name in vars(base).get(
            "__annotations__", {}))
        docs.update(_field_docs(base))
        for key, expected in _checks(base).items():
            checks[key] = list(dict.fromkeys([*checks.get(key, []), *expected]))
    keys = []
    for f in dataclasses.fields(cls):
        tp, path = hints[f.name], prefix + f.name
        sections = _sections(tp)
        if not (dataclasses.is_dataclass(tp) and f.default_factory is not dataclasses.MISSING):
            keys.append(Key(path, type_name(tp), _default(f), "; ".join(checks.get(f.name, [])),
                            docs.get(f.name, ""), owners[f.name]))
        for section in sections:
            keys += describe(section, path + ("[]." if typing.get_origin(tp) in (list, tuple) else "."))
    return keys


def _configs() -> list[tuple[str, str, type]]:
    """The configs of the page: (heading, command, class), the tasks' first — a config before those that extend it,
    then by command name (not in registration order, which depends on what was imported first)."""
    names = sorted(task_names(), key=lambda name: (len(get_task(name).config_class.__mro__), name))
    found = [(f"`rightreasons {name}`", f"rightreasons {name} --config FILE", get_task(name).config_class)
             for name in names]
    return found + list(STUDIES)


def undocumented() -> list[str]:
    """The fields of the page's keys that have no description (qualified names, each once)."""
    return sorted({key.owner for _, _, cls in _configs() for key in describe(cls) if not key.description})


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _table(keys: list[Key]) -> list[str]:
    lines = ["| Key | Type | Default | Allowed | Description |", "|---|---|---|---|---|"]
    for key in keys:
        lines.append(f"| `{key.path}` | `{_cell(key.type)}` | `{_cell(key.default)}` | {_cell(key.allowed)} | "
                     f"{_cell(key.description)} |")
    return lines


INTRODUCTION = """\
# Config reference

<!-- Generated from the config dataclasses by `python -m rightreasons.apps.config_reference docs/config.md`;
do not edit: change the field's docstring (the string below the field) and regenerate. -->

A config is a YAML file of the sections below; `KEY=VALUE` arguments after it (`--set KEY=VALUE` for a study)
override single keys (`optim.lr=1e-4`, `model.kwargs={inplanes: 16}`), parsed as YAML values. Every key is checked
when the config is read, before any work starts: an unknown or misspelt key, a value of the wrong type or out of the
allowed range is one `error:` line naming the key. *Allowed* quotes the checks of each key (the types and choices
of the *Type* column are checked as well); a config of one command lists only the keys it adds to the one it extends.
"""


def _options(callable_: Any, names: Any) -> dict[str, str]:
    """The keyword parameters ``names`` of ``callable_`` with their defaults as YAML text."""
    parameters = inspect.signature(callable_).parameters
    return {name: yaml_value(parameters[name].default) for name in names}


def _dataset_options() -> list[str]:
    """The section on ``data.options``: each dataset's own options and the common ones, with defaults."""
    common = _options(AnnotatedDataset.__init__, [o for o in COMMON_OPTIONS if o not in RESERVED_DATA_OPTIONS])
    lines = ["## `data.options`", "", "The options each dataset's loader takes in `data.options` (and "
             "`distill.eval_data.options`); an unknown option is refused with the valid ones. They are described "
             "with each dataset's class on the [data API page](api/data.md); a null default of a synthetic dataset "
             "stands for the generator's own.", "",
             "| Dataset | Options (default) |", "|---|---|"]
    for name, builder in DATASETS.items():
        own = _options(builder, [p for p in inspect.signature(builder).parameters if p not in ("root", "split",
                                                                                             "options")])
        lines.append(f"| `{name}` | {', '.join(f'`{k}: {_cell(v)}`' for k, v in own.items())} |")
    lines.append(f"| every dataset | {', '.join(f'`{k}: {_cell(v)}`' for k, v in common.items())} (a dataset's own "
                 "default first) |")
    return [*lines, ""]


def reference() -> str:
    """The Markdown of the config reference page."""
    configs = _configs()
    headings = {cls: heading for heading, _, cls in configs}
    lines = [INTRODUCTION]
    for heading, command, cls in configs:
        keys = describe(cls)
        parent = next((base for base in cls.__mro__[1:] if base in headings), None)
        if parent is None:
            reads = ":"
        else:
            inherited = set(describe(parent))
            keys = [key for key in keys if key not in inherited]
            reads = f": every key of {headings[parent]}, plus"
        lines += [f"## {heading}", "", f"`{command}` reads a `{cls.__name__}` (`{cls.__module__}`){reads}", "",
                  *_table(keys), ""]
    return "\n".join([*lines, *_dataset_options()]).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the page to the file named on the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the Markdown file to write (docs/config.md)")
    write_text_atomic(parser.parse_args(argv).out, reference())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
