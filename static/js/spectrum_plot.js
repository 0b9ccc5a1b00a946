// Interactive spectrum plot (Plotly WebGL) plus the glue between the plot and the tool form.
// Data arrives through a json_script element; no inline scripts (Content-Security-Policy).
(function () {
  "use strict";

  const WINDOW_FILL = "rgba(255, 196, 0, 0.12)";
  const INSPECTED_FILL = "rgba(0, 114, 178, 0.18)";

  function readJson(id) {
    const node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  function windowShapes(windows) {
    const shapes = [];
    const annotations = [];
    windows.forEach(function (w) {
      shapes.push({
        type: "rect", xref: "x", yref: "paper", x0: w.range[0], x1: w.range[1], y0: 0, y1: 1,
        fillcolor: WINDOW_FILL, line: { width: 0 }, layer: "below", name: "window",
      });
      (w.lines || []).forEach(function (x) {
        shapes.push({
          type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1,
          line: { color: "rgba(200, 80, 0, 0.55)", width: 1, dash: "dot" }, name: "line",
        });
      });
      annotations.push({
        x: (w.range[0] + w.range[1]) / 2, y: 1, xref: "x", yref: "paper", yanchor: "bottom",
        text: w.name, showarrow: false, font: { size: 10, color: "#8a5a00" },
      });
    });
    return { shapes: shapes, annotations: annotations };
  }

  function inspectedShapes(ranges) {
    return ranges.map(function (r) {
      return {
        type: "rect", xref: "x", yref: "paper", x0: r[0], x1: r[1], y0: 0, y1: 1,
        fillcolor: INSPECTED_FILL, line: { width: 1, color: "rgba(0,114,178,0.6)" },
        layer: "below", name: "inspected",
      };
    });
  }

  // The page's plot of a long spectrum is thinned (at most a few thousand points per trace,
  // every extreme kept); a zoom asks zoom_url for the window's own pixels and a reset restores
  // the thinned whole.
  function series(data) {
    const band = !!(data.lower && data.upper);
    return {
      x: band ? [data.wavelength, data.wavelength, data.wavelength] : [data.wavelength],
      y: band ? [data.upper, data.lower, data.flux] : [data.flux],
    };
  }

  function wireZoom(node, data) {
    if (!data.zoom_url) return;
    const whole = series(data);
    const indices = whole.x.map(function (_, i) { return i; });
    let asked = 0;
    let timer = null;
    function show(part) { Plotly.restyle(node, part, indices); }
    function fetchWindow(lo, hi) {
      const mine = ++asked;
      const url = data.zoom_url + "?lo=" + encodeURIComponent(lo) + "&hi=" + encodeURIComponent(hi);
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (part) {
          if (!part || mine !== asked) return;  // refused, or a newer zoom answered first
          const shown = series({ wavelength: part.wavelength, flux: part.flux,
            lower: data.lower ? part.lower : null, upper: data.upper ? part.upper : null });
          if (shown.x.length === indices.length) show(shown);
        })
        .catch(function () { /* keep the thinned view */ });
    }
    node.on("plotly_relayout", function (ev) {
      if (ev["xaxis.autorange"]) {
        asked++;
        show(whole);
        return;
      }
      const lo = ev["xaxis.range[0]"], hi = ev["xaxis.range[1]"];
      if (lo === undefined || hi === undefined) return;
      clearTimeout(timer);
      timer = setTimeout(function () { fetchWindow(Number(lo), Number(hi)); }, 150);
    });
  }

  function draw(node, data) {
    const traces = [];
    if (data.lower && data.upper) {
      traces.push({
        x: data.wavelength, y: data.upper, type: "scattergl", mode: "lines",
        line: { width: 0 }, hoverinfo: "skip", showlegend: false, connectgaps: false,
      });
      traces.push({
        x: data.wavelength, y: data.lower, type: "scattergl", mode: "lines", fill: "tonexty",
        fillcolor: "rgba(120,120,120,0.25)", line: { width: 0 }, hoverinfo: "skip",
        name: "±1σ", connectgaps: false,
      });
    }
    traces.push({
      x: data.wavelength, y: data.flux, type: "scattergl", mode: "lines",
      line: { width: 1, color: "#1f2937" }, name: "flux", connectgaps: false,
      hovertemplate: "%{x:.1f} Å<br>flux %{y:.4g}<extra></extra>",
    });
    const markers = windowShapes(data.windows || []);
    const inspected = inspectedShapes(data.inspected || []);
    const layout = {
      margin: { l: 60, r: 10, t: 30, b: 45 },
      xaxis: { title: { text: data.rest_frame ? "Rest-frame wavelength (Å)" : "Wavelength (Å)" } },
      yaxis: { title: { text: "Flux" }, fixedrange: false },
      shapes: markers.shapes.concat(inspected),
      annotations: markers.annotations,
      showlegend: false,
      dragmode: "zoom",
    };
    Plotly.newPlot(node, traces, layout, { responsive: true, displaylogo: false });
    node.dataset.baseShapes = JSON.stringify(layout.shapes);
    wireZoom(node, data);
    return node;
  }

  function setInspected(node, range) {
    if (!node || !window.Plotly || !node.dataset.baseShapes) return;
    const base = JSON.parse(node.dataset.baseShapes).filter(function (s) { return s.name !== "current"; });
    const current = inspectedShapes([range]).map(function (s) { s.name = "current"; return s; });
    Plotly.relayout(node, { shapes: base.concat(current) });
  }

  function wireToolForm(plotNode) {
    const form = document.getElementById("render-form");
    if (!form) return;
    const lo = form.querySelector("[name=lo]");
    const hi = form.querySelector("[name=hi]");
    const label = form.querySelector("[name=label]");
    if (plotNode) {
      plotNode.on("plotly_relayout", function (ev) {
        if (ev["xaxis.range[0]"] !== undefined && lo && hi) {
          lo.value = Number(ev["xaxis.range[0]"]).toFixed(1);
          hi.value = Number(ev["xaxis.range[1]"]).toFixed(1);
        }
      });
    }
    form.querySelectorAll(".chip").forEach(function (chip) {
      chip.addEventListener("click", function () {
        lo.value = chip.dataset.lo;
        hi.value = chip.dataset.hi;
        label.value = chip.dataset.label;
        form.requestSubmit();
      });
    });
  }

  function init() {
    document.querySelectorAll("select[data-autosubmit]").forEach(function (select) {
      select.addEventListener("change", function () { select.form.submit(); });
    });
    let plotNode = null;
    document.querySelectorAll("[data-plot-source]").forEach(function (node) {
      const data = readJson(node.dataset.plotSource);
      if (data && window.Plotly) plotNode = draw(node, data);
    });
    wireToolForm(plotNode);
    document.body.addEventListener("htmx:afterSwap", function (ev) {
      const shown = ev.detail.target && ev.detail.target.querySelector
        ? ev.detail.target.querySelector("[data-shown-range]") : null;
      const target = shown || document.querySelector("#render-result [data-shown-range]");
      if (target && target.dataset.shownRange) {
        const parts = target.dataset.shownRange.split(",").map(Number);
        if (parts.length === 2) setInspected(plotNode, parts);
      }
    });
  }

  window.specvetPlot = { draw: draw, setInspected: setInspected, readJson: readJson };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
