"""A spectrum's sparkline for the catalog list: a small inline SVG drawn server side.

Each column of the sparkline holds the lowest and highest good flux of its pixels, so a line one
pixel wide still shows (a mean or median per column would flatten it). The SVG holds numbers
only, no text from the file. The catalog list asks for the sparklines of its page's rows alone
(lazy <img>), each cached by spectrum id, so a page costs the same at 5 million rows as at 50.
"""

from __future__ import annotations

import numpy as np
from django.core.cache import cache

from annotation.spectra.models import Spectrum
from annotation.spectra.selectors import spectrum_value

WIDTH = 120
HEIGHT = 24
CACHE_SECONDS = 7 * 24 * 3600
CACHE_VERSION = 1


def sparkline_svg(
    wavelength: np.ndarray,
    flux: np.ndarray,
    bad: np.ndarray | None = None,
    *,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """The flux against wavelength as an SVG polyline, ``width`` columns of min and max."""
    good = np.isfinite(flux) & np.isfinite(wavelength)
    if bad is not None and bad.shape == flux.shape:
        good &= ~bad.astype(bool)
    wave, values = wavelength[good], flux[good]
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img">'
    )
    if values.size < 2 or wave[-1] <= wave[0]:
        return f'{head}<line x1="0" y1="{height / 2}" x2="{width}" y2="{height / 2}" stroke="#bbb" stroke-dasharray="2 2"/></svg>'
    columns = np.minimum(((wave - wave[0]) / (wave[-1] - wave[0]) * width).astype(int), width - 1)
    order = np.argsort(columns, kind="stable")
    columns, values = columns[order], values[order]
    starts = np.flatnonzero(np.r_[True, columns[1:] != columns[:-1]])
    lows = np.minimum.reduceat(values, starts)
    highs = np.maximum.reduceat(values, starts)
    xs = columns[starts] + 0.5
    bottom, top = float(lows.min()), float(highs.max())
    span = top - bottom or 1.0
    margin = 1.0

    def y(value: np.ndarray) -> np.ndarray:
        return margin + (top - value) / span * (height - 2 * margin)

    points = np.empty((2 * xs.size, 2))
    points[0::2, 0] = points[1::2, 0] = xs
    points[0::2, 1], points[1::2, 1] = y(lows), y(highs)
    path = " ".join(f"{x:.1f},{yy:.1f}" for x, yy in points)
    return (
        f'{head}<polyline fill="none" stroke="#1f4e79" stroke-width="1" '
        f'stroke-linejoin="round" points="{path}"/></svg>'
    )


def _cache_key(spectrum_id: int) -> str:
    return f"catalog:sparkline:v{CACHE_VERSION}:{spectrum_id}"


def spectrum_sparkline(spectrum_id: int) -> str | None:
    """The stored spectrum's sparkline (cached; a spectrum's arrays never change), or None when
    there is no such spectrum."""
    key = _cache_key(spectrum_id)
    svg = cache.get(key)
    if svg is not None:
        return str(svg)
    row = Spectrum.objects.only("arrays", "object_id", "survey", "redshift").filter(pk=spectrum_id)
    found = row.first()
    if found is None:
        return None
    value = spectrum_value(found)
    svg = sparkline_svg(value.wavelength, value.flux, getattr(value, "mask", None))
    cache.set(key, svg, CACHE_SECONDS)
    return svg
