"""``rightreasons explain``: PNGs per image whose content is the model's explanation; clear errors for bad input."""

import re

import numpy as np
import pytest
from PIL import Image

from rightreasons import create_model, save_model
from rightreasons.cli import main
from rightreasons.cli.explain import load_images
from rightreasons.explain import explain, to_rgba

OUTPUTS = ("input", "explanation", "contributions", "figure")


@pytest.fixture
def images(tmp_path):
    """Two small images with the same file name in different folders (one RGB, one greyscale, not square)."""
    rng = np.random.default_rng(0)
    paths = [tmp_path / "a" / "cat.png", tmp_path / "b" / "cat.png"]
    for path in paths:
        path.parent.mkdir()
    Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(paths[0])
    Image.fromarray(rng.integers(0, 256, (36, 32), dtype=np.uint8), mode="L").save(paths[1])
    return paths


@pytest.fixture
def saved_model(tmp_path):
    model = create_model("bcos_cifar10_resnet20", num_classes=4).eval()
    return model, save_model(model, tmp_path / "model.safetensors")


def test_writes_valid_pngs_with_the_explanation(tmp_path, images, saved_model, capsys):
    model, checkpoint = saved_model
    out = tmp_path / "out"
    assert main(["explain", "--checkpoint", str(checkpoint), "--size", "32", "--out", str(out), "--device", "cpu",
                 *map(str, images)]) == 0
    for stem in ("cat", "cat-2"):
        for kind in OUTPUTS:
            with Image.open(out / f"{stem}_{kind}.png") as png:
                png.verify()
        for kind in OUTPUTS[:3]:
            assert Image.open(out / f"{stem}_{kind}.png").size == (32, 32)

    x = load_images(images, 32)
    expected = explain(model, x)
    rgba = np.asarray(Image.open(out / "cat-2_explanation.png").convert("RGBA"), dtype=np.float64) / 255
    np.testing.assert_allclose(rgba, to_rgba(x[1], expected.weights[1]).double().numpy(), atol=1.5 / 255)
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2
    for line, target in zip(lines, expected.target.tolist()):
        assert f"predicted class {target}, explained class {target}" in line


def test_target_and_model_name(tmp_path, images, capsys):
    assert main(["explain", "--model", "bcos_cifar10_resnet20", "--target", "7", "--size", "32", "--out",
                 str(tmp_path / "out"), "--device", "cpu", str(images[0])]) == 0
    assert "explained class 7" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--model", "resnet18"], "resnet18 is not a B-cos model"),
    (["--model", "bcos_cifar10_resnet20", "--target", "10"], r"target classes must lie in \[0, 9\]"),
    (["--model", "bcos_cifar10_resnet20", "missing.png"], "missing.png: image file not found"),
    (["--pretrained"], "without --model, pass only --checkpoint"),
])
def test_bad_input_is_a_clear_error(tmp_path, images, capsys, argv, message):
    assert main(["explain", "--size", "32", "--out", str(tmp_path / "out"), "--device", "cpu", *argv,
                 str(images[0])]) == 2
    assert re.search(message, capsys.readouterr().err)
