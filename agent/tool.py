"""The spectral visualization tool of Spec-o3 (paper appendix B): zoomed re-renderings on demand.

The tool caches one spectrum's arrays when the session starts, renders the full-coverage view I0,
then answers each `spectral_visualization_tool` call with a PNG of the requested window. Calls
come from a model, so `render` never raises: any input it cannot use comes back as ``ok=False``
with a text that says what to ask for instead.

Request rules (wavelengths in the rest frame when the spectrum has a redshift, else observed):
- ``wavelength_range`` must be two finite numbers (numeric strings are accepted); values are
  rounded to 0.01 Angstrom.
- max before min is swapped, rendered, and the swap is reported.
- a window entirely outside the good-pixel coverage is refused and the coverage is stated; a
  window partly outside (including one far wider than the spectrum) is clipped to the coverage.
- a window narrower than MIN_WINDOW_ANGSTROM or holding fewer than MIN_WINDOW_PIXELS pixels is
  refused with a suggested window, as is one with fewer than 2 good pixels (nearest good data
  are named).
"""

from __future__ import annotations

import logging
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.render import (
    SPIKE_SMOOTH_WIDTH,
    SpectrumPlot,
    render_png,
    robust_limits,
    running_median,
)
from agent.spectra import Spectrum

logger = logging.getLogger(__name__)

TOOL_NAME = "spectral_visualization_tool"
IMAGE_SIZE = (644, 392)  # width, height in pixels; both multiples of 28
MIN_WINDOW_ANGSTROM = 5.0
MIN_WINDOW_PIXELS = 3
SUGGESTED_HALF_WIDTH_ANGSTROM = 25.0
WIDE_REQUEST_FACTOR = 2.0
MAX_LABEL_CHARS = 60
DEFAULT_CACHE_SIZE = 64
RANGE_DECIMALS = 2
FULL_VIEW_LABEL = "Full spectrum"
RANGE_FORMAT_HINT = "wavelength_range must be two numbers [min, max] in Angstrom"


@dataclass(frozen=True)
class ToolResult:
    ok: bool
    text: str  # observation text for the model
    png: bytes | None
    wavelength_range: tuple[float, float] | None  # range shown (rest frame when redshift known)
    label: str | None = None


class RangeError(ValueError):
    """A wavelength_range the tool cannot use; the message is written for the model."""


def parse_wavelength_range(value: Any) -> tuple[float, float]:
    """Two finite floats from a model-supplied value, or RangeError saying what was wrong."""
    if isinstance(value, str | bytes | dict) or not isinstance(value, Sequence | np.ndarray):
        raise RangeError(f"{RANGE_FORMAT_HINT}; got {_short_repr(value)}.")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise RangeError(f"{RANGE_FORMAT_HINT}; got an array of shape {value.shape}.")
    items = list(value)
    if len(items) != 2:
        raise RangeError(f"{RANGE_FORMAT_HINT}; got {len(items)} values: {_short_repr(value)}.")
    numbers = [_as_number(item) for item in items]
    if any(number is None for number in numbers):
        raise RangeError(f"{RANGE_FORMAT_HINT}; got {_short_repr(value)}.")
    first, second = (float(number) for number in numbers if number is not None)
    if not (math.isfinite(first) and math.isfinite(second)):
        raise RangeError(f"{RANGE_FORMAT_HINT}, both finite; got {_short_repr(value)}.")
    return first, second


def _as_number(item: Any) -> float | None:
    if isinstance(item, bool | np.bool_):
        return None
    if isinstance(item, int | float | np.integer | np.floating):
        return float(item)
    if isinstance(item, str):
        try:
            return float(item.strip())
        except ValueError:
            return None
    return None


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def sanitize_label(label: Any) -> str | None:
    """Printable, single-line, at most MAX_LABEL_CHARS characters; None when nothing is left."""
    if label is None:
        return None
    text = str(label)
    cleaned = "".join(
        char if char.isprintable() else " " for char in text if char.isprintable() or char.isspace()
    )
    cleaned = " ".join(cleaned.split())[:MAX_LABEL_CHARS].strip()
    return cleaned or None


def format_angstrom(value: float) -> str:
    """Compact wavelength for titles and coverage: 3700, 6562.8."""
    rounded = round(value, 1)
    return f"{rounded:.0f}" if rounded == int(rounded) else f"{rounded:.1f}"


class SpectralVisualizationTool:
    name = TOOL_NAME

    def __init__(
        self,
        spectrum: Spectrum,
        *,
        size: tuple[int, int] = IMAGE_SIZE,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        if not isinstance(spectrum, Spectrum):
            raise TypeError(f"spectrum must be an agent.spectra.Spectrum; got {type(spectrum)!r}")
        shape = spectrum.wavelength.shape
        if shape != spectrum.flux.shape or len(shape) != 1 or shape[0] < 2:
            raise ValueError(
                f"spectrum {spectrum.object_id or spectrum.source!r}: wavelength and flux must be "
                f"1-D of equal length >= 2; got {shape} and {spectrum.flux.shape}"
            )
        self.size = size
        self.cache_size = cache_size
        self.cache_hits = 0
        self._cache: OrderedDict[tuple[float, float, str | None], ToolResult] = OrderedDict()
        self._lock = threading.Lock()

        redshift = float(spectrum.redshift)
        self.rest_frame = math.isfinite(redshift) and redshift != 0.0 and redshift > -1.0
        self.redshift = redshift if self.rest_frame else 0.0
        self._wavelength = spectrum.wavelength / (1.0 + self.redshift)
        assert spectrum.mask is not None
        self._good = ~spectrum.mask & np.isfinite(spectrum.flux) & np.isfinite(self._wavelength)
        self._flux_exponent = display_exponent(spectrum.flux[self._good])
        self._flux = spectrum.flux * 10.0**-self._flux_exponent
        self._smooth = np.full_like(self._flux, np.nan)
        self._smooth[self._good] = running_median(self._flux[self._good], SPIKE_SMOOTH_WIDTH)
        good_wavelength = self._wavelength[self._good]
        self._coverage = (
            (float(good_wavelength[0]), float(good_wavelength[-1]))
            if good_wavelength.size >= 2
            else (float(self._wavelength[0]), float(self._wavelength[-1]))
        )

    # --- public API -----------------------------------------------------------------------------

    def coverage(self) -> tuple[float, float]:
        """First and last good pixel wavelength (rest frame when the redshift is known)."""
        return self._coverage

    def render_full(self) -> ToolResult:
        """The initial view I0: the whole good-pixel coverage."""
        return self.render(self._coverage, label=FULL_VIEW_LABEL)

    def render(self, wavelength_range: Any, label: Any = None) -> ToolResult:
        """Render one window. Never raises: unusable requests return ok=False with advice."""
        clean_label = sanitize_label(label)
        try:
            requested = parse_wavelength_range(wavelength_range)
        except RangeError as error:
            return ToolResult(False, str(error), None, None, clean_label)
        key = (
            round(requested[0], RANGE_DECIMALS),
            round(requested[1], RANGE_DECIMALS),
            clean_label,
        )
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self.cache_hits += 1
                return cached
        try:
            result = self._render_uncached(key[0], key[1], clean_label)
        except Exception as error:  # the model must get an observation, whatever broke
            logger.exception("rendering %r failed", wavelength_range)
            return ToolResult(
                False, f"The tool failed to render this window ({error}).", None, None, clean_label
            )
        if self.cache_size > 0:
            with self._lock:
                self._cache[key] = result
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return result

    # --- rendering ------------------------------------------------------------------------------

    def _render_uncached(self, first: float, second: float, label: str | None) -> ToolResult:
        notes: list[str] = []
        lo, hi = first, second
        if hi < lo:
            lo, hi = hi, lo
            notes.append(
                f"The range was given max first ([{first:g}, {second:g}]); swapped it to "
                f"[{lo:g}, {hi:g}]."
            )
        try:
            lo, hi = self._clip_to_coverage(lo, hi, notes)
            start, stop = self._check_window(lo, hi)
        except RangeError as error:
            return ToolResult(False, " ".join([*notes, str(error)]), None, None, label)
        good = self._good[start:stop]
        plot = SpectrumPlot(
            wavelength=self._wavelength[start:stop],
            flux=self._flux[start:stop],
            good=good,
            x_range=(lo, hi),
            y_range=robust_limits(self._flux[start:stop][good], self._smooth[start:stop][good]),
            title=self._title(lo, hi, label),
            x_label="Rest-frame wavelength (Å)" if self.rest_frame else "Wavelength (Å)",
            y_label=self._y_label(),
        )
        png = render_png(plot, self.size)
        masked = int(good.size - np.count_nonzero(good))
        summary = f"Showing {lo:.1f}–{hi:.1f} Å ({self._frame()}), {good.size} pixels"
        summary += f", {masked} masked." if masked else "."
        return ToolResult(True, " ".join([summary, *notes]), png, (lo, hi), label)

    def _clip_to_coverage(self, lo: float, hi: float, notes: list[str]) -> tuple[float, float]:
        cover_lo, cover_hi = self._coverage
        tolerance = 10.0**-RANGE_DECIMALS  # rounding the request must not count as overshoot
        if hi < cover_lo or lo > cover_hi:
            raise RangeError(
                f"The window {lo:.1f}–{hi:.1f} Å lies outside the data. {self._coverage_sentence()}"
            )
        if lo >= cover_lo - tolerance and hi <= cover_hi + tolerance:
            return max(lo, cover_lo), min(hi, cover_hi)
        clipped = max(lo, cover_lo), min(hi, cover_hi)
        if hi - lo > WIDE_REQUEST_FACTOR * (cover_hi - cover_lo):
            notes.append(
                f"The request {lo:g}–{hi:g} Å is much wider than the spectrum; showing its full "
                f"coverage {clipped[0]:.1f}–{clipped[1]:.1f} Å."
            )
        else:
            notes.append(
                f"The request {lo:g}–{hi:g} Å extends beyond the data; clipped to "
                f"{clipped[0]:.1f}–{clipped[1]:.1f} Å."
            )
        return clipped

    def _check_window(self, lo: float, hi: float) -> tuple[int, int]:
        """Pixel slice of [lo, hi], or RangeError when it is too narrow or has no usable data."""
        start = int(np.searchsorted(self._wavelength, lo, side="left"))
        stop = int(np.searchsorted(self._wavelength, hi, side="right"))
        pixels = stop - start
        if hi - lo < MIN_WINDOW_ANGSTROM or pixels < MIN_WINDOW_PIXELS:
            raise RangeError(
                f"The window {lo:.1f}–{hi:.1f} Å is too narrow ({hi - lo:.1f} Å, {pixels} "
                f"pixels); ask for at least {MIN_WINDOW_ANGSTROM:g} Å and {MIN_WINDOW_PIXELS} "
                f"pixels, e.g. {self._suggest_around((lo + hi) / 2)}."
            )
        good_count = int(np.count_nonzero(self._good[start:stop]))
        if good_count < 2:
            raise RangeError(
                f"The window {lo:.1f}–{hi:.1f} Å is too narrow or all masked: {pixels} pixels, "
                f"{pixels - good_count} masked, fewer than 2 usable. {self._nearest_good(start, stop)}"
            )
        return start, stop

    def _nearest_good(self, start: int, stop: int) -> str:
        below = np.flatnonzero(self._good[:start])
        above = np.flatnonzero(self._good[stop:])
        places = []
        if below.size:
            places.append(f"{self._wavelength[below[-1]]:.1f} Å (below)")
        if above.size:
            places.append(f"{self._wavelength[stop + above[0]]:.1f} Å (above)")
        if not places:
            return self._coverage_sentence()
        lo = self._wavelength[below[-1]] if below.size else self._wavelength[start]
        hi = self._wavelength[stop + above[0]] if above.size else self._wavelength[stop - 1]
        return (
            f"The nearest good data are at {' and '.join(places)}; ask for a window that "
            f"includes them, e.g. [{math.floor(lo - 10):d}, {math.ceil(hi + 10):d}]."
        )

    def _suggest_around(self, centre: float) -> str:
        cover_lo, cover_hi = self._coverage
        lo = max(cover_lo, centre - SUGGESTED_HALF_WIDTH_ANGSTROM)
        hi = min(cover_hi, centre + SUGGESTED_HALF_WIDTH_ANGSTROM)
        return f"[{math.floor(lo):d}, {math.ceil(hi):d}]"

    def _frame(self) -> str:
        return f"rest frame, z={self.redshift:.4g}" if self.rest_frame else "observed frame"

    def _coverage_sentence(self) -> str:
        cover_lo, cover_hi = self._coverage
        frame = "rest frame" if self.rest_frame else "observed frame"
        return (
            f"The spectrum covers {format_angstrom(cover_lo)}–{format_angstrom(cover_hi)} Å "
            f"({frame}); ask for a window inside it."
        )

    def _title(self, lo: float, hi: float, label: str | None) -> str:
        window = f"{format_angstrom(lo)}–{format_angstrom(hi)} Å"
        return f"{label}  {window}" if label else window

    def _y_label(self) -> str:
        if self._flux_exponent == 0:
            return "Flux"
        # "1e-17" rather than superscripts: legible at 13 px, and familiar to the model.
        return f"Flux (×1e{self._flux_exponent})"


def display_exponent(good_flux: np.ndarray) -> int:
    """Power of ten to divide flux by so tick labels stay short: 0 when the 90th percentile of
    |flux| is in [0.1, 10^4), else that percentile's decade (SDSS-style 1e-17 erg/s/cm2/A -> -17)."""
    if good_flux.size == 0:
        return 0
    scale = float(np.percentile(np.abs(good_flux), 90))
    if not math.isfinite(scale) or scale == 0 or 1e-1 <= scale < 1e4:
        return 0
    return math.floor(math.log10(scale))
