"""The whole spectrum viewer's data, one builder for every page that shows it (reads only).

The spectrum page, the vetting queue and the candidate's live page include the same template
(``templates/spectra/_viewer.html``) with the same scripts, so what an expert sees where the
decision is made is the viewer of the spectrum page: line list, redshift, smoothing, the task's
template, the redshift fit's alternatives, the compare overlay and the file's sky spectrum.
Rating pages never use it: their items are blinded (the fit, compare choices and sky name or
lead back to the spectrum).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.urls import reverse

from annotation.core import charts, permissions
from annotation.spectra import selectors
from annotation.spectra.models import Spectrum, Task


def spectrum_workbench_data(
    row: Spectrum, task: Task | None, may_decide: bool, *, fit_later: bool = False
) -> dict[str, Any]:
    """The plot's data with the workbench panels: the redshift fit, the spectra to overlay and
    the file's sky. ``fit_later``: the fit (the dearest part, and half the data) is left out and
    its URL given instead; the viewer asks for it once the plot is drawn, so a page where a
    decision is made is not kept waiting for it. The compare overlay's template choices come
    with that answer too: naming them reads the template library (a process's first read of
    the real-data cache took 0.8 s on a quiet machine, several seconds on a loaded one)."""
    data = selectors.spectrum_plot_data(row=row, task=task)
    max_points = settings.SPECTRUM_PLOT_MAX_POINTS
    if fit_later:
        data["viewer"]["redshift_fit"] = None
        data["viewer"]["redshift_fit_url"] = reverse("spectrum_viewer_fit", args=[row.pk])
    else:
        data["viewer"]["redshift_fit"] = selectors.spectrum_redshift_fit(row)
    data["viewer"]["may_decide_redshift"] = may_decide
    data["viewer"]["compare"] = {
        "choices": [
            {**choice, "label": charts.plotly_text(choice["label"]), "label_text": choice["label"]}
            for choice in selectors.spectrum_compare_choices(row)
        ],
        "url": reverse("api_spectrum_overlay", args=[row.pk]),
        # None: they come with the fit (fit_later), from redshift_fit_url.
        "templates": None if fit_later else selectors.redshift_template_choices(),
    }
    data["viewer"]["sky_spectrum"] = selectors.spectrum_sky(row, max_points)
    return data


def spectrum_viewer_context(
    *,
    row: Spectrum,
    task: Task | None,
    user: Any,
    inspected: list[list[float]] | None = None,
    fit_later: bool = False,
) -> dict[str, Any]:
    """What ``spectra/_viewer.html`` needs, for ``user``: the plot data (with the windows a
    candidate's agent inspected, if any), whether they may decide the redshift, the current one."""
    may_decide = permissions.REDSHIFT_DECIDE.allows(user)
    data = spectrum_workbench_data(row, task, may_decide, fit_later=fit_later)
    if inspected is not None:
        data["inspected"] = inspected
    return {
        "viewer_spectrum": row,
        "plot_data": data,
        "may_decide_redshift": may_decide,
        "redshift_current": selectors.spectrum_redshift_current(row),
    }
