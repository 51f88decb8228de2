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
resolution. Logits are few and stay float32. Shards are read lazily and memory-mapped (``safe_open``): an explanation
is read when a sample needs it; logits and the few per-image numbers of the format are loaded once.

The manifest records the *setting* — teacher (registry name, arguments, SHA-256 of its weights), data (name, root,
split, options), transform (resolution, crop fraction, the teacher's input encoding) and explanation (kind, layer) —
plus the image ids (count and SHA-256) and the sharding. A cache whose setting differs from the one asked for is
refused (:class:`CacheMismatchError`, listing the differing keys), an incomplete one too, and a shard whose size or
SHA-256 disagrees with its record is named (:class:`CacheCorruptError`).

Writing is resumable and atomic per shard: each shard goes to a temporary file that is fsync'ed, hashed and renamed
into place, and only then is its record written (atomically). A rerun skips shards that have a record and a file of the
recorded size, recomputes the others (a killed run leaves at most a temporary file or a shard without a record), and
finally writes the complete manifest. Several processes can write one cache together (shard ``s`` is written by
process ``s mod world_size``). Batches never cross shard boundaries, so a resumed run writes the same bytes.

Processes writing together must see one directory: on nodes that do not share a filesystem each would write its
shards to a disk of its own and the cache would stay incomplete everywhere. Before any shard is computed, process 0
writes a random token to ``.writers`` and every process reads it back; when some do not see it, every process raises
the same :class:`~rightreasons.errors.CacheError`.
"""

from __future__ import annotations

import errno
import logging
import hashlib
import json
import math
import os
import secrets
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file
from torch import Tensor, nn
from torch.utils.data import DataLoader, Subset

from ..version import __version__
from ..data import collate
from ..data.io import relative_path
from ..config import diff_configs
from ..errors import CacheError
from ..fileio import (atomic_write, file_defect, file_record, read_json_object, require_free_space,
                      writable_directory, write_json_atomic)
from ..models import unwrap_model
from .formats import DEFAULT_FORMAT, FORMATS, MapFormat

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


def _finished(root: Path, index: int) -> bool:
    """Whether shard ``index`` has a record and a file of the recorded size (a complete, renamed shard)."""
    name = _shard_name(index)
    record_path = root / f"{name}.json"
    if not record_path.is_file():
        return False
    try:
        record = read_json_object(record_path, "shard record", CacheError)
        return file_defect(root / f"{name}.safetensors", record, checksum=False) is None
    except CacheError:
        return False


def _check_shared(root: Path, token: str | None, rank: int, world_size: int,
                  gather: Callable[[Any], list[Any]]) -> None:
    """Refuse, on every process at once, a directory that not every process sees (process 0 wrote ``token`` to
    :data:`WRITERS` in it before calling this)."""
    token = gather(token)[0]
    try:
        seen = (root / WRITERS).read_text() == token
    except OSError:
        seen = False
    blind = [r for r, ok in enumerate(gather(seen)) if not ok]
    if blind:
        raise CacheError(f"{root} is not one directory for all {world_size} processes: process(es) {blind} do not see "
                         "the file process 0 wrote there (a disk of each node's own?). Processes write one cache "
                         "together only on a filesystem they share (NFS, Lustre, ...): put the cache there, or write "
                         "it on one node and copy it to the others")


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
        CacheError: not every process sees ``out`` (module docstring).
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
        token = None
        if rank == 0:
            writable_directory(root, "cache directory")
            token = secrets.token_hex(16)
            (root / WRITERS).write_text(token)
        _check_shared(root, token, rank, world_size, gather)
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
        if existing.get("complete"):
            return manifest_path
        shard_size = int(existing["shard_size"])
    per_image = _bytes_per_image(explainer, dataset, device, storage)
    if existing is None and shard_size is None:
        shard_size = max(1, target_shard_bytes // per_image)
    if shard_size < 1:
        raise ValueError(f"write_cache: shard_size must be >= 1, got {shard_size}")
    num_shards = math.ceil(len(ids) / shard_size)
    header.update(shard_size=shard_size, num_shards=num_shards, complete=False,
                  provenance={"rightreasons": __version__, **(provenance or {})})
    if rank == 0:
        writable_directory(root, "cache directory")
        for stale in root.glob(".*.tmp"):  # temporary files of a killed writer
            stale.unlink()
        missing = [s for s in range(num_shards) if not _finished(root, s)]
        images = sum(min(len(ids), (s + 1) * shard_size) - s * shard_size for s in missing)
        require_free_space(root, int(1.05 * images * per_image),
                           f"the {images:,} images still to cache need about {per_image:,} bytes each (with 5 % "
                           "headroom)", error=CacheError)
        if existing is None:
            write_json_atomic(manifest_path, header)
    barrier()
    mine = [s for s in range(num_shards) if s % world_size == rank]
    for done, s in enumerate(mine, 1):
        if not _finished(root, s):
            rows = range(s * shard_size, min(len(ids), (s + 1) * shard_size))
            tensors, shape, shard_ids = _explain_rows(explainer, dataset, rows, batch_size, device, storage)
            if shard_ids != ids[rows.start:rows.stop]:
                raise CacheError(f"{root}: dataset returned ids {shard_ids[:3]}... for rows {rows.start}–"
                                 f"{rows.stop - 1}, expected {ids[rows.start:rows.start + 3]}...")
            try:
                _write_shard(root, s, rows, tensors, shape, shard_ids)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                raise CacheError(f"the disk holding {root} is full: shard {s} could not be written ({e}). The shards "
                                 "written so far are kept; free some space and rerun the same command to "
                                 "finish the cache") from e
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
        write_json_atomic(manifest_path, {**header, "explanation_shape": list(shapes.pop()),
                                          "num_classes": classes.pop(), "shards": records, "complete": True})
    barrier()
    return manifest_path


# ---------------------------------------------------------------------------------------------------------- reading
class ExplanationCache(Mapping[str, Tensor]):
    """A complete cache directory, read lazily: ``cache[id]`` is the decoded float32 explanation ``[C, H, W]`` of
    sample ``id`` at the resolution it was computed at (the base view's; a memory-mapped read of one row, whatever the
    storage format), :meth:`logits` the cached teacher logits of a list of ids.

    Opening checks format, completeness, every shard's size and (with ``verify=True``) SHA-256, and the ids; with
    ``explanation_format``, also that the maps are stored in that format (:class:`CacheMismatchError` naming both).
    Use it as the ``explanations`` mapping of :func:`rightreasons.data.train_transform`. It pickles without its open
    files, so DataLoader workers reopen shards on first use.
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
        self.explanation_format = written
        self._storage = FORMATS[written]
        self._shape = tuple(manifest["explanation_shape"])
        self.manifest = manifest
        self.shards: list[dict[str, Any]] = manifest["shards"]
        ids: list[str] = []
        for record in self.shards:
            ids += self._check_shard(record, verify)
        if len(ids) != manifest["num_images"] or _ids_digest(ids) != manifest["ids_sha256"]:
            raise CacheCorruptError(f"{self.root}: the shards hold {len(ids)} ids that do not match the manifest's "
                                    f"{manifest['num_images']} (ids_sha256)")
        self.ids = ids
        self._row = {sample_id: (s, r) for s, record in enumerate(self.shards)
                     for r, sample_id in enumerate(ids[record["start"]:record["stop"]])}
        self._logits = torch.cat([self._tensor(s, "logits") for s in range(len(self.shards))])
        self._per_image = [self._storage.index({name: self._tensor(s, name) for name in self._storage.per_image})
                           for s in range(len(self.shards))]
        self._handles: dict[int, Any] = {}

    # ---- checks
    def _shard_path(self, record: Mapping[str, Any]) -> Path:
        return self.root / relative_path(record["file"], f"{self.root / MANIFEST}: shard record")

    def _check_shard(self, record: Mapping[str, Any], verify: bool) -> list[str]:
        """The shard's ids, after checking its size (and SHA-256 with ``verify``) against its record."""
        path = self._shard_path(record)
        problem = file_defect(path, record, checksum=verify)
        if problem is not None:
            raise CacheCorruptError(f"{path}: shard {problem}; rewrite the cache")
        try:
            with safe_open(str(path), framework="pt") as f:
                ids = json.loads((f.metadata() or {})["ids"])
        except (SafetensorError, KeyError, json.JSONDecodeError) as e:
            raise CacheCorruptError(f"{path}: unreadable shard ({type(e).__name__}: {e})") from e
        if len(ids) != record["stop"] - record["start"]:
            raise CacheCorruptError(f"{path}: shard holds {len(ids)} ids, its record says "
                                    f"{record['stop'] - record['start']}")
        return [str(i) for i in ids]

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
    def _open(self, shard: int) -> Any:
        handle = self._handles.get(shard)
        if handle is None:
            handle = self._handles[shard] = safe_open(str(self._shard_path(self.shards[shard])), framework="pt")
        return handle

    def _tensor(self, shard: int, name: str) -> Tensor:
        with safe_open(str(self._shard_path(self.shards[shard])), framework="pt") as f:
            return f.get_tensor(name)

    def __getitem__(self, sample_id: str) -> Tensor:
        shard, row = self._row[sample_id]
        return self._storage.decode(self._open(shard), row, self._per_image[shard], self._shape)

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

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_handles": {}}

    def __repr__(self) -> str:
        return (f"ExplanationCache({str(self.root)!r}, {len(self)} images, {self.explanation_format} explanations "
                f"{self.manifest['explanation_shape']}, teacher {self.manifest['teacher'].get('name')!r})")
