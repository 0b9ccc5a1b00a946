// Calibration page: reliability diagram of each model, raw and recalibrated (Plotly, data via
// json_script; the model names arrive escaped by charts.plotly_text).
(function () {
  "use strict";

  function points(part) {
    const bins = ((part && part.bins) || []).filter(function (b) { return b.count > 0; });
    return {
      x: bins.map(function (b) { return b.mean; }),
      y: bins.map(function (b) { return b.share; }),
      text: bins.map(function (b) { return b.count + " vetted"; }),
    };
  }

  function draw() {
    const node = document.getElementById("reliability-data");
    if (!node || !window.Plotly) return;
    const models = JSON.parse(node.textContent);
    const traces = [
      { x: [0, 1], y: [0, 1], mode: "lines", line: { dash: "dot", color: "#9ca3af" }, name: "perfectly calibrated", hoverinfo: "skip" },
    ];
    models.forEach(function (model) {
      const raw = points(model.raw);
      const recalibrated = points(model.recalibrated);
      traces.push({ x: raw.x, y: raw.y, text: raw.text, mode: "markers+lines", line: { dash: "dot" },
        name: model.name + " raw", hovertemplate: "P(YES) %{x:.2f}<br>share YES %{y:.2f}<br>%{text}<extra></extra>" });
      traces.push({ x: recalibrated.x, y: recalibrated.y, text: recalibrated.text, mode: "markers+lines",
        name: model.name + " v" + model.version, hovertemplate: "P(YES) %{x:.2f}<br>share YES %{y:.2f}<br>%{text}<extra></extra>" });
    });
    Plotly.newPlot("reliability-plot", traces, {
      xaxis: { title: { text: "P(YES)" }, range: [0, 1] },
      yaxis: { title: { text: "share vetted YES" }, range: [0, 1.05] },
      margin: { t: 20, r: 10 },
    }, { displaylogo: false, responsive: true });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
