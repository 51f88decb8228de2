"""``rightreasons explain``: PNGs per image whose content is the model's explanation; clear errors for bad input."""

import re

import numpy as np
import pytest
import torch
from PIL import Image

from rightreasons import create_model, save_model
from rightreasons.apps.cli import main
from rightreasons.apps.cli.explain import load_images
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
    for line, target, logits in zip(lines, expected.target.tolist(), expected.logits):
        assert f"predicted class {target} (class {target}), explained class {target} (class {target}, " in line
        assert f"p={float(torch.sigmoid(logits[target])):.3f})" in line  # BCE-trained: the sigmoid link


def test_target_and_model_name(tmp_path, images, capsys):
    assert main(["explain", "--model", "bcos_cifar10_resnet20", "--random-weights", "--target", "7", "--size", "32",
                 "--out", str(tmp_path / "out"), "--device", "cpu", str(images[0])]) == 0
    assert "explained class 7" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--model", "resnet18", "--random-weights"], "resnet18 is not a B-cos model"),
    (["--model", "bcos_cifar10_resnet20", "--random-weights", "--target", "10"],
     r"--target 10: the model has 10 classes \(0 to 9\)"),
    (["--model", "bcos_cifar10_resnet20", "--random-weights", "missing.png"], "missing.png: image file not found"),
    (["--pretrained"], "without --model, pass only --checkpoint"),
    (["--random-weights"], "without --model, pass only --checkpoint"),
    (["--model", "bcos_cifar10_resnet20"], "has no weights: pass --pretrained .* --checkpoint FILE .* "
                                           "or --random-weights"),
])
def test_bad_input_is_a_clear_error(tmp_path, images, capsys, argv, message):
    assert main(["explain", "--size", "32", "--out", str(tmp_path / "out"), "--device", "cpu", *argv,
                 str(images[0])]) == 2
    assert re.search(message, capsys.readouterr().err)


def test_without_weights_nothing_is_explained(tmp_path, images, capsys):
    """Issue 14, item 3: a bare --model used to explain random weights silently."""
    out = tmp_path / "out"
    assert main(["explain", "--model", "bcos_cifar10_resnet20", "--size", "32", "--out", str(out), "--device", "cpu",
                 str(images[0])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--random-weights" in err and not out.exists()


def test_a_directory_explains_every_image_in_it(tmp_path, images, capsys):
    folder = images[0].parent
    (folder / "notes.txt").write_text("not an image")
    Image.fromarray(np.zeros((20, 20, 3), np.uint8)).save(folder / "dog.jpg")
    (folder / "nested").mkdir()
    Image.fromarray(np.zeros((20, 20, 3), np.uint8)).save(folder / "nested" / "deep.png")
    out = tmp_path / "out"
    assert main(["explain", "--model", "bcos_cifar10_resnet20", "--random-weights", "--size", "32", "--out", str(out),
                 "--device", "cpu", str(folder)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split(":")[0] for line in lines] == [str(folder / "cat.png"), str(folder / "dog.jpg")]
    assert sorted(p.name for p in out.glob("*_figure.png")) == ["cat_figure.png", "dog_figure.png"]


def test_a_directory_without_images_is_a_clear_error(tmp_path, capsys):
    empty = tmp_path / "photos"
    empty.mkdir()
    (empty / "readme.md").write_text("no images here")
    assert main(["explain", "--model", "bcos_cifar10_resnet20", "--random-weights", "--out", str(tmp_path / "out"),
                 str(empty)]) == 2
    assert f"{empty}: the directory holds no image files" in capsys.readouterr().err


def test_class_names_and_softmax_come_from_the_weights_and_the_flag(tmp_path, images, capsys):
    model = create_model("bcos_cifar10_resnet20", num_classes=3).eval()
    checkpoint = save_model(model, tmp_path / "named.safetensors", classes=["cat", "dog", "bird"])
    assert main(["explain", "--checkpoint", str(checkpoint), "--size", "32", "--out", str(tmp_path / "out"),
                 "--device", "cpu", "--probability", "softmax", str(images[0])]) == 0
    line = capsys.readouterr().out
    logits = explain(model, load_images(images[:1], 32)).logits[0]
    names = ["cat", "dog", "bird"]
    target = int(logits.argmax())
    assert f"explained class {target} ({names[target]}, p={float(logits.softmax(0)[target]):.3f})" in line


def test_a_model_file_that_records_its_input_is_explained_at_that_size(tmp_path, images, capsys):
    from rightreasons.models.preprocessing import InputConfig

    model = create_model("bcos_cifar10_resnet20", num_classes=4).eval()
    checkpoint = save_model(model, tmp_path / "m.safetensors", input_config=InputConfig("bcos", 32))
    out = tmp_path / "out"
    assert main(["explain", "--checkpoint", str(checkpoint), "--out", str(out), "--device", "cpu",
                 str(images[0])]) == 0
    assert Image.open(out / "cat_explanation.png").size == (32, 32)
    assert main(["explain", "--checkpoint", str(checkpoint), "--size", "24", "--out", str(out), "--device", "cpu",
                 str(images[0])]) == 0  # the user's option wins
    assert Image.open(out / "cat_explanation.png").size == (24, 24)
