"""``rightreasons view``: two tiny runs (a baseline and a guided one) on one page, checked as a file and in a real
headless browser (Debian's ``chromium``; skipped with the reason where it is missing — ``.ci/run`` installs it).

The page is one file that fetches nothing; it holds the same first images of the test split for both runs, each with
both runs' explanation pictures, the true labels and the predictions the models themselves make. In the browser it
loads without console errors, shows one card per image, a class filter in the URL fragment shows fewer, and it
renders to a screenshot. Runs on different data, a bare model file, an unknown method and an ``--out`` among a run's
own files or planted as a link are refused with one ``error:`` line.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml

from cli_outcomes import clear_error
from guards import GUARD_S
from rightreasons import load_model
from rightreasons.data import collate, load_dataset, transforms_for
from run_configs import tiny_guided_config

IMAGES = 6
CHROMIUM = shutil.which("chromium")


@pytest.fixture(scope="module")
def runs(tmp_path_factory, run_cli) -> list[Path]:
    """A tiny baseline (guidance weight 0) and a tiny guided run on the same synthetic data."""
    folder = tmp_path_factory.mktemp("view")
    made = []
    for name, weight in (("baseline", 0.0), ("guided", 1.0)):
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(tiny_guided_config(**{"guidance.weight": weight})))
        done = run_cli("guide", "--config", str(folder / f"{name}.yaml"), f"output_dir={folder / name}")
        assert done.returncode == 0, done.stderr[-3000:]
        made.append(folder / name)
    return made


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def page(runs, run_cli) -> Path:
    """The page of both runs; writing it adds that one file and changes nothing else."""
    out = runs[0].parent / "page.html"
    before = _files(out.parent)
    done = run_cli("view", *map(str, runs), "--out", str(out), "--images", str(IMAGES))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == str(out)
    after = _files(out.parent)
    assert set(after) - set(before) == {"page.html"} and all(after[name] == data for name, data in before.items())
    return out


def _data(page: Path) -> dict:
    found = re.search(r'<script type="application/json" id="view-data">(.*?)</script>', page.read_text(), re.S)
    return json.loads(found.group(1))


def _predictions(run: Path) -> list[int]:
    """What the run's model predicts on the first images of the test split, computed here."""
    model = load_model(run / "model.safetensors").eval()
    options = tiny_guided_config()["data"]["options"]
    dataset = load_dataset("synthetic-birds", None, "test", **options)
    dataset.transform = transforms_for(model, 32, crop_fraction=1.0)
    with torch.no_grad():
        return model(collate([dataset[i] for i in range(IMAGES)])["image"]).argmax(1).tolist()


def test_one_self_contained_page_with_both_runs(page, runs):
    assert not re.search(r"https?://", page.read_text())
    view = _data(page)
    assert [r["label"] for r in view["runs"]] == ["baseline", "guided"]
    assert all(r["method"] == "bcos" and r["layer"] == "input" for r in view["runs"])
    assert all("accuracy" in next(iter(r["metrics"].values())) for r in view["runs"])
    assert view["classes"] == ["landbird", "waterbird"] and len(view["groups"]) == 4
    dataset = load_dataset("synthetic-birds", None, "test", **tiny_guided_config()["data"]["options"])
    assert [i["id"] for i in view["images"]] == dataset.ids[:IMAGES]
    for index, image in enumerate(view["images"]):
        assert image["labels"] == dataset.positive_labels[index].nonzero()[:, 0].tolist()
        assert image["group"] == int(dataset.groups[index]) and image["image"].startswith("data:image/png;base64,")
        assert len(image["runs"]) == 2
        for record in image["runs"]:
            assert record["explanation"].startswith("data:image/png;base64,")
            assert record["correct"] == (record["predicted"] in image["labels"])
            assert record["epg"] is None or 0 <= record["epg"] <= 1
    for position, run in enumerate(runs):
        assert [i["runs"][position]["predicted"] for i in view["images"]] == _predictions(run)


def _chromium(url: str, *flags: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr",
                           "--v=0", f"--user-data-dir={cwd / 'profile'}", *flags, url],
                          capture_output=True, text=True, timeout=GUARD_S, cwd=cwd)


def _shown(page: Path, fragment: str = "") -> tuple[int, str]:
    """Cards in the DOM of the page opened with ``fragment``, and the browser's console lines."""
    done = _chromium(page.as_uri() + fragment, "--dump-dom", cwd=page.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    console = "\n".join(line for line in done.stderr.splitlines() if ":CONSOLE" in line)
    shown = int(re.search(r'id="count" data-shown="(\d+)"', done.stdout).group(1))
    assert len(re.findall(r'class="card"', done.stdout)) == shown
    assert len(re.findall(r'class="panel explanation"', done.stdout)) == 2 * shown
    return shown, console


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on this machine (Debian: apt-get install chromium; "
                                             ".ci/run installs it)")
def test_the_page_in_a_headless_browser(page):
    shown, console = _shown(page)
    assert shown == IMAGES and not console, console
    view = _data(page)
    waterbirds = sum(1 in image["labels"] for image in view["images"])
    assert 0 < waterbirds < IMAGES
    shown, console = _shown(page, "#class=waterbird&sort=diff:0:1")
    assert shown == waterbirds and not console, console
    wrong = sum(not all(r["correct"] for r in image["runs"]) for image in view["images"])
    assert _shown(page, "#correct=any-wrong")[0] == wrong
    screenshot = page.parent / "page.png"
    done = _chromium(page.as_uri(), "--hide-scrollbars", "--window-size=1280,900", f"--screenshot={screenshot}",
                     cwd=page.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    assert screenshot.read_bytes().startswith(b"\x89PNG") and screenshot.stat().st_size > 10_000


def test_runs_on_other_data_are_refused(runs, run_cli, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(runs[1], other)
    summary = json.loads((other / "summary.json").read_text())
    summary["config"]["data"]["options"]["n"] = 16
    (other / "summary.json").write_text(json.dumps(summary))
    done = run_cli("view", str(runs[0]), str(other), "--out", str(tmp_path / "page.html"))
    clear_error(done, r"trained on synthetic-birds with options .*'n': 12.* but .*other on synthetic-birds with "
                      r"options .*'n': 16")
    assert not (tmp_path / "page.html").exists()


def test_a_bare_model_file_a_runs_own_files_and_a_link_are_refused(runs, run_cli, tmp_path):
    shutil.copy(runs[0] / "model.safetensors", tmp_path / "bare.safetensors")
    done = run_cli("view", str(tmp_path / "bare.safetensors"), "--out", str(tmp_path / "page.html"))
    clear_error(done, r"RUN_DIR .*bare.safetensors: a model file without its run's summary.json")
    before = (runs[0] / "summary.json").read_bytes()
    done = run_cli("view", str(runs[0]), "--out", str(runs[0] / "summary.json"))
    clear_error(done, r"--out .*summary.json belongs to the training run")
    assert (runs[0] / "summary.json").read_bytes() == before
    clear_error(run_cli("view", str(runs[0]), "--out", str(tmp_path / "p.html"), "--method", "magic"),
                r"--method magic: expected one of bcos, bcos_weights")
    (tmp_path / "victim.txt").write_text("kept")
    (tmp_path / "link.html").symlink_to(tmp_path / "victim.txt")
    clear_error(run_cli("view", str(runs[0]), "--out", str(tmp_path / "link.html")), r"link.html is a symbolic link")
    assert (tmp_path / "victim.txt").read_text() == "kept"
