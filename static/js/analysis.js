// Rating analysis charts (paper Figure 4): score distributions and CDFs, the Spearman heatmap,
// pairwise win/tie/loss per data set and Bradley-Terry strengths. Data via json_script.
(function () {
  "use strict";

  const SCORES = [0, 1, 2, 3, 4, 5];
  const CONFIG = { displaylogo: false, responsive: true };
  const MARGIN = { t: 40, r: 10, l: 55, b: 45 };

  // A plot is drawn when it comes near the window (IntersectionObserver): the page settles
  // after the plots in view, not after all five (issue 37 item 10).
  const observer = "IntersectionObserver" in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      if (!entry.isIntersecting) return;
      observer.unobserve(entry.target);
      const pending = entry.target.specvetPending;
      delete entry.target.specvetPending;
      if (pending) pending();
    });
  }, { rootMargin: "200px" }) : null;

  function plot(id, traces, layout) {
    const node = document.getElementById(id);
    if (!node) return;
    const render = function () {
      Plotly.newPlot(node, traces, Object.assign({ margin: MARGIN }, layout), CONFIG);
    };
    if (!observer) { render(); return; }
    node.specvetPending = render;
    observer.observe(node);
  }

  // Shares, not counts: humans give several scores per trajectory, a judge one.
  function histograms(data) {
    const traces = Object.keys(data.histograms).map(function (name) {
      const counts = data.histograms[name];
      const total = counts.reduce(function (a, b) { return a + b; }, 0) || 1;
      return {
        type: "bar", name: name, x: SCORES, y: counts.map(function (c) { return c / total; }),
        customdata: counts, hovertemplate: name + ": score %{x}<br>%{y:.0%} (%{customdata})<extra></extra>",
      };
    });
    plot("hist-plot", traces, {
      title: { text: "Score distribution" }, barmode: "group",
      xaxis: { title: { text: "score" }, dtick: 1 }, yaxis: { title: { text: "share" }, tickformat: ".0%" },
    });
  }

  function cdfs(data) {
    const traces = Object.keys(data.cdfs).map(function (name) {
      return {
        type: "scatter", mode: "lines+markers", line: { shape: "hv" }, name: name,
        x: SCORES, y: data.cdfs[name], hovertemplate: name + ": P(score ≤ %{x}) = %{y:.2f}<extra></extra>",
      };
    });
    plot("cdf-plot", traces, {
      title: { text: "Cumulative distribution" },
      xaxis: { title: { text: "score" }, dtick: 1 }, yaxis: { title: { text: "P(score ≤ x)" }, range: [0, 1.05] },
    });
  }

  function spearman(data) {
    const names = data.spearman.names;
    if (names.length < 2) return; // the page says what the heatmap needs
    const text = data.spearman.matrix.map(function (row) {
      return row.map(function (v) { return v === null ? "n/a" : v.toFixed(2); });
    });
    plot("spearman-plot", [{
      type: "heatmap", x: names, y: names, z: data.spearman.matrix, zmin: -1, zmax: 1,
      colorscale: "RdBu", reversescale: true, text: text, texttemplate: "%{text}",
      hovertemplate: "%{y} vs %{x}: ρ = %{text}<extra></extra>",
    }], { title: { text: "Spearman ρ" }, yaxis: { autorange: "reversed" }, margin: { t: 40, r: 10, l: 110, b: 90 } });
  }

  function pairwise(data) {
    const shares = data.pairwise.shares || {};
    const sets = Object.keys(shares).sort();
    if (!sets.length) return;
    const parts = [["win", "#0f7b3f"], ["tie", "#9ca3af"], ["loss", "#a11d2c"]];
    const traces = parts.map(function (part) {
      return {
        type: "bar", orientation: "h", name: part[0], y: sets, marker: { color: part[1] },
        x: sets.map(function (s) { return shares[s][part[0]]; }),
        customdata: sets.map(function (s) { return shares[s].n; }),
        hovertemplate: "%{y}: " + part[0] + " %{x:.0%} of %{customdata}<extra></extra>",
      };
    });
    plot("pairwise-plot", traces, {
      title: { text: data.pairwise.reference + " vs the other model" }, barmode: "stack",
      xaxis: { tickformat: ".0%", range: [0, 1] }, yaxis: { automargin: true },
      margin: { t: 40, r: 10, l: 90, b: 45 },
    });
  }

  // Ticks of a log axis at 1-2-5 steps, labelled as numbers: Plotly's own minor labels on a
  // short log range read "9 8 7 ... 3" for 0.9 ... 0.3.
  function logTicks(low, high) {
    const steps = [[1, 2, 5], [1, 2, 3, 5, 7], [1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9]];
    for (let k = 0; k < steps.length; k++) {
      const ticks = [];
      for (let e = Math.floor(Math.log10(low)); e <= Math.ceil(Math.log10(high)); e++) {
        steps[k].forEach(function (step) {
          const v = Number((step * Math.pow(10, e)).toPrecision(3));
          if (v >= low && v <= high) ticks.push(v);
        });
      }
      if (ticks.length >= 3) return { tickvals: ticks, ticktext: ticks.map(String) };
    }
    const ticks = [low, Math.sqrt(low * high), high];
    return { tickvals: ticks, ticktext: ticks.map(function (v) { return String(Number(v.toPrecision(3))); }) };
  }

  function strengths(data) {
    const s = data.pairwise.strengths || {};
    const names = Object.keys(s);
    if (!names.length) return;
    const bounds = [];
    names.forEach(function (n) {
      [s[n].low, s[n].estimate, s[n].high].forEach(function (v) { if (v > 0 && Number.isFinite(v)) bounds.push(v); });
    });
    const low = Math.min.apply(null, bounds.length ? bounds : [1]) / 1.15;
    const high = Math.max.apply(null, bounds.length ? bounds : [1]) * 1.15;
    const ticks = logTicks(low, high);
    plot("strengths-plot", [{
      type: "scatter", mode: "markers", x: names, y: names.map(function (n) { return s[n].estimate; }),
      error_y: {
        type: "data", symmetric: false,
        array: names.map(function (n) { return s[n].high - s[n].estimate; }),
        arrayminus: names.map(function (n) { return s[n].estimate - s[n].low; }),
      },
      hovertemplate: "%{x}: %{y:.2f}<extra></extra>",
    }], {
      title: { text: "Strength (geometric mean 1)" },
      xaxis: { automargin: true, tickangle: names.length > 3 ? -30 : 0 },
      yaxis: {
        type: "log", title: { text: "strength" }, automargin: true,
        range: [Math.log10(low), Math.log10(high)], tickvals: ticks.tickvals, ticktext: ticks.ticktext,
      },
    });
  }

  function draw() {
    const node = document.getElementById("analysis-data");
    if (!node || !window.Plotly) return;
    const data = JSON.parse(node.textContent);
    histograms(data);
    cdfs(data);
    spearman(data);
    pairwise(data);
    strengths(data);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);
  else draw();
})();
