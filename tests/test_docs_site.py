"""The documentation site builds with mkdocs in strict mode (every warning fails), what `make docs` runs; its API
pages are generated from the docstrings and show no reStructuredText markup, and every part of the package has one;
the install section is the README's, included; the studies and benchmarks moved out of the README are pages of the
site, and every committed figure is shown on one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from guards import GUARD_S

ROOT = Path(__file__).resolve().parents[1]
MARKUP = re.compile(r":(?:func|class|mod|meth|data|attr):`|``")
PACKAGE = ROOT / "rightreasons"
DIRECTIVE = re.compile(r"^::: (rightreasons[\w.]*)", re.MULTILINE)


def _public_parts() -> list[str]:
    """Every package of rightreasons (``rightreasons.data.prepare`` too) and every module at its top level."""
    packages = [".".join(init.parent.relative_to(ROOT).parts) for init in PACKAGE.rglob("__init__.py")]
    modules = [f"rightreasons.{path.stem}" for path in PACKAGE.glob("*.py") if not path.stem.startswith("_")]
    return sorted(set(packages) | set(modules))


def _nav_pages(nav: list) -> list[str]:
    return [page for item in nav for value in item.values()
            for page in (_nav_pages(value) if isinstance(value, list) else [value])]


def test_every_package_and_foundation_module_has_an_api_page():
    pages = sorted((ROOT / "docs" / "api").glob("*.md"))
    documented = {name for page in pages for name in DIRECTIVE.findall(page.read_text(encoding="utf-8"))}
    missing = [part for part in _public_parts()
               if not any(name == part or name.startswith(part + ".") for name in documented)]
    assert not missing, f"parts of the package without an API page (add `::: NAME` to a docs/api page): {missing}"
    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    assert [f"api/{page.name}" for page in pages if f"api/{page.name}" not in nav] == []
    assert {"config.md", "quickstarts.md"} <= set(nav)
    assert {"studies/demo.md", "studies/guidance.md", "robustness.md", "studies/bcosification.md", "studies/e2kd.md",
            "benchmarks.md", "performance.md"} <= set(nav)
    assert sorted(str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")
                  if str(p.relative_to(ROOT / "docs")) not in nav) == []  # no page left out of the navigation


def test_the_site_builds_strictly_with_api_pages_from_the_docstrings(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(site)], cwd=ROOT, capture_output=True, text=True,
                          timeout=GUARD_S, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    models = (site / "api" / "models" / "index.html").read_text(encoding="utf-8")
    for documented in ("rightreasons.models.factory.create_model", "LogitBiasWarning", "transforms", "Raises"):
        assert documented in models, documented
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 20
    leftovers = [str(p.relative_to(site)) for p in pages if MARKUP.search(p.read_text(encoding="utf-8"))]
    assert not leftovers
    assert (site / "cli" / "index.html").is_file() and not (site / "griffe_markup.py").exists()
    guidance = (site / "api" / "guidance" / "index.html").read_text(encoding="utf-8")
    assert "rightreasons.guidance.config.GuidanceConfig" in guidance and "annotated_per_batch" in guidance
    assert "bfloat16" in (site / "config" / "index.html").read_text(encoding="utf-8")
    quickstarts = (site / "quickstarts" / "index.html").read_text(encoding="utf-8")
    page = (ROOT / "docs" / "quickstarts.md").read_text(encoding="utf-8")
    for heading in ("PASCAL VOC 2007", "MS COCO 2014", "Waterbirds-100",  # the sections tests/quickstarts walks
                    "Distillation: the guided run into a B-cos ResNet-18"):
        assert f"### {heading}" in page and f">{heading}<" in quickstarts.replace('<a class="headerlink"', "<")
    assert "--8&lt;--" not in quickstarts and "VOCdevkit" in quickstarts
    assert "make test" in quickstarts and "constraints.txt" in quickstarts  # the README's install section, included
    assert "configs/distill/waterbirds100.yaml" in quickstarts  # the distillation of the guided runs
    shown = {Path(src).name for html in pages
             for src in re.findall(r'<img [^>]*src="([^"]+)"', html.read_text(encoding="utf-8"))}
    figures = {figure.name for figure in (ROOT / "docs" / "figures").glob("*.png")}
    assert figures and figures <= shown, sorted(figures - shown)  # every committed figure is on a page
    home = (site / "index.html").read_text(encoding="utf-8")
    assert '<img alt="' in home  # a picture on the home page
    for study in ("studies/demo", "studies/guidance", "studies/bcosification", "studies/e2kd", "robustness"):
        assert '<img alt="' in (site / study / "index.html").read_text(encoding="utf-8"), study
    committed = [*(ROOT / "docs" / "figures").glob("*.png"), *(ROOT / "docs" / "gallery" / "figures").glob("*.png")]
    assert [str(f.relative_to(ROOT)) for f in committed if f.stat().st_size >= 300_000] == []  # small figures
    gallery = {figure.name for figure in (ROOT / "docs" / "gallery" / "figures").glob("*.png")}
    assert gallery <= shown, sorted(gallery - shown)  # and every gallery figure is on its page
    science = (site / "science" / "index.html").read_text(encoding="utf-8")
    assert science.count('class="arithmatex"') >= 20  # formulas, typeset by MathJax, not code font
    assert (site / "javascripts" / "mathjax" / "tex-svg.js").stat().st_size > 1_000_000
    loads = re.compile(r'<(?:script|link)[^>]*(?:src|href)="(https?://[^"]+)"')
    remote = sorted({f"{page.relative_to(site)}: {url}" for page in pages
                     for url in loads.findall(page.read_text(encoding="utf-8"))})
    assert remote == []  # no script, style sheet or font from a CDN: the site works offline
