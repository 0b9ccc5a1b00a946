"""Reads of spectra: lists and filters, the Spectrum value, rendered windows, plot data."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from threading import Lock
from typing import Any

import numpy as np
from django.conf import settings
from django.db.models import QuerySet
from django.urls import reverse

from agent import inspection_tasks as agent_tasks
from agent.spectra import Spectrum as SpectrumValue
from agent.spectra import spectrum_from_npz_bytes
from agent.tool import SpectralVisualizationTool, ToolResult
from annotation.core import charts
from annotation.spectra.models import Spectrum, Task


@dataclass(frozen=True)
class SpectrumFilters:
    task: str = ""
    label: str = ""
    survey: str = ""
    dataset: str = ""
    q: str = ""


def spectrum_list(*, filters: SpectrumFilters) -> QuerySet[Spectrum]:
    rows = Spectrum.objects.select_related("task").defer("arrays", "meta")
    if filters.task:
        rows = rows.filter(task__code__iexact=filters.task)
    if filters.label:
        rows = rows.filter(label=filters.label.upper())
    if filters.survey:
        rows = rows.filter(survey=filters.survey)
    if filters.dataset:
        rows = rows.filter(dataset=filters.dataset)
    if filters.q:
        rows = rows.filter(object_id__icontains=filters.q)
    return rows.order_by("id")


def spectrum_filter_choices() -> dict[str, list[str]]:
    return {
        "surveys": list(Spectrum.objects.order_by().values_list("survey", flat=True).distinct()),
        "datasets": list(Spectrum.objects.order_by().values_list("dataset", flat=True).distinct()),
        "tasks": list(Task.objects.values_list("code", flat=True)),
    }


def task_value(task: Task) -> agent_tasks.Task:
    """The agent's Task value for a database row (built-in or added by an expert)."""
    return agent_tasks.task_from_dict(
        {
            "code": task.code,
            "name": task.name,
            "question": task.question,
            "guideline": task.guideline,
            "windows": task.windows,
            "contaminants": task.contaminants,
        }
    )


class _ToolCache:
    """Per-process LRU of visualization tools, so repeated renders reuse the cached arrays."""

    def __init__(self, size: int = 32) -> None:
        self._size = size
        self._tools: OrderedDict[tuple[int, str], SpectralVisualizationTool] = OrderedDict()
        self._lock = Lock()

    def get(self, row: Spectrum) -> SpectralVisualizationTool:
        key = (row.pk, row.content_hash)
        with self._lock:
            tool = self._tools.get(key)
            if tool is not None:
                self._tools.move_to_end(key)
                return tool
        tool = SpectralVisualizationTool(spectrum_value(row))
        with self._lock:
            self._tools[key] = tool
            while len(self._tools) > self._size:
                self._tools.popitem(last=False)
        return tool


_tools = _ToolCache()


def spectrum_value(row: Spectrum) -> SpectrumValue:
    value = spectrum_from_npz_bytes(bytes(row.arrays))
    value.object_id = row.object_id
    value.survey = row.survey
    value.redshift = row.redshift
    return value


def spectrum_tool(row: Spectrum) -> SpectralVisualizationTool:
    return _tools.get(row)


def spectrum_render(
    *, row: Spectrum, wavelength_range: Any = None, label: str | None = None
) -> ToolResult:
    tool = spectrum_tool(row)
    if wavelength_range is None:
        return tool.render_full()
    return tool.render(wavelength_range, label=label)


def _finite_or_none(values: np.ndarray) -> list[float | None]:
    """Plain floats with None for NaN and inf (a gap in the plot). Built with tolist(): a page
    with a plot converts three arrays of thousands of pixels on every request."""
    out: list[float | None] = np.asarray(values, dtype=float).tolist()
    for index in np.flatnonzero(~np.isfinite(values)).tolist():
        out[index] = None
    return out


PLOT_DIGITS = 7  # float32 precision, what surveys store; more digits only lengthen the page


def _plot_values(values: np.ndarray) -> list[float | None]:
    """Rounded to PLOT_DIGITS significant digits of the largest value, far below what a plot
    can show: the flux, error band and hover text need no more, and the page halves in size."""
    finite = np.isfinite(values)
    scale = float(np.max(np.abs(values[finite]))) if finite.any() else 0.0
    decimals = PLOT_DIGITS - 1 - math.floor(math.log10(scale)) if scale > 0 else 0
    if scale > 0 and abs(decimals) < 300:
        values = np.round(values, decimals)
    return _finite_or_none(values)


def spectrum_plot_arrays(row: Spectrum) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Rest-frame wavelength, flux with NaN in the masked pixels, and the 1σ error (or None)."""
    value = spectrum_value(row)
    flux = np.where(value.good, value.flux, np.nan)
    error: np.ndarray | None = None
    if value.ivar is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            error = np.where(value.good & (value.ivar > 0), 1.0 / np.sqrt(value.ivar), np.nan)
    return np.asarray(value.rest_wavelength, dtype=float), flux, error


def _plot_series(
    wave: np.ndarray, flux: np.ndarray, error: np.ndarray | None, max_points: int
) -> dict[str, Any]:
    thinned = charts.thin_spectrum(wavelength=wave, flux=flux, error=error, max_points=max_points)
    lower, upper = thinned["lower"], thinned["upper"]
    return {
        "wavelength": [round(w, 3) for w in thinned["wavelength"].tolist()],
        "flux": _plot_values(thinned["flux"]),
        "lower": _plot_values(lower) if lower is not None else None,
        "upper": _plot_values(upper) if upper is not None else None,
        "n_pixels": thinned["n_pixels"],
        "decimated": thinned["decimated"],
        # From every pixel, not the thinned ones (thinning keeps each bucket's extremes).
        "y_range": charts.robust_y_range(flux),
    }


def spectrum_plot_data(*, row: Spectrum, task: Task | None) -> dict[str, Any]:
    """What the interactive plot needs: rest-frame arrays with gaps, error band, markers.

    A spectrum of more than SPECTRUM_PLOT_MAX_POINTS pixels is thinned (charts.min_max_indices);
    the plot then asks `zoom_url` for the pixels of the range it is zoomed to.
    """
    wave, flux, error = spectrum_plot_arrays(row)
    windows = task.windows if task is not None else []
    data = {
        "object_id": row.object_id,
        "rest_frame": bool(row.redshift),
        "redshift": row.redshift,
        **_plot_series(wave, flux, error, settings.SPECTRUM_PLOT_MAX_POINTS),
        "windows": [
            {
                "name": charts.plotly_text(window["name"]),
                "range": window["rest_range"],
                "lines": window.get("lines", []),
                "kind": window.get("kind", ""),
            }
            for window in windows
        ],
    }
    if data["decimated"]:
        data["zoom_url"] = reverse("api_spectrum_plot", args=[row.pk])
    return data


def spectrum_plot_window(
    *, row: Spectrum, lo: float | None, hi: float | None, max_points: int
) -> dict[str, Any]:
    """The pixels with rest wavelength in [lo, hi], thinned like the page's to max_points."""
    wave, flux, error = spectrum_plot_arrays(row)
    inside = np.ones(wave.shape, dtype=bool)
    if lo is not None:
        inside &= wave >= lo
    if hi is not None:
        inside &= wave <= hi
    return _plot_series(
        wave[inside], flux[inside], error[inside] if error is not None else None, max_points
    )
