// Rating pages (paper Figure 7): keys 0-5 score, ← / → judge a pair and t a tie, "?" toggles the rubric.
// The server answers a submission with the next item's panel (htmx swap); this file redraws
// the spectrum plots of the new panel. No inline scripts: data comes through json_script.
(function () {
  "use strict";

  // ↓ scrolls a long trajectory, so a tie has its own letter (it recorded a tie before).
  const OUTCOME_KEYS = { ArrowLeft: "left", t: "tie", T: "tie", ArrowRight: "right" };
  let busy = false;

  function typing(target) {
    if (!target || !target.tagName) return false;
    const tag = target.tagName.toUpperCase();
    return tag === "INPUT" || tag === "TEXTAREA" || tag === "SELECT" || target.isContentEditable;
  }

  function toggleRubric() {
    const panel = document.getElementById("rubric-panel");
    if (panel) panel.hidden = !panel.hidden;
  }

  function press(selector) {
    const button = document.querySelector(selector);
    if (!button || button.disabled || busy) return false;
    button.click();
    return true;
  }

  function onKey(ev) {
    if (ev.ctrlKey || ev.metaKey || ev.altKey || ev.defaultPrevented) return;
    if (typing(ev.target)) return;
    if (ev.key === "?") {
      toggleRubric();
      ev.preventDefault();
      return;
    }
    if (/^[0-5]$/.test(ev.key)) {
      if (press('[data-score="' + ev.key + '"]')) ev.preventDefault();
      return;
    }
    const outcome = OUTCOME_KEYS[ev.key];
    if (outcome && press('[data-outcome="' + outcome + '"]')) ev.preventDefault();
  }

  // Plots of a panel that htmx swapped in (Plotly marks the ones it has drawn).
  function drawPlots(root) {
    if (!window.specvetPlot || !window.Plotly) return;
    root.querySelectorAll("[data-plot-source]:not(.js-plotly-plot)").forEach(function (node) {
      const data = window.specvetPlot.readJson(node.dataset.plotSource);
      if (data) window.specvetPlot.draw(node, data);
    });
  }

  function init() {
    document.addEventListener("keydown", onKey);
    document.addEventListener("click", function (ev) {
      const toggle = ev.target.closest ? ev.target.closest("[data-toggle-rubric]") : null;
      if (toggle) toggleRubric();
    });
    document.body.addEventListener("htmx:beforeRequest", function () { busy = true; });
    document.body.addEventListener("htmx:afterRequest", function () { busy = false; });
    // A refused score (400, 409) comes back as the same item with the reason: show it.
    document.body.addEventListener("htmx:beforeSwap", function (ev) {
      const code = ev.detail.xhr.status;
      if (code === 400 || code === 409) {
        ev.detail.shouldSwap = true;
        ev.detail.isError = false;
      }
    });
    document.body.addEventListener("htmx:afterSettle", function () {
      drawPlots(document);
      window.scrollTo({ top: 0 });
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
