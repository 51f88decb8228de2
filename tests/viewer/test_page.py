"""The viewer's parts without a trained run: the page keeps user strings out of its HTML, run labels are unique, a
summary's results are found, the dataset check names both datasets, and pictures are PNG data URIs."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import pytest
import torch
from PIL import Image

from rightreasons.classification import ClassificationConfig
from rightreasons.errors import UsageError
from rightreasons.viewer import ViewedRun, render_page, run_labels
from rightreasons.viewer.pictures import explanation_uri, rgb_uri
from rightreasons.viewer.runs import check_same_dataset, summary_results, viewed_method

HOSTILE = '</script><script>alert("x")</script><b>&'


def _view(classes: list[str]) -> dict:
    return {"dataset": "d", "split": "test", "classes": classes, "groups": None, "runs": [], "images": []}


def test_user_strings_never_reach_the_html_as_markup():
    page = render_page(_view([HOSTILE, "cat"]), title=HOSTILE)
    assert page.count("</script>") == 2  # the data element's and the script's own
    assert "<b>" not in page and "&lt;/script&gt;" in page
    data = re.search(r'<script type="application/json" id="view-data">(.*?)</script>', page, re.S).group(1)
    assert json.loads(data)["classes"] == [HOSTILE, "cat"]


def test_the_page_fetches_nothing():
    page = render_page(_view(["a"]), title="t")
    assert not re.search(r"https?://|<link|src=", page)


def test_run_labels_are_the_shortest_unique_suffixes(tmp_path):
    assert run_labels([tmp_path / "a" / "run", tmp_path / "b" / "run"]) == ["a/run", "b/run"]
    assert run_labels([tmp_path / "baseline", tmp_path / "guided"]) == ["baseline", "guided"]


def test_summary_results_take_the_exported_validation_and_final_evaluations():
    summary = {"exported_step": 4, "history": [{"step": 2, "accuracy": 0.1}, {"step": 4, "accuracy": 0.5, "epg": 0.3,
                                                                               "worst_group": "G1", "epoch": 1}],
               "test": {"split": "test", "accuracy": 0.4, "f1_per_class": [0.1, 0.2]}, "best": {"step": 4}}
    assert summary_results(summary) == {"validation (step 4)": {"accuracy": 0.5, "epg": 0.3, "worst_group": "G1"},
                                         "test (split test)": {"accuracy": 0.4}}
    assert summary_results({}) == {}


def _run(path: str, **data) -> ViewedRun:
    config = ClassificationConfig(output_dir=path)
    config.data.name, config.data.options = data.get("name", "synthetic-birds"), data.get("options", {})
    return ViewedRun(path, Path(path), torch.nn.Identity(), config, {})


def test_runs_on_different_data_are_refused_naming_both():
    check_same_dataset([_run("a"), _run("b")])
    with pytest.raises(UsageError, match=r"RUN_DIR a was trained on synthetic-birds but b on waterbirds100"):
        check_same_dataset([_run("a"), _run("b", name="waterbirds100")])
    with pytest.raises(UsageError, match=r"with options \{'n': 3\}"):
        check_same_dataset([_run("a"), _run("b", options={"n": 3})])


def test_the_method_defaults_to_the_configs():
    config = ClassificationConfig()
    assert viewed_method(config, bcos=True) == ("bcos", "input")
    assert viewed_method(config, bcos=False) == ("gradcam", "final")
    config.eval.localization = False  # shown all the same
    assert viewed_method(config, bcos=True) == ("bcos", "input")
    assert viewed_method(config, bcos=True, method="gradcam") == ("gradcam", "final")
    assert viewed_method(config, bcos=True, method="bcos_weights", layer="mid2") == ("bcos_weights", "input")


def _decoded(uri: str) -> Image.Image:
    assert uri.startswith("data:image/png;base64,")
    return Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))


def test_pictures_are_png_data_uris():
    image = torch.rand(3, 5, 7)
    assert _decoded(rgb_uri(image)).size == (7, 5)
    six = torch.cat([image, 1 - image])
    colour = _decoded(explanation_uri(six, torch.randn(5, 7), torch.randn(6, 5, 7)))
    assert colour.mode == "RGBA" and colour.size == (7, 5)
    assert _decoded(explanation_uri(six, torch.randn(5, 7), None)).size == (7, 5)
