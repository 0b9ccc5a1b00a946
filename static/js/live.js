// Live inspection view: shade each newly inspected window on the whole-spectrum plot, and keep
// the viewer's "Inspected windows" chips up to date as steps arrive (they stayed at "none yet").
(function () {
  "use strict";

  function shownRanges() {
    const ranges = [];
    document.querySelectorAll("#steps [data-shown-range]").forEach(function (step) {
      const parts = step.dataset.shownRange.split(",").map(Number);
      if (parts.length === 2 && parts.every(Number.isFinite)) ranges.push(parts);
    });
    return ranges;
  }

  function shade() {
    const node = document.getElementById("spectrum-plot");
    const ranges = shownRanges();
    if (!node || !window.specvetPlot || !node.dataset.plotReady) return;
    const known = (node._specvetData && node._specvetData.inspected) || [];
    if (ranges.length !== known.length) window.specvetPlot.setInspectedAll(node, ranges);
    if (ranges.length) window.specvetPlot.setInspected(node, ranges[ranges.length - 1]);
  }

  document.addEventListener("DOMContentLoaded", function () {
    const node = document.getElementById("spectrum-plot");
    if (node && !node.dataset.plotReady) node.addEventListener("specvet:ready", function () { window.setTimeout(shade, 0); }, { once: true });
    else window.setTimeout(shade, 50);
    // Any swap may have brought steps (the poller replaces itself, so its target is detached).
    document.body.addEventListener("htmx:afterSettle", shade);
  });
})();
