"""The config reference (``docs/config.md``): every key of every config a command reads, with type, default, the
checks of its section and the description written below its field — a key without a description fails here, and the
committed page is the one the code generates."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from rightreasons.apps import config_reference
from rightreasons.apps.config_reference import Key, describe, reference, undocumented
from rightreasons.config import expect
from rightreasons.engine import get_task, task_names

PAGE = Path(__file__).resolve().parents[2] / "docs" / "config.md"


@dataclass
class Item:
    label: str
    """The item's label."""
    size: float = 1.0

    def __post_init__(self) -> None:
        expect(self.size > 0, "size", self.size, "a size > 0")


@dataclass
class Inner:
    depth: int = 2
    """How deep."""


@dataclass
class Outer:
    """A toy config: a section, an optional section, a list of sections, checks in a loop."""

    name: str = "x"
    """The name."""
    low: int = 0
    """Lower bound."""
    high: int = 3
    inner: Inner = field(default_factory=Inner)
    """The inner section."""
    extra: Inner | None = None
    """An optional section."""
    items: list[Item] = field(default_factory=lambda: [Item("a")])
    """The items."""

    def __post_init__(self) -> None:
        for key in ("low", "high"):
            expect(getattr(self, key) >= 0, key, getattr(self, key), "an integer >= 0")
        expect(self.low <= self.high, "high", self.high, "at least low")


def test_keys_come_with_type_default_checks_and_the_docstring_below_their_field():
    keys = {key.path: key for key in describe(Outer)}
    assert list(keys) == ["name", "low", "high", "inner.depth", "extra", "extra.depth", "items", "items[].label",
                          "items[].size"]
    assert keys["name"] == Key("name", "str", "x", "", "The name.", f"{__name__}.Outer.name")
    assert (keys["low"].allowed, keys["high"].allowed) == ("an integer >= 0", "an integer >= 0; at least low")
    assert (keys["extra"].type, keys["extra"].default) == ("Inner | null", "null")
    assert keys["items"].default == "[{label: a, size: 1.0}]" and keys["items[].label"].default == "required"
    assert keys["items[].size"].allowed == "a size > 0"
    assert (keys["inner.depth"].description, keys["high"].description, keys["items[].size"].description) == \
        ("How deep.", "", "")


def test_a_key_without_a_description_is_named_with_its_field(monkeypatch):
    monkeypatch.setattr(config_reference, "STUDIES", (("toy", "toy FILE", Outer),))
    assert {f"{__name__}.Outer.high", f"{__name__}.Item.size"} <= set(undocumented())


def test_every_key_of_every_command_has_a_description():
    missing = undocumented()
    assert not missing, ("config keys without a description — write one as the string right below the field, then "
                         "run `python -m rightreasons.apps.config_reference docs/config.md`: " + ", ".join(missing))


def test_the_committed_page_is_the_generated_one():
    assert PAGE.read_text(encoding="utf-8") == reference(), \
        "docs/config.md is stale: run `python -m rightreasons.apps.config_reference docs/config.md`"


def test_the_page_covers_every_task_and_documents_mixed_precision():
    page = reference()
    for name in task_names():
        assert f"`rightreasons {name} --config FILE` reads a `{get_task(name).config_class.__name__}`" in page
    row = next(line for line in page.splitlines() if line.startswith("| `mixed_precision` |"))
    assert "'no' \\| 'bf16' \\| 'fp16'" in row and "bfloat16" in row and "GradScaler" in row
    assert not re.search(r":(?:func|class|mod|meth|data|attr):`|``", page)  # descriptions are Markdown


def test_the_generator_writes_the_page(tmp_path):
    out = tmp_path / "config.md"
    assert config_reference.main([str(out)]) == 0
    assert out.read_text(encoding="utf-8") == reference()
