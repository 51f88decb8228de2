"""``scripts/bench.py --quick`` runs end to end (a smoke test: no timing is asserted); the GPU benchmark says so and
exits 0 where there is no CUDA."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from guards import GUARD_S

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench.py"


@pytest.mark.exhaustive
def test_quick_benchmark_prints_the_table_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--device", "cpu", "--json", str(out)],
                            capture_output=True, text=True, timeout=GUARD_S)
    assert result.returncode == 0, result.stderr
    assert "| section | ours | reference | ratio | target | pass/fail |" in result.stdout
    sections = [row["section"] for row in json.loads(out.read_text())["results"]]
    assert {"bcos-forward-backward", "explain-batched", "e2kd-frozen-step", "e2kd-cache-loader",
            "bcosify-speedup", "sync-bn-step", "train-step-time", "torch-compile: graph breaks",
            "torch-compile: compile time", "torch-compile: compiled vs eager step"} <= set(sections)
    assert {"activation-memory: B-cos plain, batch 2", "activation-memory: B-cos guided at input, per image",
            "gpu-throughput: bcos_resnet18 e2kd frozen, batch 2, bf16",
            "gpu-throughput: bcos_simple_vit_ti_patch16_224 guided at input, batch 2, eager",
            "stage-checkpointing: guided at input, peak memory",
            "stage-checkpointing: guided at input, step time"} <= set(sections)
    for name in sections:
        assert f"| {name} |" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_the_gpu_benchmark_says_there_is_no_cuda_and_exits_0():
    result = subprocess.run([sys.executable, str(SCRIPT), "--device", "cuda", "--only", "gpu-throughput"],
                            capture_output=True, text=True, timeout=GUARD_S)
    assert result.returncode == 0, result.stderr
    assert "no CUDA device" in result.stdout and "measures nothing" in result.stdout
    assert "| section |" not in result.stdout


def test_compile_counts_tell_graph_breaks_and_recompilations_of_a_compiled_step():
    sys.path.insert(0, str(SCRIPT.parent))
    import bench

    torch._dynamo.reset()
    calls = {"n": 0}

    def broken() -> None:
        torch.compile(lambda x: torch.sin(print("") or x) + 1, backend="eager")(torch.ones(3))

    def recompiling() -> None:
        calls["n"] += 1
        torch.compile(_scaled, backend="eager")(torch.ones(3), calls["n"])

    assert bench._compile_counts(broken).endswith("1 graph breaks, 0 recompilations")
    torch._dynamo.reset()
    assert bench._compile_counts(recompiling) == "1 graphs, 0 graph breaks, 1 recompilations"


def _scaled(x: torch.Tensor, k: int) -> torch.Tensor:
    return x * k   # a Python int is specialised: a new value compiles again
