"""``make gpu-check``: what a machine with a CUDA GPU must show, in one prepared run of at most 8 minutes; the
JSON report is rewritten after each part, so a run stopped at its limit keeps what it measured.

1. **The device-clean tier on CUDA** (``tests/device_clean`` with ``RIGHTREASONS_TEST_DEVICES=meta,cuda``): every step
   type trains, every method explains at every layer, every loss and evaluator runs on the GPU, under
   ``torch.cuda.set_sync_debug_mode("error")`` where nothing may be read.
2. **Host syncs on CUDA** (``scripts/step_counts.py``): for every step type, the syncs counted by
   :class:`rightreasons.measure.StepCounter` and those CUDA reports itself (``set_sync_debug_mode("warn")``) — 0 on a
   step that does not log, 1 on a step that logs.
3. **Throughput** (``bench-gpu``'s rows, in the time left): images/s and peak memory of the standard ResNet-50 and of
   the B-cos ResNet-50's plain, guided (input, final) and e²KD (live, frozen) steps, eager, compiled and bf16, batch 64
   at 224 px.

It writes ``gpu-check.json`` and ``gpu-check.md`` (one table) to ``--out`` and prints the table. Without CUDA it says
so and exits 0; ``--rehearse`` runs every part on the CPU at tiny sizes (the tier on ``meta``), to try the script on
any machine.

    python scripts/gpu_check.py --out gpu-check
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch

ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 480
"""The whole check's time on the GPU: the tier and the counts first, the throughput in what is left."""


def tier(devices: str, timeout: float, extra: list[str]) -> tuple[str, bool, str]:
    """Run the device-clean tier on ``devices``; (summary line, passed, its output)."""
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/device_clean",
                           *extra], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "RIGHTREASONS_TEST_DEVICES": devices})
    lines = [line for line in done.stdout.splitlines() if re.search(r"\d+ (passed|failed|error)", line)]
    return (lines[-1].strip("= ") if lines else "no summary"), done.returncode == 0, done.stdout + done.stderr


def markdown(report: dict) -> str:
    out = [f"# make gpu-check ({report['environment']['device']}, torch {report['environment']['torch']})", "",
           f"**Device-clean tier** ({report['tier']['devices']}): {report['tier']['summary']} — "
           f"{'pass' if report['tier']['passed'] else 'FAIL'}", "",
           "| step type | host syncs (step / logged step) | reported by CUDA (step / logged step) |", "|---|---|---|"]
    for name, counts in report["host_syncs"].items():
        step, logged = counts["step"], counts["logged step"]
        cuda = (f"{len(step['cuda syncs'])} / {len(logged['cuda syncs'])}" if "cuda syncs" in step else "—")
        out.append(f"| {name} | {step['syncs']} / {logged['syncs']} | {cuda} |")
    out += ["", "| step | images/s | vs standard | peak memory | kernels per step (device time) | "
            "compiled: graphs / graph breaks / recompilations |", "|---|---|---|---|---|---|"]
    longest = []
    for row in report["throughput"]:
        step = row["section"].removeprefix("gpu-throughput: ")
        memory = re.search(r"peak memory (\d+) MiB", row["setup"])
        kernels = re.search(r"(\d+) (?:kernels|profiled operations), ([\d.]+) ms \(longest: ([^)]*)\)", row["setup"])
        graphs = re.search(r"(\d+) graphs, (\d+) graph breaks, (\d+) recompilations", row["setup"])
        out.append(f"| {step} | {row['ours']:.1f} | {row['ratio']:.2f} | "
                   f"{memory.group(1) + ' MiB' if memory else '—'} | "
                   f"{f'{kernels.group(1)} ({kernels.group(2)} ms)' if kernels else '—'} | "
                   f"{' / '.join(graphs.groups()) if graphs else '—'} |")
        if kernels:
            longest.append(f"- {step}: {kernels.group(3)}")
    out += ["", "Longest kernels of one step (self time × calls):", "", *longest] if longest else []
    out += [f"\n**{part} failed:**\n\n```\n{error}```" for part, error in report["failures"].items()]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-check"), help="folder of gpu-check.json and .md")
    parser.add_argument("--rehearse", action="store_true", help="every part on the CPU at tiny sizes")
    parser.add_argument("--budget", type=float, default=BUDGET_S, metavar="SECONDS",
                        help=f"the whole check's time (default {BUDGET_S}); throughput rows that would start in its "
                             "last 120 s are left out, so --budget 120 checks the tier and the host syncs alone")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available() and not args.rehearse:
        print(f"no CUDA device: torch {torch.__version__} sees none (torch.cuda.is_available() is False), so "
              "make gpu-check measures nothing here; run it on a machine with a GPU (or try it with --rehearse)")
        return 0
    import benchlib
    import step_counts
    from bench import GPU_MODELS, throughput_rows

    start = time.monotonic()
    device = torch.device("cpu" if args.rehearse else "cuda")
    environment = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (rehearsal)",
                   "torch": torch.__version__, "python": platform.python_version()}
    devices = "meta" if args.rehearse else "meta,cuda"
    args.out.mkdir(parents=True, exist_ok=True)
    summary, passed, output = tier(devices, 200, ["-k", "train and not torchvision or fake_cuda"] if args.rehearse
                                   else [])
    (args.out / "tier.log").write_text(output)
    if not passed:
        print(output[-4000:], file=sys.stderr)
    failures = {}
    try:
        host_syncs = step_counts.count_all(["train", "guide (Energy, B-cos at the input)"] if args.rehearse else None)
    except Exception:  # a part that breaks is reported, and the parts after it still run
        host_syncs, failures["host syncs"] = {}, traceback.format_exc(limit=-6)
    settings = benchlib.Settings(device, args.rehearse)
    report = {"environment": environment, "seconds": None,
              "tier": {"devices": devices, "summary": summary, "passed": passed},
              "host_syncs": host_syncs, "throughput": [], "failures": failures}
    for mode in ("eager",) if args.rehearse else ("eager", "bf16", "compiled"):  # compiled last: it compiles longest
        try:
            if args.rehearse:
                rows = throughput_rows(settings, GPU_MODELS[True][:1], (2,), 32, (mode,), repeats=1, warmup=1)
            else:
                rows = throughput_rows(settings, GPU_MODELS[False][:1], (64,), 224, (mode,), repeats=3, warmup=1,
                                       deadline=start + args.budget - 120)
            report["throughput"] += [asdict(r) for r in rows]
        except Exception:
            failures[f"throughput, {mode}"] = traceback.format_exc(limit=-6)
        report["seconds"] = round(time.monotonic() - start, 1)
        (args.out / "gpu-check.json").write_text(json.dumps(report, indent=2, default=str))  # kept if stopped later
    synced = [n for n, c in host_syncs.items()
              if c["step"]["syncs"] or c["logged step"]["syncs"] != 1 or c["step"].get("cuda syncs")]
    table = markdown(report)
    (args.out / "gpu-check.md").write_text(table)
    print(table)
    if synced:
        print(f"steps that wait for the device: {synced}", file=sys.stderr)
    return 0 if passed and not synced and not failures else 1


if __name__ == "__main__":
    sys.exit(main())
