"""Spectral measurements from plain arrays: continuum, equivalent width, FWHM, band depth.

Pure numpy, no state. Every function takes the wavelength grid (Angstrom, increasing), the flux,
and ``good`` (True = usable pixel), so masked pixels are never used as data: inside an
integration window they are bridged by linear interpolation of their good neighbours.

Conventions:

- **Equivalent width** ``EW = integral of (1 - F / C) d(lambda)`` in Angstrom: **positive for
  absorption, negative for emission** (the usual stellar-spectroscopy sign).
- **Depth** of a line is the fractional distance of the profile peak from the continuum,
  positive in the direction of the line (absorption dips, emission rises).
- **Band depth** ``1 - F_band / F_reference`` compares the median flux on the absorbed side of a
  molecular band head with the median flux on its clear side; positive when the band is there.
  A band *degraded to the red* (TiO, ZrO, CaH, VO) absorbs redward of its head; one *degraded to
  the blue* (C2 Swan, CN) absorbs blueward.
- **Significance** is a measured value divided by its 1-sigma error from ``ivar``; None without
  an inverse variance.

Windows are ``(low, high)`` tuples in the same frame as ``wave``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agent.resolution import RESOLVED_FACTOR

C_KMS = 299_792.458
SHADINGS = ("red", "blue")
MIN_WINDOW_PIXELS = 3

Window = tuple[float, float]


class MeasurementError(ValueError):
    """A measurement that the data cannot support: too few good pixels, no continuum, no line."""


@dataclass(frozen=True)
class Continuum:
    """A polynomial in ``(lambda - pivot)`` fitted to side bands (highest power first)."""

    coefficients: tuple[float, ...]
    pivot: float  # Angstrom
    scatter: float  # robust standard deviation of the kept side-band residuals
    n_points: int  # side-band pixels kept by the clipping

    def __call__(self, wave: np.ndarray | float) -> np.ndarray:
        offset = np.asarray(wave, dtype=np.float64) - self.pivot
        return np.polyval(np.asarray(self.coefficients), offset)

    @property
    def level(self) -> float:
        """The continuum at the pivot."""
        return float(self.coefficients[-1])

    @property
    def slope(self) -> float:
        """d C / d lambda at the pivot (flux per Angstrom)."""
        return float(self.coefficients[-2]) if len(self.coefficients) > 1 else 0.0


@dataclass(frozen=True)
class EquivalentWidth:
    ew: float  # Angstrom; > 0 absorption, < 0 emission
    error: float | None  # 1-sigma from ivar (None without ivar)
    n_pixels: int  # pixels in the window
    n_masked: int  # of which bridged by interpolation

    @property
    def significance(self) -> float | None:
        return line_significance(self.ew, self.error)


@dataclass(frozen=True)
class LineWidth:
    fwhm_kms: float
    peak_wavelength: float
    depth: float  # fractional peak height above (emission) or below (absorption) the continuum
    bounded: bool  # False when a half-maximum crossing lies beyond the window (a lower limit)


@dataclass(frozen=True)
class BandDepth:
    depth: float  # 1 - band / reference
    error: float | None  # 1-sigma from ivar (None without ivar)
    band_flux: float  # median flux on the absorbed side
    reference_flux: float  # median flux on the clear side
    band_window: Window
    reference_window: Window

    @property
    def significance(self) -> float | None:
        return line_significance(self.depth, self.error)


@dataclass(frozen=True)
class Measurement:
    """Everything measured for one feature, with the values an expert would quote."""

    name: str  # "H-alpha 6564.6", "TiO 7055.9"
    wavelength: float  # rest wavelength of the line centre or band head
    kind: str  # "line" | "band"
    ew: float | None = None  # Angstrom, > 0 absorption, < 0 emission (lines)
    ew_error: float | None = None
    fwhm_kms: float | None = None  # lines, intrinsic: the instrumental width removed in quadrature
    depth: float | None = None  # line peak depth or band depth (fraction of the continuum)
    depth_error: float | None = None  # bands
    snr: float | None = None  # median continuum S/N per pixel near the feature
    instrumental_kms: float | None = None  # the line-spread FWHM removed from fwhm_kms
    observed_fwhm_kms: float | None = None  # FWHM as measured, before the removal

    @property
    def resolved(self) -> bool | None:
        """Whether the line is clearly wider than the line-spread function (None: unknown)."""
        if self.observed_fwhm_kms is None or self.instrumental_kms is None:
            return None
        return self.observed_fwhm_kms >= RESOLVED_FACTOR * self.instrumental_kms

    @property
    def significance(self) -> float | None:
        """EW / error for lines, depth / error for bands; signed."""
        if self.kind == "band":
            return line_significance(self.depth, self.depth_error)
        return line_significance(self.ew, self.ew_error)

    def is_emission(self, threshold: float = 3.0) -> bool:
        sig = self.significance
        return self.kind == "line" and sig is not None and sig <= -threshold

    def is_absorption(self, threshold: float = 3.0) -> bool:
        sig = self.significance
        return sig is not None and sig >= threshold

    def describe(self) -> str:
        """One phrase with the numbers, e.g. 'emission EW -42.3 Å, FWHM 1450 km/s, S/N 18'."""
        parts: list[str] = []
        if self.kind == "band":
            if self.depth is not None:
                parts.append(f"band depth {self.depth:+.2f}")
            sig = self.significance
            if sig is not None:
                parts.append(f"{sig:+.1f}σ")
        else:
            if self.ew is not None:
                sig = self.significance
                state = "no clear line"
                if sig is None or abs(sig) >= 3.0:
                    state = "emission" if self.ew < 0 else "absorption"
                parts.append(f"{state} EW {self.ew:+.1f} Å")
                if sig is not None:
                    parts.append(f"{abs(sig):.1f}σ")
            if self.fwhm_kms is not None and self.resolved is False:
                parts.append(f"unresolved (instrumental FWHM {self.instrumental_kms:.0f} km/s)")
            elif self.fwhm_kms is not None and self.instrumental_kms:
                parts.append(
                    f"FWHM {self.fwhm_kms:.0f} km/s after removing the instrumental "
                    f"{self.instrumental_kms:.0f} km/s"
                )
            elif self.fwhm_kms is not None:
                parts.append(f"FWHM {self.fwhm_kms:.0f} km/s")
        if self.snr is not None:
            parts.append(f"S/N {self.snr:.0f}")
        return ", ".join(parts) if parts else "not measurable"


# --- small helpers ---------------------------------------------------------------------------


def pixel_widths(wave: np.ndarray) -> np.ndarray:
    """Width in Angstrom of each pixel (half the distance between its neighbours)."""
    wave = np.asarray(wave, dtype=np.float64)
    if wave.size < 2:
        raise MeasurementError(f"wave needs at least 2 pixels to define widths, got {wave.size}")
    return np.gradient(wave)


def line_significance(value: float | None, error: float | None) -> float | None:
    """``value / error``, None when either is missing or the error is not positive."""
    if value is None or error is None or not math.isfinite(error) or error <= 0.0:
        return None
    return float(value / error)


def _check_arrays(wave: np.ndarray, flux: np.ndarray, good: np.ndarray) -> None:
    if not (wave.shape == flux.shape == good.shape) or wave.ndim != 1:
        raise MeasurementError(
            f"wave, flux and good must be 1-D of one length, got {wave.shape}, {flux.shape}, "
            f"{good.shape}"
        )


def _check_window(window: Sequence[float], name: str) -> Window:
    if len(window) != 2:
        raise MeasurementError(f"{name} must be (low, high), got {window!r}")
    low, high = float(window[0]), float(window[1])
    if not (math.isfinite(low) and math.isfinite(high) and low < high):
        raise MeasurementError(f"{name} must be finite with low < high, got {window!r}")
    return low, high


def _span(wave: np.ndarray, window: Window) -> slice:
    start, stop = np.searchsorted(wave, window, side="left")
    return slice(int(start), int(stop))


def _usable(flux: np.ndarray, good: np.ndarray) -> np.ndarray:
    return np.asarray(good, dtype=bool) & np.isfinite(flux)


def _bridged(wave: np.ndarray, values: np.ndarray, good: np.ndarray) -> np.ndarray:
    """``values`` with bad pixels replaced by linear interpolation of the good ones."""
    if good.all():
        return values
    return np.interp(wave, wave[good], values[good])


def window_snr(
    wave: np.ndarray, flux: np.ndarray, good: np.ndarray, ivar: np.ndarray | None, window: Window
) -> float | None:
    """Median ``flux * sqrt(ivar)`` over the good pixels of ``window`` (None without ivar)."""
    if ivar is None:
        return None
    region = _span(wave, _check_window(window, "window"))
    usable = _usable(flux[region], good[region]) & (ivar[region] > 0)
    if not usable.any():
        return None
    return float(np.median(flux[region][usable] * np.sqrt(ivar[region][usable])))


def median_flux(
    wave: np.ndarray, flux: np.ndarray, good: np.ndarray, window: Window
) -> tuple[float, int]:
    """Median of the good flux in ``window`` and the number of pixels it used."""
    region = _span(wave, _check_window(window, "window"))
    values = flux[region][_usable(flux[region], good[region])]
    if values.size < MIN_WINDOW_PIXELS:
        raise MeasurementError(
            f"window {window[0]:.1f}-{window[1]:.1f} Å has {values.size} good pixels; "
            f"need {MIN_WINDOW_PIXELS}"
        )
    return float(np.median(values)), int(values.size)


# --- continuum -------------------------------------------------------------------------------


def local_continuum(
    wave: np.ndarray,
    flux: np.ndarray,
    good: np.ndarray,
    window: Window,
    side_bands: Sequence[Window],
    *,
    degree: int = 1,
    clip: float = 3.0,
    iterations: int = 4,
) -> Continuum:
    """Robust polynomial (a straight line by default) through the good pixels of
    ``side_bands``, pivoted at the centre of ``window`` (the feature it is the continuum for).

    Outliers (lines, spikes) are rejected iteratively beyond ``clip`` robust sigmas (1.4826
    MAD). When all usable pixels sit on one side of the window the shape is unconstrained and
    the continuum is the flat median of that side. ``degree=2`` follows a curved trough, e.g.
    the flanks of a broad absorption line around a narrow emission core.
    """
    wave, flux, good = np.asarray(wave), np.asarray(flux), np.asarray(good, dtype=bool)
    _check_arrays(wave, flux, good)
    low, high = _check_window(window, "window")
    if degree not in (0, 1, 2):
        raise MeasurementError(f"degree must be 0, 1 or 2, got {degree!r}")
    if not side_bands:
        raise MeasurementError("side_bands must hold at least one (low, high) window")
    pivot = 0.5 * (low + high)
    selected = np.zeros(wave.size, dtype=bool)
    for index, band in enumerate(side_bands):
        selected[_span(wave, _check_window(band, f"side_bands[{index}]"))] = True
    keep = selected & _usable(flux, good)
    needed = max(MIN_WINDOW_PIXELS, degree + 2)
    if np.count_nonzero(keep) < needed:
        raise MeasurementError(
            f"side bands of {low:.1f}-{high:.1f} Å have {np.count_nonzero(keep)} good pixels; "
            f"need {needed}"
        )
    x, y = wave[keep] - pivot, flux[keep]
    two_sided = bool((x < 0).any() and (x > 0).any())
    order = degree if two_sided else 0
    inliers = np.ones(x.size, dtype=bool)
    coefficients = np.array([float(np.median(y))])
    scatter = 0.0
    for _ in range(max(iterations, 1)):
        if order > 0 and np.unique(x[inliers]).size > order:
            coefficients = np.polyfit(x[inliers], y[inliers], order)
        else:
            coefficients = np.array([float(np.median(y[inliers]))])
        residual = y - np.polyval(coefficients, x)
        scatter = 1.4826 * float(np.median(np.abs(residual[inliers])))
        if scatter <= 0.0:
            break
        updated = np.abs(residual) <= clip * scatter
        if np.count_nonzero(updated) < needed or np.array_equal(updated, inliers):
            break
        inliers = updated
    if coefficients.size == 1 and degree >= 1:
        coefficients = np.array([0.0, float(coefficients[0])])
    return Continuum(
        tuple(float(c) for c in coefficients), pivot, scatter, int(np.count_nonzero(inliers))
    )


def flanking_bands(window: Window, width: float, gap: float = 0.0) -> tuple[Window, Window]:
    """The two side bands of ``width`` Angstrom just outside ``window`` (``gap`` away)."""
    low, high = _check_window(window, "window")
    if not width > 0 or gap < 0:
        raise MeasurementError(f"side band width must be > 0 and gap >= 0, got {width}, {gap}")
    return (low - gap - width, low - gap), (high + gap, high + gap + width)


# --- lines -----------------------------------------------------------------------------------


def _ratio_in_window(
    wave: np.ndarray, flux: np.ndarray, good: np.ndarray, window: Window, continuum: Continuum
) -> tuple[slice, np.ndarray, np.ndarray]:
    region = _span(wave, window)
    usable = _usable(flux[region], good[region])
    if np.count_nonzero(usable) < MIN_WINDOW_PIXELS:
        raise MeasurementError(
            f"window {window[0]:.1f}-{window[1]:.1f} Å has {np.count_nonzero(usable)} good "
            f"pixels; need {MIN_WINDOW_PIXELS}"
        )
    level = continuum(wave[region])
    if not np.all(level > 0):
        raise MeasurementError(
            f"the continuum is not positive in {window[0]:.1f}-{window[1]:.1f} Å; "
            "a ratio to it is meaningless"
        )
    ratio = np.where(usable, flux[region], 0.0) / level
    return region, _bridged(wave[region], ratio, usable), usable


def equivalent_width(
    wave: np.ndarray,
    flux: np.ndarray,
    good: np.ndarray,
    window: Window,
    continuum: Continuum,
    ivar: np.ndarray | None = None,
) -> EquivalentWidth:
    """``sum((1 - F/C) * dlambda)`` over ``window``: > 0 absorption, < 0 emission (Angstrom).

    Masked pixels are bridged by interpolating F/C between good neighbours. The error is the
    ivar noise of the good pixels, scaled up for the bridged ones.
    """
    wave, flux, good = np.asarray(wave), np.asarray(flux), np.asarray(good, dtype=bool)
    _check_arrays(wave, flux, good)
    window = _check_window(window, "window")
    region, ratio, usable = _ratio_in_window(wave, flux, good, window, continuum)
    widths = pixel_widths(wave)[region]
    ew = float(np.sum((1.0 - ratio) * widths))
    error = None
    if ivar is not None:
        inverse = np.asarray(ivar, dtype=np.float64)[region]
        valid = usable & np.isfinite(inverse) & (inverse > 0)
        if valid.any():
            level = continuum(wave[region])[valid]
            variance = np.sum((widths[valid] / level) ** 2 / inverse[valid])
            error = float(math.sqrt(variance * usable.size / np.count_nonzero(valid)))
    n_pixels = int(usable.size)
    return EquivalentWidth(ew, error, n_pixels, n_pixels - int(np.count_nonzero(usable)))


def _boxcar(values: np.ndarray, pixels: int) -> np.ndarray:
    if pixels <= 1:
        return values
    kernel = np.ones(pixels) / pixels
    padded = np.pad(values, pixels // 2, mode="edge")
    return np.convolve(padded, kernel, mode="valid")[: values.size]


def _half_max_edge(
    x: np.ndarray, profile: np.ndarray, peak: int, step: int, half: float, max_gap: int
) -> tuple[float, bool]:
    """Where ``profile`` falls below ``half`` walking from ``peak`` by ``step`` (+1 or -1),
    tolerating dips below half of at most ``max_gap`` pixels (double-peaked lines)."""
    last_above, index = peak, peak
    while 0 <= index + step < profile.size:
        index += step
        if profile[index] >= half:
            last_above = index
        elif abs(index - last_above) > max_gap:
            break
    beyond = last_above + step
    if not 0 <= beyond < profile.size:
        return float(x[last_above]), False
    y0, y1 = profile[last_above], profile[beyond]
    fraction = (y0 - half) / (y0 - y1) if y0 != y1 else 0.0
    return float(x[last_above] + fraction * (x[beyond] - x[last_above])), True


def fwhm_kms(
    wave: np.ndarray,
    flux: np.ndarray,
    good: np.ndarray,
    window: Window,
    continuum: Continuum,
    *,
    emission: bool,
    centre: float | None = None,
    search: float | None = None,
    smooth_pixels: int = 1,
    max_gap_pixels: int = 0,
    relative_gap: float | None = None,
) -> LineWidth:
    """Full width at half maximum (km/s) of the line in ``window``, relative to ``continuum``.

    The peak is the extreme of the (optionally boxcar-smoothed) profile within ``search``
    Angstrom of ``centre`` (anywhere in the window when not given). Half-maximum crossings are
    interpolated linearly between pixels; a crossing beyond the window returns the window edge
    with ``bounded=False``. Velocity uses the peak wavelength (``centre`` when given).

    Dips below half maximum of up to ``max_gap_pixels`` are bridged, so a double-peaked disc
    line is measured across both peaks. With ``relative_gap`` the bridge is also limited to
    that multiple of the single-peak width (in pixels): a dip between two halves of one broad
    line is bridged, the gap between a narrow line and its narrow neighbour (H-alpha and
    [N II]) is not.
    """
    wave, flux, good = np.asarray(wave), np.asarray(flux), np.asarray(good, dtype=bool)
    _check_arrays(wave, flux, good)
    window = _check_window(window, "window")
    region, ratio, _ = _ratio_in_window(wave, flux, good, window, continuum)
    x = wave[region]
    profile = _boxcar((ratio - 1.0) if emission else (1.0 - ratio), smooth_pixels)
    candidates = np.ones(x.size, dtype=bool)
    if centre is not None and search is not None:
        candidates = np.abs(x - centre) <= search
        if not candidates.any():
            raise MeasurementError(f"no pixels within {search} Å of {centre} Å")
    peak = int(np.flatnonzero(candidates)[np.argmax(profile[candidates])])
    height = float(profile[peak])
    if not height > 0.0:
        what = "emission" if emission else "absorption"
        raise MeasurementError(f"no {what} peak in {window[0]:.1f}-{window[1]:.1f} Å")
    half = 0.5 * height
    gap = max_gap_pixels
    if relative_gap is not None and gap > 0:
        left, _ = _half_max_edge(x, profile, peak, -1, half, 0)
        right, _ = _half_max_edge(x, profile, peak, +1, half, 0)
        single = (right - left) / float(np.median(np.diff(x))) if x.size > 1 else 0.0
        gap = min(gap, int(round(relative_gap * single)))
    left, left_ok = _half_max_edge(x, profile, peak, -1, half, gap)
    right, right_ok = _half_max_edge(x, profile, peak, +1, half, gap)
    reference = centre if centre is not None else float(x[peak])
    width = (right - left) / reference * C_KMS
    return LineWidth(width, float(x[peak]), height, left_ok and right_ok)


@dataclass(frozen=True)
class Deblended:
    """Equivalent widths of lines fitted together (``ews[i]`` for ``centres[i]``)."""

    ews: tuple[float, ...]  # Angstrom, > 0 absorption
    covariance: tuple[tuple[float, ...], ...]  # of the EWs, scaled up by the reduced chi2 if > 1
    reduced_chi2: float
    n_pixels: int

    def error(self, index: int) -> float:
        return math.sqrt(max(self.covariance[index][index], 0.0))


def _gaussian_pixels(wave: np.ndarray, centre: float, fwhm: float) -> np.ndarray:
    """A unit-area Gaussian averaged over each pixel (per Angstrom): on a grid as coarse as the
    line, its value at the pixel centre would misstate the area."""
    widths = pixel_widths(wave)
    scale = math.sqrt(2.0) * fwhm / (2.0 * math.sqrt(2.0 * math.log(2.0)))
    erf = np.vectorize(math.erf)
    upper = erf((wave + 0.5 * widths - centre) / scale)
    lower = erf((wave - 0.5 * widths - centre) / scale)
    return np.asarray(0.5 * (upper - lower) / widths, dtype=np.float64)


def deblend(
    wave: np.ndarray,
    flux: np.ndarray,
    good: np.ndarray,
    ivar: np.ndarray,
    window: Window,
    centres: Sequence[float],
    fwhm: Sequence[float],
    *,
    degree: int = 1,
) -> Deblended:
    """Equivalent widths of lines too close to be integrated apart: one weighted linear
    least-squares fit over ``window`` of a polynomial continuum times ``1 - sum EW_i g_i``,
    where g_i is a unit-area Gaussian of known centre and FWHM (Angstrom), e.g. the
    line-spread function of a low-resolution spectrum widened by the lines' own width.

    A first pass (continuum minus the profiles) sets the continuum the profiles scale with, so
    the EWs of the second pass are ``integral of (1 - F / C)`` as in :func:`equivalent_width`.
    The errors come from ``ivar``, scaled up by the square root of the reduced chi2 when the
    fit is worse than the noise.
    """
    wave, flux, good = np.asarray(wave), np.asarray(flux), np.asarray(good, dtype=bool)
    _check_arrays(wave, flux, good)
    low, high = _check_window(window, "window")
    if len(centres) != len(fwhm) or not centres:
        raise MeasurementError("deblend needs one FWHM per line centre and at least one line")
    if any(not (math.isfinite(w) and w > 0) for w in fwhm):
        raise MeasurementError(f"line FWHMs must be positive, got {list(fwhm)!r}")
    region = _span(wave, (low, high))
    inverse = np.asarray(ivar, dtype=np.float64)[region]
    keep = _usable(flux[region], good[region]) & np.isfinite(inverse) & (inverse > 0)
    x, y, weight = wave[region], flux[region], inverse
    n_parameters = degree + 1 + len(centres)
    if np.count_nonzero(keep) < n_parameters + MIN_WINDOW_PIXELS:
        raise MeasurementError(
            f"{low:.1f}-{high:.1f} Å has {np.count_nonzero(keep)} good pixels for "
            f"{n_parameters} parameters"
        )
    pivot, half = 0.5 * (low + high), 0.5 * (high - low)
    powers = [((x - pivot) / half) ** k for k in range(degree, -1, -1)]
    profiles = [_gaussian_pixels(x, c, w) for c, w in zip(centres, fwhm, strict=True)]

    def solve(columns: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, float]:
        design = np.vstack(columns).T[keep]
        root = np.sqrt(weight[keep])
        solution, *_ = np.linalg.lstsq(design * root[:, None], y[keep] * root, rcond=None)
        residual = y[keep] - design @ solution
        chi2 = float(np.sum(weight[keep] * residual**2)) / (design.shape[0] - design.shape[1])
        try:
            covariance = np.linalg.inv((design * weight[keep][:, None]).T @ design)
        except np.linalg.LinAlgError as exc:
            raise MeasurementError(f"the lines in {low:.1f}-{high:.1f} Å are degenerate") from exc
        return solution, covariance, chi2

    first, _, _ = solve(powers + [-p for p in profiles])
    continuum = np.polyval(first[: degree + 1], (x - pivot) / half)
    if not np.all(continuum[keep] > 0):
        raise MeasurementError(f"the continuum is not positive in {low:.1f}-{high:.1f} Å")
    solution, covariance, chi2 = solve(powers + [-continuum * p for p in profiles])
    lines = slice(degree + 1, None)
    scaled = covariance[lines, lines] * max(chi2, 1.0)
    return Deblended(
        ews=tuple(float(v) for v in solution[lines]),
        covariance=tuple(tuple(float(v) for v in row) for row in scaled),
        reduced_chi2=chi2,
        n_pixels=int(np.count_nonzero(keep)),
    )


# --- molecular bands -------------------------------------------------------------------------


def band_windows(head: float, *, shading: str, width: float, gap: float) -> tuple[Window, Window]:
    """(band window, reference window) either side of a band ``head``.

    ``shading="red"``: the band absorbs redward of the head (degraded to the red); the
    reference lies blueward. ``"blue"``: the other way round.
    """
    if shading not in SHADINGS:
        raise MeasurementError(f"shading must be one of {SHADINGS}, got {shading!r}")
    if not width > 0 or gap < 0:
        raise MeasurementError(f"band width must be > 0 and gap >= 0, got {width}, {gap}")
    redward = (head + gap, head + gap + width)
    blueward = (head - gap - width, head - gap)
    return (redward, blueward) if shading == "red" else (blueward, redward)


def band_depth(
    wave: np.ndarray,
    flux: np.ndarray,
    good: np.ndarray,
    head: float,
    *,
    shading: str,
    width: float = 30.0,
    gap: float = 2.0,
    ivar: np.ndarray | None = None,
    band_window: Window | None = None,
    reference_window: Window | None = None,
) -> BandDepth:
    """``1 - median(band side) / median(clear side)`` around a molecular band ``head``.

    The two sides default to ``width`` Angstrom starting ``gap`` Angstrom from the head (see
    :func:`band_windows`); explicit windows replace them. The error propagates the ivar noise
    of the two medians (sigma of a median ~ 1.2533 sigma of the mean).
    """
    wave, flux, good = np.asarray(wave), np.asarray(flux), np.asarray(good, dtype=bool)
    _check_arrays(wave, flux, good)
    default_band, default_reference = band_windows(head, shading=shading, width=width, gap=gap)
    inside = _check_window(band_window or default_band, "band_window")
    outside = _check_window(reference_window or default_reference, "reference_window")
    band_flux, n_band = median_flux(wave, flux, good, inside)
    reference_flux, n_reference = median_flux(wave, flux, good, outside)
    if not reference_flux > 0:
        raise MeasurementError(
            f"the reference flux near the band head {head:.1f} Å is not positive "
            f"({reference_flux:.3g}); a depth is meaningless"
        )
    depth = 1.0 - band_flux / reference_flux
    error = None
    if ivar is not None:
        band_sigma = _median_sigma(wave, flux, good, ivar, inside, n_band)
        reference_sigma = _median_sigma(wave, flux, good, ivar, outside, n_reference)
        if band_sigma is not None and reference_sigma is not None:
            ratio = band_flux / reference_flux
            error = math.hypot(
                band_sigma / reference_flux, ratio * reference_sigma / reference_flux
            )
    return BandDepth(depth, error, band_flux, reference_flux, inside, outside)


def _median_sigma(
    wave: np.ndarray,
    flux: np.ndarray,
    good: np.ndarray,
    ivar: np.ndarray,
    window: Window,
    count: int,
) -> float | None:
    region = _span(wave, window)
    inverse = np.asarray(ivar, dtype=np.float64)[region]
    valid = _usable(flux[region], good[region]) & np.isfinite(inverse) & (inverse > 0)
    if not valid.any():
        return None
    pixel_sigma = float(np.median(1.0 / np.sqrt(inverse[valid])))
    return 1.2533 * pixel_sigma / math.sqrt(count)


# --- artifacts -------------------------------------------------------------------------------


def find_spikes(
    flux: np.ndarray,
    good: np.ndarray,
    ivar: np.ndarray | None,
    *,
    threshold: float = 6.0,
    max_width: int = 2,
    shoulder: float = 0.25,
) -> np.ndarray:
    """Boolean mask of cosmic-ray-like spikes.

    A candidate is a run of at most ``max_width`` good pixels standing ``threshold`` sigma
    above the running median of 7 pixels. It is a spike when, against a baseline taken from
    the pixels 3 to 6 places beyond the run, its peak excess is itself above ``threshold``
    sigma while the two pixels touching the run rise less than ``shoulder`` times that
    excess. The line-spread function spreads any real line, even an unresolved one, over its
    neighbours (at R~1800 they keep about half the peak), so lines are kept.

    Without ivar the noise is the robust scatter of the pixel-to-pixel differences.
    """
    flux, good = np.asarray(flux, dtype=np.float64), np.asarray(good, dtype=bool)
    if flux.shape != good.shape or flux.ndim != 1:
        raise MeasurementError(
            f"flux and good must be 1-D of one length: {flux.shape}, {good.shape}"
        )
    spikes = np.zeros(flux.size, dtype=bool)
    usable = _usable(flux, good)
    indices = np.flatnonzero(usable)
    if indices.size < 15:
        return spikes
    values = flux[indices]
    if ivar is not None:
        inverse = np.asarray(ivar, dtype=np.float64)[indices]
        with np.errstate(divide="ignore", invalid="ignore"):
            sigma = np.where(inverse > 0, 1.0 / np.sqrt(inverse), np.inf)
    else:
        sigma = np.full(values.size, 1.4826 * np.median(np.abs(np.diff(values))) / math.sqrt(2))
    high = values - _running_median(values, 7) > threshold * sigma
    position = 0
    while position < values.size:
        if not high[position]:
            position += 1
            continue
        end = position
        while end + 1 < values.size and high[end + 1]:
            end += 1
        if end - position + 1 <= max_width and _is_spike(
            values, sigma, position, end, threshold, shoulder
        ):
            spikes[indices[position : end + 1]] = True
        position = end + 1
    return spikes


def _is_spike(
    values: np.ndarray, sigma: np.ndarray, start: int, end: int, threshold: float, shoulder: float
) -> bool:
    outer = np.concatenate(
        [values[max(start - 6, 0) : max(start - 2, 0)], values[end + 3 : end + 7]]
    )
    if outer.size < 3 or start == 0 or end + 1 >= values.size:
        return False
    baseline = float(np.median(outer))
    peak = float(np.max(values[start : end + 1])) - baseline
    if peak <= threshold * float(np.max(sigma[start : end + 1])):
        return False
    shoulders = max(values[start - 1], values[end + 1]) - baseline
    return bool(shoulders < shoulder * peak)


def _running_median(values: np.ndarray, width: int) -> np.ndarray:
    half = width // 2
    padded = np.pad(values, half, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, width)
    return np.median(windows, axis=1)


def estimate_ivar(flux: np.ndarray, good: np.ndarray, *, width: int = 51) -> np.ndarray:
    """Inverse variance from the data when a file has none: the robust scatter of the
    pixel-to-pixel differences (1.4826 MAD / sqrt 2) over ``width`` good pixels around each
    pixel. Bad pixels get 0. Lines wider than a few pixels barely change the differences."""
    flux, good = np.asarray(flux, dtype=np.float64), np.asarray(good, dtype=bool)
    if flux.shape != good.shape or flux.ndim != 1:
        raise MeasurementError(
            f"flux and good must be 1-D of one length: {flux.shape}, {good.shape}"
        )
    ivar = np.zeros(flux.size)
    usable = _usable(flux, good)
    indices = np.flatnonzero(usable)
    if indices.size < 3:
        return ivar
    steps = np.abs(np.diff(flux[indices]))
    steps = np.append(steps, steps[-1])
    window = max(min(width, steps.size) | 1, 3)
    sigma = 1.4826 * _running_median(steps, window) / math.sqrt(2.0)
    positive = sigma > 0
    ivar[indices[positive]] = 1.0 / sigma[positive] ** 2
    return ivar
