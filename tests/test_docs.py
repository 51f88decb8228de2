"""Every Python block of the README and of ``docs/`` runs as written (each block on its own, in a fresh directory)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from rightreasons.engine import task as task_registry
from rightreasons.models import registry

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks() -> list[tuple[str, int, str]]:
    found = []
    for document in DOCUMENTS:
        for i, match in enumerate(BLOCK.finditer(document.read_text(encoding="utf-8"))):
            found.append((str(document.relative_to(ROOT)), i, match.group(1)))
    return found


BLOCKS = _blocks()


def test_the_documents_hold_python_blocks():
    assert sum(1 for name, _, _ in BLOCKS if name == "README.md") >= 4


@pytest.mark.parametrize("name, index, code", BLOCKS, ids=[f"{n}#{i}" for n, i, _ in BLOCKS])
def test_the_block_runs(name, index, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # models a block registers stay in the block
    monkeypatch.setattr(task_registry, "_TASKS", dict(task_registry._TASKS))  # so do its tasks
    module = types.ModuleType(f"docs_block_{index}")  # a real module, as a script is (dataclasses look it up)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, f"{name} python block {index}", "exec"), module.__dict__)


CITED = re.compile(r"(?<![\w/.])((?:configs|docs|scripts|rightreasons|tests)/[\w./-]*\w(?:\.(?:py|md|yaml))?)")


def _cited_paths() -> list[tuple[str, str]]:
    sources = [*DOCUMENTS, *sorted((ROOT / "rightreasons").rglob("*.py")), *sorted((ROOT / "configs").rglob("*"))]
    found = []
    for source in sources:
        if source.is_file():
            for path in CITED.findall(source.read_text(encoding="utf-8")):
                if "*" not in path and "{" not in path and not path.startswith(("runs/", "docs/site")):
                    found.append((str(source.relative_to(ROOT)), path.rstrip(".")))
    return found


def test_every_cited_repository_path_exists():
    """Docstrings, docs and configs cite files of the repository only (no file outside it, no stale name)."""
    cited = _cited_paths()
    assert len(cited) > 10
    missing = sorted({f"{source}: {path}" for source, path in cited if not (ROOT / path).exists()})
    assert not missing, missing


def test_nothing_cites_notes_outside_the_repository():
    sources = [*DOCUMENTS, *ROOT.glob("rightreasons/**/*.py"), *ROOT.glob("configs/**/*"), *ROOT.glob("tests/**/*.py"),
               *ROOT.glob("scripts/*.py")]
    outside = "SCIENCE" + ".md"  # spelt in two parts so that this file does not cite it either
    assert not [str(s) for s in sources if s.is_file() and outside in s.read_text(encoding="utf-8")]
