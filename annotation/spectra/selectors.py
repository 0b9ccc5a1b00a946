"""Reads of spectra: lists and filters, the Spectrum value, rendered windows, plot data."""

from __future__ import annotations

import copy
import math
import time
from collections import OrderedDict
from dataclasses import dataclass
from threading import Lock
from typing import Any

import numpy as np
from django.conf import settings
from django.core.cache import caches
from django.db.models import F, QuerySet
from django.urls import reverse

from agent import inspection_tasks as agent_tasks
from agent.policies.rule_based.view import SKY_LINES as POLICY_SKY_MASKS
from agent.redshift import Template as RedshiftTemplate
from agent.redshift import template_scaled_to
from agent.redshift_fit import FIT_VERSION, fit_class_and_redshift
from agent.redshift_templates import TemplateSet, default_template_set
from agent.spectra import Spectrum as SpectrumValue
from agent.spectra import air_to_vacuum, spectrum_from_npz_bytes
from agent.tool import SpectralVisualizationTool, ToolResult
from annotation.core import charts
from annotation.spectra.labels import LabelState
from annotation.spectra.models import RedshiftDecision, Spectrum, SpectrumLabel, Task


@dataclass(frozen=True)
class SpectrumFilters:
    task: str = ""
    label: str = ""
    survey: str = ""
    dataset: str = ""
    q: str = ""
    sort: str = ""  # a SPECTRUM_SORTS key, "-" first for descending; anything else: by id


# Column key -> model field of the spectra list's sortable columns.
SPECTRUM_SORTS = {
    "object": "object_id",
    "survey": "survey",
    "dataset": "dataset",
    "task": "task__code",
    "label": "label",
    "snr": "snr",
    "z": "redshift",
    "coverage": "wavelength_min",
}


def spectrum_ordering(sort: str) -> list[Any]:
    """ORDER BY for a list sort: missing values last either way, the id breaking ties."""
    key = sort.removeprefix("-")
    if key not in SPECTRUM_SORTS:
        return ["id"]
    field = F(SPECTRUM_SORTS[key])
    descending = sort.startswith("-")
    return [
        field.desc(nulls_last=True) if descending else field.asc(nulls_last=True),
        "-id" if descending else "id",
    ]


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
    return rows.order_by(*spectrum_ordering(filters.sort))


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


def spectrum_array_page(*, row: Spectrum, offset: int, limit: int) -> dict[str, Any]:
    """Pixels [offset, offset + limit) of the stored arrays, NaN flux as None, with the total
    and the offset of the next page (None on the last)."""
    value = spectrum_value(row)
    total = int(value.wavelength.size)
    end = min(offset + limit, total)
    part = slice(offset, end)
    return {
        "offset": offset,
        "count": max(end - offset, 0),
        "total": total,
        "next_offset": end if end < total else None,
        "wavelength": value.wavelength[part].tolist(),
        "flux": [v if v == v else None for v in value.flux[part].tolist()],
        "ivar": None if value.ivar is None else value.ivar[part].tolist(),
        "mask": None if value.mask is None else value.mask[part].tolist(),
    }


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
        "wavelength": np.round(np.asarray(thinned["wavelength"], dtype=float), 3).tolist(),
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
    data["viewer"] = spectrum_viewer_data(row=row, wave=wave, flux=flux)
    data["viewer"]["template"] = task_template(task.code) if task is not None else None
    return data


TEMPLATE_MAX_POINTS = 1500
_templates: dict[str, dict[str, Any] | None] = {}


def task_template(code: str) -> dict[str, Any] | None:
    """A real reference spectrum for the task's positives (agent.real_corpus), thinned for the
    viewer's overlay; None when there is none or the real-data cache is not built. Kept per
    process: the library spectra never change."""
    if code not in _templates:
        from agent.real_corpus import reference_template

        found = reference_template(code)
        if found is None:
            _templates[code] = None
        else:
            entry, spectrum = found
            step = max(1, math.ceil(len(spectrum.wavelength) / TEMPLATE_MAX_POINTS))
            _templates[code] = {
                "name": charts.plotly_text(f"{entry.object} ({entry.subclass})"),
                "name_text": f"{entry.object} ({entry.subclass})",
                "reference": entry.reference,
                "wavelength": _plot_values(spectrum.wavelength[::step]),
                "flux": _plot_values(spectrum.flux[::step]),
            }
    return _templates[code]


# --- the viewer's overlays: line list, sky and telluric regions, masked pixels, units -----------

# The standard optical lines (Prospect / MARZ style), rest wavelengths in air as the NIST/Morton
# tables quote them above 2000 Å; below 2000 Å (C IV) the IAU quotes vacuum and air == vacuum.
# One entry per label; a doublet or triplet carries all its members.
_LINE_LIST_AIR: tuple[tuple[str, tuple[float, ...], str], ...] = (
    ("C IV", (1548.19, 1550.77), "emission"),
    ("Mg II", (2795.53, 2802.71), "emission"),
    ("[O II]", (3726.03, 3728.82), "emission"),
    ("Ca II K", (3933.66,), "absorption"),
    ("Ca II H", (3968.47,), "absorption"),
    ("H\u03b5", (3970.07,), "balmer"),
    ("H\u03b4", (4101.74,), "balmer"),
    ("H\u03b3", (4340.47,), "balmer"),
    ("He II", (4685.70,), "emission"),
    ("H\u03b2", (4861.33,), "balmer"),
    ("[O III]", (4958.91,), "emission"),
    ("[O III]", (5006.84,), "emission"),
    ("Mg b", (5167.32, 5172.68, 5183.60), "absorption"),
    ("He II", (5411.52,), "emission"),
    ("He I", (5875.62,), "emission"),
    ("Na D", (5889.95, 5895.92), "absorption"),
    ("[N II]", (6548.05,), "emission"),
    ("H\u03b1", (6562.80,), "balmer"),
    ("[N II]", (6583.45,), "emission"),
    ("He I", (6678.15,), "emission"),
    ("[S II]", (6716.44, 6730.82), "emission"),
    ("Ca II triplet", (8498.02, 8542.09, 8662.14), "absorption"),
)

# Night-sky lines the viewer shades, observed frame (air, as sky atlases quote them): [O I] 5577,
# Na D 5890/5896, [O I] 6300/6364. The same lines agent.synthetic.lines.SKY_LINES puts into the
# synthetic sky; each is shaded over the rule-based policy's mask half-width (POLICY_SKY_MASKS).
_SKY_LINES_AIR: tuple[tuple[str, float], ...] = (
    ("[O I] 5577", 5577.34),
    ("Na D 5890", 5889.95),
    ("Na D 5896", 5895.92),
    ("[O I] 6300", 6300.30),
    ("[O I] 6364", 6363.78),
)
_SKY_HALF_WIDTH = float(POLICY_SKY_MASKS[0][1])  # Å, the policy's own sky-line mask
# Telluric absorption, observed frame (Å): O2 A and B bands and the 7160-7340 water band the
# synthetic observing model (agent.synthetic.observing) also imprints.
_TELLURIC_BANDS: tuple[tuple[str, float, float], ...] = (
    ("telluric B (O\u2082)", 6867.0, 6884.0),
    ("telluric H\u2082O", 7160.0, 7340.0),
    ("telluric A (O\u2082)", 7594.0, 7621.0),
)
MAX_MASKED_RUNS = 300  # a few hundred grey marks at most; nearer runs are merged beyond that

# Flux units the surveys document when a file's header does not name them (BUNIT).
_SURVEY_FLUX_UNITS = {
    "SDSS": "10\u207b\u00b9\u2077 erg s\u207b\u00b9 cm\u207b\u00b2 \u00c5\u207b\u00b9",
    "BOSS": "10\u207b\u00b9\u2077 erg s\u207b\u00b9 cm\u207b\u00b2 \u00c5\u207b\u00b9",
    "DESI": "10\u207b\u00b9\u2077 erg s\u207b\u00b9 cm\u207b\u00b2 \u00c5\u207b\u00b9",
}


def _to_vacuum(air: float) -> float:
    return round(float(air_to_vacuum(air)), 2)


def viewer_line_list() -> list[dict[str, Any]]:
    """The line markers: name, rest wavelengths in vacuum and in air (Å), and the line's kind."""
    return [
        {
            "name": charts.plotly_text(name),
            "vacuum": [_to_vacuum(w) for w in air],
            "air": list(air),
            "kind": kind,
        }
        for name, air, kind in _LINE_LIST_AIR
    ]


def viewer_sky_regions() -> list[dict[str, Any]]:
    """Sky lines and telluric bands in the observed frame, vacuum Å (the stored wavelengths)."""
    regions = [
        {
            "name": charts.plotly_text(name),
            "kind": "sky",
            "range": [
                _to_vacuum(centre) - _SKY_HALF_WIDTH,
                _to_vacuum(centre) + _SKY_HALF_WIDTH,
            ],
        }
        for name, centre in _SKY_LINES_AIR
    ]
    regions += [
        {
            "name": charts.plotly_text(name),
            "kind": "telluric",
            "range": [_to_vacuum(lo), _to_vacuum(hi)],
        }
        for name, lo, hi in _TELLURIC_BANDS
    ]
    return regions


def masked_runs(
    wave: np.ndarray, flux: np.ndarray, limit: int = MAX_MASKED_RUNS
) -> list[list[float]]:
    """[lo, hi] wavelength runs of masked pixels (flux NaN: ivar 0, survey mask bits)."""
    bad = ~np.isfinite(flux)
    if not bad.any():
        return []
    edges = np.flatnonzero(np.diff(np.concatenate(([0], bad.view(np.int8), [0]))))
    starts, stops = edges[0::2], edges[1::2] - 1
    runs = [[float(wave[a]), float(wave[b])] for a, b in zip(starts, stops, strict=True)]
    while len(runs) > limit:  # merge the runs across the smallest gaps
        gaps = [runs[i + 1][0] - runs[i][1] for i in range(len(runs) - 1)]
        cut = sorted(gaps)[len(runs) - limit - 1]
        merged = [runs[0]]
        for run, gap in zip(runs[1:], gaps, strict=True):
            if gap <= cut:
                merged[-1][1] = run[1]
            else:
                merged.append(run)
        runs = merged
    return [[round(lo, 2), round(hi, 2)] for lo, hi in runs]


def spectrum_flux_unit(row: Spectrum) -> dict[str, str]:
    """The flux unit: the file's BUNIT, else the survey's documented unit, else unknown."""
    meta = row.meta or {}
    unit = meta.get("BUNIT") or meta.get("bunit") or meta.get("flux_unit")
    if unit:
        return {"unit": str(unit), "source": "file"}
    survey = str(row.survey).upper()
    for name, value in _SURVEY_FLUX_UNITS.items():
        if survey.startswith(name):
            return {"unit": value, "source": "survey convention"}
    return {"unit": "", "source": "unknown"}


def spectrum_wavelength_medium(row: Spectrum) -> dict[str, str]:
    """Stored wavelengths are always vacuum (readers convert air columns, agent.spectra.tables);
    `in_file` says what the file itself held: LAMOST, SDSS and DESI publish vacuum."""
    meta = row.meta or {}
    in_file = str(meta.get("wavelength_frame_in_file") or "")
    if not in_file:
        survey = str(row.survey).upper()
        known = ("LAMOST", "SDSS", "BOSS", "DESI", "SPECVI")
        in_file = "vacuum" if survey.startswith(known) else "unknown"
    return {"stored": "vacuum", "in_file": in_file}


# What the viewer's controls accept (spectrum_viewer.js holds them to these): a smoothing kernel
# wider than 101 pixels froze the tab, and z <= -1 has no meaning (1 + z is the stretch factor).
VIEWER_LIMITS = {"z_min": -0.01, "z_max": 10.0, "smooth_width_min": 1, "smooth_width_max": 101}


def spectrum_viewer_data(*, row: Spectrum, wave: np.ndarray, flux: np.ndarray) -> dict[str, Any]:
    """What the viewer's control bar draws over the plot (plot coordinates are rest frame when
    the spectrum has a redshift: `frame_z` converts the observed-frame sky regions)."""
    unit = spectrum_flux_unit(row)
    return {
        "frame_z": float(row.redshift or 0.0),
        "lines": viewer_line_list(),
        "sky": viewer_sky_regions(),
        "masked": masked_runs(wave, flux),
        "medium": spectrum_wavelength_medium(row),
        "flux_unit": charts.plotly_text(unit["unit"]),
        "flux_unit_text": unit["unit"],  # raw, for the metadata table (Django escapes it)
        "flux_unit_source": unit["source"],
        "limits": VIEWER_LIMITS,
    }


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


# --- vetted labels ---------------------------------------------------------------------------


def vetted_labels_of(
    *, pairs: list[tuple[int, int]]
) -> dict[tuple[int, int], tuple[str, str, list[dict[str, Any]]]]:
    """(spectrum id, task id) -> (label value, state, the decisions behind it: each expert's
    latest, ``labels.DecisionRecord.as_dict()``) for the pairs that have a label row."""
    if not pairs:
        return {}
    wanted = set(pairs)
    rows = SpectrumLabel.objects.filter(
        spectrum_id__in={spectrum for spectrum, _ in wanted},
        task_id__in={task for _, task in wanted},
    ).values_list("spectrum_id", "task_id", "value", "state", "decisions")
    return {
        (spectrum, task): (value, state, list(decisions or []))
        for spectrum, task, value, state, decisions in rows
        if (spectrum, task) in wanted
    }


def vetted_labels(*, task_codes: list[str] | None = None) -> QuerySet[SpectrumLabel]:
    """Labels the rule has made (agreed or resolved), optionally for some tasks."""
    rows = SpectrumLabel.objects.filter(state__in=LabelState.LABELLED).exclude(value="")
    if task_codes:
        rows = rows.filter(task__code__in=task_codes)
    return rows.select_related("task", "spectrum")


def vetted_label(*, spectrum_id: int, task_id: int) -> SpectrumLabel | None:
    return SpectrumLabel.objects.filter(spectrum_id=spectrum_id, task_id=task_id).first()


# --- redshift by cross-correlation (agent.redshift) -----------------------------------------------

REDSHIFT_TEMPLATE_MAX_POINTS = 2000  # per template sent to the viewer
REDSHIFT_FITS_KEPT = 256  # fits kept per process (a fit costs ~0.5-3 s)
# Fits are also stored in the shared cache (Redis in production) for every process and restart:
# the key names the fit's version, the template set's digest and the spectrum's content, so a
# changed fit, other templates or other pixels never read an old answer.
REDSHIFT_FIT_CACHE_SECONDS = 90 * 24 * 3600
_redshift_fits: OrderedDict[str, dict[str, Any]] = OrderedDict()
_redshift_fits_lock = Lock()
_template_set_lock = Lock()
_template_set: list[TemplateSet] = []


def redshift_template_set() -> TemplateSet:
    """The templates the fit correlates against (agent.redshift_templates), read once per process
    (immutable afterwards): the corpus's where the cache is built, synthetic ones otherwise."""
    with _template_set_lock:
        if not _template_set:
            _template_set.append(default_template_set())
        return _template_set[0]


def _thinned_template(template: RedshiftTemplate) -> dict[str, Any]:
    wave = np.asarray(template.wavelength, dtype=float)
    flux = np.asarray(template.flux, dtype=float)
    step = max(1, math.ceil(wave.size / REDSHIFT_TEMPLATE_MAX_POINTS))
    return {
        "name": charts.plotly_text(template.name),
        "name_text": template.name,
        "kind": template.kind,
        "wavelength": [round(w, 2) for w in wave[::step].tolist()],
        "flux": _plot_values(flux[::step]),
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def spectrum_redshift_fit(row: Spectrum, n_best: int = 5) -> dict[str, Any]:
    """The class and the fit's alternatives, lowest chi2 first (agent.redshift_fit), each with
    MARZ's quality, the template's index in ``templates`` and the factor that scales it to the
    observed flux; the templates (rest frame, thinned) the alternatives use; what the fit cost.
    Kept per process (_redshift_fits) and in the shared cache (redshift_fit_key)."""
    template_set = redshift_template_set()
    key = redshift_fit_key(row, template_set, n_best)
    with _redshift_fits_lock:
        if key in _redshift_fits:
            return copy.deepcopy(_redshift_fits[key])
    stored = caches["default"].get(key)
    if stored is None:
        stored = _redshift_fit_uncached(row, template_set, n_best)
        caches["default"].set(key, stored, REDSHIFT_FIT_CACHE_SECONDS)
    with _redshift_fits_lock:
        _redshift_fits[key] = stored
        while len(_redshift_fits) > REDSHIFT_FITS_KEPT:
            _redshift_fits.popitem(last=False)
    return copy.deepcopy(stored)


def redshift_fit_key(row: Spectrum, template_set: TemplateSet, n_best: int) -> str:
    """Where the fit of this spectrum's content against these templates is stored."""
    return f"redshift-fit:v{FIT_VERSION}:{template_set.fingerprint}:{row.content_hash}:{n_best}"


def _redshift_fit_uncached(row: Spectrum, template_set: TemplateSet, n_best: int) -> dict[str, Any]:
    """The fit itself, as spectrum_redshift_fit answers it (what it stores)."""
    value = spectrum_value(row)
    started = time.perf_counter()
    fit = fit_class_and_redshift(
        value.wavelength, value.flux, ivar=value.ivar, mask=value.mask,
        templates=template_set.templates, n_best=n_best,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    by_name = {t.name: i for i, t in enumerate(template_set.templates)}
    used: dict[int, int] = {}
    candidates = []
    good = value.good
    for rank, alternative in enumerate(fit.alternatives, start=1):
        index = by_name[alternative.template]
        ivar = None if value.ivar is None else value.ivar[good]
        template = template_set.templates[index]
        scale = template_scaled_to(
            template, alternative.z, value.wavelength[good], value.flux[good], ivar
        )
        entry = alternative.as_dict()
        candidates.append(
            {
                **entry,
                "delta_chi2": _finite(entry["delta_chi2"]),
                "rank": rank,
                "template": charts.plotly_text(alternative.template),
                "template_text": alternative.template,
                "template_index": used.setdefault(index, len(used)),
                "scale": scale,
            }
        )
    order = sorted(used, key=used.__getitem__)
    result = {
        **fit.as_dict(),
        "class_delta_chi2": _finite(fit.class_delta_chi2),
        "candidates": candidates,
        "templates": [_thinned_template(template_set.templates[i]) for i in order],
        "seconds": round(seconds, 4),
        "note": "; ".join(part for part in (template_set.note, fit.note) if part),
        "template_source": template_set.source,
    }
    return result


def spectrum_redshift_current(row: Spectrum) -> RedshiftDecision | None:
    """The newest expert redshift of the spectrum, or None."""
    return row.redshift_decisions.select_related("decided_by").first()


def vetted_redshift(spectrum_id: int | None) -> RedshiftDecision | None:
    """The newest expert redshift of the spectrum with this id (None: none, or no spectrum)."""
    if spectrum_id is None:
        return None
    return RedshiftDecision.objects.filter(spectrum_id=spectrum_id).first()


# --- compare: other spectra to overlay, the sky -------------------------------------------------

COMPARE_MAX_NEIGHBOURS = 5
COMPARE_RADIUS_DEG = 1.0  # the catalog neighbours offered lie within this of the spectrum


def spectrum_compare_choices(row: Spectrum) -> list[dict[str, Any]]:
    """Spectra to overlay: others of the same object (designation), then the nearest on the sky
    within COMPARE_RADIUS_DEG (up to COMPARE_MAX_NEIGHBOURS)."""
    same = list(
        Spectrum.objects.filter(object_id=row.object_id)
        .exclude(pk=row.pk)
        .only("id", "object_id", "survey", "dataset")[:10]
    )
    choices = [
        {"id": s.pk, "relation": "same object", "label": f"{s.object_id} ({s.survey}, {s.dataset})"}
        for s in same
    ]
    if row.ra is not None and row.dec is not None:
        seen = {row.pk, *(s.pk for s in same)}
        cos_dec = max(math.cos(math.radians(row.dec)), 1e-3)
        box = Spectrum.objects.filter(
            ra__range=(
                row.ra - COMPARE_RADIUS_DEG / cos_dec,
                row.ra + COMPARE_RADIUS_DEG / cos_dec,
            ),
            dec__range=(row.dec - COMPARE_RADIUS_DEG, row.dec + COMPARE_RADIUS_DEG),
        ).only("id", "object_id", "survey", "dataset", "ra", "dec")[:500]
        near = []
        for s in box:
            if s.pk in seen or s.ra is None or s.dec is None:
                continue
            distance = math.hypot((s.ra - row.ra) * cos_dec, s.dec - row.dec)
            if distance <= COMPARE_RADIUS_DEG:
                near.append((distance, s))
        near.sort(key=lambda pair: (pair[0], pair[1].pk))
        choices += [
            {
                "id": s.pk,
                "relation": f"neighbour {distance * 3600:.0f}\u2033",
                "label": f"{s.object_id} ({s.survey}, {s.dataset})",
            }
            for distance, s in near[:COMPARE_MAX_NEIGHBOURS]
        ]
    return choices


def spectrum_overlay(*, row: Spectrum, other: Spectrum, max_points: int) -> dict[str, Any]:
    """``other`` on ``row``'s plot axis (its observed wavelengths over 1 + row's redshift), its
    flux scaled so that its median over the common range equals ``row``'s there."""
    mine, theirs = spectrum_value(row), spectrum_value(other)
    frame = 1.0 + float(row.redshift or 0.0)
    wave = theirs.wavelength / frame
    flux = np.where(theirs.good, theirs.flux, np.nan)
    lo = max(float(mine.wavelength[0]), float(theirs.wavelength[0]))
    hi = min(float(mine.wavelength[-1]), float(theirs.wavelength[-1]))
    scale = 1.0
    if hi > lo:
        ours = mine.flux[mine.good & (mine.wavelength >= lo) & (mine.wavelength <= hi)]
        other_flux = flux[(theirs.wavelength >= lo) & (theirs.wavelength <= hi)]
        other_flux = other_flux[np.isfinite(other_flux)]
        if ours.size and other_flux.size and np.median(other_flux) != 0:
            scale = float(np.median(ours) / np.median(other_flux))
    thinned = charts.thin_spectrum(
        wavelength=wave, flux=flux * scale, error=None, max_points=max_points
    )
    label = f"{other.object_id} ({other.survey}, {other.dataset}) \u00d7{scale:.3g}"
    return {
        "id": other.pk,
        "name": charts.plotly_text(label),
        "name_text": label,
        "scale": scale,
        "overlap": [lo, hi] if hi > lo else None,
        "wavelength": np.round(np.asarray(thinned["wavelength"], dtype=float), 3).tolist(),
        "flux": _plot_values(thinned["flux"]),
    }


def redshift_template_choices() -> list[dict[str, Any]]:
    """The fit's templates by index, for the compare overlay (names raw: textContent only)."""
    return [
        {"index": i, "name_text": t.name, "kind": t.kind}
        for i, t in enumerate(redshift_template_set().templates)
    ]


def spectrum_template_overlay(*, row: Spectrum, index: int, z: float) -> dict[str, Any] | None:
    """Template ``index`` of the fit's set redshifted to ``z``, on ``row``'s plot axis and scaled
    to its flux (weighted least squares); None for an index out of the set."""
    templates = redshift_template_set().templates
    if not 0 <= index < len(templates):
        return None
    template = templates[index]
    value = spectrum_value(row)
    good = value.good
    scale = template_scaled_to(
        template,
        z,
        value.wavelength[good],
        value.flux[good],
        None if value.ivar is None else value.ivar[good],
    )
    thinned = _thinned_template(template)
    stretch = (1.0 + z) / (1.0 + float(row.redshift or 0.0))
    label = f"{template.name} at z = {z:.5f} ×{scale:.3g}"
    return {
        "id": f"template-{index}",
        "name": charts.plotly_text(label),
        "name_text": label,
        "scale": scale,
        "overlap": None
        if scale == 0
        else [float(value.wavelength[0]), float(value.wavelength[-1])],
        "wavelength": [round(w * stretch, 3) for w in thinned["wavelength"]],
        "flux": [None if v is None else v * scale for v in thinned["flux"]],
    }


def spectrum_sky(row: Spectrum, max_points: int) -> dict[str, Any] | None:
    """The sky spectrum the file carried (SDSS ``sky``; a table's sky column), on the plot's
    axis and thinned; None when the file had none."""
    value = spectrum_value(row)
    if value.sky is None:
        return None
    frame = 1.0 + float(row.redshift or 0.0)
    sky = np.where(np.isfinite(value.sky), value.sky, np.nan)
    thinned = charts.thin_spectrum(
        wavelength=value.wavelength / frame, flux=sky, error=None, max_points=max_points
    )
    return {
        "wavelength": np.round(np.asarray(thinned["wavelength"], dtype=float), 3).tolist(),
        "flux": _plot_values(thinned["flux"]),
    }


# --- the list a spectrum page was opened from ------------------------------------------------------

LIST_NEIGHBOURS_CAP = 5000  # ids read to place a spectrum in its list


@dataclass(frozen=True)
class SpectrumNeighbours:
    previous_id: int | None
    next_id: int | None
    position: int | None  # 1-based; None when the spectrum is not among the first ids read
    count: int
    capped: bool


def spectrum_list_neighbours(*, filters: SpectrumFilters, spectrum_id: int) -> SpectrumNeighbours:
    """The previous and next spectra of ``spectrum_id`` in the spectra list with ``filters``
    (its filters and sort), reading at most LIST_NEIGHBOURS_CAP ids."""
    ids = list(
        spectrum_list(filters=filters).values_list("id", flat=True)[: LIST_NEIGHBOURS_CAP + 1]
    )
    capped = len(ids) > LIST_NEIGHBOURS_CAP
    ids = ids[:LIST_NEIGHBOURS_CAP]
    if spectrum_id not in ids:
        return SpectrumNeighbours(None, None, None, len(ids), capped)
    at = ids.index(spectrum_id)
    return SpectrumNeighbours(
        previous_id=ids[at - 1] if at > 0 else None,
        next_id=ids[at + 1] if at + 1 < len(ids) else None,
        position=at + 1,
        count=len(ids),
        capped=capped,
    )
