"""``rightreasons.fileio``: the one file checksum, checked against the digest of the whole file at once (the chunked
read must cover every byte, including a last chunk shorter than the others)."""

from __future__ import annotations

import hashlib

import pytest

from rightreasons import fileio


@pytest.mark.parametrize("algorithm", ["sha256", "md5"])
@pytest.mark.parametrize("size", [0, 5, 2 * (1 << 22) + 3])
def test_file_digest_equals_hashing_the_whole_file(tmp_path, algorithm, size):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert fileio.file_digest(path, algorithm) == hashlib.new(algorithm, data).hexdigest()
