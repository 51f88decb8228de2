"""scripts/docs_figures.py and scripts/gallery_figures.py, which draw the docs' committed figures: the palette
reduction keeps a figure's size in pixels (tests/test_docs.py compares gallery figures by it) and stays under the
limit, each demo figure states its run's budget, and the gallery script finds every gallery page's example."""

import importlib.util
import sys
from pathlib import Path

import numpy as np
from PIL import Image

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _load(name: str):
    sys.path.insert(0, str(SCRIPTS))
    try:
        spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(SCRIPTS))


def test_shrink_keeps_the_size_in_pixels_and_the_file_small(tmp_path):
    figures = _load("docs_figures")
    path = tmp_path / "noisy.png"
    blocks = np.random.default_rng(0).integers(0, 256, (70, 90, 3), dtype=np.uint8)  # upscaled maps, as in a grid
    noise = np.random.default_rng(1).integers(0, 8, (700, 900, 3), dtype=np.uint8)
    Image.fromarray(blocks.repeat(10, 0).repeat(10, 1) + noise).save(path)
    before = path.stat().st_size
    figures.shrink(path)
    with Image.open(path) as shrunk:
        assert shrunk.size == (900, 700) and shrunk.mode == "P"
    assert path.stat().st_size <= min(figures.MAX_BYTES, before)


def test_the_demo_figures_state_their_run():
    figures = _load("docs_figures")
    recipe = {"train_images": 512, "batch_size": 32, "baseline_epochs": 3, "guided_epochs": 2}
    assert "512 training images, the baseline 48 steps, each guided model 32 more" in figures.run_note(recipe)
    settings = figures.docs_settings()
    assert settings.recipe.batch_size == 32 and settings.recipe.guided_epochs == 2 and settings.seeds == 1


def test_the_gallery_script_finds_one_example_per_page():
    gallery = _load("gallery_figures")
    found = gallery.pages()
    assert {"explain", "guide", "distill", "view", "metrics"} <= set(found) and "index" not in found
    assert all("import" in code for code in found.values())
