"""Two processes writing one explanation cache (``write_cache`` with ``rank``/``world_size``, gloo; rank 0 in the test
process, rank 1 spawned): on one shared directory they split the shards and the cache equals the one-process cache;
on two directories — nodes whose disks are their own — both refuse with the same ``CacheError`` before computing any
shard, instead of leaving a half cache on each disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from rightreasons.data import eval_transform, load_dataset
from rightreasons.distill import ExplanationCache, write_cache
from rightreasons.errors import CacheError

SIZE = 16
SETTING = {"teacher": {"name": "fake", "kwargs": {}, "weights_sha256": "abc"},
           "data": {"name": "synthetic-birds", "root": None, "split": "train", "options": {"n": 10}},
           "transform": {"image_size": SIZE, "crop_fraction": 1.0, "encoding": "bcos"},
           "explanation": {"method": "bcos_weights", "layer": "input"}}


class Teacher:
    """A deterministic stand-in for a teacher; counts the batches it explained."""

    calls = 0

    def __call__(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        return torch.stack([images.mean((1, 2, 3)), -images.std((1, 2, 3))], 1), images - 0.5


def write(out: Path, rank: int, world_size: int) -> tuple[Path, int]:
    teacher = Teacher()
    dataset = load_dataset("synthetic-birds", None, "train", n=10, size=SIZE,
                           transform=eval_transform(SIZE, encoding="bcos", crop_fraction=1.0))

    def gather(value: Any) -> list[Any]:
        values = [None] * world_size
        dist.all_gather_object(values, value)
        return values

    manifest = write_cache(teacher, dataset, out, SETTING, batch_size=2, shard_size=3, rank=rank,
                           world_size=world_size, barrier=dist.barrier if world_size > 1 else lambda: None,
                           gather=gather if world_size > 1 else lambda value: [value])
    return manifest, teacher.calls


def worker(rank: int, root: Path) -> dict[str, Any]:
    """One of two processes: the teacher calls it made writing the cache into ``root/shared`` together with the
    other, and the error it raised when each process was given a directory of its own."""
    outcome: dict[str, Any] = {"shared": write(root / "shared", rank, 2)[1]}
    try:
        write(root / f"node-{rank}", rank, 2)  # each process its own directory
    except CacheError as e:
        outcome["separate"] = str(e)
    return outcome


def test_processes_write_one_shared_cache_and_refuse_directories_they_do_not_share(tmp_path, gloo_processes):
    outcomes = gloo_processes(worker, tmp_path)
    # one shared directory: 4 shards of 3 images, process 0 writes shards 0 and 2, process 1 shards 1 and 3
    assert [o["shared"] for o in outcomes] == [1 + 2 + 2, 2 + 1]  # process 0: one image to size the disk space
    write(tmp_path / "single", 0, 1)
    shared, single = ExplanationCache(tmp_path / "shared"), ExplanationCache(tmp_path / "single")
    assert list(shared) == list(single)
    for sample_id in single:
        assert torch.equal(shared[sample_id], single[sample_id])
    # two directories: both processes refuse, naming the process that does not see process 0's files
    for outcome in outcomes:
        assert outcome["separate"].startswith(f"{tmp_path / 'node-'}")
        assert "process(es) [1] do not see the file process 0 wrote there" in outcome["separate"]
        assert "filesystem they share" in outcome["separate"]
    assert not list((tmp_path / "node-1").glob("shard-*")) and not list((tmp_path / "node-0").glob("shard-*"))
