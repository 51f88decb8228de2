"""The demo's figure stages: explanations of the same test images by every model, and the Pareto plot.

Both stages read the models and test metrics left by :func:`rightreasons.apps.demo.guidance.train_and_evaluate` and
write PNGs under ``out/figures``; their numbers (predictions shown in the figure, the front and the representative
model) go to ``ctx.results``. :func:`draw_explanations` draws the grid for any set of models (the distillation stage:
teacher vs students).
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from matplotlib.patches import Rectangle

from ...boxes import class_masks, outline
from ...classification.loss import class_probabilities, resolve_classification_loss
from ...data import GROUP_NAMES, collate
from ...metrics.evaluation import is_multilabel
from ...explain import explain, to_rgba
from ...metrics import epg
from ...models import capabilities, load_model
from ...plotting import figure
from ...reporting import mark_fronts, markdown_table, plot_pareto
from .pipeline import DemoContext
from .settings import DemoSettings

__all__ = ["draw_explanations", "explanation_figure", "explanation_targets", "pareto_figure", "smoke_note"]

#: opacity smoothing window of the colour explanations: the B-cos default of 15 px at 224 px, scaled to the image
SMOOTH_AT_224 = 15


def _smooth_window(size: int) -> int:
    window = max(1, round(SMOOTH_AT_224 * size / 224))
    return window if window % 2 else window + 1


def explanation_targets(ctx: DemoContext) -> list[int]:
    """Test indices shown in the figure: the first ``explain_per_group`` images of each group (G3, a waterbird on
    land, among them)."""
    groups = torch.as_tensor(ctx.test_set().records.groups)
    picks = []
    for g in range(len(GROUP_NAMES)):
        found = torch.nonzero(groups == g).flatten()[:ctx.settings.explain_per_group].tolist()
        if not found:
            raise ValueError(f"the test split has no image of group {GROUP_NAMES[g]}; use more test images")
        picks += found
    return picks


def draw_explanations(ctx: DemoContext, models: Mapping[str, Path], filename: str, note: str | None = None
                      ) -> tuple[Path, list[dict[str, Any]]]:
    """A grid of the chosen test images (:func:`explanation_targets`, box drawn), one row per image, and for each of
    ``models`` (column title → model file) its colour explanation of the ground-truth class, titled with the
    predicted class, its probability, its logit (green: correct) and the EPG of the explanation on that image (the
    share of its positive contributions inside the box, what the test table averages); the box is outlined on every
    explanation, so where the evidence sits is seen against the object. Each column's header gives its mean EPG over
    the images shown; ``note``, when given, is written above the grid (a smoke run says why its explanations do not
    move). Written to ``out/figures/<filename>``; returns the path and, per image, its id, group, label and every
    model's prediction and EPG.

    Probabilities go through the link of the loss the demo's recipes train with (the default, ``auto``: BCE for
    B-cos models, so ``sigmoid``). Small B-cos networks trained for a few epochs, as here, can have logits of order
    1e-3: every probability is then within a fraction of a percent of 0.5, and the logit shows the margin the
    prediction rests on."""
    loaded = {name: load_model(model_file).to(ctx.device).eval() for name, model_file in models.items()}
    test = ctx.test_set(next(iter(loaded.values())))  # B-cos models: one encoding for all
    indices = explanation_targets(ctx)
    batch = collate([test[i] for i in indices])
    images = batch["image"].to(ctx.device)
    labels = batch["labels"].argmax(1).to(ctx.device)
    masks = class_masks(batch["boxes"], batch["box_labels"], labels.cpu(), tuple(images.shape[-2:])).to(ctx.device)
    shown: dict[str, Any] = {}
    for name, model in loaded.items():
        e = explain(model, images, target=labels)
        loss = resolve_classification_loss("auto", capabilities(model).bcos, is_multilabel(test))
        probabilities = class_probabilities(e.logits, loss)
        predicted = probabilities.argmax(1)
        shown[name] = {"rgba": to_rgba(images.cpu(), e.weights.cpu(), smooth=_smooth_window(ctx.settings.image_size)),
                       "class": predicted.cpu().tolist(),
                       "probability": probabilities.gather(1, predicted[:, None])[:, 0].cpu().tolist(),
                       "logit": e.logits.detach().float().gather(1, predicted[:, None])[:, 0].cpu().tolist(),
                       "epg": epg(e.maps.detach().float(), masks).cpu().tolist()}
    rows, cols = len(indices), 1 + len(models)
    path = ctx.out / "figures" / filename
    lines = len(textwrap.wrap(note, _note_width(cols))) + 2 if note else 0
    with figure(path, rows, cols, size=(1.9 * cols, 1.9 * rows + 0.4 + 0.16 * lines), dpi=110) as (fig, axes):
        records = _draw_grid(axes, test, indices, batch, images, labels, models, shown)
        if note:  # a suptitle: the figure's layout makes room for it
            fig.suptitle(textwrap.fill(note, _note_width(cols)) + "\n\n", fontsize=7, color="firebrick")
    return path, records


def _note_width(cols: int) -> int:
    """Characters per line of a note above a grid of ``cols`` columns (7 pt text, 1.9 inches a column)."""
    return max(40, int(1.9 * cols * 15))


def _draw_grid(axes: Any, test: Any, indices: list[int], batch: dict[str, Any], images: torch.Tensor,
               labels: torch.Tensor, models: Mapping[str, Path], shown: dict[str, Any]) -> list[dict[str, Any]]:
    classes = test.classes
    records = []
    for r, index in enumerate(indices):
        group = int(test.records.groups[index])
        ax = axes[r][0]
        ax.imshow(images[r, :3].permute(1, 2, 0).cpu().clamp(0, 1).numpy())
        for box in batch["boxes"][r].as_subclass(torch.Tensor).tolist():
            x, y, width, height = outline(box)
            ax.add_patch(Rectangle((x, y), width, height, fill=False, color="white", lw=1))
        ax.set_title(GROUP_NAMES[group], fontsize=7)
        record = {"id": str(batch["id"][r]), "group": GROUP_NAMES[group], "label": classes[int(labels[r])],
                  "predictions": {}}
        for c, name in enumerate(models, start=1):
            predicted, probability = shown[name]["class"][r], shown[name]["probability"][r]
            logit = shown[name]["logit"][r]
            score = shown[name]["epg"][r]
            axes[r][c].imshow(shown[name]["rgba"][r].numpy())
            for box in batch["boxes"][r].as_subclass(torch.Tensor).tolist():
                x, y, width, height = outline(box)
                axes[r][c].add_patch(Rectangle((x, y), width, height, fill=False, color="grey", lw=0.6, ls="--"))
            correct = predicted == int(labels[r])
            axes[r][c].set_title(f"{classes[predicted]} p={probability:.3f}\nlogit {logit:+.2g}  EPG {score:.0%}",
                                 fontsize=6, color="darkgreen" if correct else "firebrick")
            record["predictions"][name] = {"class": classes[predicted], "probability": probability, "logit": logit,
                                           "epg": score}
        records.append(record)
    headers = ["input + box", *(f"{name}\nEPG {sum(shown[name]['epg']) / len(indices):.0%}" for name in models)]
    for c, header in enumerate(headers):
        axes[0][c].annotate(header, (0.5, 1.32), xycoords="axes fraction", ha="center", fontsize=8, weight="bold")
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    return records


def _median_abs_logit(records: list[dict[str, Any]]) -> float:
    logits = [abs(p["logit"]) for r in records for p in r["predictions"].values()]
    return float(torch.tensor(logits).median())


def smoke_note(settings: DemoSettings) -> str | None:
    """What the explanation figure of a smoke run (``--quick``) says on itself: its models trained too few steps for
    guidance to move the explanations, and what their explanations show instead; ``None`` for the full demo."""
    if not settings.smoke:
        return None
    r = settings.recipe
    per_epoch = -(-(r.train_images or 2000) // r.batch_size)
    return (f"Smoke run (--quick): the baseline trained {per_epoch * r.baseline_epochs} steps and each guided model "
            f"{per_epoch * r.guided_epochs} — too few for guidance to move the explanations onto the object (EPG in "
            "each header and panel). A barely trained B-cos network's colour explanation shows its architecture: "
            "opacity ‖W(x)‖ peaks where most paths of the zero-padded convolutions meet, the image centre. "
            "The full demo (make demo) moves them: test EPG 28 % → 79 % with Energy guidance "
            "(docs/studies/demo.md).")


def explanation_figure(ctx: DemoContext) -> None:
    """Stage: explanations of the chosen test images by the baseline and every guided model (seed 0); a smoke run's
    figure says on itself why its explanations do not move (:func:`smoke_note`)."""
    path, records = draw_explanations(ctx, {name: ctx.models[name][0] for name in ctx.settings.models},
                                      "explanations.png", note=smoke_note(ctx.settings))
    mean_epg = {name: sum(r["predictions"][name]["epg"] for r in records) / len(records)
                for name in ctx.settings.models}
    ctx.results["explanations"] = {"figure": str(path.relative_to(ctx.out)), "seed": 0, "images": records,
                                   "mean_epg": mean_epg}
    ctx.add_section("Explanations before and after guidance",
                    "B-cos explanations (W(x), colour-coded; seed 0) of the ground-truth class for the same test "
                    "images, one row per image, with the predicted class, its probability (sigmoid of the logit: "
                    "B-cos models train with BCE) and its logit (green: correct). The median |logit| shown is "
                    f"{_median_abs_logit(records):.2g}: small B-cos networks trained for a few epochs have small "
                    "logits, so their probabilities stay close to 0.5 and the logit shows what the prediction rests "
                    "on. "
                    f"Rows: {', '.join(r['group'] for r in records)}. EPG of the images shown (mean; each panel gives "
                    "its own): " + ", ".join(f"{name} {score:.0%}" for name, score in mean_epg.items()) + "."
                    + (" " + note if (note := smoke_note(ctx.settings)) else "") + "\n\n"
                    f"![explanations]({path.relative_to(ctx.out)})")


def pareto_figure(ctx: DemoContext) -> None:
    """Stage: every model and seed as a point (test accuracy, EPG, IoU); the Pareto front and the representative
    (highest EPG within 5 p.p. of the best accuracy), plotted against EPG."""
    runs = ctx.results["guidance"]["runs"]
    points = [{"id": f"{model}/{seed}", "group": "test", "model": model, **metrics}
              for seed, by_model in runs.items() for model, metrics in by_model.items()]
    objectives = ("accuracy", "epg", "iou")
    marked = mark_fronts(points, objectives, score_key="accuracy")
    path = plot_pareto(ctx.out / "figures" / "pareto.png", marked,
                       [("epg", "accuracy"), ("epg", "worst_group_accuracy")], colour_key="model",
                       title="synthetic-birds test split: every model and seed")
    front = [p for p in marked if p["on_front"]]
    pick = next(p for p in marked if p["representative"])
    ctx.results["pareto"] = {"figure": str(path.relative_to(ctx.out)), "objectives": list(objectives),
                             "front": [p["id"] for p in front], "representative": pick["id"]}
    rows = [{**p, **{k: f"{100 * p[k]:.1f}" for k in (*objectives, "worst_group_accuracy")}} for p in front]
    ctx.add_section("Pareto front",
                    "Models (each seed a point) on the Pareto front over (test accuracy, EPG, IoU); ★ = the "
                    "representative model, the highest EPG within 5 p.p. of the best accuracy "
                    f"(here `{pick['id']}`).\n\n"
                    + markdown_table(rows, ["id", "accuracy", "worst_group_accuracy", "epg", "iou",
                                            "representative"],
                                     ["model/seed", "accuracy", "worst group", "EPG", "IoU", "representative"])
                    + f"\n![Pareto plot]({path.relative_to(ctx.out)})")
