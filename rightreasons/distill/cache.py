"""Frozen teacher outputs for e²KD (thesis §8.1.3): logits and explanations computed once per training image.

Layout of a cache directory::

    manifest.json                  what the cache holds (see below); "complete": true once every shard is written
    shard-00000.safetensors        the explanation maps in the cache's format (below), "logits" float32 [n, K];
                                   metadata "ids": JSON list of the n sample ids
    shard-00000.json               the shard's record: rows, SHA-256, size, shapes (written after the shard)

The explanations are computed on the un-augmented *base view* of each image (:func:`rightreasons.data.base_view`) and
stored in one of the :data:`~rightreasons.distill.formats.FORMATS` (manifest key ``explanation_format``; a manifest
without it is ``float16``): ``float16`` (each map scaled to a maximum magnitude of 1 and cast to float16, so that no
map under- or overflows; relative error < 2⁻¹¹ of the map's maximum) or ``compact`` (8-bit levels with a step per
32-pixel tile chosen so that each tile keeps a cosine similarity >= 0.995, deflate-compressed; about 33× smaller for
a B-cos ResNet-50's ``W(x)`` at 224 px). ``cache[id]`` is always the decoded float32 map at the base view's
resolution. Logits are few and stay float32. Shards are read lazily: an explanation is read when a sample needs it;
logits and the few per-image numbers of the format are loaded once, and checked then (their shapes against the
manifest's, finite values). Reads are positioned reads of the rows asked for, never a memory map: a mapped shard
truncated while a training reads it kills the process with ``SIGBUS``, while a shard that changed size or comes up
short here is a :class:`CacheCorruptError` naming it. A ``compact`` map is inflated only up to the size its shape
needs (a crafted shard cannot make it allocate more).

The manifest records the *setting* — teacher (registry name, arguments, SHA-256 of its weights), data (name, root,
split, options), transform (resolution, crop fraction, the teacher's input encoding) and explanation (kind, layer) —
plus the image ids (count and SHA-256) and the sharding. A cache whose setting differs from the one asked for is
refused (:class:`CacheMismatchError`, listing the differing keys), an incomplete one too, and a shard whose size or
SHA-256 disagrees with its record is named (:class:`CacheCorruptError`).

Writing is resumable and atomic per shard: each shard goes to a temporary file that is fsync'ed, hashed and renamed
into place, and only then is its record written (atomically). A rerun skips shards that have a record and a file of the
recorded size, recomputes the others (a killed run leaves at most a temporary file or a shard without a record), and
finally writes the complete manifest. A rerun over a complete cache verifies it: every shard's size and SHA-256
against its record; a missing or damaged shard is named (a warning), the manifest is marked incomplete and the shard
rewritten. A failed write (a full disk, also one filled by another process meanwhile) is a :class:`CacheError` naming
the shard and the cause; the shards written stay, and the rerun finishes the cache. Several processes can write one
cache together (shard ``s`` is written by process ``s mod world_size``; process 0 decides which shards are to be
written). Batches never cross shard boundaries, so a resumed or repaired run writes the same bytes.

Processes writing together must see one directory: on nodes that do not share a filesystem each would write its
shards to a disk of its own and the cache would stay incomplete everywhere. Before any shard is computed, process 0
writes a random token to ``.writers`` and every process reads it back; when some do not see it, every process raises
the same :class:`~rightreasons.errors.CacheError` (:func:`rightreasons.fileio.shared_directory`).
"""

from __future__ import annotations

import errno
import logging
import hashlib
import json
import math
import os
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import save_file
from torch import Tensor, nn
from torch.utils.data import DataLoader, Subset

from ..version import __version__
from ..data import collate
from ..data.io import relative_path
from ..config import diff_configs
from ..errors import CacheError
from ..fileio import (atomic_write, file_defect, file_record, read_json_object, require_free_space,
                      shared_directory, writable_directory, write_json_atomic)
from ..models import unwrap_model
from .formats import DEFAULT_FORMAT, FORMATS, MapFormat, require_finite, require_shape

__all__ = ["CacheCorruptError", "CacheMismatchError", "ExplanationCache", "MANIFEST", "weights_fingerprint",
           "write_cache"]

logger = logging.getLogger(__name__)

FORMAT, VERSION = "rightreasons-explanation-cache", 1
MANIFEST = "manifest.json"
SETTING_KEYS = ("teacher", "data", "transform", "explanation")
DEFAULT_SHARD_BYTES = 256 * 2 ** 20
WRITERS = ".writers"

#: ``explainer(images [N, C, H, W]) -> (logits [N, K], explanations [N, C', H', W'])`` on the teacher's input
Explainer = Callable[[Tensor], tuple[Tensor, Tensor]]


class CacheMismatchError(CacheError):
    """The cache was written for another teacher, dataset, transform or explanation than the one asked for."""


class CacheCorruptError(CacheError):
    """A shard's size or checksum disagrees with its record (truncated, overwritten or damaged file)."""


def weights_fingerprint(model: nn.Module) -> str:
    """SHA-256 over the model's state dict (names, dtypes, shapes and bytes, in name order)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(unwrap_model(model).state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())
    return digest.hexdigest()


def _ids_digest(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


def _shard_name(index: int) -> str:
    return f"shard-{index:05d}"


def _require(record: Any, keys: Sequence[str], where: str | Path) -> None:
    """Refuse a manifest entry that is not a mapping holding ``keys`` (a :class:`CacheError` naming the key)."""
    if not isinstance(record, Mapping):
        raise CacheError(f"{where}: expected a JSON object, got {type(record).__name__}")
    missing = [k for k in keys if k not in record]
    if missing:
        raise CacheError(f"{where}: missing key {missing[0]!r} (written by another version, or edited); rewrite the "
                         "cache with `rightreasons cache`")


def _format_of(manifest: Mapping[str, Any]) -> Any:
    """The manifest's explanation format (caches written before formats existed are ``float16``)."""
    return manifest.get("explanation_format", "float16")


def _mismatch(found: Mapping[str, Any], expected: Mapping[str, Any], keys: Sequence[str]) -> list[str]:
    return diff_configs({k: found.get(k) for k in keys}, {k: expected.get(k) for k in keys})


# ---------------------------------------------------------------------------------------------------------- writing
def _bytes_per_image(explainer: Explainer, dataset: Any, device: torch.device, storage: MapFormat) -> int:
    """What one image costs in a shard (its stored map and per-image numbers, float32 logits); the first image is
    explained and stored to learn it."""
    batch = collate([dataset[0]])
    logits, explanations = explainer(batch["image"].to(device))
    stored = storage.encode(explanations.detach().float().cpu())
    return sum(t.numel() * t.element_size() for t in stored.values()) + logits.shape[1] * 4


def _explain_rows(explainer: Explainer, dataset: Any, rows: range, batch_size: int, device: torch.device,
                  storage: MapFormat) -> tuple[dict[str, Tensor], list[int], list[str]]:
    """Explain dataset rows ``rows``: the shard's tensors (maps stored in ``storage``, float32 ``logits``), the shape
    of one map and the ids."""
    loader = DataLoader(Subset(dataset, list(rows)), batch_size=batch_size, shuffle=False, collate_fn=collate)
    parts: list[dict[str, Tensor]] = []
    shape, ids = [], []
    for batch in loader:
        out_logits, explanations = explainer(batch["image"].to(device))
        explanations = explanations.detach().float().cpu()
        shape = list(explanations.shape[1:])
        parts.append({**storage.encode(explanations), "logits": out_logits.detach().float().cpu()})
        ids += [str(i) for i in batch["id"]]
    return {key: torch.cat([p[key] for p in parts]) for key in parts[0]}, shape, ids


def _require_finite_outputs(root: Path, index: int, tensors: dict[str, Tensor], ids: list[str]) -> None:
    """Refuse to write shard ``index`` whose teacher outputs (logits, maps or their scales) hold a NaN or an infinite
    value, naming the shard, the field and the images: a cache that every later training would refuse (or, unread,
    train on as NaN losses) is not written in the first place."""
    for key, values in tensors.items():
        if not values.is_floating_point():
            continue
        bad = ~values.reshape(len(values), -1).isfinite().all(1)  # [N]: the images, one row each
        if bad.any():
            images = [ids[i] for i in bad.nonzero().flatten()[:5].tolist()]
            raise CacheError(f"{root}: the teacher's {key!r} for shard {_shard_name(index)} holds non-finite values "
                             f"(images {images}); nothing of that shard was written. A teacher's outputs are finite: "
                             "check its weights and the images")


def _write_shard(root: Path, index: int, rows: range, tensors: dict[str, Tensor], shape: list[int],
                 ids: list[str]) -> dict[str, Any]:
    """Write shard ``index`` atomically (:func:`~rightreasons.fileio.atomic_write`), then its record."""
    name = _shard_name(index)
    path = atomic_write(root / f"{name}.safetensors", lambda tmp: save_file(
        {key: t.contiguous() for key, t in tensors.items()}, str(tmp), metadata={"ids": json.dumps(ids)}))
    record = {"file": path.name, "index": index, "start": rows.start, "stop": rows.stop, **file_record(path),
              "explanation_shape": shape, "num_classes": tensors["logits"].shape[1]}
    write_json_atomic(root / f"{name}.json", record)
    return record


UNWRITTEN = "has no record"
"""Why :func:`_unfinished` lists a shard that was never finished: in a partial cache, the shards to come; any other
reason, or any reason in a cache marked complete, is damage worth a warning."""


def _unfinished(root: Path, num_shards: int, checksum: bool) -> dict[int, str]:
    """The shards still to write, each with why: no record (:data:`UNWRITTEN`), an unreadable record, or a file
    that disagrees with its record — missing, another size, or (with ``checksum``) another SHA-256."""
    todo = {}
    for index in range(num_shards):
        name = _shard_name(index)
        record_path = root / f"{name}.json"
        if not record_path.is_file():
            todo[index] = UNWRITTEN
            continue
        try:
            record = read_json_object(record_path, "shard record", CacheError)
        except CacheError as e:
            todo[index] = f"has an unreadable record ({e})"
            continue
        problem = file_defect(root / f"{name}.safetensors", record, checksum=checksum)
        if problem is not None:
            todo[index] = problem
    return todo


@contextmanager
def _writing(root: Path, what: str) -> Iterator[None]:
    """Turn a failed write of ``what`` (a full disk — also when another process filled it meanwhile —, a file size
    limit, a read-only disk) into a :class:`CacheError` naming it and the cause, saying that the cache stays
    resumable: shards are renamed into place only once written, so a failed write leaves none half-written."""
    try:
        yield
    except (OSError, SafetensorError) as e:
        full = getattr(e, "errno", None) == errno.ENOSPC or f"(os error {errno.ENOSPC})" in str(e)
        cause = "no space left on device" if full else f"{type(e).__name__}: {e}"
        raise CacheError(f"could not write {what} of {root}: {cause}. The shards written so far are kept: "
                         f"{'free some space' if full else 'remove the cause'} and rerun the same command to finish "
                         "the cache") from e


def write_cache(explainer: Explainer, dataset: Any, out: str | os.PathLike, setting: Mapping[str, Any], *,
                batch_size: int = 64, shard_size: int | None = None, device: torch.device | str = "cpu",
                rank: int = 0, world_size: int = 1, barrier: Callable[[], None] = lambda: None,
                gather: Callable[[Any], list[Any]] = lambda value: [value],
                target_shard_bytes: int = DEFAULT_SHARD_BYTES, provenance: Mapping[str, Any] | None = None,
                explanation_format: str = DEFAULT_FORMAT) -> Path:
    """Explain every image of ``dataset`` once and store logits and explanations in ``out``; returns the manifest.

    Args:
        explainer: the teacher's ``images -> (logits, explanations)`` (no graph; see :data:`Explainer`).
        dataset: samples in the common format whose transform gives the teacher's input on the base view; needs
            ``ids`` (the sample ids in index order).
        out: the cache directory (created; a partial cache of the same setting there is resumed).
        setting: the ``teacher``, ``data``, ``transform`` and ``explanation`` sections recorded and compared.
        batch_size: images per teacher call (batches stay inside a shard).
        shard_size: images per shard; ``None`` = about ``target_shard_bytes`` per shard, or the size of the partial
            cache being resumed.
        rank, world_size, barrier, gather: this process's share when several processes write together
            (``barrier`` synchronises them, ``gather(value)`` returns every process's value in rank order); defaults:
            one process.
        provenance: extra information recorded but not compared (teacher checkpoint path, ...).
        explanation_format: how the maps are stored, one of :data:`~rightreasons.distill.formats.FORMATS`.

    Raises:
        CacheMismatchError: ``out`` holds a cache (partial or complete) of another setting, dataset or sharding.
        CacheError: not every process sees ``out`` (module docstring); a shard or the manifest could not be written
            (naming it and the cause; what was written stays resumable).
    """
    root = Path(out)
    missing = [k for k in SETTING_KEYS if k not in setting]
    if missing:
        raise ValueError(f"write_cache: setting lacks the sections {missing}")
    if explanation_format not in FORMATS:
        raise ValueError(f"write_cache: unknown explanation format {explanation_format!r}; expected one of "
                         f"{list(FORMATS)}")
    storage = FORMATS[explanation_format]
    device = torch.device(device)
    ids = [str(i) for i in dataset.ids]
    if not ids:
        raise ValueError("write_cache: the dataset is empty")
    header: dict[str, Any] = {"format": FORMAT, "version": VERSION, **{k: setting[k] for k in SETTING_KEYS},
                              "explanation_format": explanation_format, "num_images": len(ids),
                              "ids_sha256": _ids_digest(ids)}
    if world_size > 1:  # before anything is read: every process must see the same files
        if rank == 0:
            writable_directory(root, "cache directory")
        shared_directory(root, WRITERS, rank == 0, gather, CacheError,
                         "Processes write one cache together only on a filesystem they share (NFS, Lustre, ...): put "
                         "the cache there, or write it on one node and copy it to the others")
    manifest_path = root / MANIFEST
    existing = read_json_object(manifest_path, "cache manifest", CacheError) if manifest_path.is_file() else None
    if existing is not None:
        keys = ("format", "version", *SETTING_KEYS, "explanation_format", "num_images", "ids_sha256")
        differing = _mismatch({**existing, "explanation_format": _format_of(existing)}, header, keys)
        if shard_size is not None and existing.get("shard_size") != shard_size:
            differing.append(f"shard_size: {existing.get('shard_size')!r} != {shard_size!r}")
        if differing:
            raise CacheMismatchError(f"{root} already holds a cache of another setting; differing keys: "
                                     + "; ".join(differing) + ". Choose another output directory or delete it.")
        shard_size = int(existing["shard_size"])
    complete = existing is not None and bool(existing.get("complete"))
    per_image = None
    if existing is None and shard_size is None:
        per_image = _bytes_per_image(explainer, dataset, device, storage)
        shard_size = max(1, target_shard_bytes // per_image)
    if shard_size < 1:
        raise ValueError(f"write_cache: shard_size must be >= 1, got {shard_size}")
    num_shards = math.ceil(len(ids) / shard_size)
    header.update(shard_size=shard_size, num_shards=num_shards, complete=False,
                  provenance={"rightreasons": __version__, **(provenance or {})})
    todo: dict[int, str] = {}
    if rank == 0:  # decides, for every process, which shards to write
        writable_directory(root, "cache directory")
        for stale in root.glob(".*.tmp"):  # temporary files of a killed writer
            stale.unlink()
        todo = _unfinished(root, num_shards, checksum=complete)
        for s, problem in todo.items():
            if complete or problem != UNWRITTEN:
                logger.warning("cache: %s %s; rewriting it", root / f"{_shard_name(s)}.safetensors", problem)
        if todo:
            if per_image is None:
                per_image = _bytes_per_image(explainer, dataset, device, storage)
            images = sum(min(len(ids), (s + 1) * shard_size) - s * shard_size for s in todo)
            require_free_space(root, int(1.05 * images * per_image),
                               f"the {images:,} images still to cache need about {per_image:,} bytes each (with 5 % "
                               "headroom)", error=CacheError)
            if existing is None or complete:  # a repaired cache is incomplete until its shards are rewritten
                with _writing(root, MANIFEST):
                    write_json_atomic(manifest_path, header)
    todo = gather(todo)[0]
    if complete and not todo:
        return manifest_path
    mine = [s for s in sorted(todo) if s % world_size == rank]
    for done, s in enumerate(mine, 1):
        rows = range(s * shard_size, min(len(ids), (s + 1) * shard_size))
        tensors, shape, shard_ids = _explain_rows(explainer, dataset, rows, batch_size, device, storage)
        if shard_ids != ids[rows.start:rows.stop]:
            raise CacheError(f"{root}: dataset returned ids {shard_ids[:3]}... for rows {rows.start}–"
                             f"{rows.stop - 1}, expected {ids[rows.start:rows.start + 3]}...")
        _require_finite_outputs(root, s, tensors, shard_ids)
        with _writing(root, f"shard {_shard_name(s)}"):
            _write_shard(root, s, rows, tensors, shape, shard_ids)
        if rank == 0:
            logger.info("cache: %d/%d shards written by process 0", done, len(mine))
    barrier()
    if rank == 0:
        records = [read_json_object(root / f"{_shard_name(s)}.json", "shard record", CacheError)
                   for s in range(num_shards)]
        shapes = {tuple(r["explanation_shape"]) for r in records}
        classes = {r["num_classes"] for r in records}
        if len(shapes) != 1 or len(classes) != 1:
            raise CacheError(f"{root}: shards disagree on explanation shape {sorted(shapes)} or class count "
                             f"{sorted(classes)}")
        with _writing(root, MANIFEST):
            write_json_atomic(manifest_path, {**header, "explanation_shape": list(shapes.pop()),
                                              "num_classes": classes.pop(), "shards": records, "complete": True})
    barrier()
    return manifest_path


# ---------------------------------------------------------------------------------------------------------- reading
_DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "I32": torch.int32,
           "I64": torch.int64, "F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32,
           "F64": torch.float64}
_MAX_HEADER = 100 * 2 ** 20  # the limit of safetensors itself


class _Shard:
    """A safetensors shard read with positioned reads of the rows asked for — never memory-mapped, so that a shard
    truncated under its reader is a :class:`CacheCorruptError` naming it instead of a ``SIGBUS``. Holds the parsed
    header only (each read opens the file), so it pickles into DataLoader workers and keeps no file open.
    ``get_slice(name)[a:b]`` and ``get_tensor(name)`` read as ``safe_open`` handles do, for rows along the first
    dimension."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with self._file() as f:
            self.size = os.fstat(f.fileno()).st_size
            (length,) = struct.unpack("<Q", self._read(f, 0, 8)) if self.size >= 8 else (-1,)
            if not 0 < length <= min(_MAX_HEADER, self.size - 8):
                raise self._unreadable(f"a header of {length:,} bytes in a file of {self.size:,}")
            try:
                header = json.loads(self._read(f, 8, length))
            except (UnicodeDecodeError, json.JSONDecodeError) as e:
                raise self._unreadable(f"its header is not JSON ({e})") from None
        if not isinstance(header, dict):
            raise self._unreadable("its header is not a JSON object")
        self._data = 8 + length
        self.metadata = header.pop("__metadata__", None) or {}
        self._tensors = {name: self._entry(name, spec) for name, spec in header.items()}
        self.shapes = {name: shape for name, (_, shape, _) in self._tensors.items()}

    def _unreadable(self, why: str) -> CacheCorruptError:
        return CacheCorruptError(f"{self.path}: unreadable shard ({why}); rewrite the cache")

    def _entry(self, name: str, spec: Any) -> tuple[torch.dtype, tuple[int, ...], int]:
        """A tensor's dtype, shape and offset in the file, after checking that its bytes lie inside the file."""
        try:
            dtype = _DTYPES[spec["dtype"]]
            shape = tuple(int(n) for n in spec["shape"])
            begin, end = (int(n) for n in spec["data_offsets"])
        except (KeyError, TypeError, ValueError) as e:
            raise self._unreadable(f"tensor {name!r} has no valid dtype, shape and data_offsets ({e!r})") from None
        if (not shape or min(shape) < 0 or not 0 <= begin <= end or self._data + end > self.size
                or end - begin != math.prod(shape) * dtype.itemsize):
            raise self._unreadable(f"tensor {name!r} of shape {list(shape)} does not fit its bytes {begin}–{end} in a "
                                   f"file of {self.size:,}")
        return dtype, shape, self._data + begin

    def _file(self) -> Any:
        try:
            return open(self.path, "rb", buffering=0)
        except FileNotFoundError:
            raise CacheCorruptError(f"{self.path}: the shard is missing (deleted while being read); rewrite the "
                                    "cache") from None
        except OSError as e:
            raise CacheError(f"{self.path}: cannot read the shard ({e})") from None

    def _read(self, f: Any, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset``; a file that changed size since it was opened, or comes up short, is named."""
        now = os.fstat(f.fileno()).st_size
        data = os.pread(f.fileno(), size, offset) if now == self.size else b""
        while 0 < len(data) < size:
            more = os.pread(f.fileno(), size - len(data), offset + len(data))
            if not more:
                break
            data += more
        if len(data) != size:
            raise CacheCorruptError(f"{self.path}: the shard was truncated or rewritten while being read (it has "
                                    f"{os.fstat(f.fileno()).st_size:,} bytes, {self.size:,} when the cache was "
                                    f"opened; {len(data):,} of {size:,} bytes read at offset {offset:,}); rewrite "
                                    "the cache and start again")
        return data

    def rows(self, name: str, start: int, stop: int) -> Tensor:
        """Rows ``start:stop`` of tensor ``name`` (along its first dimension)."""
        if name not in self._tensors:
            raise self._unreadable(f"it holds no tensor {name!r}")
        dtype, shape, offset = self._tensors[name]
        if not 0 <= start <= stop <= shape[0]:
            raise CacheCorruptError(f"{self.path}: rows {start}:{stop} asked of {name!r}, which has {shape[0]}; "
                                    "rewrite the cache")
        row = math.prod(shape[1:]) * dtype.itemsize
        if start == stop or row == 0:
            return torch.empty((stop - start, *shape[1:]), dtype=dtype)
        with self._file() as f:
            data = self._read(f, offset + start * row, (stop - start) * row)
        return torch.frombuffer(bytearray(data), dtype=dtype).reshape(stop - start, *shape[1:])

    def get_tensor(self, name: str) -> Tensor:
        return self.get_slice(name)[:]

    def get_slice(self, name: str) -> _Rows:
        return _Rows(self, name)


class _Rows:
    """``shard.get_slice(name)``: ``[a:b]`` reads rows ``a:b`` of a tensor of a :class:`_Shard`."""

    def __init__(self, shard: _Shard, name: str) -> None:
        self.shard, self.name = shard, name

    def __getitem__(self, rows: slice) -> Tensor:
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise TypeError(f"a shard's tensors are read by contiguous row ranges, not {rows!r}")
        start = 0 if rows.start is None else rows.start
        stop = self.shard.shapes.get(self.name, (0,))[0] if rows.stop is None else rows.stop
        return self.shard.rows(self.name, start, stop)


class ExplanationCache(Mapping[str, Tensor]):
    """A complete cache directory, read lazily: ``cache[id]`` is the decoded float32 explanation ``[C, H, W]`` of
    sample ``id`` at the resolution it was computed at (the base view's; a read of one row, whatever the storage
    format), :meth:`logits` the cached teacher logits of a list of ids.

    Opening checks format, completeness, every shard's size and (with ``verify=True``) SHA-256, the ids, the shapes
    of every shard's tensors and that its logits and per-image numbers are finite; with ``explanation_format``, also
    that the maps are stored in that format (:class:`CacheMismatchError` naming both). A map that cannot be decoded
    (a shard changed while being read, a crafted ``compact`` map) is a :class:`CacheCorruptError` naming the shard and
    the sample. Use it as the ``explanations`` mapping of :func:`rightreasons.data.train_transform`. It keeps no file
    open (each read opens its shard), so it pickles into DataLoader workers.
    """

    def __init__(self, root: str | os.PathLike, verify: bool = True, explanation_format: str | None = None) -> None:
        self.root = Path(root)
        path = self.root / MANIFEST
        if not path.is_file():
            raise CacheError(f"{self.root}: not an explanation cache (no {MANIFEST}); write one with "
                             "`rightreasons cache --out DIR`")
        manifest = read_json_object(path, "cache manifest", CacheError)
        if manifest.get("format") != FORMAT or manifest.get("version") != VERSION:
            raise CacheError(f"{path}: not a {FORMAT} manifest of version {VERSION} (format "
                             f"{manifest.get('format')!r}, version {manifest.get('version')!r})")
        if not manifest.get("complete"):
            raise CacheError(f"{self.root}: the cache is incomplete (its writing was interrupted); rerun the same "
                             "`rightreasons cache` command to finish it")
        _require(manifest, ("shards", "num_images", "ids_sha256", "explanation_shape", "num_classes", *SETTING_KEYS),
                 path)
        if not isinstance(manifest["shards"], list):
            raise CacheError(f"{path}: 'shards' must be a list of shard records")
        for i, record in enumerate(manifest["shards"]):
            _require(record, ("file", "start", "stop", "sha256", "bytes"), f"{path}: shards[{i}]")
        written = _format_of(manifest)
        if written not in FORMATS:
            raise CacheError(f"{path}: unknown explanation_format {written!r} (written by a newer version?); "
                             f"expected one of {list(FORMATS)}")
        if explanation_format is not None and explanation_format != written:
            raise CacheMismatchError(f"{self.root}: the cache stores its explanations as {written!r}, but "
                                     f"{explanation_format!r} was asked for (distill.cache_format); set "
                                     f"distill.cache_format={written} or write a {explanation_format} cache")
        shape = manifest["explanation_shape"]
        if not (isinstance(shape, list) and len(shape) == 3 and all(type(n) is int and n > 0 for n in shape)):
            raise CacheError(f"{path}: explanation_shape {shape!r} is not a map shape [C, H, W] of positive integers")
        self.explanation_format = written
        self._storage = FORMATS[written]
        self._shape = tuple(shape)
        self.manifest = manifest
        self.shards: list[dict[str, Any]] = manifest["shards"]
        self._readers: list[_Shard] = []
        ids: list[str] = []
        logits: list[Tensor] = []
        self._per_image: list[dict[str, Tensor]] = []
        for record in self.shards:
            shard, shard_ids = self._open_shard(record, verify)
            shard_logits, per_image = self._load_shard(shard, len(shard_ids))
            self._readers.append(shard)
            ids += shard_ids
            logits.append(shard_logits)
            self._per_image.append(per_image)
        if len(ids) != manifest["num_images"] or _ids_digest(ids) != manifest["ids_sha256"]:
            raise CacheCorruptError(f"{self.root}: the shards hold {len(ids)} ids that do not match the manifest's "
                                    f"{manifest['num_images']} (ids_sha256)")
        self.ids = ids
        self._row = {sample_id: (s, r) for s, record in enumerate(self.shards)
                     for r, sample_id in enumerate(ids[record["start"]:record["stop"]])}
        self._logits = torch.cat(logits)

    # ---- checks
    def _shard_path(self, record: Mapping[str, Any]) -> Path:
        return self.root / relative_path(record["file"], f"{self.root / MANIFEST}: shard record")

    def _open_shard(self, record: Mapping[str, Any], verify: bool) -> tuple[_Shard, list[str]]:
        """The shard's reader and ids, after checking its size (and SHA-256 with ``verify``) against its record."""
        path = self._shard_path(record)
        problem = file_defect(path, record, checksum=verify)
        if problem is not None:
            raise CacheCorruptError(f"{path}: shard {problem}; rewrite the cache")
        shard = _Shard(path)
        try:
            ids = json.loads(shard.metadata["ids"])
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise CacheCorruptError(f"{path}: unreadable shard (no JSON list of ids in its metadata: "
                                    f"{type(e).__name__}: {e})") from e
        if not isinstance(ids, list):
            raise CacheCorruptError(f"{path}: unreadable shard (its metadata's ids are not a list)")
        if len(ids) != record["stop"] - record["start"]:
            raise CacheCorruptError(f"{path}: shard holds {len(ids)} ids, its record says "
                                    f"{record['stop'] - record['start']}")
        return shard, [str(i) for i in ids]

    def _load_shard(self, shard: _Shard, rows: int) -> tuple[Tensor, dict[str, Tensor]]:
        """A shard's logits and the index of its per-image numbers (:meth:`MapFormat.index`), after checking their
        shapes against the manifest's and that they are finite (a :class:`CacheCorruptError` naming shard and
        field: a NaN here would only show up as a diverging training)."""
        try:
            require_shape(shard.shapes, "logits", (rows, self.manifest["num_classes"]))
            logits = shard.get_tensor("logits")
            require_finite("logits", logits)
            per_image = {name: shard.get_tensor(name) for name in self._storage.per_image}
            self._storage.check(shard.shapes, per_image, rows, self._shape)
        except ValueError as e:
            raise CacheCorruptError(f"{shard.path}: {e}; rewrite the cache") from None
        return logits.float(), self._storage.index(per_image)

    def check_setting(self, expected: Mapping[str, Any]) -> None:
        """Refuse the cache unless its teacher, data, transform and explanation sections equal ``expected``'s."""
        differing = _mismatch(self.manifest, expected, SETTING_KEYS)
        if differing:
            raise CacheMismatchError(f"{self.root}: the cache was written for another setting (stale or wrong "
                                     "cache); differing keys: " + "; ".join(differing)
                                     + ". Write a new one with `rightreasons cache`.")

    def check_ids(self, ids: Sequence[str]) -> None:
        """Refuse the cache unless it holds every id in ``ids``."""
        missing = [i for i in ids if i not in self._row]
        if missing:
            raise CacheMismatchError(f"{self.root}: no cached explanation for {len(missing)} of the {len(ids)} "
                                     f"training images (e.g. {missing[:5]})")

    # ---- access
    def __getitem__(self, sample_id: str) -> Tensor:
        shard, row = self._row[sample_id]
        reader = self._readers[shard]
        try:
            return self._storage.decode(reader, row, self._per_image[shard], self._shape)
        except ValueError as e:
            raise CacheCorruptError(f"{reader.path}: the map (row {row}) of sample {sample_id!r} {e}; rewrite the "
                                    "cache") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.ids)

    def __len__(self) -> int:
        return len(self.ids)

    def __contains__(self, sample_id: object) -> bool:
        return sample_id in self._row

    def logits(self, ids: Sequence[str]) -> Tensor:
        """The cached teacher logits ``[N, K]`` (float32) of samples ``ids``."""
        try:
            rows = [self.shards[s]["start"] + r for s, r in (self._row[i] for i in ids)]
        except KeyError as e:
            raise CacheMismatchError(f"{self.root}: no cached logits for sample {e.args[0]!r}") from None
        return self._logits[rows]

    def __repr__(self) -> str:
        return (f"ExplanationCache({str(self.root)!r}, {len(self)} images, {self.explanation_format} explanations "
                f"{self.manifest['explanation_shape']}, teacher {self.manifest['teacher'].get('name')!r})")
