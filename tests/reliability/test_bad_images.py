"""Truncated, corrupt and non-image files where a dataset expects an image, read through a real loader (Waterbirds)
in the main process and in DataLoader workers.

Every case ends in a :class:`DataError` that names the image file — or, for a cut that leaves the pixel data whole
(a missing end marker), in exactly the pixels of the intact file. Never a crash, a hang or a half-decoded image.
"""

from __future__ import annotations

import io
import struct
import tempfile
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from PIL import Image

from rightreasons.data import DataError, collate, load_dataset
from guards import GUARD_S

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = [f"birds/{i:03d}.img" for i in range(4)]


def encoded(fmt: str, seed: int = 0) -> bytes:
    """A 24 × 32 RGB image of random pixels, encoded as ``fmt``."""
    pixels = np.random.default_rng(seed).integers(0, 256, (24, 32, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt)
    return buffer.getvalue()


IMAGES = {fmt: encoded(fmt) for fmt in ("JPEG", "PNG")}


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


#: a PNG header that declares 100,000 × 100,000 pixels (a decompression bomb) and holds no pixel data
BOMB = (b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", struct.pack(">IIBBBBB", 100_000, 100_000, 8, 2, 0, 0, 0))
        + png_chunk(b"IEND", b""))


def write_waterbirds(root: Path, contents: list[bytes]) -> Path:
    """A Waterbirds-100 layout whose training images hold ``contents`` (any bytes, whatever the file name says)."""
    meta = ["img_filename,y,place,split"] + [f"{name},{i % 2},{i % 2},0" for i, name in enumerate(NAMES)]
    boxes = ["img_filename,x1,y1,x2,y2"] + [f"{name},2,3,20,18" for name in NAMES]
    (root / "metadata.csv").write_text("\n".join(meta) + "\n")
    (root / "boxes.csv").write_text("\n".join(boxes) + "\n")
    (root / "birds").mkdir()
    for name, content in zip(NAMES, contents):
        (root / name).write_bytes(content)
    return root


@contextmanager
def scratch() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as folder:
        yield Path(folder)


def load_first(content: bytes) -> torch.Tensor | None:
    """The image of sample 0 holding ``content``, or None after a DataError that names its file."""
    with scratch() as root:
        dataset = load_dataset("waterbirds100", write_waterbirds(root, [content] * len(NAMES)), "train")
        try:
            return dataset[0]["image"]
        except DataError as e:
            assert str(root / NAMES[0]) in str(e), f"message does not name the image file: {e}"
            assert "cannot decode image" in str(e), e
            event("refused with DataError")
            return None


@FUZZ
@given(data=st.data(), fmt=st.sampled_from(sorted(IMAGES)))
def test_truncated_images_are_refused_or_whole(data, fmt):
    full = IMAGES[fmt]
    cut = data.draw(st.integers(0, len(full) - 1), label="cut")
    image = load_first(full[:cut])
    if image is not None:  # only a cut after the pixel data may decode, and then to the intact pixels
        event("decoded whole")
        assert torch.equal(image, load_first(full))


@FUZZ
@given(content=st.one_of(st.binary(max_size=400), st.text(max_size=200).map(str.encode),
                         st.sampled_from([b"", b"<html>404 Not Found</html>", b"\xff\xd8\xff\xe0" + b"\x00" * 40,
                                          b"\x89PNG\r\n\x1a\n", BOMB])))
def test_non_image_files_are_refused(content):
    """Random bytes, text, an empty file, an HTML error page saved as an image, bare JPEG/PNG signatures and a
    decompression bomb's header."""
    assert load_first(content) is None


def test_a_directory_where_the_image_should_be_is_refused(tmp_path):
    root = write_waterbirds(tmp_path, [IMAGES["PNG"]] * len(NAMES))
    (root / NAMES[1]).unlink()
    (root / NAMES[1]).mkdir()
    with pytest.raises(DataError, match=rf"{NAMES[1]}: image file not found"):
        load_dataset("waterbirds100", root, "train")[1]


def test_corrupt_image_in_a_worker_is_raised_in_the_main_process_naming_the_file(tmp_path):
    """DataLoader with 2 workers: the worker's DataError reaches the main process as a DataError naming the file."""
    contents = [IMAGES["JPEG"]] * len(NAMES)
    contents[2] = IMAGES["JPEG"][: len(IMAGES["JPEG"]) // 2]
    root = write_waterbirds(tmp_path, contents)
    dataset = load_dataset("waterbirds100", root, "train")
    loader = torch.utils.data.DataLoader(dataset, batch_size=1, num_workers=2, collate_fn=collate, timeout=GUARD_S)
    with pytest.raises(DataError, match=rf"(?s)Caught DataError in DataLoader worker.*{NAMES[2]}: cannot decode image"):
        for _ in loader:
            pass


def _saved(array: np.ndarray, fmt: str) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format=fmt)
    return buffer.getvalue()


def test_a_16_bit_png_is_scaled_to_8_bit_not_clipped_to_white(tmp_path):
    """A 16-bit grey PNG (PIL mode I;16) of values v reads as round(v / 257) in every channel: 65535 → 255, not
    everything above 255 → 255 (the image read 99.7 % white)."""
    ramp = (np.arange(24 * 32).reshape(24, 32) * 85).astype(np.uint16)  # 0 … 65195
    root = write_waterbirds(tmp_path, [_saved(ramp, "PNG")] * len(NAMES))
    image = load_dataset("waterbirds100", root, "train").load_image(0)
    expected = torch.from_numpy(np.rint(ramp / 257.0).astype(np.uint8))
    assert image.dtype == torch.uint8 and torch.equal(image, expected.expand(3, -1, -1))


def test_a_float_image_in_the_unit_range_is_scaled_to_8_bit(tmp_path):
    values = np.linspace(0, 1, 24 * 32, dtype=np.float32).reshape(24, 32)
    root = write_waterbirds(tmp_path, [_saved(values, "TIFF")] * len(NAMES))
    image = load_dataset("waterbirds100", root, "train").load_image(0)
    assert torch.equal(image[0], torch.from_numpy(np.rint(values.astype(np.float64) * 255).astype(np.uint8)))


@pytest.mark.parametrize("bad, message", [(np.nan, "not finite"), (np.inf, "not finite"), (-np.inf, "not finite"),
                                          (7.5, r"span \[0, 7\.5\], expected \[0, 1\]")])
def test_non_finite_or_out_of_range_float_pixels_are_refused_naming_the_file(tmp_path, bad, message):
    """A float TIFF (PIL mode F) mapped NaN to 0 and inf to 255 silently; now its file is named."""
    values = np.full((24, 32), 0.5, np.float32)
    values[3, 4] = bad
    values[0, 0] = 0.0
    root = write_waterbirds(tmp_path, [_saved(values, "TIFF")] * len(NAMES))
    with pytest.raises(DataError, match=rf"{NAMES[0]}: .*{message}"):
        load_dataset("waterbirds100", root, "train")[0]
