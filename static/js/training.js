// Training run charts (paper Figure 6): loss, reward, tool calls, response length, F1 over steps.
// The page passes every point so far in #training-chart; each htmx poll of the progress section
// brings only the newer points in #training-points, which are appended to the traces.
(function () {
  "use strict";

  const CHARTS = [
    { id: "chart-loss", title: "Loss", axis: "loss", traces: [["loss", "loss"]] },
    { id: "chart-reward", title: "Mean reward", axis: "reward", traces: [["reward_mean", "reward"]] },
    { id: "chart-tools", title: "Tool calls per trajectory", axis: "calls",
      traces: [["tool_calls_mean", "rollouts"], ["val_tool_calls_mean", "validation"]] },
    { id: "chart-length", title: "Response length", axis: "tokens",
      traces: [["response_length_mean", "model tokens"]] },
    { id: "chart-f1", title: "F1", axis: "F1",
      traces: [["val_f1", "validation F1"], ["batch_f1", "rollout F1"]] },
  ];
  const CONFIG = { displaylogo: false, responsive: true };

  function readJson(id) {
    const node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  // The page holds only its stage's charts (no reward or response length for SFT).
  function shown() {
    return CHARTS.filter(function (chart) { return document.getElementById(chart.id); });
  }

  function draw(data) {
    for (const chart of shown()) {
      const traces = chart.traces.map(function (pair) {
        const series = data.series[pair[0]] || { x: [], y: [] };
        return { x: series.x, y: series.y, name: pair[1], mode: "lines+markers", type: "scatter",
                 hovertemplate: "step %{x}<br>" + pair[1] + " %{y:.4g}<extra></extra>" };
      });
      Plotly.newPlot(chart.id, traces, {
        title: { text: chart.title }, margin: { t: 40, r: 10 },
        xaxis: { title: { text: "step" }, rangemode: "tozero" },
        yaxis: { title: { text: chart.axis } }, showlegend: chart.traces.length > 1,
      }, CONFIG);
    }
  }

  function extend(data) {
    for (const chart of shown()) {
      const x = [], y = [], indices = [];
      chart.traces.forEach(function (pair, index) {
        const series = data.series[pair[0]];
        if (series && series.x.length) {
          x.push(series.x);
          y.push(series.y);
          indices.push(index);
        }
      });
      if (indices.length) Plotly.extendTraces(chart.id, { x: x, y: y }, indices);
    }
  }

  // The creation form shows the data fields of the chosen stage only.
  function wireStageForm() {
    const stage = document.querySelector("select[name=stage]");
    if (!stage) return;
    function sync() {
      document.querySelectorAll("fieldset[data-stage]").forEach(function (fieldset) {
        fieldset.hidden = fieldset.dataset.stage !== stage.value;
      });
    }
    stage.addEventListener("change", sync);
    sync();
  }

  function start() {
    wireStageForm();
    const initial = readJson("training-chart");
    if (!initial || !window.Plotly) return;
    draw(initial);
    let seen = initial.last_id;
    document.body.addEventListener("htmx:afterSettle", function (event) {
      if (!event.target || event.target.id !== "training-progress") return;
      const fresh = readJson("training-points");
      if (!fresh || fresh.last_id <= seen) return;
      seen = fresh.last_id;
      extend(fresh);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
