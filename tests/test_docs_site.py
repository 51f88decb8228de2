"""The documentation site builds with mkdocs in strict mode (every warning fails), what `make docs` runs; its API
pages are generated from the docstrings and show no reStructuredText markup."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARKUP = re.compile(r":(?:func|class|mod|meth|data|attr):`|``")


def test_the_site_builds_strictly_with_api_pages_from_the_docstrings(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(site)], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    models = (site / "api" / "models" / "index.html").read_text(encoding="utf-8")
    for documented in ("rightreasons.models.factory.create_model", "LogitBiasWarning", "transforms", "Raises"):
        assert documented in models, documented
    pages = list(site.rglob("*.html"))
    assert len(pages) >= 8
    leftovers = [str(p.relative_to(site)) for p in pages if MARKUP.search(p.read_text(encoding="utf-8"))]
    assert not leftovers
    assert (site / "cli" / "index.html").is_file() and not (site / "griffe_markup.py").exists()
