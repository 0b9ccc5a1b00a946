"""Redshift by cross-correlation against templates (Tonry & Davis 1979, as RVSAO xcsao and MARZ).

The spectrum and every template are rebinned onto one grid uniform in log10(wavelength), where a
redshift is a shift: log10(lambda_obs) = log10(lambda_rest) + log10(1 + z). Each is continuum
subtracted (a running median), clipped, apodized (cosine bell at both ends) and scaled to unit
norm; the cross-correlation of the two is one FFT product, normalised by the template's energy
over the overlap at each shift (the template must cover at least MIN_OVERLAP of the spectrum). Its peaks inside the template's
redshift range are the candidates: the height h of a peak, the rms sigma_a of the correlation's
antisymmetric part about it, r = h / (sqrt(2) sigma_a), and the redshift error from the peak's
FWHM w (in pixels of the grid): sigma_pix = (3/8) w / (1 + r) (Tonry & Davis 1979, eq. 24).

Cost is bounded: the grid holds at most ``MAX_PIXELS`` pixels (a wider spectrum gets a coarser
step) and at most ``MAX_TEMPLATES`` templates are correlated; each template costs one real FFT
of the next power of two above spectrum + template length.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.ndimage import median_filter

C_KMS = 299792.458
LOG_STEP = 1e-4  # log10 Angstrom per pixel: SDSS's sampling, 69 km/s
MAX_PIXELS = 8192  # of the spectrum's log grid; a wider spectrum gets a coarser step
MAX_TEMPLATES = 32
MIN_GOOD_PIXELS = 50
CONTINUUM_WIDTH_KMS = 7000.0  # running-median width: removes the continuum, keeps the lines
CLIP_SIGMAS = 30.0  # MARZ's clipping of the continuum-subtracted flux (cosmic rays, sky)
APODIZE_FRACTION = 0.05  # of the grid at each end, tapered by a cosine bell
PEAKS_PER_TEMPLATE = 3
MIN_OVERLAP = 0.5  # of the spectrum's grid a template must cover at a redshift tried
DISTINCT_KMS = 1000.0  # two candidates of one template kind nearer than this are one
# The redshifts each kind of template is tried at (MARZ's ranges, rounded).
Z_RANGES = {
    "star": (-0.002, 0.002),  # |v| < 600 km/s: Galactic stars, not a galaxy at 1200 km/s
    "galaxy": (-0.005, 1.6),
    "qso": (0.0, 5.0),
}


@dataclass(frozen=True)
class Template:
    """A rest-frame template: vacuum Angstrom, flux in any unit (only its shape matters)."""

    name: str
    kind: str  # a Z_RANGES key
    wavelength: np.ndarray
    flux: np.ndarray

    @property
    def z_range(self) -> tuple[float, float]:
        return Z_RANGES.get(self.kind, Z_RANGES["galaxy"])


@dataclass(frozen=True)
class RedshiftCandidate:
    z: float
    z_err: float
    template: str
    kind: str
    r_value: float  # Tonry & Davis r: peak height over sqrt(2) x antisymmetric rms
    peak_height: float  # normalised correlation at the peak, at most 1
    peak_fwhm_kms: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "z": self.z,
            "z_err": self.z_err,
            "template": self.template,
            "kind": self.kind,
            "r_value": self.r_value,
            "peak_height": self.peak_height,
            "peak_fwhm_kms": self.peak_fwhm_kms,
        }


@dataclass(frozen=True)
class RedshiftFit:
    candidates: tuple[RedshiftCandidate, ...]  # best first (highest r)
    log_step: float
    n_pixels: int
    n_templates: int
    note: str = ""

    @property
    def best(self) -> RedshiftCandidate | None:
        return self.candidates[0] if self.candidates else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "candidates": [candidate.as_dict() for candidate in self.candidates],
            "log_step": self.log_step,
            "n_pixels": self.n_pixels,
            "n_templates": self.n_templates,
            "note": self.note,
        }


# --- preparing a spectrum on the log grid --------------------------------------------------------


def _rebin(wave: np.ndarray, flux: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Mean flux in each bin between log-grid edges (flux conserving): the integral of the
    piecewise-linear spectrum, differenced at the edges."""
    widths = np.diff(wave)
    integral = np.concatenate(([0.0], np.cumsum(0.5 * (flux[1:] + flux[:-1]) * widths)))
    at_edges = np.interp(edges, wave, integral)
    return np.diff(at_edges) / np.diff(edges)


def _taper(n: int) -> np.ndarray:
    window = np.ones(n)
    width = max(1, int(APODIZE_FRACTION * n))
    ramp = 0.5 * (1.0 - np.cos(np.pi * (np.arange(width) + 0.5) / width))
    window[:width] = ramp
    window[n - width :] = ramp[::-1]
    return window


def _prepare(
    wave: np.ndarray, flux: np.ndarray, good: np.ndarray, start: float, step: float, n: int
) -> tuple[np.ndarray, np.ndarray]:
    """Continuum-subtracted, clipped, apodized, unit-norm flux on the grid start + i * step
    (log10 Angstrom), pixels without good data zero; and each pixel's weight (the taper where
    there is data, 0 where there is none)."""
    centres = start + step * np.arange(n)
    edges = 10.0 ** np.concatenate(([centres[0] - step / 2], centres + step / 2))
    rebinned = _rebin(wave[good], flux[good], edges)
    # A grid pixel is usable when its whole bin lies where good pixels are (gaps stay gaps).
    coverage = _rebin(wave, good.astype(float), edges)
    inside = (edges[:-1] >= wave[good][0]) & (edges[1:] <= wave[good][-1])
    usable = inside & (coverage > 0.999)
    if usable.sum() < MIN_GOOD_PIXELS:
        return np.zeros(n), np.zeros(n)
    filled = np.interp(np.arange(n), np.flatnonzero(usable), rebinned[usable])
    width = max(3, int(round(CONTINUUM_WIDTH_KMS / (C_KMS * math.log(10.0) * step))) | 1)
    residual = filled - median_filter(filled, size=width, mode="nearest")
    residual[~usable] = 0.0
    sigma = 1.4826 * float(np.median(np.abs(residual[usable])))
    if sigma > 0:
        residual = np.clip(residual, -CLIP_SIGMAS * sigma, CLIP_SIGMAS * sigma)
    weight = _taper(n) * usable
    residual *= weight
    norm = float(np.sqrt(np.sum(residual**2)))
    return (residual / norm if norm > 0 else residual), weight


def _good_pixels(
    wave: np.ndarray, flux: np.ndarray, ivar: np.ndarray | None, mask: np.ndarray | None
) -> np.ndarray:
    good = np.isfinite(wave) & np.isfinite(flux) & (wave > 0)
    if ivar is not None:
        good &= np.isfinite(ivar) & (ivar > 0)
    if mask is not None:
        good &= ~np.asarray(mask, dtype=bool)
    return good


# --- the correlation peaks ----------------------------------------------------------------------


def _peak_fwhm(corr: np.ndarray, index: int, height: float, lo: int, hi: int) -> float:
    """Full width at half the peak's height, in pixels (linear interpolation on each side)."""
    half = height / 2.0
    sides = []
    for direction, stop in ((-1, lo), (1, hi)):
        k = index
        while k + direction >= stop and k + direction <= hi and corr[k + direction] > half:
            k += direction
        nxt = k + direction
        if nxt < lo or nxt > hi:
            sides.append(float(abs(k - index)) + 0.5)
            continue
        above, below = corr[k], corr[nxt]
        fraction = (above - half) / (above - below) if above != below else 0.5
        sides.append(abs(k - index) + fraction)
    return max(sides[0] + sides[1], 1.0)


def _antisymmetric_rms(corr: np.ndarray, index: int, lo: int, hi: int) -> float:
    reach = min(index - lo, hi - index)
    if reach < 2:
        return float("nan")
    m = np.arange(1, reach + 1)
    antisymmetric = 0.5 * (corr[index + m] - corr[index - m])
    return float(np.sqrt(np.mean(antisymmetric**2)))


def _template_peaks(
    spec: np.ndarray,
    spec_weight: np.ndarray,
    spec_start: float,
    template: Template,
    step: float,
    z_range: tuple[float, float],
) -> list[RedshiftCandidate]:
    wave = np.asarray(template.wavelength, dtype=float)
    flux = np.asarray(template.flux, dtype=float)
    good = _good_pixels(wave, flux, None, None)
    if good.sum() < MIN_GOOD_PIXELS:
        return []
    t_start = math.log10(wave[good][0]) + step
    t_n = int((math.log10(wave[good][-1]) - step - t_start) / step) + 1
    if t_n < MIN_GOOD_PIXELS:
        return []
    tmpl, _ = _prepare(wave, flux, good, t_start, step, t_n)
    n_fft = 1 << int(math.ceil(math.log2(spec.size + t_n)))
    # corr[k] = sum_j tmpl[j] * spec[j + k]; k < 0 wraps to the end of the FFT's array.
    wrapped = np.fft.irfft(np.fft.rfft(spec, n_fft) * np.conj(np.fft.rfft(tmpl, n_fft)), n_fft)
    lags = np.arange(-(t_n - 1), spec.size)
    corr = wrapped[lags % n_fft]
    # Normalised over the overlap (the template's energy where it meets the spectrum): a strong
    # line outside the spectrum no longer outweighs the lines inside it (a quasar's Lyman alpha
    # taken for Mg II). Lags where the template covers under MIN_OVERLAP of the spectrum are out.
    support = np.fft.irfft(
        np.fft.rfft(spec_weight**2, n_fft) * np.conj(np.fft.rfft(tmpl**2, n_fft)), n_fft
    )[lags % n_fft]
    covered = np.minimum(spec.size, t_n + lags) - np.maximum(0, lags)
    usable = (covered >= MIN_OVERLAP * spec.size) & (support > 1e-6)
    corr = np.where(usable, corr / np.sqrt(np.where(usable, support, 1.0)), 0.0)
    # log10(1 + z) = spec_start - t_start + k * step
    log_lo = math.log10(1.0 + z_range[0]) - (spec_start - t_start)
    log_hi = math.log10(1.0 + z_range[1]) - (spec_start - t_start)
    lo = max(int(math.ceil(log_lo / step)) - lags[0], 1)
    hi = min(int(math.floor(log_hi / step)) - lags[0], lags.size - 2)
    if hi <= lo:
        return []
    window = corr[lo : hi + 1]
    local = np.flatnonzero(
        (window[1:-1] > window[:-2]) & (window[1:-1] >= window[2:]) & (window[1:-1] > 0)
    ) + (lo + 1)
    if local.size == 0:
        return []
    top = local[np.argsort(corr[local])[::-1][:PEAKS_PER_TEMPLATE]]
    found = []
    for index in top.tolist():
        left, centre, right = corr[index - 1], corr[index], corr[index + 1]
        curvature = left - 2.0 * centre + right
        offset = 0.5 * (left - right) / curvature if curvature < 0 else 0.0
        height = float(centre - 0.25 * (left - right) * offset)
        sigma_a = _antisymmetric_rms(corr, index, 0, corr.size - 1)
        if not (sigma_a > 0):
            continue
        r_value = height / (math.sqrt(2.0) * sigma_a)
        fwhm = _peak_fwhm(corr, index, height, 0, corr.size - 1)
        log_shift = spec_start - t_start + (lags[index] + offset) * step
        z = 10.0**log_shift - 1.0
        pixel_error = 3.0 / 8.0 * fwhm / (1.0 + max(r_value, 0.0))
        z_err = (1.0 + z) * math.log(10.0) * step * pixel_error
        found.append(
            RedshiftCandidate(
                z=z,
                z_err=z_err,
                template=template.name,
                kind=template.kind,
                r_value=r_value,
                peak_height=height,
                peak_fwhm_kms=fwhm * step * math.log(10.0) * C_KMS,
            )
        )
    return found


def _distinct(candidates: list[RedshiftCandidate], n_best: int) -> tuple[RedshiftCandidate, ...]:
    kept: list[RedshiftCandidate] = []
    for candidate in sorted(candidates, key=lambda c: c.r_value, reverse=True):
        same = any(
            other.kind == candidate.kind
            and abs(other.z - candidate.z) / (1.0 + other.z) * C_KMS < DISTINCT_KMS
            for other in kept
        )
        if not same:
            kept.append(candidate)
        if len(kept) == n_best:
            break
    return tuple(kept)


def cross_correlate(
    wavelength: np.ndarray,
    flux: np.ndarray,
    *,
    templates: Sequence[Template],
    ivar: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    n_best: int = 5,
    z_range: tuple[float, float] | None = None,
) -> RedshiftFit:
    """The best ``n_best`` redshifts of an observed-frame spectrum (vacuum Angstrom) against
    ``templates`` (rest frame), highest Tonry & Davis r first; one per template kind and
    redshift (nearer than DISTINCT_KMS is the same). ``z_range`` narrows every template's own.

    Only the first MAX_TEMPLATES templates are used; the note says when some were left out.
    """
    wave = np.asarray(wavelength, dtype=float)
    values = np.asarray(flux, dtype=float)
    good = _good_pixels(wave, values, ivar, mask)
    notes = []
    if len(templates) > MAX_TEMPLATES:
        notes.append(f"{len(templates) - MAX_TEMPLATES} templates past {MAX_TEMPLATES} not tried")
    used = list(templates)[:MAX_TEMPLATES]
    if good.sum() < MIN_GOOD_PIXELS:
        note = f"fewer than {MIN_GOOD_PIXELS} good pixels"
        return RedshiftFit((), LOG_STEP, 0, len(used), "; ".join([note, *notes]))
    log_lo, log_hi = math.log10(wave[good][0]), math.log10(wave[good][-1])
    step = max(LOG_STEP, (log_hi - log_lo) / MAX_PIXELS)
    start = log_lo + step  # bins fully inside the spectrum
    n = int((log_hi - step - start) / step) + 1
    spec, weight = _prepare(wave, values, good, start, step, n)
    candidates: list[RedshiftCandidate] = []
    for template in used:
        low, high = template.z_range
        if z_range is not None:
            low, high = max(low, z_range[0]), min(high, z_range[1])
        if high > low:
            candidates += _template_peaks(spec, weight, start, template, step, (low, high))
    return RedshiftFit(_distinct(candidates, n_best), step, n, len(used), "; ".join(notes))


def template_scaled_to(
    template: Template,
    z: float,
    wavelength: np.ndarray,
    flux: np.ndarray,
    ivar: np.ndarray | None = None,
) -> float:
    """The factor that best matches the template redshifted to ``z`` to the observed flux
    (weighted least squares over the pixels both cover); 0 when they share none."""
    wave = np.asarray(wavelength, dtype=float)
    observed = np.asarray(flux, dtype=float)
    rest = wave / (1.0 + z)
    t_wave = np.asarray(template.wavelength, dtype=float)
    model = np.interp(rest, t_wave, np.asarray(template.flux, dtype=float))
    weight = np.ones_like(observed) if ivar is None else np.asarray(ivar, dtype=float)
    use = (
        (rest >= t_wave[0])
        & (rest <= t_wave[-1])
        & np.isfinite(observed)
        & np.isfinite(model)
        & np.isfinite(weight)
        & (weight > 0)
    )
    denominator = float(np.sum(weight[use] * model[use] ** 2))
    if not use.any() or denominator <= 0:
        return 0.0
    return float(np.sum(weight[use] * model[use] * observed[use]) / denominator)
