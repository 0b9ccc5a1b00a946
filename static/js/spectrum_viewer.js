// The spectrum viewer's control bar (templates/spectra/_viewer_controls.html): line list shifted
// by a redshift or radial velocity, air or vacuum line wavelengths, client-side smoothing, sky and
// telluric regions, masked pixels, and (on the candidate page) the inspected windows and the
// selected step's image. Every label comes from the server already made inert for Plotly
// (charts.plotly_text); text put into the page goes through textContent only.
(function () {
  "use strict";

  const C_KMS = 299792.458;
  // Bounds the server states (selectors.VIEWER_LIMITS); these are the fallbacks. A smoothing
  // width of 100000 froze the tab for ~50 s, and z = -1 put every line at zero wavelength.
  const LIMITS = { z_min: -0.01, z_max: 10, smooth_width_min: 1, smooth_width_max: 101 };
  const KIND_COLOURS = {
    balmer: "rgba(190, 30, 45, 0.75)",
    emission: "rgba(0, 110, 60, 0.75)",
    absorption: "rgba(60, 60, 170, 0.75)",
  };
  const SKY_FILL = "rgba(140, 80, 200, 0.14)";
  const TELLURIC_FILL = "rgba(0, 150, 170, 0.12)";
  const MASK_FILL = "rgba(90, 90, 90, 0.55)";

  // --- smoothing over the pixels shown (nulls are gaps, never averaged in) --------------------

  function kernel(kind, width) {
    if (kind === "boxcar") {
      const half = Math.max(0, Math.floor(width / 2));
      return new Array(2 * half + 1).fill(1);
    }
    const sigma = Math.max(width, 1) / 2.3548;  // width is the Gaussian's FWHM in pixels
    const half = Math.max(1, Math.ceil(3 * sigma));
    const weights = [];
    for (let k = -half; k <= half; k++) weights.push(Math.exp(-0.5 * (k / sigma) * (k / sigma)));
    return weights;
  }

  function smooth(flux, kind, width) {
    const weights = kernel(kind, width);
    const half = (weights.length - 1) / 2;
    const out = new Array(flux.length);
    for (let i = 0; i < flux.length; i++) {
      const centre = flux[i];
      if (centre === null || !Number.isFinite(centre)) { out[i] = null; continue; }
      let sum = 0, norm = 0;
      for (let k = -half; k <= half; k++) {
        const v = flux[i + k];
        if (v === null || v === undefined || !Number.isFinite(v)) continue;
        sum += v * weights[k + half];
        norm += weights[k + half];
      }
      out[i] = norm > 0 ? sum / norm : null;
    }
    return out;
  }

  // Text fields, number boxes, selects and sliders keep their keys (as keys.js decides).
  function typingIn(target) {
    if (!target || !target.closest) return false;
    if (target.isContentEditable) return true;
    const field = target.closest("input, textarea, select");
    if (!field) return false;
    const kind = (field.getAttribute("type") || "text").toLowerCase();
    return !["button", "submit", "reset", "radio", "checkbox"].includes(kind);
  }

  // --- the viewer of one plot -----------------------------------------------------------------

  function Viewer(bar, node) {
    this.bar = bar;
    this.node = node;
    this.data = node._specvetData || {};
    this.info = this.data.viewer || { lines: [], sky: [], masked: [], frame_z: 0 };
    this.frameZ = this.data.rest_frame ? Number(this.info.frame_z) || 0 : 0;
    this.z = this.frameZ;
    this.limits = Object.assign({}, LIMITS, this.info.limits || {});
    // Markers outside the spectrum would stretch the x-axis's autorange: only those inside it.
    const known = (this.data.wavelength || []).filter(function (x) { return x !== null; });
    this.span = known.length ? [known[0], known[known.length - 1]] : [-Infinity, Infinity];
  }

  Viewer.prototype.field = function (name) {
    return this.bar.querySelector("[data-viewer=" + name + "]");
  };

  Viewer.prototype.toPlot = function (observed) { return observed / (1 + this.frameZ); };

  Viewer.prototype.unit = function () {
    const unit = this.field("z-unit");
    return unit ? unit.value : "z";
  };

  Viewer.prototype.showZ = function (skip) {
    const inKms = this.unit() === "kms";
    const value = inKms ? this.z * C_KMS : this.z;
    const slider = this.field("z-slider");
    const number = this.field("z-number");
    if (slider) {
      const wide = this.frameZ > 0.5 ? Math.min(7, Math.ceil(this.frameZ * 2)) : 1;
      slider.min = inKms ? String(Math.round(this.limits.z_min * C_KMS)) : String(this.limits.z_min);
      slider.max = inKms ? "3000" : String(wide);
      slider.step = inKms ? "1" : "0.0001";
      if (slider !== skip) slider.value = String(value);
    }
    if (number && number !== skip) number.value = inKms ? value.toFixed(1) : value.toFixed(5);
    if (number) {
      number.step = inKms ? "1" : "0.0001";
      number.min = String(inKms ? Math.round(this.limits.z_min * C_KMS) : this.limits.z_min);
      number.max = String(inKms ? Math.round(this.limits.z_max * C_KMS) : this.limits.z_max);
    }
    const shown = this.field("z-shown");
    if (shown) {
      shown.textContent = "z = " + this.z.toFixed(5) + " (cz = " + (this.z * C_KMS).toFixed(0) + " km/s)";
    }
  };

  // The message under a control that was given a value out of its bounds (textContent only).
  Viewer.prototype.warn = function (text) {
    const note = this.field("limit-note");
    if (!note) return;
    note.textContent = text;
    note.hidden = !text;
  };

  Viewer.prototype.setFrom = function (input) {
    const value = Number(input.value);
    if (input.value === "" || !Number.isFinite(value)) return;
    const inKms = this.unit() === "kms";
    const z = inKms ? value / C_KMS : value;
    const lo = this.limits.z_min, hi = this.limits.z_max;
    if (z < lo || z > hi) {
      this.z = Math.min(Math.max(z, lo), hi);
      this.warn("Redshift " + input.value + (inKms ? " km/s" : "") + " is out of range: z must lie between " +
        lo + " and " + hi + " (cz " + (lo * C_KMS).toFixed(0) + " to " + (hi * C_KMS).toFixed(0) +
        " km/s); set to " + this.z.toFixed(5) + ".");
      this.showZ(null);
    } else {
      this.z = z;
      this.warn("");
      this.showZ(input);
    }
    this.drawLines();
  };

  // The smoothing width, held to its bounds; the box shows the width actually used.
  Viewer.prototype.smoothWidth = function () {
    const box = this.field("smooth-width");
    const lo = this.limits.smooth_width_min, hi = this.limits.smooth_width_max;
    const asked = Math.round(Number((box || {}).value));
    if (!Number.isFinite(asked) || (box && box.value === "")) return 5;
    const width = Math.min(Math.max(asked, lo), hi);
    if (width !== asked) {
      this.warn("Smoothing width " + box.value + " px is out of range: it must lie between " + lo +
        " and " + hi + " px; set to " + width + ".");
      box.value = String(width);
    } else {
      this.warn("");
    }
    return width;
  };

  // --- line labels: horizontal, in rows under the top of the plot, never overlapping ----------
  // Issue 37: labels rotated by 90° at 9 px piled on each other at 1,440 px. Each label now takes
  // the first row where it clears those already placed, measured in screen pixels for the range
  // shown (redrawn on zoom and resize); one that fits in no row is left off until a zoom makes
  // room (its marker stays). Balmer lines are placed first, then emission, then absorption lines.
  const LABEL_FONT_PX = 11;
  const LABEL_ROW_PX = 15;
  const LABEL_ROWS = 3;
  const LABEL_GAP_PX = 6;
  const KIND_ORDER = { balmer: 0, emission: 1, absorption: 2 };
  let measureContext = null;

  // The label's width on screen: its text (Plotly decodes the entities) in Plotly's font.
  function labelWidth(text) {
    const plain = String(text).replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&#37;/g, "%").replace(/&amp;/g, "&");
    if (!measureContext) measureContext = document.createElement("canvas").getContext("2d");
    if (!measureContext) return plain.length * LABEL_FONT_PX * 0.62;
    measureContext.font = LABEL_FONT_PX + "px \"Open Sans\", verdana, arial, sans-serif";
    return measureContext.measureText(plain).width + 4;
  }

  // The x axis's pixels per Ångström and its range now (Plotly's laid-out axis when drawn).
  Viewer.prototype.axisScale = function () {
    const axis = (this.node._fullLayout || {}).xaxis;
    const range = this.xRange();
    const width = axis && axis._length ? axis._length : Math.max((this.node.clientWidth || 600) - 70, 100);
    return { lo: range[0], hi: range[1], perUnit: width / Math.max(range[1] - range[0], 1e-9), width: width };
  };

  // labels: [{x, text, kind, order}] -> the same with a row (0 = top), or row -1 when left off.
  function placeLabels(labels, scale) {
    const rows = [];
    for (let r = 0; r < LABEL_ROWS; r++) rows.push([]);
    const sorted = labels.slice().sort(function (a, b) {
      return (KIND_ORDER[a.kind] || 1) - (KIND_ORDER[b.kind] || 1) || a.order - b.order;
    });
    sorted.forEach(function (label) {
      label.row = -1;
      const centre = (label.x - scale.lo) * scale.perUnit;
      const half = labelWidth(label.text) / 2;
      if (centre < 0 || centre > scale.width) return;
      // Kept inside the plot: a label at an edge is shifted in (xshift), not cut off.
      let shift = 0;
      if (centre - half < 0) shift = half - centre;
      else if (centre + half > scale.width) shift = scale.width - centre - half;
      const left = centre + shift - half - LABEL_GAP_PX / 2, right = centre + shift + half + LABEL_GAP_PX / 2;
      for (let r = 0; r < rows.length; r++) {
        const clear = rows[r].every(function (span) { return right <= span[0] || left >= span[1]; });
        if (clear) {
          rows[r].push([left, right]);
          label.row = r;
          label.shift = shift;
          return;
        }
      }
    });
    return labels;
  }

  Viewer.prototype.drawLines = function () {
    const on = this.field("lines");
    const shapes = [];
    const labels = [];
    if (!on || on.checked) {
      const medium = (this.field("medium") || {}).value || "vacuum";
      const shift = (1 + this.z) / (1 + this.frameZ);
      const span = this.span;
      this.info.lines.forEach(function (line, order) {
        const colour = KIND_COLOURS[line.kind] || KIND_COLOURS.emission;
        const waves = line[medium] || line.vacuum;
        let labelled = false;
        waves.forEach(function (rest) {
          const x = rest * shift;
          if (x < span[0] || x > span[1]) return;
          shapes.push({
            type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1,
            line: { color: colour, width: 1, dash: "dash" }, name: "line-marker",
          });
          if (!labelled) {
            labelled = true;
            labels.push({ x: x, text: line.name, kind: line.kind, colour: colour, order: order });
          }
        });
      });
    }
    const annotations = placeLabels(labels, this.axisScale())
      .filter(function (label) { return label.row >= 0; })
      .map(function (label) {
        return {
          x: label.x, y: 1, xref: "x", yref: "paper", yanchor: "top", xanchor: "center",
          xshift: label.shift, yshift: -2 - label.row * LABEL_ROW_PX, text: label.text, showarrow: false,
          font: { size: LABEL_FONT_PX, color: label.colour }, bgcolor: "rgba(255,255,255,0.8)",
          borderpad: 0, name: "line-label",
        };
      });
    this.linesShown = labels.length;
    window.specvetPlot.setLayer(this.node, "lines", shapes, annotations);
    this.node.dataset.lineShift = String((1 + this.z) / (1 + this.frameZ));
    this.node.dataset.lineLabels = annotations.length + "/" + labels.length;
  };

  Viewer.prototype.drawSky = function () {
    const self = this;
    const sky = this.field("sky");
    const masked = this.field("masked");
    const shapes = [];
    if (!sky || sky.checked) {
      this.info.sky.forEach(function (region) {
        shapes.push({
          type: "rect", xref: "x", yref: "paper", layer: "below",
          x0: self.toPlot(region.range[0]), x1: self.toPlot(region.range[1]), y0: 0, y1: 1,
          fillcolor: region.kind === "telluric" ? TELLURIC_FILL : SKY_FILL, line: { width: 0 },
          name: region.kind,
        });
      });
    }
    if (!masked || masked.checked) {
      this.info.masked.forEach(function (run) {
        const pad = run[0] === run[1] ? 0.5 : 0;
        shapes.push({
          type: "rect", xref: "x", yref: "paper", x0: run[0] - pad, x1: run[1] + pad,
          y0: 0, y1: 0.025, fillcolor: MASK_FILL, line: { width: 0 }, name: "masked",
        });
      });
    }
    window.specvetPlot.setLayer(this.node, "sky", shapes, []);
  };

  Viewer.prototype.drawSmooth = function () {
    const kind = (this.field("smooth") || {}).value || "none";
    const width = this.smoothWidth();
    const raw = this.field("raw");
    const fluxIndex = this.node._specvetFluxIndex;
    const smoothIndex = fluxIndex + 1;
    const trace = this.node.data[fluxIndex];
    const showRaw = !raw || raw.checked;
    const rawIndices = [];
    for (let i = 0; i <= fluxIndex; i++) rawIndices.push(i);
    Plotly.restyle(this.node, { visible: showRaw }, rawIndices);
    Plotly.restyle(this.node, { "line.color": kind === "none" ? "#1f2937" : "#9ca3af" }, [fluxIndex]);
    if (kind === "none") {
      Plotly.restyle(this.node, { visible: false, x: [[]], y: [[]] }, [smoothIndex]);
    } else {
      const y = smooth(Array.from(trace.y), kind, width);
      Plotly.restyle(this.node, { visible: true, x: [Array.from(trace.x)], y: [y] }, [smoothIndex]);
    }
    this.node.dataset.smoothing = kind === "none" ? "none" : kind + ":" + width;
  };

  // A real reference spectrum of the task's positives (agent.real_corpus), scaled so that its
  // median over the common range matches the median flux shown.
  Viewer.prototype.drawTemplate = function () {
    const template = this.info.template;
    const box = this.field("template");
    if (!template || !box) return;
    const flux = this.node.data[this.node._specvetFluxIndex];
    const lo = Math.max(template.wavelength[0], flux.x[0]);
    const hi = Math.min(template.wavelength[template.wavelength.length - 1], flux.x[flux.x.length - 1]);
    function median(values) {
      const known = values.filter(function (v) { return v !== null && Number.isFinite(v); }).sort(function (a, b) { return a - b; });
      return known.length ? known[Math.floor(known.length / 2)] : null;
    }
    const inside = function (xs, ys) { return ys.filter(function (_, i) { return xs[i] >= lo && xs[i] <= hi; }); };
    const ours = median(inside(Array.from(flux.x), Array.from(flux.y)));
    const theirs = median(inside(template.wavelength, template.flux));
    const scale = ours !== null && theirs ? ours / theirs : 1;
    const y = template.flux.map(function (v) { return v === null ? null : v * scale; });
    if (this.templateIndex === undefined) {
      Plotly.addTraces(this.node, {
        x: template.wavelength, y: y, type: "scatter", mode: "lines", name: template.name,
        line: { color: "rgba(217, 119, 6, 0.85)", width: 1.2 }, hoverinfo: "skip", visible: box.checked,
      });
      this.templateIndex = this.node.data.length - 1;
    } else {
      Plotly.restyle(this.node, { y: [y], visible: box.checked }, [this.templateIndex]);
    }
    this.node.dataset.template = box.checked ? "shown" : "hidden";
  };

  // --- zoom, pan and smoothing steps (buttons with data-key; the arrows are handled below) -----

  const ZOOM_FACTOR = 1.5;
  const PAN_FRACTION = 0.25;
  // The widths ] and [ step through (pixels); below the first is no smoothing.
  const SMOOTH_STEPS = [3, 5, 9, 15, 25, 41, 71, 101];

  Viewer.prototype.xRange = function () {
    const range = (this.node.layout.xaxis || {}).range;
    return range ? [Number(range[0]), Number(range[1])] : this.span.slice();
  };

  // The x range asked for, held inside the spectrum's span (a zoom out stops at the whole).
  Viewer.prototype.showRange = function (lo, hi) {
    const span = this.span;
    const width = Math.min(hi - lo, span[1] - span[0]);
    if (lo < span[0]) { lo = span[0]; hi = lo + width; }
    if (hi > span[1]) { hi = span[1]; lo = hi - width; }
    window.specvetPlot.zoomTo(this.node, lo, hi);
  };

  Viewer.prototype.zoom = function (factor) {
    const range = this.xRange();
    const centre = (range[0] + range[1]) / 2;
    const half = (range[1] - range[0]) * factor / 2;
    this.showRange(centre - half, centre + half);
  };

  Viewer.prototype.pan = function (fraction) {
    const range = this.xRange();
    const shift = (range[1] - range[0]) * fraction;
    this.showRange(range[0] + shift, range[1] + shift);
  };

  Viewer.prototype.stepSmoothing = function (direction) {
    const kind = this.field("smooth");
    const box = this.field("smooth-width");
    if (!kind || !box) return;
    const width = Number(box.value) || 5;
    let next;
    if (kind.value === "none") {
      if (direction < 0) return;
      next = SMOOTH_STEPS[0];
      kind.value = "gaussian";
    } else if (direction > 0) {
      next = SMOOTH_STEPS.find(function (w) { return w > width; }) || SMOOTH_STEPS[SMOOTH_STEPS.length - 1];
    } else {
      const smaller = SMOOTH_STEPS.filter(function (w) { return w < width; });
      if (!smaller.length) { kind.value = "none"; next = width; } else next = smaller[smaller.length - 1];
    }
    box.value = String(next);
    this.drawSmooth();
  };

  Viewer.prototype.wireKeys = function () {
    const self = this;
    const actions = {
      "zoom-in": function () { self.zoom(1 / ZOOM_FACTOR); },
      "zoom-out": function () { self.zoom(ZOOM_FACTOR); },
      "pan-left": function () { self.pan(-PAN_FRACTION); },
      "pan-right": function () { self.pan(PAN_FRACTION); },
      "zoom-whole": function () { Plotly.relayout(self.node, { "xaxis.autorange": true }); },
      "smooth-less": function () { self.stepSmoothing(-1); },
      "smooth-more": function () { self.stepSmoothing(1); },
    };
    Object.keys(actions).forEach(function (name) {
      const button = self.field(name);
      if (button) button.addEventListener("click", actions[name]);
    });
    // Keys keys.js does not take (it clicks data-key elements for one-character keys); Home is
    // "whole spectrum" everywhere, and the only key for it where 0-4 set a quality (the queue).
    const extra = { ArrowLeft: "pan-left", ArrowRight: "pan-right", "=": "zoom-in", Home: "zoom-whole" };
    document.addEventListener("keydown", function (event) {
      if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
      if (typingIn(event.target) || !extra[event.key] || !self.bar.offsetParent) return;
      event.preventDefault();
      actions[extra[event.key]]();
    });
  };

  // The candidate page: the inspected windows as chips, and the selected step's image beside
  // the plot.
  Viewer.prototype.selectWindow = function (range) {
    const figure = document.getElementById("step-view");
    if (!figure) return;
    const key = range[0] + "," + range[1];
    let chosen = null;
    document.querySelectorAll("#steps [data-shown-range]").forEach(function (step) {
      const parts = step.dataset.shownRange.split(",").map(Number);
      const same = Math.abs(parts[0] - range[0]) < 0.05 && Math.abs(parts[1] - range[1]) < 0.05;
      step.classList.remove("selected");
      if (same && !chosen) chosen = step;
    });
    const image = chosen ? chosen.querySelector("img.tool-png") : null;
    const img = figure.querySelector("img");
    const caption = figure.querySelector("figcaption");
    if (chosen) chosen.classList.add("selected");
    if (image && img) {
      img.src = image.getAttribute("src");
      img.alt = image.getAttribute("alt") || "";
      if (caption) caption.textContent = "The agent's view of " + range[0].toFixed(1) + "\u2013" + range[1].toFixed(1) + " \u00c5";
      figure.hidden = false;
      figure.dataset.range = key;
      this.bar.closest(".viewer").classList.add("with-step");
    }
  };

  Viewer.prototype.drawChips = function () {
    const self = this;
    const holder = this.field("inspected");
    if (!holder) return;
    const ranges = this.data.inspected || [];
    holder.replaceChildren();
    ranges.forEach(function (range, i) {
      const chip = document.createElement("button");
      chip.type = "button";
      chip.className = "chip inspected-chip";
      chip.dataset.lo = String(range[0]);
      chip.dataset.hi = String(range[1]);
      chip.textContent = (i + 1) + ": " + range[0].toFixed(0) + "\u2013" + range[1].toFixed(0) + " \u00c5";
      chip.addEventListener("click", function () {
        window.specvetPlot.zoomTo(self.node, range[0], range[1]);
        self.selectWindow(range);
      });
      holder.appendChild(chip);
    });
    const empty = this.field("inspected-empty");
    if (empty) empty.hidden = ranges.length > 0;
  };

  Viewer.prototype.wire = function () {
    const self = this;
    this.bar.hidden = false;
    const medium = this.field("medium");
    if (medium && this.info.medium) medium.value = this.info.medium.stored === "air" ? "air" : "vacuum";
    const unitNote = this.field("medium-note");
    if (unitNote && this.info.medium) {
      unitNote.textContent = "Spectrum wavelengths: " + this.info.medium.stored + " (file: " + this.info.medium.in_file + ")";
    }
    const decimated = this.field("decimated-note");
    if (decimated) decimated.hidden = !this.data.decimated;
    ["z-slider", "z-number"].forEach(function (name) {
      const input = self.field(name);
      if (input) input.addEventListener("input", function () { self.setFrom(input); });
    });
    const unit = this.field("z-unit");
    if (unit) unit.addEventListener("change", function () { self.showZ(null); });
    const reset = this.field("z-reset");
    if (reset) reset.addEventListener("click", function () { self.z = self.frameZ; self.showZ(null); self.drawLines(); });
    ["lines", "medium"].forEach(function (name) {
      const input = self.field(name);
      if (input) input.addEventListener("change", function () { self.drawLines(); });
    });
    ["sky", "masked"].forEach(function (name) {
      const input = self.field(name);
      if (input) input.addEventListener("change", function () { self.drawSky(); });
    });
    ["smooth", "smooth-width", "raw"].forEach(function (name) {
      const input = self.field(name);
      if (input) input.addEventListener(name === "smooth-width" ? "input" : "change", function () { self.drawSmooth(); });
    });
    this.node.addEventListener("specvet:data", function () {
      if (self.node.dataset.smoothing && self.node.dataset.smoothing !== "none") self.drawSmooth();
    });
    this.node.addEventListener("specvet:window", function (ev) { self.selectWindow(ev.detail.range); });
    // The labels' rows depend on the pixels per Ångström: placed again after a zoom or a resize.
    this.node.on("plotly_relayout", function (ev) {
      const moved = ev["xaxis.range[0]"] !== undefined || ev["xaxis.range"] !== undefined ||
        ev["xaxis.autorange"] !== undefined || ev.autosize !== undefined || ev.width !== undefined;
      if (moved) self.drawLines();
    });
    this.node.addEventListener("specvet:inspected", function () { self.drawChips(); });
    document.addEventListener("click", function (ev) {
      const header = ev.target.closest ? ev.target.closest("#steps .step[data-shown-range] header") : null;
      if (!header) return;
      const parts = header.parentElement.dataset.shownRange.split(",").map(Number);
      if (parts.length !== 2) return;
      window.specvetPlot.zoomTo(self.node, parts[0], parts[1]);
      self.selectWindow(parts);
    });
    if (this.info.template) {
      this.field("template-control").hidden = false;
      this.field("template-name").textContent = this.info.template.name_text;
      this.field("template-note").hidden = true;
      this.field("template").addEventListener("change", function () { self.drawTemplate(); });
    }
    this.wireKeys();
    this.showZ(null);
    this.drawChips();
    // The sky regions and the line markers in one relayout (one redraw of the plot).
    window.specvetPlot.batchLayers(this.node, function () {
      self.drawSky();
      self.drawLines();
    });
    this.node.dataset.viewerReady = "1";
  };

  function init() {
    if (!window.specvetPlot || !window.Plotly) return;
    document.querySelectorAll("[data-viewer-for]").forEach(function (bar) {
      const node = document.getElementById(bar.dataset.viewerFor);
      if (!node) return;
      function start() { new Viewer(bar, node).wire(); }
      if (node.dataset.plotReady) start();
      else node.addEventListener("specvet:ready", start, { once: true });
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
