"""The frozen-explanation cache: round trip (values, dtypes, shapes), resumable and atomic writing, refusal of
mismatched, incomplete and corrupt caches, and joint augmentation of images and cached explanations."""

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from rightreasons.config import ConfigError, load_config
from rightreasons.data import eval_transform, load_dataset, train_transform
from rightreasons.distill import (CacheCorruptError, CacheMismatchError, DistillConfig, ExplanationCache,
                                  weights_fingerprint, write_cache)
from rightreasons.distill.formats import COMPACT_COSINE, FORMATS, TILE
from rightreasons.engine.data import SeededTransform
from rightreasons.errors import CacheError

SIZE = 16
SETTING = {"teacher": {"name": "fake", "kwargs": {}, "weights_sha256": "abc"},
           "data": {"name": "synthetic-birds", "root": None, "split": "train", "options": {"n": 10}},
           "transform": {"image_size": SIZE, "crop_fraction": 1.0, "encoding": "bcos"},
           "explanation": {"method": "bcos_weights", "layer": "input"}}


def dataset(n=10):
    return load_dataset("synthetic-birds", None, "train", n=n, size=SIZE,
                        transform=eval_transform(SIZE, encoding="bcos", crop_fraction=1.0))


class FakeTeacher:
    """A deterministic 'teacher': explanations are a signed function of the image with a per-image scale
    spanning orders of magnitude (float16 would under- or overflow without the per-map scaling)."""

    def __init__(self, fail_on_call=None):
        self.calls = 0
        self.fail_on_call = fail_on_call

    def __call__(self, images):
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise KeyboardInterrupt("killed while writing")
        scale = 10.0 ** (images[:, 0].mean((1, 2)) * 16 - 8)
        explanations = (images - 0.4) * scale[:, None, None, None]
        logits = torch.stack([images.mean((1, 2, 3)), -images[:, 1].std((1, 2))], 1) * 7
        return logits, explanations


def expected(n=10):
    batch = torch.stack([s["image"] for s in dataset(n)])
    return FakeTeacher()(batch)


def test_round_trip_values_dtypes_and_shapes(tmp_path):
    write_cache(FakeTeacher(), dataset(), tmp_path, SETTING, batch_size=3, shard_size=4)
    logits, explanations = expected()
    cache = ExplanationCache(tmp_path)
    ids = dataset().ids
    assert len(cache) == 10 and list(cache) == ids and cache.manifest["num_shards"] == 3
    for i, sample_id in enumerate(ids):
        value = cache[sample_id]
        assert value.dtype == torch.float32 and value.shape == (6, SIZE, SIZE)
        peak = explanations[i].abs().max()
        torch.testing.assert_close(value, explanations[i], rtol=0, atol=float(peak) * 2 ** -11)
    torch.testing.assert_close(cache.logits(ids[::-1]), logits.flip(0), rtol=0, atol=0)
    with safe_open(str(tmp_path / "shard-00000.safetensors"), framework="pt") as f:
        assert f.get_slice("explanations").get_dtype() == "F16"
        assert f.get_slice("logits").get_dtype() == "F32"
        assert json.loads(f.metadata()["ids"]) == ids[:4]


def test_interrupted_writing_resumes_to_the_same_bytes(tmp_path):
    full, partial = tmp_path / "full", tmp_path / "partial"
    write_cache(FakeTeacher(), dataset(), full, SETTING, batch_size=2, shard_size=4)
    # killed in the second shard (calls: one image to size the shards and check the free space, then 2 per shard)
    with pytest.raises(KeyboardInterrupt):
        write_cache(FakeTeacher(fail_on_call=4), dataset(), partial, SETTING, batch_size=2, shard_size=4)
    assert (partial / "shard-00000.json").is_file() and not (partial / "shard-00001.json").exists()
    with pytest.raises(CacheError, match="incomplete"):
        ExplanationCache(partial)
    # a half-written shard left behind (temporary file) and a shard renamed without its record are both redone
    (partial / ".shard-00001.safetensors.tmp").write_bytes(b"half a shard")
    (partial / "shard-00002.safetensors").write_bytes(b"renamed but no record")
    teacher = FakeTeacher()
    write_cache(teacher, dataset(), partial, SETTING, batch_size=2)
    assert teacher.calls == 1 + 3   # the sizing probe, shard 1 (2 batches), shard 2 (rows 8–9); shard 0 was kept
    for s in range(3):
        name = f"shard-{s:05d}.safetensors"
        assert (partial / name).read_bytes() == (full / name).read_bytes()
    assert ExplanationCache(partial).ids == dataset().ids
    # a complete cache is not rewritten
    again = FakeTeacher()
    write_cache(again, dataset(), partial, SETTING)
    assert again.calls == 0


def test_mismatched_setting_is_refused_with_the_differing_keys(tmp_path):
    write_cache(FakeTeacher(), dataset(), tmp_path, SETTING, shard_size=5)
    cache = ExplanationCache(tmp_path)
    cache.check_setting(SETTING)
    stale = {**SETTING, "teacher": {**SETTING["teacher"], "weights_sha256": "def"},
             "transform": {**SETTING["transform"], "image_size": 32}}
    with pytest.raises(CacheMismatchError, match=r"teacher.weights_sha256: 'abc' != 'def'.*transform.image_size"):
        cache.check_setting(stale)
    with pytest.raises(CacheMismatchError, match="teacher.weights_sha256"):
        write_cache(FakeTeacher(), dataset(), tmp_path, stale)
    with pytest.raises(CacheMismatchError, match="no cached explanation for 1 of"):
        cache.check_ids(["train-000001", "not-cached"])
    with pytest.raises(CacheMismatchError, match="num_images"):   # same setting, other images
        write_cache(FakeTeacher(), dataset(8), tmp_path, SETTING)


def test_corrupt_or_truncated_shard_is_named(tmp_path):
    write_cache(FakeTeacher(), dataset(), tmp_path, SETTING, shard_size=4)
    shard = tmp_path / "shard-00001.safetensors"
    data = bytearray(shard.read_bytes())
    data[-3] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(CacheCorruptError, match=r"shard-00001\.safetensors: shard does not match its SHA-256"):
        ExplanationCache(tmp_path)
    shard.write_bytes(bytes(data[:-10]))
    with pytest.raises(CacheCorruptError, match=r"shard-00001\.safetensors: shard has \d+ bytes"):
        ExplanationCache(tmp_path)


def test_weights_fingerprint_follows_the_weights():
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    b.load_state_dict(a.state_dict())
    assert weights_fingerprint(a) == weights_fingerprint(b)
    with torch.no_grad():
        b.weight[0, 0] += 1e-6
    assert weights_fingerprint(a) != weights_fingerprint(b)


def augmented(cache, **options):
    transform = SeededTransform(train_transform(SIZE, encoding="bcos", explanations=cache, crop_fraction=1.0,
                                                **options), seed=3)
    return load_dataset("synthetic-birds", None, "train", n=10, size=SIZE, transform=transform)


@pytest.mark.parametrize("explanation_format", ["float16", "compact"])
def test_flipped_image_gets_the_flipped_explanation_pixel_exact(tmp_path, explanation_format):
    write_cache(FakeTeacher(), dataset(), tmp_path, SETTING, shard_size=4, explanation_format=explanation_format)
    cache = ExplanationCache(tmp_path)
    plain = dataset()
    flipped = augmented(cache, scale=(1.0, 1.0), ratio=(1.0, 1.0), hflip=1.0)
    for i in range(len(plain)):
        sample = flipped[i]
        assert torch.equal(sample["image"], plain[i]["image"].flip(-1))
        assert torch.equal(sample["explanation"].as_subclass(torch.Tensor), cache[sample["id"]].flip(-1))


def test_random_crops_move_image_and_explanation_together(tmp_path):
    # a teacher whose explanation *is* its input image: after any joint crop/flip the two must still agree
    write_cache(lambda x: (x[:, :2, 0, 0], x[:, :3]), dataset(), tmp_path,
                {**SETTING, "explanation": {"method": "identity", "layer": "input"}}, shard_size=4)
    cache = ExplanationCache(tmp_path)
    data = augmented(cache, scale=(0.3, 0.8))
    for i in range(len(data)):
        sample = data[i]
        image, explanation = sample["image"][:3], sample["explanation"].as_subclass(torch.Tensor)
        assert image.shape == explanation.shape == (3, SIZE, SIZE)
        torch.testing.assert_close(explanation, image, rtol=0, atol=2e-3)   # float16 storage of [0, 1] values


def test_open_errors_name_the_problem(tmp_path):
    with pytest.raises(CacheError, match="not an explanation cache"):
        ExplanationCache(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "other"}))
    with pytest.raises(CacheError, match="not a rightreasons-explanation-cache manifest"):
        ExplanationCache(tmp_path)


def cosine(a, b):
    return torch.nn.functional.cosine_similarity(a.flatten().double(), b.flatten().double(), dim=0).item()


def test_compact_format_keeps_the_promised_cosine_and_is_smaller(tmp_path):
    class SparseTeacher(FakeTeacher):
        """Explanations that are 0 except in a few pixels (as B-cos W(x)), some all zero."""

        def __call__(self, images):
            logits, explanations = super().__call__(images)
            return logits, explanations * (images[:, :1] > 0.6) * (images[:, :1].mean((2, 3), keepdim=True) > 0.2)

    write_cache(SparseTeacher(), dataset(), tmp_path / "f16", SETTING, shard_size=4)
    write_cache(SparseTeacher(), dataset(), tmp_path / "compact", SETTING, shard_size=4, explanation_format="compact")
    exact, f16 = SparseTeacher()(torch.stack([s["image"] for s in dataset()]))[1], ExplanationCache(tmp_path / "f16")
    compact = ExplanationCache(tmp_path / "compact")
    assert compact.explanation_format == compact.manifest["explanation_format"] == "compact"
    assert f16.manifest["explanation_format"] == "float16"
    torch.testing.assert_close(compact.logits(compact.ids), f16.logits(f16.ids), rtol=0, atol=0)
    for i, sample_id in enumerate(compact.ids):
        value = compact[sample_id]
        assert value.dtype == torch.float32 and value.shape == (6, SIZE, SIZE)
        if not exact[i].any():
            assert not value.any()
            continue
        assert cosine(value, exact[i]) >= COMPACT_COSINE
    assert 5 <= sum(bool(e.any()) for e in exact) < len(exact)
    size = lambda root: sum(p.stat().st_size for p in root.glob("*.safetensors"))  # noqa: E731
    assert size(tmp_path / "compact") < size(tmp_path / "f16") / 3


def test_compact_keeps_the_cosine_in_every_tile_so_that_crops_stay_faithful(tmp_path):
    # a sparse map [6, 70, 50] (not whole tiles) with loud, quiet and silent tiles: each tile keeps the cosine
    gen = torch.Generator().manual_seed(0)
    maps = torch.randn(2, 6, 70, 50, generator=gen) * (torch.rand(2, 6, 70, 50, generator=gen) < 0.05)
    maps[:, :, :32, :32] *= 1e4
    maps[0, :, 32:64, :32] = 0
    save_file(FORMATS["compact"].encode(maps), str(tmp_path / "shard.safetensors"))
    storage = FORMATS["compact"]
    with safe_open(str(tmp_path / "shard.safetensors"), framework="pt") as f:
        per_image = storage.index({name: f.get_tensor(name) for name in storage.per_image})
        decoded = [storage.decode(f, row, per_image, (6, 70, 50)) for row in range(2)]
    for value, exact in zip(decoded, maps):
        assert value.shape == (6, 70, 50) and value.dtype == torch.float32
        for top in range(0, 70, TILE):
            for left in range(0, 50, TILE):
                tile, original = (m[:, top:top + TILE, left:left + TILE] for m in (value, exact))
                if original.any():
                    assert cosine(tile, original) >= COMPACT_COSINE, (top, left)
                else:
                    assert not tile.any()


def test_cache_read_or_resumed_as_another_format_is_refused(tmp_path):
    write_cache(FakeTeacher(), dataset(), tmp_path, SETTING, shard_size=4, explanation_format="compact")
    with pytest.raises(CacheMismatchError, match="stores its explanations as 'compact', but 'float16' was asked for"):
        ExplanationCache(tmp_path, explanation_format="float16")
    assert len(ExplanationCache(tmp_path, explanation_format="compact")) == 10
    with pytest.raises(CacheMismatchError, match="explanation_format: 'compact' != 'float16'"):
        write_cache(FakeTeacher(), dataset(), tmp_path, SETTING)


def test_a_cache_written_before_formats_existed_reads_as_float16(tmp_path):
    write_cache(FakeTeacher(), dataset(), tmp_path, SETTING, shard_size=4)
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    del manifest["explanation_format"]
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert ExplanationCache(tmp_path, explanation_format="float16").explanation_format == "float16"
    with pytest.raises(CacheMismatchError, match="as 'float16', but 'compact'"):
        ExplanationCache(tmp_path, explanation_format="compact")


def test_an_unknown_cache_format_is_a_config_error(tmp_path):
    config = Path(__file__).resolve().parents[2] / "configs" / "distill" / "synthetic.yaml"
    with pytest.raises(ConfigError, match="cache_format"):
        load_config(DistillConfig, config, [f"output_dir={tmp_path}", "distill.cache_format=float8"])
