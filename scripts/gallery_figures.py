"""Draw the gallery's committed figures: run the Python block of every docs/gallery page in a fresh temporary
directory, as tests/test_docs.py does, and copy the figure it writes (``<page>.png``) to docs/gallery/figures/.

    OMP_NUM_THREADS=1 python scripts/gallery_figures.py            # every page (about a minute on one core)
    OMP_NUM_THREADS=1 python scripts/gallery_figures.py guide      # one page

A page shows its figure as ``figures/<page>.png``; tests/test_docs.py checks that the block still writes a figure of
the committed one's size. Each PNG is reduced to a palette (scripts/docs_figures.py, ``shrink``) to stay small.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GALLERY = ROOT / "docs" / "gallery"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)

sys.path.insert(0, str(ROOT / "scripts"))
from docs_figures import shrink  # noqa: E402


def pages() -> dict[str, str]:
    """Every gallery page with a Python block: ``{page stem: its block}`` (one block a page)."""
    found = {}
    for page in sorted(GALLERY.glob("*.md")):
        blocks = BLOCK.findall(page.read_text(encoding="utf-8"))
        if blocks:
            found[page.stem] = blocks[0]
    return found


def draw(stem: str, code: str) -> Path | None:
    """Run ``code`` in a fresh directory; copy its ``<stem>.png``, when it writes one, to docs/gallery/figures/."""
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([sys.executable, "-c", code], cwd=scratch, check=True,
                       env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
        made = Path(scratch) / f"{stem}.png"
        if not made.is_file():
            return None
        (GALLERY / "figures").mkdir(exist_ok=True)
        return shrink(Path(shutil.copy(made, GALLERY / "figures" / made.name)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="*", help="page names (default: every gallery page)")
    args = parser.parse_args(argv)
    found = pages()
    for stem in args.pages or found:
        path = draw(stem, found[stem])
        print(f"{stem}: {path} ({path.stat().st_size:,} bytes)" if path else f"{stem}: no figure")


if __name__ == "__main__":
    main()
