"""The faster loading paths give the samples the previous code gave.

* Reading images (one copy fewer, no RGB-to-RGB conversion, a channels-last view): the same pixels as before, for
  every image mode.
* The float conversion (:func:`to_float`, one buffer, contiguous planes): bit-identical to ``x.float() / 255``.
* Collating in a DataLoader worker (stacked straight into shared memory): the batches of in-process collation.
* The compact and float16 map decoders: bit-identical to their previous formulas.
* ``SanitizeBoxes`` skipping samples without boxes: the output torchvision's path gives, and its errors.
* The training preset on the decoded uint8 image (resized in 8 bits): the same crops, flips, boxes, labels and masks
  as the float pipeline, and images within 1.5/255 of it (half a level of rounding plus the uint8 kernel's fixed-point
  weights; 1.004/255 at worst and 0.24/255 on average over 300 random crops of natural-ish and noise images), 0.5/255
  on average. Presets that take float images (evaluation, frozen e²KD) give bit-identical samples to the previous code.
"""

import warnings
import zlib

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors import safe_open
from safetensors.torch import save_file
from torchvision import tv_tensors
from torchvision.transforms import v2

from rightreasons.data import DataError, SanitizeBoxes, collate, eval_transform, load_dataset, train_transform
from rightreasons.data.io import open_image, read_image
from rightreasons.data.sample import to_float
from rightreasons.data.transforms import takes_uint8
from rightreasons.distill.formats import FORMATS, TILE
from rightreasons.engine.data import SeededTransform

#: how far the uint8 training preset's images may lie from the float pipeline's: at most, and on average
UINT8_MAX_ERROR, UINT8_MEAN_ERROR = 1.5 / 255, 0.5 / 255


def previous_read_image(path):
    """``read_image`` before the loading-speed work: PIL's conversion, copied, then copied into colour planes."""
    return torch.from_numpy(np.asarray(open_image(path)).copy()).permute(2, 0, 1).contiguous()


def smooth_pixels(h, w, seed=0):
    """uint8 ``[h, w, 3]`` with smooth structure and some noise (JPEG-like content)."""
    rng = np.random.default_rng(seed)
    base = rng.random((3, h // 8 + 2, w // 8 + 2)).astype(np.float32)
    field = torch.nn.functional.interpolate(torch.from_numpy(base)[None], size=(h, w), mode="bicubic")[0]
    noisy = field.permute(1, 2, 0).numpy() * 200 + rng.normal(0, 8, (h, w, 3))
    return np.clip(noisy, 0, 255).astype(np.uint8)


IMAGE_FILES = {  # name: (mode, file name, save options)
    "rgb-jpeg": ("RGB", "a.jpg", {"quality": 90}),
    "progressive-444-jpeg": ("RGB", "b.jpg", {"quality": 95, "progressive": True, "subsampling": 0}),
    "grey-jpeg": ("L", "c.jpg", {}),
    "cmyk-jpeg": ("CMYK", "d.jpg", {}),
    "palette-png": ("P", "e.png", {}),
    "rgba-png": ("RGBA", "f.png", {}),
    "bilevel-png": ("1", "g.png", {}),
    "16-bit-png": ("I;16", "h.png", {}),
}


@pytest.mark.parametrize("name", IMAGE_FILES)
def test_read_image_gives_the_previous_pixels_for_every_mode(tmp_path, name):
    mode, file_name, options = IMAGE_FILES[name]
    pixels = smooth_pixels(37, 53)
    if mode == "I;16":
        image = Image.fromarray((pixels[..., 0].astype(np.uint16) * 257).astype(np.uint16))
    else:
        image = Image.fromarray(pixels).convert(mode)
    image.save(tmp_path / file_name, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's warning about a tensor on read-only memory
        ours = read_image(tmp_path / file_name)
    assert ours.shape == (3, 37, 53) and ours.dtype == torch.uint8
    assert torch.equal(ours, previous_read_image(tmp_path / file_name))
    ours[:, 0, 0] = 7  # memory of its own
    assert ours[:, 0, 0].tolist() == [7, 7, 7]


def test_read_image_names_the_file_it_cannot_decode(tmp_path):
    good = tmp_path / "good.jpg"
    Image.fromarray(smooth_pixels(64, 64)).save(good, quality=90)
    (tmp_path / "truncated.jpg").write_bytes(good.read_bytes()[:len(good.read_bytes()) // 2])
    (tmp_path / "text.jpg").write_bytes(b"not a jpeg at all")
    for name in ("truncated.jpg", "text.jpg"):
        with pytest.raises(DataError, match=rf"{name}: cannot decode image"):
            read_image(tmp_path / name)
    with pytest.raises(DataError, match="more than the limit of 4,000"):
        read_image(good, max_pixels=4000)


@pytest.mark.parametrize("layout", ["planes", "channels-last"])
def test_to_float_is_the_previous_division_bit_for_bit(layout):
    values = torch.arange(256, dtype=torch.uint8).repeat(3, 64, 3)[:, :, :600]  # every value, vectorised and tails
    if layout == "channels-last":
        values = values.permute(1, 2, 0).contiguous().permute(2, 0, 1)
    ours = to_float(values)
    assert ours.dtype == torch.float32 and ours.is_contiguous()
    assert torch.equal(ours, values.float() / 255.0)


def test_batches_collated_in_a_worker_are_those_collated_here():
    ds = load_dataset("synthetic-multilabel", None, "test", n=8, size=32, max_objects=3,
                      transform=SeededTransform(train_transform(24), seed=1))
    here = [collate([ds[i] for i in range(k, k + 4)]) for k in (0, 4)]
    there = list(torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1, collate_fn=collate))
    for ours, expected in zip(there, here, strict=True):
        assert ours.keys() == expected.keys() and ours["id"] == expected["id"]
        for key in ("image", "labels", "has_boxes", "group", "mask"):
            assert torch.equal(ours[key], expected[key])
        for a, b in zip(ours["boxes"] + ours["box_labels"], expected["boxes"] + expected["box_labels"], strict=True):
            assert torch.equal(a, b)


def previous_compact_decode(shard, row, per_image, shape):
    """``CompactFormat.decode`` before the loading-speed work: float copies of the levels, scaled, then untiled."""
    start = int(per_image["offsets"][row])
    blob = shard.get_slice("codes")[start:start + int(per_image["lengths"][row])].numpy().tobytes()
    c, h, w = shape
    rows, cols = -(-h // TILE), -(-w // TILE)
    steps = torch.from_numpy(np.frombuffer(blob[:4 * rows * cols], dtype=np.float32).copy())
    codes = np.frombuffer(zlib.decompress(blob[4 * rows * cols:]), dtype=np.int8).reshape(rows * cols, -1)
    tiles = torch.from_numpy(codes.astype(np.float32)) * steps[:, None]
    maps = tiles.reshape(rows, cols, c, TILE, TILE).permute(2, 0, 3, 1, 4).reshape(c, rows * TILE, cols * TILE)
    return maps[:, :h, :w]


def previous_float16_decode(shard, row, per_image, shape):
    return shard.get_slice("explanations")[row:row + 1][0].float() * per_image["scales"][row]


@pytest.mark.parametrize("shape", [(6, 224, 224), (3, 50, 70), (1, 32, 33)])
@pytest.mark.parametrize("name", ["compact", "float16"])
def test_map_decoders_give_the_previous_maps_bit_for_bit(tmp_path, name, shape):
    generator = torch.Generator().manual_seed(0)
    maps = torch.randn(3, *shape, generator=generator) * (torch.rand(3, 1, *shape[1:], generator=generator) < 0.1)
    maps[1] = 0  # an all-zero map
    storage = FORMATS[name]
    save_file(storage.encode(maps), str(tmp_path / "shard.safetensors"))
    previous = {"compact": previous_compact_decode, "float16": previous_float16_decode}[name]
    with safe_open(str(tmp_path / "shard.safetensors"), framework="pt") as shard:
        per_image = storage.index({key: shard.get_tensor(key) for key in storage.per_image})
        for row in range(3):
            ours = storage.decode(shard, row, per_image, shape)
            assert ours.shape == shape and ours.dtype == torch.float32
            assert torch.equal(ours, previous(shard, row, per_image, shape))


def test_sanitize_skips_samples_without_boxes_with_the_same_output_and_errors():
    sample = {"image": tv_tensors.Image(torch.rand(3, 8, 8)), "mask": tv_tensors.Mask(torch.zeros(8, 8)),
              "boxes": tv_tensors.BoundingBoxes(torch.zeros(0, 4), format="XYXY", canvas_size=(8, 8)),
              "box_labels": torch.zeros(0, dtype=torch.long), "labels": torch.ones(3), "id": "a"}
    sanitize = SanitizeBoxes()
    ours, torchvision_path = sanitize(sample), v2.SanitizeBoundingBoxes.forward(sanitize, sample)
    assert ours.keys() == torchvision_path.keys()
    for key, value in ours.items():
        assert type(value) is type(torchvision_path[key])
        assert value == torchvision_path[key] if isinstance(value, str) else torch.equal(value, torchvision_path[key])
    assert ours["boxes"].canvas_size == (8, 8)
    with pytest.raises(ValueError, match="must match the number of labels"):
        sanitize({**sample, "box_labels": torch.zeros(2, dtype=torch.long)})


def test_which_presets_take_uint8_images():
    cache = {"a": torch.zeros(1, 8, 8)}
    assert takes_uint8(train_transform(8)) and takes_uint8(SeededTransform(train_transform(8), seed=0))
    assert not takes_uint8(train_transform(8, explanations=cache))
    assert not takes_uint8(SeededTransform(train_transform(8, explanations=cache), seed=0))
    assert not takes_uint8(eval_transform(8)) and not takes_uint8(None) and not takes_uint8(lambda sample: sample)


@pytest.fixture
def jpegs(tmp_path, write_voc):
    """A VOC 2007 layout with JPEGs of several sizes and boxes, some of which the crops cut or drop; the JPEGs
    replaced by smooth ones (conftest's are noise)."""
    objects = {"000001": (120, 160, [("dog", 10, 20, 90, 100, 0), ("cat", 100, 5, 150, 60, 0)]),
               "000002": (160, 120, [("person", 2, 2, 119, 159, 0)]),
               "000003": (90, 130, [("car", 60, 40, 61, 41, 0), ("bus", 1, 1, 40, 30, 1), ("dog", 5, 50, 125, 88, 0)]),
               "000004": (75, 100, [("bird", 30, 20, 70, 60, 0)])}
    voc = write_voc(tmp_path, objects, {"train": list(objects)})
    for k, (image_id, (h, w, _)) in enumerate(objects.items()):
        Image.fromarray(smooth_pixels(h, w, seed=k)).save(voc / "JPEGImages" / f"{image_id}.jpg", quality=90)
    return voc


def float_pipeline(dataset, transform, index):
    """What ``dataset[index]`` gave before: the sample with its float image (the previous reading and conversion),
    through ``transform`` (a SeededTransform: the same seed from (seed, epoch, id))."""
    sample = dataset.load_checked(index)
    assert torch.equal(sample["image"], previous_read_image(dataset.source(index)).float() / 255.0)
    return transform(sample)


@pytest.mark.parametrize("epoch", [0, 1, 2])
def test_the_uint8_training_preset_crops_like_the_float_one_within_one_level(jpegs, epoch):
    transform = SeededTransform(train_transform(48, scale=(0.1, 1.0)), seed=5)
    transform.set_epoch(epoch)
    ds = load_dataset("voc2007", jpegs, "train", transform=transform)
    errors, largest = [], []
    for i in range(len(ds)):
        ours, expected = ds[i], float_pipeline(ds, transform, i)
        assert ours.keys() == expected.keys()
        for key in ("boxes", "box_labels", "labels"):  # the same crop and flip
            assert torch.equal(ours[key], expected[key])
        assert ours["boxes"].canvas_size == expected["boxes"].canvas_size == (48, 48)
        assert (ours["id"], ours["has_boxes"]) == (expected["id"], expected["has_boxes"])
        assert ours["image"].dtype == torch.float32 and ours["image"].shape == (6, 48, 48)
        difference = (ours["image"] - expected["image"]).abs()
        assert difference.max() <= UINT8_MAX_ERROR
        errors.append(difference.mean())
        largest.append(difference.max())
        assert torch.equal(ds[i]["image"], ours["image"])  # seeded by (seed, epoch, id): the same sample again
    assert torch.stack(errors).mean() <= UINT8_MEAN_ERROR
    assert max(largest) > 0  # the uint8 path was taken


def test_float_presets_give_the_previous_samples_bit_for_bit(jpegs):
    ids = load_dataset("voc2007", jpegs, "train").ids
    cache = {sample_id: torch.rand(2, 40, 40, generator=torch.Generator().manual_seed(k))
             for k, sample_id in enumerate(ids)}
    for transform in (SeededTransform(train_transform(40, explanations=cache, crop_fraction=1.0), seed=3),
                      SeededTransform(eval_transform(40), seed=3)):
        ds = load_dataset("voc2007", jpegs, "train", transform=transform)
        for i in range(len(ds)):
            ours, expected = ds[i], float_pipeline(ds, transform, i)
            assert ours.keys() == expected.keys()
            for key, value in ours.items():
                assert value == expected[key] if isinstance(value, (str, bool)) else torch.equal(value, expected[key])
