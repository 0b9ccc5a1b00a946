// Live inspection view: shade each newly inspected window on the whole-spectrum plot.
(function () {
  "use strict";

  function latestRange() {
    const steps = document.querySelectorAll("#steps [data-shown-range]");
    if (!steps.length) return null;
    const parts = steps[steps.length - 1].dataset.shownRange.split(",").map(Number);
    return parts.length === 2 ? parts : null;
  }

  function shade() {
    const node = document.getElementById("spectrum-plot");
    const range = latestRange();
    if (node && range && window.specvetPlot) window.specvetPlot.setInspected(node, range);
  }

  document.addEventListener("DOMContentLoaded", function () {
    window.setTimeout(shade, 50);
    document.body.addEventListener("htmx:afterSettle", function (event) {
      if (event.detail.target && event.detail.target.closest && event.detail.target.closest("#steps")) shade();
    });
  });
})();
