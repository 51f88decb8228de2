"""The explanation figures of the docs site (docs/figures/*.png), from small real runs and the project's own renderers.

    OMP_NUM_THREADS=1 python scripts/docs_figures.py                    # a small demo run (about 3 minutes)
    OMP_NUM_THREADS=1 python scripts/docs_figures.py --demo runs/demo   # reuse a demo run (the full one: 3 seeds)

From a demo run (:func:`docs_settings` unless ``--demo`` names a finished run) it draws, with the demo's
grid (:func:`rightreasons.apps.demo.figures.draw_explanations`: the image with its box, then each model's colour
explanation of the true class with its prediction and EPG):

* ``demo_explanations.png`` — the baseline and the Energy-guided model (home page, the demo study);
* ``guidance_explanations.png`` — the baseline and every guided variant (the guidance study);
* ``robustness_explanations.png`` — the baseline and the guided model with boxes on 1 % of the images (robustness);
* ``e2kd_explanations.png`` — the teacher and its KD / e²KD / frozen-e²KD students (the e²KD study);

and, from a short B-cosification of a standard torchvision ResNet-18 fine-tuned on the synthetic birds,
``bcosification_explanation.png`` with :func:`rightreasons.explain.save_explanation` (the B-cosification study).
Each demo figure says on itself what run it comes from (:func:`run_note`).
Every PNG is reduced to a palette of 256 colours (fewer where needed) to stay under :data:`MAX_BYTES`.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "figures"
#: the largest committed figure, in bytes
MAX_BYTES = 300_000


def shrink(path: Path) -> Path:
    """Rewrite the PNG at ``path`` with a palette (optimised): 256 colours, fewer while the file is over
    :data:`MAX_BYTES`; refuse one still over it at 64."""
    with Image.open(path) as image:
        rgb = image.convert("RGB")
    for colours in (256, 128, 64):
        rgb.quantize(colours, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
        if path.stat().st_size <= MAX_BYTES:
            return path
    raise SystemExit(f"{path} is {path.stat().st_size:,} bytes, over {MAX_BYTES:,}")


def docs_settings():
    """The run behind the committed figures: the quick demo (one seed, 512 training images) with batches of 32 and
    two guided epochs — 48 baseline and 32 guided steps, enough for Energy guidance to move the explanations onto the
    object (EPG of the images shown: baseline 33 %, Energy 58 %), where the quick demo's 24 and 8 steps are not."""
    from dataclasses import replace

    from rightreasons.apps.demo import DemoSettings

    quick = DemoSettings.quick()
    return replace(quick, recipe=replace(quick.recipe, batch_size=32, guided_epochs=2))


def run_note(recipe: dict) -> str:
    """What a figure says about its run, from the run's ``results.json`` ``settings.recipe``."""
    images = recipe["train_images"] or 2000
    steps = -(-images // recipe["batch_size"])
    return (f"One seed of the demo's benchmark at a small budget: {images} training images, the baseline "
            f"{steps * recipe['baseline_epochs']} steps, each guided model {steps * recipe['guided_epochs']} more "
            "from it (scripts/docs_figures.py). Each header: the mean EPG of the images shown.")


def demo_figures(run: Path, out: Path, scratch: Path) -> list[Path]:
    """The demo-run figures (module docstring) of the finished demo in ``run``, drawn in ``scratch`` and written to
    ``out``."""
    from rightreasons.apps.demo import DemoContext, DemoSettings
    from rightreasons.apps.demo.distillation import MODE_LABELS
    from rightreasons.apps.demo.figures import draw_explanations
    import json
    from dataclasses import replace

    results = json.loads((run / "results.json").read_text(encoding="utf-8"))
    recipe = results["settings"]["recipe"]
    settings = DemoSettings.quick() if results["settings"]["smoke"] else DemoSettings.full()
    settings = replace(settings, recipe=replace(settings.recipe, **{
        key: recipe[key] for key in ("train_images", "test_images", "batch_size", "baseline_epochs", "guided_epochs")}))
    ctx = DemoContext(scratch, replace(settings, explain_per_group=1))
    files = {**results["guidance"]["model_files"], **results["distillation"]["model_files"]}
    model = student = lambda name: Path(files[name][0])  # noqa: E731  (seed 0)
    note = run_note(recipe)
    grids = {"demo_explanations.png": {"baseline": model("baseline"), "Energy-guided": model("energy")},
             "guidance_explanations.png": {name: model(name) for name in settings.models},
             "robustness_explanations.png": {"baseline (ERM)": model("baseline"),
                                             "Energy, boxes on 1 %": model("energy-1pct")},
             "e2kd_explanations.png": {"teacher (energy)": model(settings.distillation.teacher),
                                       **{MODE_LABELS[m]: student(m) for m in settings.distillation.modes}}}
    written = []
    epochs = results["settings"]["distillation"]["epochs"]
    students = (f" The students train {epochs} epoch{'s' if epochs > 1 else ''} from scratch: too few to take over "
                "the teacher's explanations at this budget (the e²KD study measures that).")
    for filename, models in grids.items():
        extra = students if filename.startswith("e2kd") else ""
        path, _ = draw_explanations(ctx, models, filename, note=note + extra)
        written.append(shrink(Path(shutil.copy(path, out / filename))))
    return written


def bcosification_figure(out: Path, steps: int = 48) -> Path:
    """A torchvision ResNet-18 (width 64, 2 classes) B-cosified with the defaults and fine-tuned ``steps`` steps on
    synthetic birds at 32 px (Adam, BCE); its explanation of a test image's true class with the box drawn."""
    import torchvision

    import rightreasons
    from rightreasons.data import collate, load_dataset
    from rightreasons.encoding import reencode
    from rightreasons.explain import explain, prediction_caption, save_explanation

    torch.manual_seed(0)
    model = rightreasons.bcosify(torchvision.models.resnet18(num_classes=2))
    data = load_dataset("synthetic-birds", None, "train", n=512, size=32)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    batches = iter(torch.utils.data.DataLoader(data, batch_size=32, shuffle=True, collate_fn=collate))
    model.train()
    for _ in range(steps):
        try:
            batch = next(batches)
        except StopIteration:
            batches = iter(torch.utils.data.DataLoader(data, batch_size=32, shuffle=True, collate_fn=collate))
            batch = next(batches)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(
            model(reencode(batch["image"], "none", "bcos")), batch["labels"])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()
    sample = load_dataset("synthetic-birds", None, "test", n=8, size=32)[2]
    x = reencode(sample["image"][None], "none", "bcos")
    target = int(sample["labels"].argmax())
    e = explain(model, x, target=target)
    title = (f"B-cosified ResNet-18, {steps} fine-tuning steps — "
             + prediction_caption(e.logits[0].sigmoid().detach(), target, data.classes, e.logits[0].detach()))
    path = save_explanation(out / "bcosification_explanation.png", x[0], e.weights[0].detach(), title,
                            boxes=sample["boxes"].as_subclass(torch.Tensor))
    return shrink(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo", type=Path, help="a finished demo run to draw from (default: run the quick demo)")
    parser.add_argument("--out", type=Path, default=OUT, help="where the PNGs go (default: docs/figures)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        run = args.demo
        if run is None:
            from rightreasons.apps.demo import run_demo
            from rightreasons.console import set_threads

            set_threads(1)
            run = Path(scratch) / "demo"
            run_demo(run, docs_settings())
        written = demo_figures(run, args.out, Path(scratch) / "figures")
        written.append(bcosification_figure(args.out))
    for path in written:
        print(f"{path} ({path.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
