"""timm's data pipeline feeds our models as a timm user runs it: image files, timm's transforms and loaders, the logits
of our own evaluation pipeline (the ``explain`` command's loading, a model file's recorded view)."""

import random

import numpy as np
import pytest
import timm
import torch
from PIL import Image
from timm.data import ImageDataset, resolve_data_config

import rightreasons as rr
from rightreasons.apps.cli.explain import load_images
from rightreasons.encoding import IMAGENET_MEAN, IMAGENET_STD
from rightreasons.models.preprocessing import InputConfig
from rightreasons.models.timm_bridge import EncodedLoader, create_loader, create_transform, data_config

BCOS = "bcos_cifar10_resnet20"
STANDARD, STANDARD_ARGS = "xdnn_resnet50", {"layers": [1, 1, 1, 1]}
CPU = torch.device("cpu")


@pytest.fixture(autouse=True, scope="module")
def _timm_registered():
    rr.register_timm_models()


def _write_image(path, height, width, seed=0):
    """A noisy RGB PNG: every pixel differs, so a wrong crop, resize, scaling or channel order shows."""
    pixels = np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def _folder(root, height, width):
    """timm's ImageDataset layout: a folder per class, two images in each."""
    for c, name in enumerate(["cat", "dog"]):
        (root / name).mkdir(parents=True)
        for i in range(2):
            _write_image(root / name / f"{i}.png", height, width, seed=10 * c + i)
    return ImageDataset(str(root))


def _bcos(**kwargs):
    return timm.create_model(BCOS, num_classes=3, **kwargs).eval()


def _standard():
    return timm.create_model(STANDARD, num_classes=3, **STANDARD_ARGS).eval()


def test_pretrained_cfg_describes_what_each_model_takes():
    bcos, standard = _bcos(), _standard()
    assert {k: bcos.pretrained_cfg[k] for k in ("input_size", "mean", "std", "crop_pct", "interpolation",
                                                "encoding", "fixed_input_size")} == {
        "input_size": (6, 224, 224), "mean": (0.0, 0.0, 0.0), "std": (1.0, 1.0, 1.0), "crop_pct": 1.0,
        "interpolation": "bilinear", "encoding": "bcos", "fixed_input_size": False}
    assert {k: standard.pretrained_cfg[k] for k in ("input_size", "mean", "std", "encoding")} == {
        "input_size": (3, 224, 224), "mean": IMAGENET_MEAN, "std": IMAGENET_STD, "encoding": "normalize"}
    release = timm.create_model("bcos_resnet50.long").pretrained_cfg  # the release evaluates at resize 232
    assert release["crop_pct"] == 224 / 232 and release["input_size"] == (6, 224, 224)
    vit = timm.create_model("bcos_simple_vit_ti_patch16_224", image_size=32, depth=1).pretrained_cfg
    assert vit["input_size"] == (6, 32, 32) and vit["fixed_input_size"] and vit["crop_pct"] == 0.875


def test_plain_timm_transform_gives_three_channels_that_a_bcos_model_refuses(tmp_path):
    """timm's own create_transform cannot add channels; the model says what to use instead."""
    model = _bcos()
    image = Image.open(_write_image(tmp_path / "x.png", 224, 240))
    x = timm.data.create_transform(**resolve_data_config(model=model))(image)
    assert x.shape == (3, 224, 224) and 0 <= float(x.min()) and float(x.max()) <= 1  # unnormalised RGB
    with pytest.raises(ValueError, match=r"six-channel B-cos encoding.*timm_bridge\.create_transform\(model\)"):
        model(x[None])


def test_eval_transform_gives_the_explain_commands_input_and_logits(tmp_path):
    """An image whose shorter side is the input size: timm's view and ours crop alike, and nothing is resized."""
    model = _bcos()
    path = _write_image(tmp_path / "x.png", 224, 261)  # odd margin: the centre crop's rounding matters
    x = create_transform(model)(Image.open(path))
    ours = load_images([path], 224, "bcos", 1.0)[0]
    assert x.shape == (6, 224, 224)
    torch.testing.assert_close(x, ours, rtol=0, atol=1e-6)  # ToTensor divides by 255, ToDtype multiplies by 1/255
    torch.testing.assert_close(x[3:], 1 - x[:3], rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(model(x[None]), model(ours[None]), rtol=0, atol=1e-6)


def test_a_model_files_recorded_view_drives_timms_pipeline(tmp_path):
    model = rr.create_model(BCOS, num_classes=3)
    view = InputConfig("bcos", 32, crop_pct=0.8, interpolation="bicubic")
    loaded = rr.load_model(rr.save_model(model, tmp_path / "m.safetensors", input_config=view)).eval()
    assert data_config(loaded) == {"input_size": (6, 32, 32), "interpolation": "bicubic", "mean": (0.0, 0.0, 0.0),
                                   "std": (1.0, 1.0, 1.0), "crop_pct": 0.8, "crop_mode": "center"}
    image = Image.open(_write_image(tmp_path / "x.png", 40, 45))  # resized to 40 = 32 / 0.8 both ways: identity
    x = create_transform(loaded)(image)
    ours = view.transforms()(image).as_subclass(torch.Tensor)
    torch.testing.assert_close(x, ours, rtol=0, atol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x[None]), loaded(ours[None]), rtol=0, atol=1e-6)


def test_a_model_without_a_timm_config_takes_its_encodings_defaults():
    config = data_config(rr.create_model(BCOS, num_classes=3))
    assert config["mean"] == (0.0, 0.0, 0.0) and config["crop_pct"] == 1.0 and config["input_size"] == (6, 224, 224)


def test_where_the_views_resize_they_differ_by_about_one_grey_level(tmp_path):
    """timm resizes the 8-bit PIL image, our view the float image: the known, bounded difference."""
    view = InputConfig("bcos", 32)
    image = Image.open(_write_image(tmp_path / "x.png", 40, 52))
    x = create_transform(_bcos(), input_size=32)(image)
    difference = (x - view.transforms()(image).as_subclass(torch.Tensor)).abs().max()
    assert 0 < difference <= 2 / 255


def test_standard_models_get_timms_own_normalisation(tmp_path):
    model = _standard()
    path = _write_image(tmp_path / "x.png", 224, 247)
    plain = timm.data.create_transform(**resolve_data_config(model=model))(Image.open(path))
    x = create_transform(model)(Image.open(path))
    ours = load_images([path], 224, "normalize", 1.0)[0]
    torch.testing.assert_close(x, plain, rtol=0, atol=0)  # nothing added to timm's transform
    torch.testing.assert_close(x, ours, rtol=0, atol=1e-6)
    with torch.no_grad():
        torch.testing.assert_close(model(x[None]), model(ours[None]), rtol=0, atol=1e-6)


def test_train_transform_is_timms_augmentation_then_the_encoding(tmp_path):
    model = _bcos()
    image = Image.open(_write_image(tmp_path / "x.png", 48, 64))
    options = {"is_training": True, "input_size": 32, "color_jitter": 0.4, "re_prob": 0.5}

    def augmented(transform):
        random.seed(3)
        torch.manual_seed(3)
        return transform(image)

    rgb = augmented(timm.data.create_transform(**{**resolve_data_config(model=model), **options}))
    x = augmented(create_transform(model, **options))
    assert x.shape == (6, 32, 32)
    torch.testing.assert_close(x, torch.cat([rgb, 1 - rgb]), rtol=0, atol=0)
    model(x[None])  # accepted


def test_loaders_with_and_without_prefetcher_give_the_transforms_batches(tmp_path):
    model = _bcos()
    dataset = _folder(tmp_path / "data", 32, 37)
    expected = torch.stack([load_images([tmp_path / "data" / name / f"{i}.png"], 32, "bcos", 1.0)[0]
                            for name in ("cat", "dog") for i in range(2)])
    for prefetch in (False, True):
        loader = create_loader(dataset, model, input_size=32, batch_size=4, use_prefetcher=prefetch, device=CPU,
                               num_workers=0)
        assert isinstance(loader, EncodedLoader) and len(loader) == 1
        [(x, y)] = list(loader)
        torch.testing.assert_close(x, expected, rtol=0, atol=1e-6)
        assert y.tolist() == [0, 0, 1, 1]
        with torch.no_grad():
            torch.testing.assert_close(model(x), model(expected), rtol=0, atol=1e-6)


def test_a_training_loader_yields_encoded_batches_from_the_prefetcher(tmp_path):
    model = _bcos()
    loader = create_loader(_folder(tmp_path / "data", 40, 48), model, input_size=32, batch_size=2, is_training=True,
                           use_prefetcher=True, device=CPU, num_workers=0, re_prob=0.5)
    assert not loader.mixup_enabled and loader.dataset is loader.loader.dataset
    batches = list(loader)
    assert len(batches) == len(loader) == 2
    for x, _ in batches:
        assert x.shape == (2, 6, 32, 32)
        torch.testing.assert_close(x[:, 3:], 1 - x[:, :3], rtol=0, atol=0)
        model(x)


def test_a_standard_models_loader_is_timms_own(tmp_path):
    model = _standard()
    loader = create_loader(_folder(tmp_path / "data", 32, 32), model, input_size=32, batch_size=4,
                           use_prefetcher=True, device=CPU, num_workers=0)
    assert not isinstance(loader, EncodedLoader)
    [(x, _)] = list(loader)
    expected = torch.stack([load_images([tmp_path / "data" / name / f"{i}.png"], 32, "normalize", 1.0)[0]
                            for name in ("cat", "dog") for i in range(2)])
    torch.testing.assert_close(x, expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("options, message", [
    ({"mean": IMAGENET_MEAN}, r"without mean/std normalisation"),
    ({"std": (0.5, 0.5, 0.5)}, r"without mean/std normalisation"),
    ({"use_prefetcher": True}, r"create_loader\(dataset, model, use_prefetcher=True"),
    ({"normalize": False}, r"create_loader"),
])
def test_bcos_inputs_that_the_encoding_cannot_follow_are_refused(options, message):
    with pytest.raises(ValueError, match=message):
        create_transform(_bcos(), **options)
