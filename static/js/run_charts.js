// Run page charts: reliability diagram and F1 against coverage (Plotly, data via json_script).
(function () {
  "use strict";

  function draw() {
    const node = document.getElementById("run-metrics");
    if (!node || !window.Plotly) return;
    const metrics = JSON.parse(node.textContent);
    const bins = metrics.reliability.filter(function (b) { return b.count > 0; });
    Plotly.newPlot("reliability-plot", [
      { x: [0, 1], y: [0, 1], mode: "lines", line: { dash: "dot", color: "#9ca3af" }, name: "perfectly calibrated", hoverinfo: "skip" },
      { x: bins.map(function (b) { return b.confidence; }), y: bins.map(function (b) { return b.accuracy; }),
        text: bins.map(function (b) { return b.count + " candidates"; }), mode: "lines+markers", name: "observed",
        hovertemplate: "confidence %{x:.2f}<br>accuracy %{y:.2f}<br>%{text}<extra></extra>" },
    ], { title: { text: "Reliability (ECE " + metrics.ece.toFixed(3) + ")" }, xaxis: { title: { text: "confidence" }, range: [0, 1] },
         yaxis: { title: { text: "accuracy" }, range: [0, 1.05] }, margin: { t: 40, r: 10 }, showlegend: false },
      { displaylogo: false, responsive: true });
    Plotly.newPlot("coverage-plot", [
      { x: metrics.coverage.map(function (p) { return p.coverage; }), y: metrics.coverage.map(function (p) { return p.f1; }),
        text: metrics.coverage.map(function (p) { return "threshold " + p.threshold.toFixed(3) + ", " + p.n + " automatic"; }),
        mode: "lines+markers", name: "F1", hovertemplate: "coverage %{x:.2f}<br>F1 %{y:.3f}<br>%{text}<extra></extra>" },
      { x: metrics.coverage.map(function (p) { return p.coverage; }), y: metrics.coverage.map(function (p) { return p.accuracy; }),
        mode: "lines", name: "accuracy", line: { dash: "dot" } },
    ], { title: { text: "F1 of automatic decisions vs coverage" }, xaxis: { title: { text: "share decided automatically" }, range: [0, 1.02] },
         yaxis: { title: { text: "score" }, range: [0, 1.05] }, margin: { t: 40, r: 10 } },
      { displaylogo: false, responsive: true });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
