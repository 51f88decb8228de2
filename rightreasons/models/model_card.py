"""The model card of a model directory: the Hub's metadata header and what the run that trained the model measured.

:func:`model_card` writes ``README.md`` text: a YAML header the Hugging Face Hub reads (``library_name``, ``tags``,
``datasets``, ``metrics``, ``pipeline_tag``), then the architecture, its input, the classes, and — for a model from a
training run — the run's numbers (accuracy, worst-group accuracy, EPG, IoU, where the run measured them) on the
validation that chose the exported weights and on each final evaluation, with the rule that chose them, the seed, the
command line and the commit, and the explanation figures of example images saved beside it. Everything comes from
``config.json`` (:func:`~rightreasons.models.hub.model_config`), the run's ``summary.json`` and the figures' file
names; nothing is measured here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import yaml

__all__ = ["CARD_METRICS", "model_card", "run_evaluations"]

CARD_METRICS = {"accuracy": "accuracy", "worst_group_accuracy": "worst-group accuracy", "epg": "EPG", "iou": "IoU"}
"""Summary metric → its name in the card, in the card's order."""


def _header(config: Mapping[str, Any], run: Mapping[str, Any] | None, results: Mapping[str, Mapping[str, Any]]) -> str:
    data = ((run or {}).get("config") or {}).get("data") or {}
    bcos = (config.get("input") or {}).get("encoding") == "bcos"
    header: dict[str, Any] = {"library_name": config["library_name"], "pipeline_tag": "image-classification",
                              "tags": ["rightreasons", "image-classification", "explainability",
                                       *(["b-cos"] if bcos else [])]}
    if data.get("name"):
        header["datasets"] = [data["name"]]
    metrics = [key for key in CARD_METRICS if any(key in r for r in results.values())]
    if metrics:
        header["metrics"] = metrics
    return "---\n" + yaml.safe_dump(header, sort_keys=False) + "---\n"


def run_evaluations(run: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Heading → metrics of a training run's ``summary.json``: the validation at the exported step, then each final
    evaluation (``test``, ...)."""
    step = run.get("exported_step")
    validation = next((h for h in run.get("history") or [] if h.get("step") == step), None)
    found = {} if validation is None else {f"validation (step {step})": validation}
    for key, value in run.items():
        if isinstance(value, Mapping) and "split" in value:
            found[f"{key} (split {value['split']})"] = value
    return found


def _table(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    shown = [key for key in CARD_METRICS if any(key in r for r in results.values())]
    if not shown:
        return []
    lines = ["| evaluation | " + " | ".join(CARD_METRICS[k] for k in shown) + " |",
             "|---" * (len(shown) + 1) + "|"]
    for name, metrics in results.items():
        cells = [f"{metrics[k]:.4f}" if isinstance(metrics.get(k), (int, float)) else "–" for k in shown]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    worst = [f"{name}: {r['worst_group']}" for name, r in results.items() if r.get("worst_group")]
    if worst:
        lines += ["", "Worst group — " + "; ".join(worst) + "."]
    return lines


def _training(run: Mapping[str, Any]) -> list[str]:
    config, provenance, best = run.get("config") or {}, run.get("provenance") or {}, run.get("best") or {}
    export = (config.get("checkpoint") or {}).get("export", "last")
    rule = (f"the best validation {best.get('metric', 'score')}" if export == "best"
            else "the last step") + f", step {run.get('exported_step')}"
    lines = [f"- task: `rightreasons {run.get('task')}`, {run.get('steps')} steps, {run.get('epochs')} epochs",
             f"- exported weights: {rule}",
             f"- seed: {config.get('seed')}"]
    if provenance.get("argv"):
        lines.append("- command line: `" + " ".join(map(str, provenance["argv"])) + "`")
    if provenance.get("git_commit"):
        lines.append(f"- commit: `{provenance['git_commit']}` (rightreasons {provenance.get('rightreasons')}, "
                     f"torch {provenance.get('torch')})")
    return lines


def model_card(config: Mapping[str, Any], run: Mapping[str, Any] | None = None, pictures: Sequence[str] = ()) -> str:
    """The ``README.md`` of a model directory with ``config`` (its ``config.json``), from the training ``run``'s
    ``summary.json`` when there is one; ``pictures`` are the file names of explanation figures in the directory."""
    results = run_evaluations(run) if run else {}
    view = config.get("input")
    lines = [f"# {config['architecture']}", "",
             f"A `{config['architecture']}` image classifier, saved by rightreasons (`pip install rightreasons`).",
             "", "```python", "from rightreasons.models.hub import from_pretrained", "",
             'model = from_pretrained("PATH_OR_REPO_ID")',
             "x = model.input_config.transforms()(image)  # the input the model was trained on" if view else
             "", "```", "", "## Model", "",
             f"- architecture: `{config['architecture']}`, arguments `{config['arguments']}`"]
    if view:
        lines.append(f"- input: {view['input_size'][1]}×{view['input_size'][2]} px, encoding `{view['encoding']}`, "
                     f"crop_pct {view['crop_pct']}, {view['interpolation']} resize")
    if config.get("classes"):
        lines.append(f"- classes ({len(config['classes'])}): " + ", ".join(config["classes"]))
    if run:
        lines += ["", "## Results", "", *(_table(results) or ["The run recorded no metrics."]),
                  "", "## Training", "", *_training(run)]
    if pictures:
        lines += ["", "## Explanations", "", "The model's explanations of example images (input, explanation W(x), "
                  "contributions; the title names the explained class, its probability and the prediction):"]
        for i, name in enumerate(pictures, 1):
            lines += ["", f"![explanation {i}]({name})"]
    return _header(config, run, results) + "\n" + "\n".join(lines) + "\n"
