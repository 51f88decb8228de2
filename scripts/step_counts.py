"""Host syncs and aten operations of one training step of every step type of the engine, counted deterministically
(:func:`rightreasons.engine.counting.count_step`): a step that does not log must not wait for the device (0 syncs),
a step that logs reads its losses once (1 sync); on a CUDA device, the syncs it reports itself are listed too
(:class:`~rightreasons.measure.CudaSyncs`). ``make bench`` (section ``host-syncs``), ``make gpu-check`` and the tests
run it, on one process and under DDP (two processes, gloo)::

    python scripts/step_counts.py [--json PATH]
    torchrun --standalone --nproc_per_node 2 scripts/step_counts.py --json PATH

Each step type is a tiny run (B-cos ResNet-18 of width 8 unless it says otherwise, 32 px, a global batch of 4 on the
synthetic birds): the counts are those of the engine and the task, whatever the model's size.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import broadcast_object_list

import rightreasons.apps.tasks  # noqa: F401 - registers every task
from rightreasons import create_model, save_model
from rightreasons.config import from_dict
from rightreasons.distill import DistillConfig, write_teacher_cache
from rightreasons.engine import Trainer, get_task
from rightreasons.engine.counting import count_step
from rightreasons.engine.launch import use_cpu
from rightreasons.measure import CudaSyncs

BCOS = {"name": "bcos_resnet18", "kwargs": {"inplanes": 8}}

#: step type -> (task, the config sections that make it); ``{cache}`` and ``{first_stage}`` are filled in
STEP_TYPES: dict[str, tuple[str, dict[str, Any]]] = {
    "train": ("train", {}),
    "train (torchvision ResNet-18)": ("train", {"model": {"name": "resnet18", "kwargs": {}}}),
    "guide (Energy, B-cos at the input)": ("guide", {"guidance": {"weight": 1.0}}),
    "guide (L1, GradCAM at mid2)": ("guide", {"guidance": {"weight": 1.0, "loss": "l1", "method": "gradcam",
                                                           "layer": "mid2"}}),
    "distill (live e²KD)": ("distill", {"teacher": {**BCOS, "kwargs": {"inplanes": 8, "num_classes": 2}},
                                        "distill": {"explanation_weight": 1.0}}),
    "distill (frozen e²KD)": ("distill", {"teacher": {**BCOS, "kwargs": {"inplanes": 8, "num_classes": 2}},
                                          "distill": {"explanation_weight": 1.0, "frozen": "{cache}"}}),
    "robust (reweight)": ("robust", {"robustness": {"method": "reweight"}}),
    "robust (GroupDRO)": ("robust", {"robustness": {"method": "groupdro"}}),
    "robust (JTT upweight)": ("robust", {"robustness": {"method": "upweight", "error_set_from": "{first_stage}"}}),
}


def _config(task: str, sections: dict[str, Any], folder: Path, name: str) -> Any:
    raw = {"output_dir": str(folder / name.replace(" ", "_")), "cpu": torch.cuda.is_available() is False,
           "log_with": [], "model": BCOS, "eval": {"num_images": 0},
           "data": {"name": "synthetic-birds", "image_size": 32, "batch_size": 4, "annotated_fraction": 0.5,
                    "options": {"n": 16, "size": 32}}}
    text = json.dumps({**raw, **sections}).replace("{cache}", str(folder / "cache")).replace(
        "{first_stage}", str(folder / "first_stage.safetensors"))
    kind = get_task(task)
    return kind, from_dict(kind.config_class, json.loads(text))


def count(name: str, folder: Path) -> dict[str, Any]:
    """Build the run of step type ``name`` in ``folder``, take a step (the optimiser creates its state), then count
    a step that does not log and one that does."""
    kind, config = _config(*STEP_TYPES[name], folder, name)
    if isinstance(config, DistillConfig) and config.distill.frozen:
        write_teacher_cache(config, config.distill.frozen)
    trainer = Trainer(kind(config))
    batches = iter(trainer.loader)
    trainer.train_step(next(batches))
    trainer.read_steps()
    result: dict[str, Any] = {}
    for label, log in (("step", False), ("logged step", True)):
        with CudaSyncs() as cuda:
            counts = count_step(trainer, next(batches), log)
        result[label] = {"syncs": len(counts.syncs), "ops": counts.ops, "launches": counts.launches,
                         "sites": [f"{s.op} at {s.site}" for s in counts.syncs]}
        if torch.cuda.is_available():  # what the GPU itself reports
            result[label]["cuda syncs"] = [f"{s.op} at {s.site}" for s in cuda.syncs]
    trainer.lock.release()
    return result


def count_all(names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """Every step type's counts (``names``: some of :data:`STEP_TYPES`), on this process (every process of a
    launch runs it, in one folder that the main process makes)."""
    torch.manual_seed(0)
    state = PartialState(cpu=use_cpu(not torch.cuda.is_available()))
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        folder = Path(broadcast_object_list([tmp])[0])
        if state.is_main_process:
            save_model(create_model("bcos_resnet18", num_classes=2, inplanes=8), folder / "first_stage.safetensors")
        state.wait_for_everyone()
        results = {name: count(name, folder) for name in names or STEP_TYPES}
        state.wait_for_everyone()  # the main process's folder goes last
        return results


def markdown(results: dict[str, dict[str, Any]], processes: int) -> str:
    lines = [f"| step type ({processes} process{'es' if processes > 1 else ''}) | host syncs: step / logged step | "
             "aten ops per step | of which launch kernels |", "|---|---|---|---|"]
    lines += [f"| {name} | {r['step']['syncs']} / {r['logged step']['syncs']} | {r['step']['ops']:,} | "
              f"{r['step']['launches']:,} |" for name, r in results.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the counts (rank 0's) as JSON to PATH")
    parser.add_argument("--only", action="append", choices=list(STEP_TYPES), metavar="TYPE",
                        help=f"count only this step type (repeatable): {', '.join(STEP_TYPES)}")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    results = count_all(args.only)
    state = PartialState()  # set up by count_all
    if state.is_main_process:
        print(markdown(results, state.num_processes))
        if args.json:
            args.json.write_text(json.dumps({"processes": state.num_processes, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
