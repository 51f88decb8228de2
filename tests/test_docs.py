"""Every Python block of the README and of ``docs/`` (its subfolders too) runs as written (each block on its own, in a
fresh directory); the README's short versions (its commands, its results table) are those of the docs pages."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
from PIL import Image

import rightreasons.apps.tasks  # noqa: F401  (the built-in tasks, registered before any block copies the registry)
from rightreasons.engine import task as task_registry
from rightreasons.models import registry

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks() -> list[tuple[str, int, str]]:
    found = []
    for document in DOCUMENTS:
        for i, match in enumerate(BLOCK.finditer(document.read_text(encoding="utf-8"))):
            found.append((str(document.relative_to(ROOT)), i, match.group(1)))
    return found


BLOCKS = _blocks()


def test_the_documents_hold_python_blocks():
    assert sum(1 for name, _, _ in BLOCKS if name == "README.md") >= 1
    # the README's examples moved to the user guide: B-cos networks (explain, explanation mode, B-cosification),
    # model guidance and e²KD
    for page, count in (("docs/guide/bcos.md", 3), ("docs/guide/guidance.md", 1), ("docs/guide/distillation.md", 1)):
        assert sum(1 for name, _, _ in BLOCKS if name == page) >= count, page


@pytest.mark.parametrize("name, index, code", BLOCKS, ids=[f"{n}#{i}" for n, i, _ in BLOCKS])
def test_the_block_runs(name, index, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # models a block registers stay in the block
    monkeypatch.setattr(task_registry, "_TASKS", dict(task_registry._TASKS))  # so do its tasks
    module = types.ModuleType(f"docs_block_{index}")  # a real module, as a script is (dataclasses look it up)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, f"{name} python block {index}", "exec"), module.__dict__)
    if name.startswith("docs/gallery/"):  # a gallery example draws the figure its page shows, at the committed size
        stem = Path(name).stem
        committed = GALLERY / "figures" / f"{stem}.png"
        if f"](figures/{stem}.png)" in (ROOT / name).read_text(encoding="utf-8"):
            with Image.open(tmp_path / f"{stem}.png") as drawn, Image.open(committed) as shown:
                assert drawn.size == shown.size, (drawn.size, shown.size)


GALLERY = ROOT / "docs" / "gallery"


def test_the_gallery_pages_each_run_one_example_and_show_its_committed_figure():
    """Each gallery page holds one Python block; a page that shows ``figures/<page>.png`` commits it (small), and
    scripts/gallery_figures.py draws it from that block (tests/test_docs.py runs the block and compares sizes)."""
    pages = sorted(page for page in GALLERY.glob("*.md") if page.name != "index.md")
    assert len(pages) >= 5
    index = (GALLERY / "index.md").read_text(encoding="utf-8")
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert len(BLOCK.findall(text)) == 1, page.name
        assert f"]({page.name})" in index, page.name  # listed on the gallery's first page
        shown = re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", text)
        assert shown, f"{page.name} shows no figure"
        if f"figures/{page.stem}.png" in shown:
            figure = GALLERY / "figures" / f"{page.stem}.png"
            assert figure.is_file() and figure.stat().st_size < 300_000, page.name
    committed = {figure.stem for figure in (GALLERY / "figures").glob("*.png")}
    assert committed <= {page.stem for page in pages}  # no figure without its example


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


def _table(text: str, header: str) -> dict[str, dict[str, str]]:
    """The markdown table whose header row starts with ``header``: {first cell: {column: cell}}."""
    lines = text[text.index(header):].splitlines()
    columns = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = dict(zip(columns, cells))
    return rows


def test_the_readme_results_table_is_the_demo_study_s():
    """The README's headline table is a column subset of the demo page's table, row for row and number for number."""
    readme = _table((ROOT / "README.md").read_text(encoding="utf-8"), "| model | overall acc. |")
    demo = _table((ROOT / "docs" / "studies" / "demo.md").read_text(encoding="utf-8"), "| model | overall acc. |")
    assert len(readme) >= 6 and set(readme) == set(demo)
    for model, row in readme.items():
        assert {column: demo[model][column] for column in row} == row, model


def test_the_readme_commands_are_the_quickstarts():
    """Every ``rightreasons`` command of the README's bash blocks is written the same on the quickstarts page, which
    tests/quickstarts runs."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    page = (ROOT / "docs" / "quickstarts.md").read_text(encoding="utf-8")
    lines = [line for block in re.findall(r"^```bash\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)
             for line in block.splitlines() if line.startswith("rightreasons ")]
    assert len(lines) >= 5
    assert [line for line in lines if line not in page.splitlines()] == []
