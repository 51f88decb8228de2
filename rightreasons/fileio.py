"""Writing files so that a crash never leaves a partial one: the one atomic-write recipe of the package.

:func:`atomic_write` writes to a temporary file in the target's directory, flushes it to disk (``fsync``), renames it
over the target (``os.replace``, atomic on POSIX filesystems) and flushes the directory entry, so that after a crash or
``SIGKILL`` a reader finds either the complete old file or the complete new one, never a mix. Model files, checkpoint
states, cache shards, summaries and reports are all written through it.

Nothing is written through a symbolic link (a link planted at a path a command writes would have its target — a file
of another run or another user — overwritten): :func:`atomic_write` refuses a link at its path, and its temporary
file has a unique name, is created exclusively and never through a link (``O_EXCL | O_NOFOLLOW``) and is locked while
it is written, so that the next write of the same path removes the temporaries of a killed writer;
:func:`open_no_follow` opens a file written in place (a log, a dataset's images) with ``O_NOFOLLOW``; and
:func:`refuse_links` lets a command refuse, at its start, links at the paths it will write. Each refusal
(:func:`refuse_link`) names the path and says that it is a symbolic link.

:func:`writable_directory` is the one check, before any work, that an output directory can be created and written.

:func:`json_text` is the one JSON encoder of what the package writes: it refuses NaN and ±inf (which JSON cannot
hold; ``json.dumps`` would write the invalid tokens ``NaN`` and ``Infinity``) with a
:class:`~rightreasons.errors.NonFiniteError` naming the key.

:func:`file_digest` is the one checksum of a file's bytes (checkpoint manifests, cache shards, released weights,
dataset checksum files).

:class:`DirectoryLock` is the one lock of a directory a command writes (a training run's output directory, an e²KD
cache): an exclusive ``flock`` on ``DIRECTORY/.lock``, held until the writer ends. A second writer (another launch,
another node on a shared filesystem) is refused with an error naming the holder (process id, host, start time,
command line). The kernel releases the lock when its process ends, however it ends, so a restart after ``SIGKILL`` is
never blocked by a stale lock; the file itself stays and only describes the last holder.

:func:`remove_tree` is the one deletion of a directory a command wrote (checkpoints, leftovers of a crash): it never
follows a symlink out of the directory it cleans.

This module imports nothing of rightreasons but the crash-test boundaries (:mod:`rightreasons.faults`) and the error
classes.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import fcntl
import glob
import hashlib
import json
import math
import os
import re
import secrets
import shutil
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from .errors import NonFiniteError, RightReasonsError, UsageError
from .faults import boundary

__all__ = ["DirectoryLock", "LOCK_FILE", "atomic_write", "atomic_write_all", "file_defect", "file_digest",
           "file_record", "fsync_path", "json_text", "open_no_follow", "read_json_object", "refuse_link",
           "refuse_links", "remove_tree", "require_free_space", "shared_directory", "writable_directory", "writable_file",
           "write_csv_atomic", "write_json_atomic", "write_text_atomic"]

_DIGEST_CHUNK = 1 << 22


def file_digest(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """Hex digest of the file's bytes (``algorithm``: any name of :mod:`hashlib`), read in 4 MiB chunks so that
    large files never sit in memory whole."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        while chunk := f.read(_DIGEST_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_record(path: str | os.PathLike) -> dict[str, Any]:
    """What a manifest records of a file to verify it later: ``{"bytes": size, "sha256": digest}``."""
    return {"bytes": Path(path).stat().st_size, "sha256": file_digest(path)}


def file_defect(path: str | os.PathLike, record: dict[str, Any], checksum: bool = True) -> str | None:
    """Why the file ``path`` is not the one its :func:`file_record` ``record`` describes — missing, another size,
    another SHA-256 (with ``checksum``) — as the end of a sentence about the file; ``None`` when it is. The one check
    behind every manifest-verified set of files (training checkpoints, the e²KD cache's shards)."""
    path = Path(path)
    if not path.is_file():
        return "is missing"
    size = path.stat().st_size
    if size != record.get("bytes"):
        return f"has {size} bytes, its record says {record.get('bytes')} (truncated or replaced)"
    if checksum and file_digest(path) != record.get("sha256"):
        return "does not match its SHA-256 in the record (corrupted or replaced)"
    return None


def fsync_path(path: str | os.PathLike) -> None:
    """Flush a file's contents, or a directory's entries (after a rename inside it), to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def writable_directory(path: str | os.PathLike, what: str = "output directory", *, create: bool = True) -> Path:
    """Check, before any work is done, that directory ``path`` can hold the files a command writes:
    :class:`~rightreasons.errors.UsageError` naming ``what`` and the path when it cannot (a file in the way, no write
    permission, a read-only disk). ``create=True`` creates it (with its parents) and writes and removes a probe file;
    ``create=False`` leaves the disk as it is and checks the nearest existing ancestor instead. Returns the path."""
    path = Path(path)
    try:
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir():
            raise UsageError(f"{what} {path} is not writable: {existing} is a file, not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UsageError(f"{what} {path} is not writable: no write permission in {existing} for user id "
                             f"{os.getuid()}")
        if create:
            path.mkdir(parents=True, exist_ok=True)
            probe = path / f".write-test.{uuid.uuid4().hex[:12]}"
            probe.write_text("ok")
            probe.unlink()
    except OSError as e:  # also a name too long for the filesystem (ENAMETOOLONG), met by the first look at it
        raise UsageError(f"{what} {_excerpt(path)} is not writable: {e.strerror or e}") from e
    return path


def _excerpt(path: Path, limit: int = 200) -> str:
    """``path`` as text, its middle elided beyond ``limit`` characters (a 5,000-character path in a message)."""
    text = str(path)
    return text if len(text) <= limit else f"{text[:limit // 2]}…{text[-limit // 2:]} ({len(text):,} characters)"


def remove_tree(path: str | os.PathLike, inside: str | os.PathLike) -> None:
    """Delete directory ``path``, which lies in directory ``inside``, never following a symlink out of ``inside``: a
    symlink is removed itself (its target is untouched); a directory that resolves outside ``inside`` (through a
    symlinked parent) is refused with :class:`~rightreasons.errors.UsageError`. Links inside the tree are removed,
    never followed (:func:`shutil.rmtree`)."""
    path = Path(path)
    if path.is_symlink():
        path.unlink()
        return
    resolved, root = path.resolve(), Path(inside).resolve()
    if resolved != root and root not in resolved.parents:
        raise UsageError(f"refusing to delete {path}: it resolves to {resolved}, outside {inside} (through a "
                         "symlink), and deleting there could destroy files of another run")
    shutil.rmtree(path)


LOCK_FILE = ".lock"

#: locks this process holds: resolved directory -> (file descriptor, number of holders in this process)
_HELD: dict[Path, list[int]] = {}


class DirectoryLock:
    """The exclusive lock on a directory a command writes (module docstring); ``error`` is the refusal's class and
    ``what`` names the directory in it. Re-entrant within one process (a run restarted in the same process after an
    error takes it again); other processes are refused."""

    def __init__(self, directory: str | os.PathLike, what: str = "output directory",
                 error: type[RightReasonsError] = UsageError) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LOCK_FILE
        self.what, self.error = what, error
        self.held = False

    def acquire(self) -> None:
        """Take the lock, or raise ``error`` naming the process that holds it."""
        key = self.directory.resolve()
        if self.held:
            return
        if key in _HELD:
            _HELD[key][1] += 1
            self.held = True
            return
        fd = _open_fd(self.path, os.O_RDWR | os.O_CREAT, self.error, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace")
            os.close(fd)
            raise self.error(f"{self.what} {self.directory} is in use by another run ({_describe(holder)}); two "
                             "runs writing one directory would corrupt what it holds: wait for that run to end, or "
                             "choose another directory") from None
        holder = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "argv": sys.argv}
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder).encode(), 0)
        _HELD[key] = [fd, 1]
        self.held = True

    def release(self) -> None:
        """Give the lock back (once this process's last holder releases it, other processes may take it)."""
        if not self.held:
            return
        self.held = False
        key = self.directory.resolve()
        entry = _HELD[key]
        entry[1] -= 1
        if entry[1] == 0:
            del _HELD[key]
            os.close(entry[0])  # closing the descriptor releases the flock

    def __enter__(self) -> DirectoryLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _describe(holder: str) -> str:
    try:
        info = json.loads(holder)
        return (f"process {info['pid']} on host {info['host']}, started {info['started']}: "
                f"{' '.join(map(str, info['argv']))}")
    except (ValueError, KeyError, TypeError):
        return "a process that has not yet written its name"


def require_free_space(path: str | os.PathLike, needed: int, what: str, advice: str = "",
                       error: type[RightReasonsError] = UsageError) -> None:
    """Refuse, before any work, to write ``needed`` bytes under ``path`` when its disk has less free: ``error`` says
    ``what`` needs the space (and ``advice``, how to need less)."""
    free = shutil.disk_usage(path).free
    if needed > free:
        raise error(f"not enough free disk space in {path}: {what}, {needed:,} bytes in all, but only {free:,} bytes "
                    f"are free{f'; {advice}' if advice else ''}")


def refuse_link(path: str | os.PathLike, error: type[RightReasonsError] = UsageError) -> None:
    """Refuse with ``error`` to write ``path`` when it is a symbolic link: writing would change what the link points
    to — a file of another run or of another user, outside the directory the command writes."""
    if Path(path).is_symlink():
        raise error(f"{path} is a symbolic link (to {os.readlink(path)}); rightreasons never writes through a link, "
                    "which could overwrite a file outside the directory it writes: remove the link (or choose "
                    "another output) and run the command again")


def refuse_links(root: str | os.PathLike, paths: Iterable[str], error: type[RightReasonsError] = UsageError) -> None:
    """Refuse with ``error``, before any work, a symbolic link at any of ``paths`` (relative to directory ``root``)
    or at a folder between ``root`` and one of them: the files and folders a command will write in ``root``
    (:func:`refuse_link`). ``root`` itself may be a link (an output directory on another disk)."""
    for relative in paths:
        path = Path(root)
        for part in Path(relative).parts:
            path = path / part
            refuse_link(path, error)


def writable_file(path: str | os.PathLike, what: str = "output file") -> Path:
    """Check, before any work is done and without touching the disk, that file ``path`` can be written (atomically):
    its folder can be created and written (:func:`writable_directory` with ``create=False``) and ``path`` is not a
    directory; :class:`~rightreasons.errors.UsageError` otherwise. Returns the path."""
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"{what} {path} is a directory; name a file in it")
    writable_directory(path.parent, f"the folder of {what}", create=False)
    return path


_OPEN_FLAGS = {"a": os.O_WRONLY | os.O_APPEND | os.O_CREAT, "r+b": os.O_RDWR,
               "wb": os.O_WRONLY | os.O_CREAT | os.O_TRUNC}


def _open_fd(path: str | os.PathLike, flags: int, error: type[RightReasonsError] = UsageError,
             permissions: int = 0o666) -> int:
    """``os.open(path, flags)`` that never follows a symbolic link at ``path`` (``O_NOFOLLOW``): a link is refused
    with ``error`` (:func:`refuse_link`)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, permissions)
    except OSError as e:
        if e.errno == errno.ELOOP:
            refuse_link(path, error)
        raise


def open_no_follow(path: str | os.PathLike, mode: str, error: type[RightReasonsError] = UsageError) -> IO[Any]:
    """``open(path, mode)`` for writing in place — ``"a"`` (append, created when missing), ``"r+b"`` (an existing
    file, e.g. to truncate it) or ``"wb"`` (created or emptied) — that never follows a symbolic link at ``path``: a
    link is refused with ``error``. For files written bit by bit (a log) or too many to write atomically (a dataset's
    images)."""
    path = Path(path)
    return os.fdopen(_open_fd(path, _OPEN_FLAGS[mode], error), mode)


#: the name of a temporary file beside ``<name>``: ``.<name>.<12 hex digits>.tmp`` (group 1: ``<name>``)
_TEMPORARY = re.compile(r"\.(.+)\.[0-9a-f]{12}\.tmp")


def _label(path: Path) -> str:
    """``path``'s name in a fault boundary, the same in every run: a temporary file's unique part is left out (a
    writer handed a temporary file, such as a model staged by :func:`atomic_write_all`, writes it atomically too), so
    that the kill-point harness finds the boundaries of one run again in the next."""
    match = _TEMPORARY.fullmatch(path.name)
    return path.name if match is None else f"{match.group(1)} (temporary)"


def _remove_stale_temporaries(path: Path) -> None:
    """Remove the temporary files of ``path`` that no process is writing any more: those of a writer that was killed
    before its rename (:func:`_temporary` holds an ``flock`` on its file until it is renamed or removed, and the kernel
    releases it when the writer dies), so that a crash leaves no temporary file for good. A link at such a name is
    removed itself."""
    for stale in path.parent.glob(f".{glob.escape(path.name)}.*.tmp"):
        match = _TEMPORARY.fullmatch(stale.name)
        if match is None or match.group(1) != path.name:
            continue
        try:
            fd = os.open(stale, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:  # renamed or removed by its writer meanwhile, or not this user's to touch
            if e.errno == errno.ELOOP:
                stale.unlink(missing_ok=True)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a live writer's
            continue
        else:
            stale.unlink(missing_ok=True)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _temporary(path: Path) -> Iterator[Path]:
    """A new temporary file beside ``path``, named ``.<name>.<unique>.tmp`` (unpredictable, so that no link can be
    planted at it in advance) and created exclusively without following a link (``O_EXCL``), with the permissions a
    new file gets under the umask; locked (``flock``) while this process writes it and removed unless it was renamed.
    Stale temporaries of ``path`` (of a killed writer) are removed first. ``path`` itself must not be a link
    (:func:`refuse_link`); its folder is created when missing."""
    refuse_link(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temporaries(path)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:12]}.tmp")
    fd = _open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)  # gone already when it was renamed
        os.close(fd)  # releases the flock


def _umask() -> int:
    """The process's umask, read without changing it (``/proc/self/status``; elsewhere set and restored at once)."""
    try:
        status = Path("/proc/self/status").read_text(encoding="ascii")
        return int(re.search(r"^Umask:\s*([0-7]+)$", status, re.MULTILINE).group(1), 8)
    except (OSError, AttributeError, ValueError):
        umask = os.umask(0o022)
        os.umask(umask)
        return umask


def _publish(tmp: Path, path: Path) -> None:
    """Give the written ``tmp`` the permissions a new file gets under the umask (``0o666 & ~umask``: a writer such
    as safetensors may have replaced it with a private file) and rename it over ``path``."""
    os.chmod(tmp, 0o666 & ~_umask())
    os.replace(tmp, path)


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Create or replace ``path`` atomically: ``write(tmp)`` fills a temporary file beside it (:func:`_temporary`),
    which is then fsync'ed, given the permissions of a new file under the umask and renamed over ``path``; the
    directory is fsync'ed last. The parent directory is created when missing; a symbolic link at ``path`` is refused (:func:`refuse_link`). When ``write`` raises, ``path`` is
    untouched and the temporary file is removed; one left by a killed writer is removed by the next write of ``path``.
    """
    path = Path(path)
    with _temporary(path) as tmp:
        write(tmp)
        fsync_path(tmp)
        boundary(f"atomic-write {_label(path)}: written, not renamed")
        _publish(tmp, path)
    fsync_path(path.parent)
    boundary(f"atomic-write {_label(path)}: renamed")
    return path


def atomic_write_all(writes: Sequence[tuple[str | os.PathLike, Callable[[Path], None]]]) -> None:
    """Create or replace several files, none of them before all are written: each ``write(staged)`` fills a
    temporary file beside its path (:func:`_temporary`; it is fsync'ed), then the staged files are renamed over their
    paths in the given order. When a write raises, no path is touched and the staged files are removed. A crash
    between two renames leaves only the earlier paths replaced, so the last path should be the one that marks the set
    complete.
    """
    with contextlib.ExitStack() as staging:
        staged: list[tuple[Path, Path]] = []
        for path, write in writes:
            path = Path(path)
            staged.append((staging.enter_context(_temporary(path)), path))
            write(staged[-1][0])
            fsync_path(staged[-1][0])
            boundary(f"atomic-write {_label(path)}: staged")
        for tmp, path in staged:
            _publish(tmp, path)
            fsync_path(path.parent)
            boundary(f"atomic-write {_label(path)}: renamed")


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def write_csv_atomic(path: str | os.PathLike, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> Path:
    """Write a CSV file (``header`` line, then ``rows``) to ``path`` atomically."""
    def write(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(header)
            writer.writerows(rows)

    return atomic_write(path, write)


def read_json_object(path: str | os.PathLike, what: str, error: type[RightReasonsError] = UsageError) -> dict[str, Any]:
    """The JSON object stored in ``path``; ``error`` names the file and ``what`` it should be when it cannot be read,
    is not JSON, or holds something other than an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise error(f"{path}: unreadable {what} ({type(e).__name__}: {e})") from e
    if not isinstance(data, dict):
        raise error(f"{path}: not a {what} (expected a JSON object)")
    return data


def _non_finite(data: Any, key: str = "") -> tuple[str, float] | None:
    """The key path (``a.b[2]``) and value of the first NaN or infinite float in ``data``, or None."""
    if isinstance(data, float) and not math.isfinite(data):
        return key or "<value>", data
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, (list, tuple)) else ()
    for name, value in items:
        found = _non_finite(value, f"{key}[{name}]" if isinstance(name, int) else f"{key}.{name}" if key else str(name))
        if found is not None:
            return found
    return None


def json_text(data: Any, what: str, *, indent: int | None = 2, sort_keys: bool = False) -> str:
    """``data`` as JSON text; a NaN or infinite number anywhere in it is a :class:`NonFiniteError` naming ``what``
    (the file or output) and the key, since JSON cannot hold it and a metric that is not a number must not pass as
    one."""
    found = _non_finite(data)
    if found is not None:
        raise NonFiniteError(f"{what}: {found[0]} is {found[1]}, not a finite number; nothing was written")
    return json.dumps(data, indent=indent, sort_keys=sort_keys, allow_nan=False)


def write_json_atomic(path: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as indented JSON (sorted keys) to ``path`` atomically (finite numbers only: :func:`json_text`)."""
    return write_text_atomic(path, json_text(data, str(path), sort_keys=True) + "\n")


def shared_directory(root: str | os.PathLike, name: str, main: bool, gather: Callable[[Any], list[Any]],
                     error: type[RightReasonsError], advice: str) -> None:
    """Refuse, on every process of a launch at once, a directory that not all of them see as one — nodes whose disks
    are their own would each write a part of what belongs together (a cache's shards, a run's checkpoints). The main
    process writes a random token to ``root/name``; every process reads it back, and where some do not see it each
    raises ``error`` naming them, then ``advice``. ``gather(value)``: every process's value, in rank order (a
    collective: every process calls this function at the same point). The path itself may differ between nodes (a
    file system mounted at another place); what counts is that they see one directory."""
    token = secrets.token_hex(16) if main else None
    if main:
        atomic_write(Path(root) / name, lambda tmp: tmp.write_text(token))  # never through a planted link
    token = gather(token)[0]
    try:
        seen = (Path(root) / name).read_text() == token
    except OSError:
        seen = False
    seen_by = gather(seen)
    blind = [rank for rank, ok in enumerate(seen_by) if not ok]
    if blind:
        raise error(f"{root} is not one directory for all {len(seen_by)} processes: process(es) {blind} do not see the "
                    f"file process 0 wrote there (a disk of each node's own?). {advice}")
