"""What the Plotly charts are given: names made inert, spectra thinned to what a plot can show."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agent.render import SPIKE_SMOOTH_WIDTH, robust_limits, running_median

# Plotly renders trace names, axis and tick labels, annotations, titles and hover text as its
# own pseudo-HTML (<b>, <br>, <a href=...>) and substitutes %{...} in hover templates.
_PLOTLY_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "%": "&#37;"})


def plotly_text(value: object) -> str:
    """A user-, model- or expert-provided string as Plotly shows it literally, never as markup.

    Plotly decodes the entities back to the characters, so the chart reads exactly `value`.
    """
    return str(value).translate(_PLOTLY_ESCAPES)


def plotly_keys(mapping: dict[str, Any]) -> dict[str, Any]:
    """A mapping whose keys become trace names or categories, with those keys made inert."""
    return {plotly_text(key): value for key, value in mapping.items()}


def analysis_chart_data(analysis: dict[str, Any]) -> dict[str, Any]:
    """The parts of a campaign analysis that analysis.js draws, every judge, policy, rater and
    data set name made inert. The page's tables show the raw analysis (Django escapes them)."""
    pairwise = analysis.get("pairwise") or {}
    spearman = analysis.get("spearman") or {"names": [], "matrix": []}
    return {
        "histograms": plotly_keys(analysis.get("histograms") or {}),
        "cdfs": plotly_keys(analysis.get("cdfs") or {}),
        "spearman": {
            "names": [plotly_text(name) for name in spearman["names"]],
            "matrix": spearman["matrix"],
        },
        "pairwise": {
            "reference": plotly_text(pairwise.get("reference") or ""),
            "policies": [plotly_text(name) for name in pairwise.get("policies") or []],
            "shares": plotly_keys(pairwise.get("shares") or {}),
            "strengths": plotly_keys(pairwise.get("strengths") or {}),
        },
    }


# --- thinning spectra -----------------------------------------------------------------------


def min_max_indices(values: np.ndarray, max_points: int) -> np.ndarray:
    """Sorted indices of at most `max_points` of `values` that draw the same line on a screen.

    Min-max decimation: the pixels are cut into max_points // 3 equal buckets (max_points >= 3)
    and each keeps its lowest and highest finite pixel, so every emission spike and absorption
    trough (and the global extrema) survive; a bucket holding a masked pixel (NaN) also keeps
    its first one, so the gaps in the line survive too. Fewer pixels than max_points are all
    kept.
    """
    n = int(values.shape[0])
    if n <= max_points:
        return np.arange(n)
    width = math.ceil(n / max(1, max_points // 3))
    buckets = math.ceil(n / width)
    padded = np.full(buckets * width, np.nan)
    padded[:n] = values
    grid = padded.reshape(buckets, width)
    finite = np.isfinite(grid)
    real = (np.arange(buckets * width) < n).reshape(buckets, width)
    gap = ~finite & real
    lowest = np.where(finite, grid, np.inf).argmin(axis=1)
    highest = np.where(finite, grid, -np.inf).argmax(axis=1)
    first_gap = gap.argmax(axis=1)
    keep = np.stack(
        [
            np.where(finite.any(axis=1), lowest, -1),
            np.where(finite.any(axis=1), highest, -1),
            np.where(gap.any(axis=1), first_gap, -1),
        ],
        axis=1,
    )
    offsets = (np.arange(buckets) * width)[:, None]
    indices = np.where(keep >= 0, keep + offsets, -1).ravel()
    return np.unique(indices[indices >= 0])


def _bucket_envelope(values: np.ndarray, indices: np.ndarray, lowest: bool) -> np.ndarray:
    """For each kept index, the extreme of `values` over the pixels it stands for (up to the
    next kept index), so a thinned error band is never narrower than the full one."""
    if indices.size == values.size:
        return values
    fill = np.inf if lowest else -np.inf
    finite = np.where(np.isfinite(values), values, fill)
    reduce = np.minimum.reduceat if lowest else np.maximum.reduceat
    starts = indices.copy()
    starts[0] = 0
    out = reduce(finite, starts)
    return np.where(np.isfinite(out), out, np.nan)


def thin_spectrum(
    *,
    wavelength: np.ndarray,
    flux: np.ndarray,
    error: np.ndarray | None,
    max_points: int,
) -> dict[str, Any]:
    """Wavelength, flux and the ±1σ band at no more than max_points points each."""
    indices = min_max_indices(flux, max_points)
    thinned: dict[str, Any] = {
        "wavelength": wavelength[indices],
        "flux": flux[indices],
        "lower": None,
        "upper": None,
        "n_pixels": int(flux.size),
        "decimated": bool(indices.size < flux.size),
    }
    if error is not None:
        lower, upper = flux - error, flux + error
        gap = ~np.isfinite(flux[indices])
        thinned["lower"] = np.where(gap, np.nan, _bucket_envelope(lower, indices, lowest=True))
        thinned["upper"] = np.where(gap, np.nan, _bucket_envelope(upper, indices, lowest=False))
    return thinned


def robust_y_range(flux: np.ndarray) -> list[float] | None:
    """[low, high] for a flux axis: the agent's own image limits (agent.render.robust_limits) over
    the finite flux, so the interactive plot and the agent's image show the same thing: every
    real feature, strong lines included, but not an isolated cosmic ray that would squash the rest.

    None when no pixel is finite (Plotly then picks its own range)."""
    finite = np.asarray(flux, dtype=float)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return None
    low, high = robust_limits(finite, running_median(finite, SPIKE_SMOOTH_WIDTH))
    return [low, high]
