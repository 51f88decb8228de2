"""The page itself: one self-contained HTML file (inline CSS and script, images as data URIs, nothing fetched) that
shows what :func:`~rightreasons.viewer.view.collect_view` collected.

The view's data travel as JSON in a ``<script type="application/json">`` element, with every ``<`` written as
``\\u003c`` so that no string of the data (a class name is the dataset's, hence the user's) can close the element;
the script builds the page from it with ``textContent`` and attributes only, never as HTML. The one string placed into
the HTML itself, the title, is escaped.

The page's state — filters by true class, group and correctness, and the sort order — lives in the URL's fragment
(``page.html#class=waterbird&group=G2%20landbird%2Fwater&correct=any-wrong&sort=diff:0:1``), so that a view can be
bookmarked or sent, and a headless browser can open the page filtered. Sort keys: ``index`` (the split's order),
``epg:R`` / ``-epg:R`` (EPG of run ``R``, lowest / highest first), ``diff:A:B`` (EPG of run ``B`` minus run ``A``,
lowest first); correctness: ``all``, ``all-correct``, ``any-wrong``, ``wrong:R``, ``correct:R``.
"""

from __future__ import annotations

import html
from typing import Any

from ..fileio import json_text

__all__ = ["render_page"]

STYLE = """
body{font:14px system-ui,sans-serif;margin:1em;background:#fafafa;color:#222}
h1{font-size:1.3em;margin:.2em 0}
table{border-collapse:collapse;margin:.5em 0}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th:first-child,td:first-child{text-align:left}
#controls{margin:.8em 0;display:flex;gap:1em;flex-wrap:wrap;align-items:center}
#grid{display:flex;flex-wrap:wrap;gap:10px}
.card{background:#fff;border:1px solid #ddd;border-radius:4px;padding:6px}
.card header{font-size:.85em;margin-bottom:4px}
.panels{display:flex;gap:6px}
.panel{width:128px;font-size:.8em}
.frame{position:relative;width:128px;height:128px;background:#000}
.frame img{width:100%;height:100%;image-rendering:pixelated;display:block}
.box{position:absolute;border:1.5px solid #ff0;box-sizing:border-box;pointer-events:none}
.right{color:#070}.wrong{color:#b00;font-weight:bold}
"""

SCRIPT = r"""
"use strict";
const view = JSON.parse(document.getElementById("view-data").textContent);
const runs = view.runs, images = view.images;
const el = (tag, text, cls) => {
  const e = document.createElement(tag);
  if (text !== undefined) e.textContent = text;
  if (cls) e.className = cls;
  return e;
};
const className = k => view.classes[k] === undefined ? "class " + k : view.classes[k];
const fmt = v => typeof v === "number" ? (Number.isInteger(v) ? String(v) : v.toFixed(4)) : String(v);

function metricsTable() {
  const keys = [];
  runs.forEach(r => Object.values(r.metrics).forEach(m => Object.keys(m).forEach(k => {
    if (!keys.includes(k)) keys.push(k);
  })));
  const table = el("table"), head = el("tr");
  ["run", "evaluation", ...keys].forEach(k => head.appendChild(el("th", k)));
  table.appendChild(head);
  runs.forEach(r => {
    const evaluations = Object.entries(r.metrics);
    if (!evaluations.length) evaluations.push(["(no summary.json)", {}]);
    evaluations.forEach(([name, values]) => {
      const row = el("tr");
      row.appendChild(el("td", r.label + " (" + r.method + " @ " + r.layer + ")"));
      row.appendChild(el("td", name));
      keys.forEach(k => row.appendChild(el("td", k in values ? fmt(values[k]) : "–")));
      table.appendChild(row);
    });
  });
  return table;
}

function select(id, label, options) {
  const wrap = el("label", label + " "), s = el("select");
  s.id = id;
  options.forEach(([value, text]) => {
    const o = el("option", text);
    o.value = value;
    s.appendChild(o);
  });
  s.addEventListener("change", () => { location.hash = stateHash(); });
  wrap.appendChild(s);
  document.getElementById("controls").appendChild(wrap);
  return s;
}

const classSelect = select("class", "class", [["", "all"], ...view.classes.map(c => [c, c])]);
const groupSelect = view.groups ? select("group", "group", [["", "all"], ...view.groups.map(g => [g, g])]) : null;
const correctSelect = select("correct", "correctness", [["all", "all"], ["all-correct", "correct in every run"],
  ["any-wrong", "wrong in some run"], ...runs.flatMap((r, i) => [["wrong:" + i, "wrong: " + r.label],
  ["correct:" + i, "correct: " + r.label]])]);
const sortSelect = select("sort", "sort", [["index", "split order"], ...runs.flatMap((r, i) => [
  ["epg:" + i, "EPG " + r.label + ", lowest first"], ["-epg:" + i, "EPG " + r.label + ", highest first"]]),
  ...runs.flatMap((a, i) => runs.flatMap((b, j) => i === j ? [] : [["diff:" + i + ":" + j,
    "EPG " + b.label + " − " + a.label + ", lowest first"]]))]);
const selects = {class: classSelect, group: groupSelect, correct: correctSelect, sort: sortSelect};

function stateHash() {
  return Object.entries(selects).filter(([, s]) => s && s.value && s.value !== s.options[0].value)
    .map(([k, s]) => k + "=" + encodeURIComponent(s.value)).join("&");
}

function readHash() {
  new URLSearchParams(location.hash.slice(1)).forEach((value, key) => {
    const s = selects[key];
    if (s && Array.from(s.options).some(o => o.value === value)) s.value = value;
  });
}

function shown(image) {
  if (classSelect.value && !image.labels.some(k => className(k) === classSelect.value)) return false;
  if (groupSelect && groupSelect.value && view.groups[image.group] !== groupSelect.value) return false;
  const [kind, run] = correctSelect.value.split(":");
  const correct = image.runs.map(r => r.correct);
  if (kind === "all-correct") return correct.every(Boolean);
  if (kind === "any-wrong") return !correct.every(Boolean);
  if (kind === "wrong") return !correct[run];
  if (kind === "correct") return correct[run];
  return true;
}

function sortKey(image) {
  const [kind, a, b] = sortSelect.value.split(":");
  const epg = i => image.runs[i].epg;
  if (kind === "epg") return epg(a);
  if (kind === "-epg") return epg(a) === null ? null : -epg(a);
  if (kind === "diff") return epg(a) === null || epg(b) === null ? null : epg(b) - epg(a);
  return image.index;
}

function frame(src, boxes, alt) {
  const f = el("div", undefined, "frame"), img = el("img");
  img.src = src;
  img.alt = alt;
  f.appendChild(img);
  boxes.forEach(([k, x1, y1, x2, y2]) => {
    const b = el("div", undefined, "box");
    Object.assign(b.style, {left: 100 * x1 + "%", top: 100 * y1 + "%", width: 100 * (x2 - x1) + "%",
                            height: 100 * (y2 - y1) + "%"});
    b.title = className(k);
    f.appendChild(b);
  });
  return f;
}

function card(image) {
  const c = el("div", undefined, "card");
  c.dataset.id = image.id;
  const group = image.group === null || image.group === undefined ? "" :
    " · group " + (view.groups ? view.groups[image.group] : image.group);
  c.appendChild(el("header", image.id + " · true: " + image.labels.map(className).join(", ") + group));
  const panels = el("div", undefined, "panels"), input = el("div", undefined, "panel");
  input.appendChild(frame(image.image, image.boxes, "image " + image.id));
  input.appendChild(el("div", "image + boxes"));
  panels.appendChild(input);
  image.runs.forEach((r, i) => {
    const p = el("div", undefined, "panel explanation");
    p.dataset.run = runs[i].label;
    p.appendChild(frame(r.explanation, image.boxes.filter(b => b[0] === r.target),
                        runs[i].label + " explanation of " + className(r.target)));
    p.appendChild(el("div", runs[i].label));
    p.appendChild(el("div", "pred: " + className(r.predicted) + " (p=" + r.probability.toFixed(3) + ")",
                     r.correct ? "right prediction" : "wrong prediction"));
    p.appendChild(el("div", "EPG " + (r.epg === null ? "–" : r.epg.toFixed(3))));
    panels.appendChild(p);
  });
  c.appendChild(panels);
  return c;
}

function render() {
  readHash();
  const chosen = images.filter(shown);
  const keyed = chosen.map(image => [sortKey(image), image]);
  keyed.sort((p, q) => p[0] === null ? (q[0] === null ? 0 : 1) : q[0] === null ? -1 : p[0] - q[0]);
  const grid = document.getElementById("grid");
  grid.replaceChildren(...keyed.map(([, image]) => card(image)));
  const count = document.getElementById("count");
  count.textContent = chosen.length + " of " + images.length + " images shown";
  count.dataset.shown = chosen.length;
}

images.forEach((image, i) => { image.index = i; });
document.getElementById("summary").textContent = "dataset " + view.dataset + ", split " + view.split + ", first " +
  images.length + " images; each run explains the first true class; EPG of that explanation inside its " +
  ({"boxes": "boxes", "masks": "mask", "points": "point discs", "masks-else-boxes": "mask, else boxes",
    "union": "boxes, mask and point discs"}[view.regions] || "boxes") + ".";
document.getElementById("metrics").appendChild(metricsTable());
window.addEventListener("hashchange", render);
render();
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>{style}</style>
</head>
<body>
<h1>{title}</h1>
<p id="summary"></p>
<div id="metrics"></div>
<div id="controls"></div>
<p id="count"></p>
<div id="grid"></div>
<script type="application/json" id="view-data">{data}</script>
<script>{script}</script>
</body>
</html>
"""


def render_page(view: dict[str, Any], title: str) -> str:
    """The HTML page of ``view`` (:func:`~rightreasons.viewer.view.collect_view`) titled ``title``."""
    data = json_text(view, "the view's data", indent=None).replace("<", "\\u003c")
    return TEMPLATE.format(title=html.escape(title), style=STYLE, data=data, script=SCRIPT)
