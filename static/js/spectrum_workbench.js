// The spectrum page's panels under the viewer (templates/spectra/_workbench_panels.html): the
// redshift fit's alternatives to step through, each drawn as its template at its z (the line
// markers follow), the accept button's rank, and the compare overlay (another spectrum, the sky).
// Names and labels arrive made inert for Plotly (charts.plotly_text); page text goes through
// textContent only.
(function () {
  "use strict";

  const TEMPLATE_LINE = { color: "rgba(217, 119, 6, 0.9)", width: 1.2 };
  const OVERLAY_LINE = { color: "rgba(37, 99, 235, 0.75)", width: 1 };
  const SKY_LINE = { color: "rgba(140, 80, 200, 0.7)", width: 1 };
  // The fit costs the server seconds of CPU (5-14 s on a loaded 2-core machine), and a request
  // running while the expert decides slowed each decision by ~1.5 s (issue 37): it is asked for
  // once the page has stayed open this long, so a decision made by keys at once never starts
  // one, and a page left before the answer drops its request.
  const FIT_DELAY_MS = 1000;

  function Workbench(bar, node) {
    this.bar = bar;
    this.node = node;
    this.data = node._specvetData || {};
    this.viewer = this.data.viewer || {};
    this.fit = this.viewer.redshift_fit || { candidates: [], templates: [] };
    this.frameZ = this.data.rest_frame ? Number(this.viewer.frame_z) || 0 : 0;
    this.index = 0;
    this.traces = {};
    this.asked = 0;
  }

  Workbench.prototype.field = function (name) {
    return this.bar.querySelector("[data-workbench=" + name + "]");
  };

  // A trace of this panel's (template, overlay, sky): added once, restyled afterwards.
  Workbench.prototype.setTrace = function (key, trace) {
    if (this.traces[key] === undefined) {
      Plotly.addTraces(this.node, Object.assign({ type: "scatter", mode: "lines", hoverinfo: "skip", connectgaps: false }, trace));
      this.traces[key] = this.node.data.length - 1;
    } else {
      Plotly.restyle(this.node, { x: [trace.x], y: [trace.y], name: trace.name, visible: trace.visible }, [this.traces[key]]);
    }
  };

  Workbench.prototype.hideTrace = function (key) {
    if (this.traces[key] !== undefined) Plotly.restyle(this.node, { visible: false }, [this.traces[key]]);
  };

  // The viewer's line markers at z: through its own box, as if typed (spectrum_viewer.js).
  Workbench.prototype.moveLines = function (z) {
    const controls = document.querySelector("[data-viewer-for='" + this.node.id + "']");
    if (!controls) return;
    const unit = controls.querySelector("[data-viewer=z-unit]");
    const box = controls.querySelector("[data-viewer=z-number]");
    if (unit && unit.value !== "z") { unit.value = "z"; unit.dispatchEvent(new Event("change")); }
    if (box) { box.value = z.toFixed(5); box.dispatchEvent(new Event("input")); }
  };

  // moveLines: the line markers follow a stepped-to alternative; on load they stay at the
  // file's redshift (the "file z" the viewer starts from).
  Workbench.prototype.show = function (index, moveLines) {
    if (this.fitPending) return;  // asked for, not arrived: the keys wait for it
    const candidates = this.fit.candidates;
    const shown = this.field("fit-shown");
    if (!candidates.length) {
      shown.textContent = "no alternative (" + (this.fit.note || "nothing correlated") + ")";
      ["fit-previous", "fit-next", "fit-accept"].forEach(function (name) {
        const button = this.field(name);
        if (button) button.disabled = true;
      }, this);
      return;
    }
    ["fit-previous", "fit-next", "fit-accept"].forEach(function (name) {
      const button = this.field(name);
      if (button) button.disabled = false;
    }, this);
    this.index = (index + candidates.length) % candidates.length;
    const c = candidates[this.index];
    const template = this.fit.templates[c.template_index];
    // A star's redshift is a velocity: km/s. Quality on MARZ's scale (6: a star).
    const where = c.spectype === "STAR"
      ? "v = " + c.velocity_kms.toFixed(1) + " \u00b1 " + c.velocity_err_kms.toFixed(1) + " km/s"
      : "z = " + c.z.toFixed(5) + " \u00b1 " + c.z_err.toFixed(5);
    shown.textContent = (this.index + 1) + "/" + candidates.length + ": " + c.spectype + " " + where +
      " \u00b7 " + c.template_text + " \u00b7 quality " + c.quality + " (" + c.quality_label + ")" +
      (this.index ? " \u00b7 \u0394\u03c7\u00b2 +" + c.chi2_above_best.toFixed(0) : "");
    const stretch = (1 + c.z) / (1 + this.frameZ);
    const box = this.field("fit-template");
    this.setTrace("template", {
      x: template.wavelength.map(function (w) { return w * stretch; }),
      y: template.flux.map(function (v) { return v === null ? null : v * c.scale; }),
      name: c.template, line: TEMPLATE_LINE, visible: !box || box.checked,
    });
    const rank = this.field("fit-rank");
    if (rank) rank.value = String(c.rank);
    if (moveLines) this.moveLines(c.z);
    this.node.dataset.fitRank = String(c.rank);
    this.node.dataset.fitZ = String(c.z);
    this.node.dataset.fitQuality = String(c.quality);
  };

  Workbench.prototype.overlay = function (id) {
    const self = this;
    const note = this.field("compare-shown");
    const mine = ++this.asked;
    if (!id) {
      this.hideTrace("overlay");
      note.textContent = "";
      delete this.node.dataset.overlay;
      return;
    }
    let url = this.viewer.compare.url + "?other=" + encodeURIComponent(id);
    if (id.indexOf("t:") === 0) {
      // A template at the redshift the line markers show (the chosen alternative, or typed).
      const z = Math.min(Math.max(Number(this.node.dataset.lineShift || 1) * (1 + this.frameZ) - 1, -0.01), 10);
      url = this.viewer.compare.url + "?template=" + encodeURIComponent(id.slice(2)) + "&z=" + z.toFixed(6);
    }
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) { return response.ok ? response.json() : null; })
      .then(function (part) {
        if (mine !== self.asked) return;
        if (!part) { note.textContent = "could not load that spectrum"; return; }
        self.setTrace("overlay", { x: part.wavelength, y: part.flux, name: part.name, line: OVERLAY_LINE, visible: true });
        note.textContent = part.name_text + (part.overlap ? "" : " (no common range)");
        self.node.dataset.overlay = String(part.id);
      })
      .catch(function () { note.textContent = "could not load that spectrum"; });
  };

  // The fit's alternatives: from the page's data, or (pages where a decision is made, issue 37)
  // asked for once the plot is drawn, so that the page and its keys do not wait for the fit.
  Workbench.prototype.useFit = function (fit) {
    this.fitPending = false;
    this.fit = fit || { candidates: [], templates: [], note: "the fit could not be loaded" };
    if (fit && fit.template_choices) this.addTemplateChoices(fit.template_choices);
    const fitNote = this.field("fit-note");
    if (fitNote && fit) {
      const margin = fit.class_delta_chi2;
      fitNote.textContent = (fit.spectype ? "class " + fit.spectype + (margin === null || margin === undefined
        ? "" : " (\u0394\u03c7\u00b2 " + margin.toFixed(0) + " over the next class)") + "; " : "") +
        fit.n_pixels + " px, " + fit.n_templates + " templates, " +
        (fit.seconds * 1000).toFixed(0) + " ms" + (fit.note ? "; " + fit.note : "");
    }
    this.show(0, false);
    this.node.dataset.fitReady = "1";
  };

  // The templates to overlay at the z shown: in the page's data, or (fit_later) with the fit.
  Workbench.prototype.addTemplateChoices = function (templates) {
    const select = this.field("compare");
    if (templates.length && !select.querySelector("optgroup[data-templates]")) {
      const group = document.createElement("optgroup");
      group.label = "template at the z shown";
      group.dataset.templates = "1";
      templates.forEach(function (t) {
        const option = document.createElement("option");
        option.value = "t:" + t.index;
        option.textContent = t.name_text + " (" + t.kind + ")";
        group.appendChild(option);
      });
      select.appendChild(group);
    }
    select.disabled = select.options.length < 2;
  };

  Workbench.prototype.loadFit = function () {
    const self = this;
    if (this.viewer.redshift_fit || !this.viewer.redshift_fit_url) {
      this.useFit(this.fit);
      return;
    }
    this.fitPending = true;
    this.field("fit-shown").textContent = "fitting\u2026";
    const url = this.viewer.redshift_fit_url;
    const controller = window.AbortController ? new AbortController() : null;
    const timer = window.setTimeout(function () {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" }, signal: controller ? controller.signal : undefined })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (fit) { self.useFit(fit); })
        .catch(function (error) { if (!error || error.name !== "AbortError") self.useFit(null); });
    }, FIT_DELAY_MS);
    window.addEventListener("pagehide", function () {
      window.clearTimeout(timer);
      if (controller) controller.abort();
    }, { once: true });
  };

  Workbench.prototype.wire = function () {
    const self = this;
    this.bar.hidden = false;
    this.field("fit-previous").addEventListener("click", function () { self.show(self.index - 1, true); });
    this.field("fit-next").addEventListener("click", function () { self.show(self.index + 1, true); });
    this.field("fit-template").addEventListener("change", function () { self.show(self.index, false); });
    const select = this.field("compare");
    (this.viewer.compare ? this.viewer.compare.choices : []).forEach(function (choice) {
      const option = document.createElement("option");
      option.value = String(choice.id);
      option.textContent = choice.relation + ": " + choice.label_text;
      select.appendChild(option);
    });
    this.addTemplateChoices(this.viewer.compare ? this.viewer.compare.templates || [] : []);
    select.addEventListener("change", function () { self.overlay(select.value); });
    const sky = this.viewer.sky_spectrum;
    if (sky) {
      this.field("sky-control").hidden = false;
      this.field("sky-note").hidden = true;
      this.field("sky").addEventListener("change", function (ev) {
        if (ev.target.checked) self.setTrace("sky", { x: sky.wavelength, y: sky.flux, name: "sky", line: SKY_LINE, visible: true });
        else self.hideTrace("sky");
        self.node.dataset.sky = ev.target.checked ? "shown" : "hidden";
      });
    }
    this.loadFit();
    this.node.dataset.workbenchReady = "1";
  };

  function init() {
    if (!window.specvetPlot || !window.Plotly) return;
    document.querySelectorAll("[data-workbench-for]").forEach(function (bar) {
      const node = document.getElementById(bar.dataset.workbenchFor);
      if (!node) return;
      function start() { new Workbench(bar, node).wire(); }
      // After the viewer's bar: its z box must be wired before the fit moves the lines.
      if (node.dataset.viewerReady) start();
      else {
        const wait = new MutationObserver(function () {
          if (!node.dataset.viewerReady) return;
          wait.disconnect();
          start();
        });
        wait.observe(node, { attributes: true, attributeFilter: ["data-viewer-ready"] });
      }
    });
  }

  // A refused or unconfirmed redshift answers with its reason (400, 403, 409): shown in place.
  document.addEventListener("htmx:beforeSwap", function (event) {
    const target = event.detail.target;
    const status = event.detail.xhr ? event.detail.xhr.status : 0;
    if (target && target.id === "redshift-current" && [400, 403, 409].indexOf(status) >= 0) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
