"""A catalog entry as one standalone, offline HTML file an astronomer can mail to a colleague:
an interactive Bokeh spectrum with the inspected windows shaded, every step's reasoning, tool
call and PNG, the verdict and the provenance. Reads only; the caller checks who may read the
entry (blinding.catalog_entries_visible_to) and which decisions they may read."""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
from bokeh.embed import components
from bokeh.models import DataRange1d, HoverTool
from bokeh.models.annotations import BoxAnnotation
from bokeh.plotting import figure
from bokeh.resources import Resources
from django.template.loader import render_to_string
from django.utils import timezone

from annotation.catalog import selectors as catalog
from annotation.catalog import trajectories
from annotation.core import charts
from annotation.core.models import ImageBlob
from annotation.inspections.decision_history import HistoryRow
from annotation.inspections.models import CatalogEntry
from annotation.spectra import selectors
from annotation.spectra.models import Spectrum

# Enough for every pixel of the surveys we load; a longer spectrum is thinned to its extremes
# per bucket (charts.min_max_indices) so the file stays small enough to mail.
REPORT_MAX_POINTS = 20_000

# BokehJS itself, inlined: the file must open offline, with no CDN. Only the core component:
# the figure uses no widgets, tables, WebGL or MathJax (those would add 2.6 MB).
BOKEH_RESOURCES = Resources(mode="inline", components=["bokeh"])


def _spectrum_figure(row: Spectrum, inspected: list[list[float]]) -> Any:
    wave, flux, error = selectors.spectrum_plot_arrays(row)
    thinned = charts.thin_spectrum(
        wavelength=wave, flux=flux, error=error, max_points=REPORT_MAX_POINTS
    )
    rest = bool(row.redshift)
    # bokeh types figure() by its declared properties only; tools, active_* and *_axis_label
    # are keyword arguments that figure.__init__ handles itself.
    plot = figure(  # type: ignore[call-arg]
        height=380,
        sizing_mode="stretch_width",
        tools="pan,wheel_zoom,box_zoom,reset,save",
        active_drag="box_zoom",
        active_scroll="wheel_zoom",
        x_axis_label="Rest-frame wavelength (Å)" if rest else "Wavelength (Å)",
        y_axis_label="Flux",
    )
    if thinned["lower"] is not None and thinned["upper"] is not None:
        plot.varea(
            x=thinned["wavelength"],
            y1=thinned["lower"],
            y2=thinned["upper"],
            fill_color="#9ecae1",
            fill_alpha=0.4,
            legend_label="±1σ",
        )
    # Masked pixels are NaN, which Bokeh draws as a gap in the line.
    line = plot.line(x=thinned["wavelength"], y=thinned["flux"], line_color="#08306b", line_width=1)
    # The flux alone sets the y-axis: the ±1σ band of noisy pixels would flatten the spectrum,
    # and a percentile range (the site's plot) clips the narrow emission line being vetted.
    plot.y_range = DataRange1d(renderers=[line], range_padding=0.05)
    plot.add_tools(
        HoverTool(
            renderers=[line],
            tooltips=[("λ", "@x{0.0} Å"), ("flux", "@y{0.000}")],
            mode="vline",
        )
    )
    for low, high in inspected:
        plot.add_layout(BoxAnnotation(left=low, right=high, fill_color="#fd8d3c", fill_alpha=0.18))
    if plot.legend:
        plot.legend.location = "top_right"
    return plot


def _data_uri(png: bytes | None) -> str:
    if not png:
        return ""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _inspected(steps: list[trajectories.StepView]) -> list[list[float]]:
    windows = []
    for step in steps:
        shown = step.image_range
        if not isinstance(shown, list | tuple) or len(shown) != 2:
            continue
        try:
            low, high = (float(value) for value in shown)
        except (TypeError, ValueError):  # a stored trajectory is data, not a promise
            continue
        if np.isfinite(low) and np.isfinite(high) and low < high:
            windows.append([low, high])
    return windows


def entry_report_html(*, entry: CatalogEntry, decisions: list[HistoryRow]) -> str:
    """The report of the entry's candidate and its first rollout (the whole page as a string),
    with ``decisions``: the experts' answers on its spectrum for the task (any run, earlier ones
    marked replaced) that the reader may read."""
    candidate = entry.candidate
    rollout = candidate.rollouts.order_by("index").first() if candidate else None
    view = trajectories.trajectory_view(rollout.data) if rollout else None
    shas = {step.image_sha256 for step in view.steps} if view else set()
    if view and view.initial_image_sha256:
        shas.add(view.initial_image_sha256)
    shas.discard("")
    images = {
        sha: _data_uri(bytes(png))
        for sha, png in ImageBlob.objects.filter(sha256__in=shas).values_list("sha256", "png")
    }
    steps = [
        {"step": step, "image": images.get(step.image_sha256, "")}
        for step in (view.steps if view else [])
    ]
    plot_script = plot_div = ""
    spectrum = candidate.spectrum if candidate else None
    if spectrum is not None:
        plot_script, plot_div = components(
            _spectrum_figure(spectrum, _inspected(view.steps) if view else [])
        )
    run = entry.run
    return render_to_string(
        "catalog/report.html",
        {
            "entry": entry,
            "candidate": candidate,
            "spectrum": spectrum,
            "rollout": rollout,
            "view": view,
            "steps": steps,
            "initial_image": images.get(view.initial_image_sha256, "") if view else "",
            "decisions": decisions,
            "run": run,
            "policy_spec": json.dumps(catalog.public_policy_spec(run.policy_spec), indent=2),
            "policy_info": json.dumps(catalog.public_policy_spec(run.policy_info), indent=2),
            "sampling": json.dumps(catalog.public_policy_spec(run.sampling), indent=2),
            "bokeh_js": BOKEH_RESOURCES.render_js(),
            "plot_script": plot_script,
            "plot_div": plot_div,
            "generated_at": timezone.now(),
        },
    )
