"""The observation: survey-like throughput, reddening, tellurics, sky, noise and bad pixels."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.synthetic.lines import (
    _SNR_WINDOW,
    CA_K,
    DIBS,
    N_PIXELS,
    NA_D,
    SKY_LINES,
    SNR_RANGE,
    WAVELENGTH,
)
from agent.synthetic.physics import (
    _band_profile,
    _convolve_lsf,
    _Features,
    _log_uniform,
    _profile,
    _span,
)


def _unit_band_tau(head: float, length: float, stop: float) -> np.ndarray:
    tau = np.zeros(N_PIXELS)
    window, shape = _band_profile(head, length, redward=True)
    tau[window] = shape * (WAVELENGTH[window] < stop)
    return tau


def _smooth_box(low: float, high: float, edge: float) -> np.ndarray:
    rise = 1.0 / (1.0 + np.exp(-(WAVELENGTH - low) / edge))
    fall = 1.0 / (1.0 + np.exp((WAVELENGTH - high) / edge))
    return rise * fall


_TELLURIC_A = _unit_band_tau(7594.0, 14.0, 7630.0)
_TELLURIC_B = _unit_band_tau(6868.0, 18.0, 6925.0)
_TELLURIC_WATER = (
    0.4 * _smooth_box(7160.0, 7340.0, 15.0)
    + 0.6 * _smooth_box(8120.0, 8350.0, 20.0)
    + 1.0 * _smooth_box(8950.0, 9300.0, 20.0)
)
# OH Meinel band groups in the red (vacuum A range, typical peak relative to the sky continuum);
# the lines inside a group sit at fixed but approximate positions.
_OH_GROUPS = (
    (6830.0, 6980.0, 1.0),
    (7230.0, 7420.0, 2.0),
    (7710.0, 8010.0, 2.5),
    (8280.0, 8550.0, 3.5),
    (8760.0, 9060.0, 4.0),
)


def _oh_forest() -> tuple[tuple[float, float], ...]:
    draw = np.random.default_rng(20270)
    lines = []
    for low, high, peak in _OH_GROUPS:
        for centre in np.sort(draw.uniform(low, high, 12)):
            lines.append((round(float(centre), 1), round(peak * float(draw.uniform(0.2, 1.0)), 2)))
    return tuple(lines)


SKY_EMISSION = SKY_LINES + _oh_forest()
_SNR_PIXELS = _span(*_SNR_WINDOW)
_READ_NOISE_VARIANCE = 20.0  # counts^2 per pixel
# The blue end: throughput falls as a logistic of this width (A) around a per-spectrum edge,
# fitted by eye to the S/N profiles of the two real LAMOST files (see the module docstring).
BLUE_EDGE_RANGE = (4250.0, 4550.0)
_BLUE_EDGE_WIDTH = 200.0


def _throughput(dichroic: float, dip_depth: float, blue_edge: float) -> np.ndarray:
    blue = 0.3 * np.exp(-(((WAVELENGTH - 5000.0) / 1100.0) ** 4))
    blue = blue / (1.0 + np.exp(-(WAVELENGTH - blue_edge) / _BLUE_EDGE_WIDTH))
    red = 0.85 * np.exp(-(((WAVELENGTH - 7300.0) / 1700.0) ** 4))
    red_share = 1.0 / (1.0 + np.exp(-(WAVELENGTH - dichroic) / 40.0))
    dip = 1.0 - dip_depth * np.exp(-0.5 * ((WAVELENGTH - dichroic) / 70.0) ** 2)
    return (blue * (1.0 - red_share) + red * red_share) * dip


@dataclass(frozen=True)
class _Observation:
    flux: np.ndarray
    ivar: np.ndarray
    mask: np.ndarray
    snr: float
    conditions: dict[str, Any]


def _interstellar(rng: np.random.Generator, ebv: float) -> np.ndarray:
    features = _Features()
    strength = ebv / 0.3
    features.line(CA_K, 0.25 * strength * rng.uniform(0.5, 1.5), 30.0)
    for centre in NA_D:
        features.line(centre, 0.3 * strength * rng.uniform(0.5, 1.5), 30.0)
    for centre, depth, width in DIBS:
        features.line(centre, 0.06 * depth * strength, width)
    extinction = 3.1 * (WAVELENGTH / 5500.0) ** -1.3
    return features.transmission * 10.0 ** (-0.4 * ebv * extinction)


def _observe(intrinsic: np.ndarray, rng: np.random.Generator, snr: float | None) -> _Observation:
    ebv = 0.3 * rng.random() ** 2
    scaled = (WAVELENGTH - 6400.0) / 2700.0
    tilt, curvature = rng.normal(0.0, 0.12), rng.normal(0.0, 0.06)
    warp = np.exp(tilt * scaled + curvature * scaled**2)
    telluric = np.exp(
        -_convolve_lsf(rng.uniform(0.15, 0.6) * _TELLURIC_A + rng.uniform(0.05, 0.3) * _TELLURIC_B)
        - rng.uniform(0.0, 0.12) * _TELLURIC_WATER
    )
    dichroic = rng.uniform(5720.0, 5880.0)
    step = np.where(dichroic < WAVELENGTH, 1.0 + rng.normal(0.0, 0.04), 1.0)
    # the two arms' calibrations meet badly: a bump or dip that is not in the star
    junction = 1.0 + rng.normal(0.0, 0.06) * np.exp(
        -0.5 * ((WAVELENGTH - dichroic) / rng.uniform(40.0, 120.0)) ** 2
    )
    source = intrinsic * _interstellar(rng, ebv) * warp * telluric * step * junction

    target = snr if snr is not None else _log_uniform(rng, *SNR_RANGE)
    blue_edge = rng.uniform(*BLUE_EDGE_RANGE)
    throughput = _throughput(dichroic, rng.uniform(0.35, 0.7), blue_edge)
    signal = source * throughput
    sky_ratio = _log_uniform(rng, 0.05, 1.0)
    reference = float(np.median(signal[_SNR_PIXELS]))
    s2 = target**2 * (1.0 + sky_ratio)
    counts_ref = 0.5 * (s2 + math.sqrt(s2**2 + 4.0 * target**2 * _READ_NOISE_VARIANCE))
    counts = signal * (counts_ref / reference)
    sky = sky_ratio * counts_ref * throughput / float(np.median(throughput[_SNR_PIXELS]))
    sky *= 0.7 + 0.3 * WAVELENGTH / 6500.0
    sky_lines, residual = np.zeros(N_PIXELS), np.zeros(N_PIXELS)
    # sky subtraction leaves a scale error common to all lines and a wavelength offset between
    # the sky model and the object (P-Cygni-like wiggles)
    scale_error, offset = rng.normal(0.0, 0.05), rng.normal(0.0, 0.1)
    for centre, strength in SKY_EMISSION:
        window, shape, _ = _profile(centre, 0.0, 0.0)
        line = sky[window] * strength * rng.uniform(0.5, 2.0) * shape
        sky_lines[window] += line
        slope = np.gradient(line, WAVELENGTH[window]) if line.size > 1 else 0.0 * line
        residual[window] += (scale_error + rng.normal(0.0, 0.03)) * line - offset * slope
    variance = np.maximum(counts, 0.0) + sky + sky_lines + _READ_NOISE_VARIANCE
    observed = counts + residual + np.sqrt(variance) * rng.standard_normal(N_PIXELS)
    cosmics = int(rng.poisson(2.0))
    for start in rng.integers(0, N_PIXELS - 2, cosmics):
        hit = slice(int(start), int(start) + int(rng.integers(1, 3)))
        observed[hit] += rng.uniform(5.0, 50.0) * math.sqrt(counts_ref + sky_ratio * counts_ref)

    calibration = (counts_ref / reference) * throughput
    level = _log_uniform(rng, 30.0, 3000.0) / float(np.median(source[_SNR_PIXELS]))
    flux = observed / calibration * level
    ivar = (calibration / level) ** 2 / variance
    mask = _bad_pixels(rng)
    flux[mask], ivar[mask] = 0.0, 0.0
    flux, ivar = (
        flux.astype(np.float32).astype(np.float64),
        ivar.astype(np.float32).astype(np.float64),
    )
    good = ~mask[_SNR_PIXELS]
    measured = float(np.median((flux * np.sqrt(ivar))[_SNR_PIXELS][good])) if good.any() else 0.0
    conditions = {
        "snr_target": target,
        "ebv": ebv,
        "dichroic": dichroic,
        "blue_edge": blue_edge,
        "calibration_tilt": tilt,
        "sky_scale_error": scale_error,
        "sky_offset": offset,
        "cosmic_rays": cosmics,
    }
    return _Observation(flux, ivar, mask, measured, conditions)


def _bad_pixels(rng: np.random.Generator) -> np.ndarray:
    mask = np.zeros(N_PIXELS, dtype=bool)
    mask[N_PIXELS - int(rng.integers(1, 9)) :] = True  # the red end is often unusable
    if rng.random() < 0.3:
        mask[: int(rng.integers(1, 41))] = True
    for _ in range(int(rng.poisson(1.0))):
        start = int(rng.integers(0, N_PIXELS - 6))
        mask[start : start + int(rng.integers(1, 7))] = True
    if rng.random() < 0.03:  # a dead CCD region
        start = int(rng.integers(0, N_PIXELS - 200))
        mask[start : start + int(rng.integers(50, 201))] = True
    return mask
