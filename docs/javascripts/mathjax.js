// MathJax 3 for the formulas of the site (pymdownx.arithmatex, generic mode, writes \( \) and \[ \] into the pages).
// The MathJax component itself is vendored beside this file (mathjax/tex-svg.js, MathJax 3.2.2 from npm, Apache-2.0:
// mathjax/LICENSE), so the site renders formulas offline: no CDN.
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};

// Material for MkDocs swaps pages without reloading when instant navigation is on: typeset every page it shows.
if (typeof document$ !== "undefined") {
  document$.subscribe(() => {
    if (window.MathJax && MathJax.typesetPromise) {
      MathJax.startup.output.clearCache();
      MathJax.typesetClear();
      MathJax.texReset();
      MathJax.typesetPromise();
    }
  });
}
