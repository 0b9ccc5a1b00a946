// Interactive spectrum plot (Plotly, SVG) plus the glue between the plot and the tool form.
// SVG, not WebGL ("scattergl"): the server sends at most a few thousand points per plot (min and
// max per pixel column, annotation.core.charts.min_max_indices), which SVG draws in milliseconds,
// while each WebGL plot compiles its shaders first, in software on a machine without a GPU: on a
// loaded 2-core machine that was seconds per plot (issue 37 item 10).
// Data arrives through a json_script element; no inline scripts (Content-Security-Policy).
(function () {
  "use strict";

  const TRACE = "scatter";
  const WINDOW_FILL = "rgba(255, 196, 0, 0.12)";
  const INSPECTED_FILL = "rgba(0, 114, 178, 0.18)";

  function readJson(id) {
    const node = document.getElementById(id);
    return node ? JSON.parse(node.textContent) : null;
  }

  const LABEL_ROW_PX = 13;
  const LABEL_CHAR_PX = 6;  // 10 px font, a generous average glyph width

  // Window labels sit in rows above the plot: each goes to the first row where it clears the
  // labels already placed (in pixels of the whole view; zooming in only spreads them apart).
  function labelRows(windows, xSpan, widthPx) {
    const rows = [];
    const scale = widthPx / Math.max(xSpan[1] - xSpan[0], 1e-9);
    const order = windows.map(function (w, i) { return i; }).sort(function (a, b) {
      return (windows[a].range[0] + windows[a].range[1]) - (windows[b].range[0] + windows[b].range[1]);
    });
    const rowOf = new Array(windows.length).fill(0);
    order.forEach(function (i) {
      const w = windows[i];
      const centre = ((w.range[0] + w.range[1]) / 2 - xSpan[0]) * scale;
      const half = (String(w.name).length * LABEL_CHAR_PX) / 2 + 4;
      let row = rows.findIndex(function (rightEdge) { return rightEdge <= centre - half; });
      if (row === -1) { rows.push(0); row = rows.length - 1; }
      rows[row] = centre + half;
      rowOf[i] = row;
    });
    return { rowOf: rowOf, count: rows.length };
  }

  function windowShapes(windows, rowOf) {
    const shapes = [];
    const annotations = [];
    windows.forEach(function (w, i) {
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
        yshift: (rowOf ? rowOf[i] : 0) * LABEL_ROW_PX, name: "window-label",
      });
    });
    return { shapes: shapes, annotations: annotations };
  }

  // Clickable labels under the inspected windows: a click zooms to the window (and the page's
  // viewer, spectrum_viewer.js, shows that step's image).
  function inspectedLabels(ranges) {
    return ranges.map(function (r, i) {
      return {
        x: (r[0] + r[1]) / 2, y: 0, xref: "x", yref: "paper", yanchor: "bottom",
        text: "\u25B8" + (i + 1), showarrow: false, captureevents: true,
        font: { size: 10, color: "#0b4f7a" }, bgcolor: "rgba(255,255,255,0.7)",
        name: "inspected-label", hovertext: "zoom to " + r[0].toFixed(1) + "\u2013" + r[1].toFixed(1) + " \u00c5",
      };
    });
  }

  // Overlays are layers (base markers, the live step's window, the viewer's lines and sky
  // regions, ...): each layer replaces its own shapes and annotations, never another's.
  function composeOverlays(node) {
    const layers = node._specvetLayers || {};
    let shapes = [];
    let annotations = [];
    Object.keys(layers).forEach(function (name) {
      shapes = shapes.concat(layers[name].shapes || []);
      annotations = annotations.concat(layers[name].annotations || []);
    });
    return Plotly.relayout(node, { shapes: shapes, annotations: annotations });
  }

  function setLayer(node, name, shapes, annotations) {
    if (!node || !window.Plotly || !node._specvetLayers) return null;
    node._specvetLayers[name] = { shapes: shapes || [], annotations: annotations || [] };
    if (node._specvetBatching) return null;
    return composeOverlays(node);
  }

  // Several layers set at once (the viewer's first draw: sky, lines): one relayout, so one
  // redraw, instead of one per layer (issue 37: each cost 0.2 s on the queue page).
  function batchLayers(node, fill) {
    if (!node || !window.Plotly || !node._specvetLayers) return null;
    node._specvetBatching = true;
    try {
      fill();
    } finally {
      node._specvetBatching = false;
    }
    return composeOverlays(node);
  }

  function zoomTo(node, lo, hi) {
    return Plotly.relayout(node, { "xaxis.range[0]": lo, "xaxis.range[1]": hi });
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

  // The y-axis follows the flux, not the ±1σ band, with the agent's own image limits
  // (agent/render.py robust_limits; charts.robust_y_range gives the same on the server for the
  // whole and each zoom): every real feature, strong lines included, but not an isolated spike.
  const SPIKE_SMOOTH_WIDTH = 5, SPIKE_THRESHOLD_SIGMA = 8, SPIKE_REACH_FRACTION = 0.5;
  const SPIKE_MAX_PIXELS = 2, SPIKE_CONTINUUM_WIDTH = 15, SPIKE_NOISE_SIGMAS = 3;
  const SPIKE_SUPPORT_RATIO = 2, Y_MARGIN_FRACTION = 0.06;
  const PLATEAU_MAX_PIXELS = 5, PLATEAU_FLAT_FRACTION = 0.8, PLATEAU_EDGE_FRACTION = 0.2;

  // agent/render.py _plateau_runs: 3-5 pixel runs, flat-topped and sharp-edged (issue 37).
  function markPlateaus(flux, threshold, sigma, spike) {
    const n = flux.length;
    if (n < SPIKE_CONTINUUM_WIDTH) return;
    const rise = flux.map(function (v, i) { return v - runningMedianAt(flux, SPIKE_CONTINUUM_WIDTH, i); });
    for (let i = 0; i < n; i++) {
      if (Math.abs(rise[i]) <= threshold) continue;
      let end = i;
      while (end + 1 < n && Math.abs(rise[end + 1]) > threshold) end++;
      const start = i;
      i = end;
      const length = end - start + 1;
      if (length < 3 || length > PLATEAU_MAX_PIXELS || start === 0 || end === n - 1) continue;
      const run = rise.slice(start, end + 1);
      const top = run.reduce(function (a, b) { return Math.abs(b) > Math.abs(a) ? b : a; });
      const sign = top > 0 ? 1 : -1;
      const peak = Math.max.apply(null, run.map(function (v) { return sign * v; }));
      const flat = Math.min.apply(null, run.map(function (v) { return sign * v; })) >= PLATEAU_FLAT_FRACTION * peak;
      const edge = Math.max(SPIKE_NOISE_SIGMAS * sigma, PLATEAU_EDGE_FRACTION * peak);
      if (flat && sign * rise[start - 1] <= edge && sign * rise[end + 1] <= edge) {
        for (let k = start; k <= end; k++) spike[k] = true;
      }
    }
  }

  function median(values) {
    const sorted = values.slice().sort(function (a, b) { return a - b; });
    const mid = sorted.length >> 1;
    return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
  }

  function runningMedianAt(values, width, i) {
    const half = width >> 1, last = values.length - 1, window = [];
    for (let k = i - half; k <= i + half; k++) window.push(values[Math.min(Math.max(k, 0), last)]);
    return median(window);
  }

  function robustLimits(flux) {
    const n = flux.length;
    const smooth = n < SPIKE_SMOOTH_WIDTH ? flux.slice()
      : flux.map(function (_, i) { return runningMedianAt(flux, SPIKE_SMOOTH_WIDTH, i); });
    const residual = flux.map(function (v, i) { return v - smooth[i]; });
    const sigma = 1.4826 * median(residual.map(Math.abs));
    const threshold = Math.max(SPIKE_THRESHOLD_SIGMA * sigma,
      0.05 * (Math.max.apply(null, smooth) - Math.min.apply(null, smooth)));
    const spike = new Array(n).fill(false);
    for (let i = 0; i < n && n >= 3; i++) {
      if (Math.abs(residual[i]) <= threshold) continue;
      let end = i;
      while (end + 1 < n && Math.abs(residual[end + 1]) > threshold) end++;
      const start = i;
      i = end;
      if (end - start + 1 > SPIKE_MAX_PIXELS) continue;
      const peak = Math.abs(residual[end]) > Math.abs(residual[start]) ? end : start;
      const sign = Math.sign(residual[peak]);
      const sides = [];
      if (start > 0) sides.push(sign * flux[start - 1]);
      if (end < n - 1) sides.push(sign * flux[end + 1]);
      if (!sides.length) continue;
      const neighbour = Math.max.apply(null, sides);
      const continuum = sign * runningMedianAt(flux, SPIKE_CONTINUUM_WIDTH, peak);
      const rise = sign * flux[peak] - neighbour;
      if (neighbour - continuum <= Math.max(SPIKE_NOISE_SIGMAS * sigma, rise / SPIKE_SUPPORT_RATIO)) {
        spike[start] = spike[end] = true;
      }
    }
    markPlateaus(flux, threshold, sigma, spike);
    let lo = Infinity, hi = -Infinity;
    flux.forEach(function (v, i) { if (!spike[i]) { lo = Math.min(lo, v); hi = Math.max(hi, v); } });
    const reach = SPIKE_REACH_FRACTION * (hi - lo);
    let low = lo, high = hi;
    flux.forEach(function (v, i) {
      if (!spike[i]) return;
      if (v >= lo - reach) low = Math.min(low, v);
      if (v <= hi + reach) high = Math.max(high, v);
    });
    const span = high - low;
    if (!(span > 0) || !Number.isFinite(span)) {
      const half = high !== 0 ? Math.abs(high) * 0.05 : 0.5;
      return [low - half, high + half];
    }
    return [low - Y_MARGIN_FRACTION * span, high + Y_MARGIN_FRACTION * span];
  }

  function robustRange(wavelength, flux, lo, hi) {
    const shown = [];
    for (let i = 0; i < flux.length; i++) {
      const x = wavelength[i], y = flux[i];
      if (y !== null && Number.isFinite(y) && x >= lo && x <= hi) shown.push(y);
    }
    return shown.length ? robustLimits(shown) : null;
  }

  function wireYRange(node, data) {
    // An explicit y zoom (a box, or a drag on the y-axis) is the user's; an x-only zoom, a pan
    // or a fetched window rescales y; a reset (double-click) restores the whole's range.
    const state = { userY: false, lo: null, hi: null };
    function apply(range) {
      if (range && !state.userY) Plotly.relayout(node, { "yaxis.range": range.slice() });
    }
    const known = data.wavelength.filter(function (x) { return x !== null; });
    const xSpan = known.length ? [known[0], known[known.length - 1]] : null;
    node.on("plotly_relayout", function (ev) {
      if (ev["xaxis.autorange"] || ev["yaxis.autorange"]) {
        // Reset and Autoscale: the whole spectrum, x its own span and y the whole's range.
        state.userY = false;
        state.lo = state.hi = null;
        const whole = {};
        if (data.y_range) whole["yaxis.range"] = data.y_range.slice();
        if (xSpan && ev["xaxis.autorange"]) whole["xaxis.range"] = xSpan.slice();
        Plotly.relayout(node, whole);
        return;
      }
      if (ev["yaxis.range[0]"] !== undefined) {
        state.userY = true;
        return;
      }
      const lo = ev["xaxis.range[0]"], hi = ev["xaxis.range[1]"];
      if (lo === undefined || hi === undefined) return;
      state.lo = Number(lo);
      state.hi = Number(hi);
      apply(robustRange(data.wavelength, data.flux, state.lo, state.hi));
    });
    return {
      // A fetched window's own range, computed from every pixel in it.
      window: function (lo, hi, range) {
        if (state.lo === lo && state.hi === hi) apply(range);
      },
    };
  }

  function wireZoom(node, data, yRange) {
    if (!data.zoom_url) return;
    const whole = series(data);
    const indices = whole.x.map(function (_, i) { return i; });
    let asked = 0;
    let timer = null;
    function show(part) {
      Plotly.restyle(node, part, indices).then(function () {
        node.dispatchEvent(new CustomEvent("specvet:data"));
      });
    }
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
          yRange.window(lo, hi, part.y_range);
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
        x: data.wavelength, y: data.upper, type: TRACE, mode: "lines",
        line: { width: 0 }, hoverinfo: "skip", showlegend: false, connectgaps: false,
      });
      traces.push({
        x: data.wavelength, y: data.lower, type: TRACE, mode: "lines", fill: "tonexty",
        fillcolor: "rgba(120,120,120,0.25)", line: { width: 0 }, hoverinfo: "skip",
        name: "±1σ", connectgaps: false,
      });
    }
    traces.push({
      x: data.wavelength, y: data.flux, type: TRACE, mode: "lines",
      line: { width: 1, color: "#1f2937" }, name: "flux", connectgaps: false,
      hovertemplate: "%{x:.1f} Å<br>flux %{y:.4g}<extra></extra>",
    });
    node._specvetFluxIndex = traces.length - 1;
    // The viewer's smoothed flux (spectrum_viewer.js fills it); hidden until asked for.
    traces.push({
      x: [], y: [], type: TRACE, mode: "lines", visible: false, name: "smoothed",
      line: { width: 1.5, color: "#b91c1c" }, connectgaps: false,
      hovertemplate: "%{x:.1f} Å<br>smoothed %{y:.4g}<extra></extra>",
    });
    const windows = data.windows || [];
    const known = data.wavelength.filter(function (x) { return x !== null; });
    const xSpan = known.length ? [known[0], known[known.length - 1]] : [0, 1];
    const rows = labelRows(windows, xSpan, Math.max((node.clientWidth || 600) - 70, 100));
    const markers = windowShapes(windows, rows.rowOf);
    const inspectedRanges = data.inspected || [];
    const unit = data.viewer && data.viewer.flux_unit ? " (" + data.viewer.flux_unit + ")" : "";
    const medium = data.viewer ? ", " + data.viewer.medium.stored : "";
    const layout = {
      margin: { l: 60, r: 10, t: 18 + rows.count * LABEL_ROW_PX, b: 45 },
      // The spectrum's own span: an autorange would stretch to overlays beyond it (sky and
      // telluric regions of the whole optical range around a short CSV).
      xaxis: {
        title: { text: (data.rest_frame ? "Rest-frame wavelength (Å" : "Wavelength (Å") + medium + ")" },
        range: known.length ? xSpan.slice() : undefined,
      },
      yaxis: { title: { text: "Flux" + unit }, fixedrange: false, range: data.y_range || undefined },
      shapes: markers.shapes.concat(inspectedShapes(inspectedRanges)),
      annotations: markers.annotations.concat(inspectedLabels(inspectedRanges)),
      showlegend: false,
      dragmode: "zoom",
    };
    // The inspected windows are their own layer: the live page adds to them as steps arrive.
    node._specvetLayers = {
      base: { shapes: markers.shapes, annotations: markers.annotations },
      inspected: { shapes: inspectedShapes(inspectedRanges), annotations: inspectedLabels(inspectedRanges) },
    };
    node._specvetData = data;
    Plotly.newPlot(node, traces, layout, { responsive: true, displaylogo: false }).then(function () {
      node.dataset.plotReady = "1";
      node.dispatchEvent(new CustomEvent("specvet:ready"));
    });
    node.on("plotly_clickannotation", function (ev) {
      const note = ev.annotation || {};
      if (note.name !== "inspected-label") return;
      const index = Number(String(note.text).replace(/\D/g, "")) - 1;
      const range = (node._specvetData.inspected || [])[index];
      if (!range) return;
      zoomTo(node, range[0], range[1]);
      node.dispatchEvent(new CustomEvent("specvet:window", { detail: { range: range } }));
    });
    wireZoom(node, data, wireYRange(node, data));
    return node;
  }

  // Every window inspected so far (the live page calls this as steps arrive); the viewer's
  // chips follow through the specvet:inspected event.
  function setInspectedAll(node, ranges) {
    if (!node || !node._specvetData) return;
    node._specvetData.inspected = ranges.slice();
    setLayer(node, "inspected", inspectedShapes(ranges), inspectedLabels(ranges));
    node.dispatchEvent(new CustomEvent("specvet:inspected", { detail: { ranges: ranges.slice() } }));
  }

  function setInspected(node, range) {
    const current = inspectedShapes([range]).map(function (s) { s.name = "current"; return s; });
    setLayer(node, "current", current, []);
  }

  function wireToolForm(plotNode) {
    const form = document.getElementById("render-form");
    if (!form) return;
    const lo = form.querySelector("[name=lo]");
    const hi = form.querySelector("[name=hi]");
    const label = form.querySelector("[name=label]");
    if (plotNode) {
      // A zoom or pan names its range ("xaxis.range[0]"); a reset (the 0 key, a double-click)
      // sets the whole span as one "xaxis.range" (wireYRange): both fill the form (issue 37: after
      // 0 the form kept the old zoom).
      plotNode.on("plotly_relayout", function (ev) {
        const whole = ev["xaxis.range"];
        const from = ev["xaxis.range[0]"] !== undefined ? ev["xaxis.range[0]"] : whole && whole[0];
        const to = ev["xaxis.range[1]"] !== undefined ? ev["xaxis.range[1]"] : whole && whole[1];
        if (from !== undefined && to !== undefined && lo && hi) {
          lo.value = Number(from).toFixed(1);
          hi.value = Number(to).toFixed(1);
          // The chip's label named the chip's window, not the one zoomed to.
          if (label) label.value = "";
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

  window.specvetPlot = {
    draw: draw, setInspected: setInspected, setInspectedAll: setInspectedAll, readJson: readJson,
    setLayer: setLayer, batchLayers: batchLayers, zoomTo: zoomTo,
  };
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
