"""The frozen teacher of a distillation: loading it (:func:`load_teacher`), the setting a cache of its explanations is
written for (:func:`cache_setting`) and writing that cache (:func:`write_teacher_cache`, ``rightreasons cache``)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from torch import Tensor, nn

from ..data import eval_transform, load_dataset
from ..engine.launch import process_group_kwargs, start_checks, use_cpu
from ..errors import CacheError, TrainingError, UsageError
from ..fileio import LOCK_FILE, DirectoryLock, refuse_links, writable_directory
from ..explain import attribute, layer_for
from ..models import capabilities, create_model, model_file, resolve_architecture
from .cache import MANIFEST, WRITERS, weights_fingerprint, write_cache
from .config import DistillConfig, TeacherConfig
from .explanations import freeze, resolve_explanation
from .subsets import ShotSubset, few_shot_indices

__all__ = ["cache_setting", "load_teacher", "teacher_classes", "training_subset", "write_teacher_cache"]


def load_teacher(config: TeacherConfig) -> nn.Module:
    """The frozen teacher: a model file written by rightreasons (``checkpoint`` only) or a registry model.

    Parameters not loaded from weights (a teacher without weights, for smoke runs) are initialised from seed 0, so
    that every process and every run — the cache writer included — builds the same teacher."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        checkpoint = model_file(config.checkpoint, "teacher.checkpoint")
        name, kwargs = resolve_architecture(config.name, config.kwargs, checkpoint, "teacher")
        model = create_model(name, pretrained=config.pretrained, checkpoint=checkpoint, **kwargs)
    return freeze(model)


def teacher_classes(teacher: nn.Module) -> int:
    """The number of classes of ``teacher`` (its students get as many)."""
    count = capabilities(teacher).num_classes
    if count is None:
        raise TrainingError(f"cannot tell the number of classes of the teacher {capabilities(teacher).name}")
    return count


def cache_setting(config: DistillConfig, teacher: nn.Module, method: str) -> dict[str, Any]:
    """The setting a cache of ``teacher``'s explanations on ``config``'s training data is written for and checked
    against: teacher (name, arguments, weights hash), data (name, resolved root, split, options), transform (size,
    base-view crop fraction, the teacher's encoding) and explanation (method, layer)."""
    data, args = config.data, teacher.model_args
    return {
        "teacher": {"name": args["name"], "kwargs": args["kwargs"], "weights_sha256": weights_fingerprint(teacher)},
        "data": {"name": data.name, "root": None if data.root is None else str(Path(data.root).resolve()),
                 "split": data.train_split, "options": data.options_for(data.train_split)},
        "transform": {"image_size": data.image_size, "crop_fraction": config.distill.crop_fraction,
                      "encoding": capabilities(teacher).encoding},
        "explanation": {"method": method, "layer": layer_for(method, config.distill.explanation_layer)},
    }


def training_subset(dataset: Any, config: DistillConfig) -> Any:
    """The ``distill.shots`` subset of the training set (the whole set without shots)."""
    shots = config.distill.shots
    if shots is None:
        return dataset
    return ShotSubset(dataset, few_shot_indices(dataset.positive_labels, shots, config.distill.shots_seed))


def write_teacher_cache(config: DistillConfig, out: str | Path, *, batch_size: int | None = None,
                        shard_size: int | None = None) -> Path:
    """Compute ``config.teacher``'s logits and explanations once per training image of ``config.data`` (the
    ``distill.shots`` subset when set) on the base view, and write them to ``out`` (resumable; see
    :mod:`rightreasons.distill.cache`). Uses every process of an ``accelerate``/``torchrun`` launch; the main
    process holds the lock of ``out`` (:class:`~rightreasons.fileio.DirectoryLock`) until the cache is written. A
    symbolic link at a file the cache writes is refused before any work (the shards' at their writes)."""
    state = PartialState(cpu=use_cpu(config.cpu), **process_group_kwargs().to_kwargs())  # bounded waits
    lock = DirectoryLock(out, "cache directory", CacheError)
    created = not Path(out).exists()
    start_checks(state, lambda: (writable_directory(out, "cache directory"),
                                 refuse_links(out, (LOCK_FILE, WRITERS, MANIFEST), CacheError), lock.acquire()))
    try:
        return _write_teacher_cache(config, out, state, batch_size, shard_size)
    except BaseException:
        lock.release()
        if created and state.is_main_process and {p.name for p in Path(out).iterdir()} <= {LOCK_FILE}:
            shutil.rmtree(out)  # a refused start leaves nothing behind: the directory held only its lock
        raise
    finally:
        lock.release()


def _write_teacher_cache(config: DistillConfig, out: str | Path, state: PartialState, batch_size: int | None,
                         shard_size: int | None) -> Path:
    teacher = load_teacher(config.teacher).to(state.device)
    method = resolve_explanation(config.distill.explanation, capabilities(teacher).bcos)
    if method == "none":
        raise UsageError("distill.explanation='none': there are no explanations to cache")
    setting = cache_setting(config, teacher, method)
    data = config.data
    transform = eval_transform(data.image_size, encoding=setting["transform"]["encoding"],
                               crop_fraction=config.distill.crop_fraction)
    dataset = training_subset(load_dataset(data.name, data.root, data.train_split, transform=transform,
                                            **data.options_for(data.train_split)), config)
    layer = setting["explanation"]["layer"]

    def explainer(images: Tensor) -> tuple[Tensor, Tensor]:
        result = attribute(teacher, images, None, method, layer)
        return result.logits, result.explanation

    batch_size = data.eval_batch_size if batch_size is None else batch_size
    return write_cache(explainer, dataset, out, setting, batch_size=batch_size, shard_size=shard_size,
                       device=state.device, rank=state.process_index, world_size=state.num_processes,
                       barrier=state.wait_for_everyone, gather=lambda value: gather_object([value]),
                       provenance={"teacher_checkpoint": config.teacher.checkpoint, "shots": config.distill.shots,
                                   "shots_seed": config.distill.shots_seed},
                       explanation_format=config.distill.cache_format)
