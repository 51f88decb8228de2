"""The package's import graph: no cycles, and each layer imports only the layers below it.

Every ``import`` / ``from ... import`` statement of every module of ``rightreasons/`` counts, also those inside
functions (an import hidden in a function is how a cycle used to be held together). The layers, lowest first, are
those of ``docs/ARCHITECTURE.md``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from guards import GUARD_S

PACKAGE = Path(__file__).resolve().parents[1] / "rightreasons"

#: rank of each part of the package; a module may import modules of a lower rank, or of its own top-level part. The
#: rule of the floor plan: the features (classification, which guidance and distillation build on) sit above the
#: engine, the engine above the kit (models, explanations, data, metrics, reporting), and no two features of one rank
#: import each other. Robustness sits above guidance: its study sets box guidance beside the group-robustness methods.
LAYERS: dict[str, float] = {
    "errors": -1, "version": -1, "faults": -1, "console": -1, "choices": -1,
    "fileio": 0, "model_layout": 0, "encoding": 0, "boxes": 0, "config": 0, "measure": 0, "plotting": 0.5,
    "regions": 0.25,
    "bcos": 1,
    "models.registry": 1.5,
    "models": 2,
    "explain": 3, "data": 3,
    "metrics": 4,
    "reporting": 4.5,
    "engine": 5,
    "classification": 6,
    "guidance": 7, "distill": 7, "robustness": 7.5, "viewer": 7.5, "judging": 7.5,
    "apps": 8,
    "__main__": 9, "": 8,  # "" is the package itself (the public API facade)
}
#: the parts of the kit, below the engine
KIT = ("bcos", "models", "explain", "data", "metrics", "reporting")
#: the features, above the engine
FEATURES = ("classification", "guidance", "distill")


def _modules() -> dict[str, tuple[Path, bool]]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return found


MODULES = _modules()


def _targets(module: str, is_package: bool, node: ast.AST) -> list[str]:
    """The rightreasons modules an import statement of ``module`` imports."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = module.split(".")[:len(module.split(".")) - node.level + (1 if is_package else 0)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module or ""
        names = [f"{stem}.{a.name}" if f"{stem}.{a.name}" in MODULES else stem for a in node.names]
    else:
        return []
    targets = []
    for name in names:
        if not name.startswith("rightreasons"):
            continue
        while name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        if name != module:
            targets.append(name)
    return targets


def _graph() -> dict[str, set[str]]:
    graph = {}
    for module, (path, is_package) in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        graph[module] = {t for node in ast.walk(tree) for t in _targets(module, is_package, node)}
    return graph


GRAPH = _graph()


def _part(module: str) -> str:
    """The layer a module belongs to: the longest key of :data:`LAYERS` that prefixes its name."""
    name = module.removeprefix("rightreasons").lstrip(".")
    for key in sorted(LAYERS, key=len, reverse=True):
        if name == key or name.startswith(key + ".") or (key == "" and name == ""):
            return key
    raise AssertionError(f"{module} is in no layer of LAYERS; add its part to the table")


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_graph_sees_every_module_and_import():
    assert len(MODULES) > 80
    assert "rightreasons.models.registry" in GRAPH["rightreasons.models.resnet"]
    assert "rightreasons.explain.layers" in GRAPH["rightreasons.explain.attribution"]  # a relative import


def test_a_cycle_would_be_found():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_among_the_modules():
    assert _cycles(GRAPH) == []


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_every_module_imports_only_layers_below_it(module):
    part = _part(module)
    upward = [t for t in GRAPH[module]
              if _part(t).split(".")[0] != part.split(".")[0] and LAYERS[_part(t)] >= LAYERS[part]]
    assert not upward, f"{module} (layer {part!r}) imports {upward} from its own or a higher layer"


def test_the_registry_imports_nothing_but_the_error_classes_and_the_config_rules():
    assert GRAPH["rightreasons.models.registry"] <= {"rightreasons.errors", "rightreasons.config"}


def test_the_engine_knows_no_feature_and_no_model():
    """The engine trains any task: it imports no feature, and nothing of the B-cos kit, the model zoo or the
    explanation methods (they reach it through the task and its hooks)."""
    engine = {m: deps for m, deps in GRAPH.items() if _part(m) == "engine"}
    assert "rightreasons.engine.trainer" in engine
    forbidden = (*FEATURES, "apps", "bcos", "models", "explain")
    for module, deps in engine.items():
        assert not {d for d in deps if _part(d).split(".")[0] in forbidden}, module


def test_no_arrow_runs_back_up():
    """Every import goes down the floor plan (or stays in its part): the kit never imports the engine or a feature,
    a feature never imports an application, and the features of one rank (guidance, distillation) never import each
    other."""
    for module, deps in GRAPH.items():
        part = _part(module).split(".")[0]
        for dep in deps:
            target = _part(dep).split(".")[0]
            if part in KIT:
                assert target not in ("engine", *FEATURES, "apps"), (module, dep)
            if part in FEATURES:
                assert target != "apps" and (target == part or target not in FEATURES[1:]), (module, dep)


def test_the_layer_kit_imports_nothing_above_it():
    kit = {m: deps for m, deps in GRAPH.items() if _part(m) == "bcos"}
    assert kit
    for module, deps in kit.items():
        outside = {d for d in deps if _part(d) != "bcos"}
        assert outside <= {"rightreasons.choices", "rightreasons.encoding", "rightreasons.errors"}, (module, outside)


#: the machinery of the zoo, above the model files: building, weight files, facts about a model, timm
MACHINERY = {f"rightreasons.models.{name}"
             for name in ("factory", "weights", "capabilities", "checkpointing", "timm_bridge", "hub", "model_card",
                          "preprocessing")}
#: what a model file registers itself with: its names and its released weights
REGISTRATION = {"rightreasons.models.registry", "rightreasons.models.pretrained"}


def test_model_files_use_the_registry_only_to_register():
    families = [m for m in GRAPH if _part(m) == "models" and m not in MACHINERY | REGISTRATION | {"rightreasons.models"}]
    assert "rightreasons.models.resnet" in families and "rightreasons.models.bcosify.convert" in families
    for module in families:
        assert not GRAPH[module] & MACHINERY, module
    assert GRAPH["rightreasons.models.pretrained"] & MACHINERY <= {"rightreasons.models.weights"}


def test_importing_the_package_leaves_timm_alone():
    code = ("import timm, rightreasons; assert timm.list_models('bcos_*') == [], 'registered'; "
            "added = rightreasons.register_timm_models(); assert 'bcos_resnet18' in added; "
            "assert 'bcos_resnet18' in timm.list_models('bcos_*')")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=GUARD_S)
