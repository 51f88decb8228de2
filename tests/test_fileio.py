"""``rightreasons.fileio``: the one file checksum, checked against the digest of the whole file at once (the chunked
read must cover every byte, including a last chunk shorter than the others), the atomic CSV writer, and that no other
module moves files into place by hand."""

from __future__ import annotations

import ast
import csv
import hashlib
import os
from pathlib import Path

import pytest

from rightreasons import fileio
from rightreasons.errors import UsageError


@pytest.mark.parametrize("algorithm", ["sha256", "md5"])
@pytest.mark.parametrize("size", [0, 5, 2 * (1 << 22) + 3])
def test_file_digest_equals_hashing_the_whole_file(tmp_path, algorithm, size):
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    path = tmp_path / "blob"
    path.write_bytes(data)
    assert fileio.file_digest(path, algorithm) == hashlib.new(algorithm, data).hexdigest()


def test_write_csv_atomic_round_trips_and_leaves_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / "boxes.csv"
    fileio.write_csv_atomic(path, ["id", "x"], [["a", 1], ["b,c", None]])
    assert list(csv.reader(path.open(newline=""))) == [["id", "x"], ["a", "1"], ["b,c", ""]]

    def rows():
        yield ["c", 3]
        raise RuntimeError("interrupted while writing")

    with pytest.raises(RuntimeError):
        fileio.write_csv_atomic(path, ["id", "x"], rows())
    assert list(csv.reader(path.open(newline="")))[1] == ["a", "1"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["boxes.csv"]


def _renames(source: str) -> list[int]:
    """Lines that move a file into place: ``os.replace``/``os.rename``/``shutil.move``, or ``p.replace(q)`` /
    ``p.rename(q)`` with one argument (``str.replace`` takes two; ``dataclasses.replace`` copies a dataclass)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value.id if isinstance(node.func.value, ast.Name) else None
            if (owner, node.func.attr) in {("os", "replace"), ("os", "rename"), ("shutil", "move")} or \
                    (node.func.attr in ("replace", "rename") and len(node.args) == 1
                     and owner not in ("os", "shutil", "dataclasses")):
                lines.append(node.lineno)
    return lines


def test_files_are_moved_into_place_only_by_the_atomic_write_and_the_checkpoint_directories():
    """One atomic-write mechanism: every other module writes through ``fileio`` (hand-made temp-file-and-rename
    recipes had crept back in, without fsync, in the synthetic index and the Waterbirds box file)."""
    package = Path(fileio.__file__).parent
    allowed = {"fileio.py", "engine/checkpointing.py"}  # the latter promotes whole checkpoint directories
    found = {str(p.relative_to(package)): lines for p in sorted(package.rglob("*.py"))
             if str(p.relative_to(package)) not in allowed and (lines := _renames(p.read_text(encoding="utf-8")))}
    assert found == {}
    assert _renames("import os\nos.replace(a, b)\ntmp.replace(path)\n'x'.replace('a', 'b')\n") == [2, 3]


@pytest.mark.parametrize("value, shown", [(float("nan"), "nan"), (float("inf"), "inf"), (-float("inf"), "-inf")])
def test_json_files_hold_only_finite_numbers(tmp_path, value, shown):
    """``json.dumps`` writes NaN and Infinity, which are not JSON; the one writer refuses them naming the file and
    the key, and leaves the file that was there."""
    from rightreasons.errors import NonFiniteError
    from rightreasons.fileio import write_json_atomic

    path = tmp_path / "results.json"
    path.write_text('{"epg": 0.5}\n')
    with pytest.raises(NonFiniteError, match=rf"results\.json: metrics\.per_class\[1\] is {shown}, not a finite"):
        write_json_atomic(path, {"metrics": {"accuracy": 0.5, "per_class": [0.1, value]}})
    assert path.read_text() == '{"epg": 0.5}\n' and [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_remove_tree_never_follows_a_symlink_out_of_its_directory(tmp_path):
    """A link is removed itself, its target kept; a directory reached through a linked parent is refused."""
    outside = tmp_path / "other-run"
    (outside / "step-000001").mkdir(parents=True)
    (outside / "step-000001" / "manifest.json").write_text("{}")
    run = tmp_path / "run"
    run.mkdir()
    (run / "step-000001").symlink_to(outside / "step-000001", target_is_directory=True)
    fileio.remove_tree(run / "step-000001", run)
    assert not (run / "step-000001").is_symlink() and (outside / "step-000001" / "manifest.json").is_file()
    (run / "checkpoints").symlink_to(outside, target_is_directory=True)
    with pytest.raises(UsageError, match=r"refusing to delete .*step-000001: it resolves to .*, outside"):
        fileio.remove_tree(run / "checkpoints" / "step-000001", run)
    assert (outside / "step-000001" / "manifest.json").is_file()


def test_files_written_together_are_replaced_only_once_all_are_written(tmp_path):
    """A finished run's model file and summary: when the second cannot be written, neither is replaced."""
    model, summary = tmp_path / "model.safetensors", tmp_path / "summary.json"
    model.write_text("old model")
    summary.write_text("old summary")

    def fails(path: Path) -> None:
        path.write_text("half a summ")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        fileio.atomic_write_all([(model, lambda p: p.write_text("new model")), (summary, fails)])
    assert (model.read_text(), summary.read_text()) == ("old model", "old summary")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors", "summary.json"]
    fileio.atomic_write_all([(model, lambda p: p.write_text("new model")), (summary, lambda p: p.write_text("new"))])
    assert (model.read_text(), summary.read_text()) == ("new model", "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.safetensors", "summary.json"]


def test_written_files_get_the_permissions_of_the_umask_even_when_the_writer_made_them_private(tmp_path):
    """safetensors creates its files with mode 0600; a colleague on a shared file system must read them (issue 35)."""
    import torch
    from safetensors.torch import save_file

    from rightreasons.fileio import atomic_write, atomic_write_all

    previous = os.umask(0o027)
    try:
        atomic_write(tmp_path / "a.safetensors", lambda tmp: save_file({"x": torch.zeros(1)}, str(tmp)))
        atomic_write_all([(tmp_path / "b.txt", lambda tmp: tmp.write_text("b"))])
    finally:
        os.umask(previous)
    assert (tmp_path / "a.safetensors").stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "b.txt").stat().st_mode & 0o777 == 0o640
