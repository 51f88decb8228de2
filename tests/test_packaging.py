"""A built wheel holds every subpackage, the shipped configs (as the package data of `rightreasons.configs`) and
`py.typed` (PEP 561: type checkers read the package's hints)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from setuptools import find_packages
from guards import GUARD_S

ROOT = Path(__file__).resolve().parents[1]


def test_the_package_list_names_every_subpackage():
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    found = find_packages(str(ROOT), include=["rightreasons*"])
    assert sorted(set(listed) - {"rightreasons.configs"}) == sorted(found), \
        "add the new subpackage to [tool.setuptools] packages in pyproject.toml"


def test_the_wheel_contains_the_configs_and_py_typed(tmp_path):
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for part in ("rightreasons", "configs"):
        shutil.copytree(ROOT / part, source / part, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(source),
                           "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=GUARD_S)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("rightreasons-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {f"rightreasons/configs/{p.relative_to(ROOT / 'configs')}" for p in (ROOT / "configs").rglob("*")
               if p.suffix in (".yaml", ".md")}
    assert shipped and shipped <= names, sorted(shipped - names)[:10]
    for module in ("rightreasons/apps/cli/__init__.py", "rightreasons/data/prepare/__init__.py",
                   "rightreasons/console.py", "rightreasons/py.typed"):
        assert module in names
