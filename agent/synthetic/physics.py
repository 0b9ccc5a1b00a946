"""Spectrum primitives: the instrument, line and band profiles, feature and emission sums."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.synthetic.lines import (
    _FWHM_TO_SIGMA,
    _GAUSS_AREA,
    C_KMS,
    N_PIXELS,
    PIXEL_KMS,
    RESOLUTION,
    WAVELENGTH,
)


def _span(low: float, high: float) -> slice:
    start, stop = np.searchsorted(WAVELENGTH, (low, high))
    return slice(int(start), int(stop))


@dataclass(frozen=True)
class _Instrument:
    resolving_power: float
    fwhm_kms: float
    kernel: np.ndarray  # the Gaussian line-spread function in pixels (constant R, log grid)


def _instrument(resolving_power: float) -> _Instrument:
    fwhm_kms = C_KMS / resolving_power
    sigma = fwhm_kms * _FWHM_TO_SIGMA / PIXEL_KMS
    offsets = np.arange(-int(math.ceil(4 * sigma)), int(math.ceil(4 * sigma)) + 1)
    kernel = np.exp(-0.5 * (offsets / sigma) ** 2)
    return _Instrument(resolving_power, fwhm_kms, kernel / kernel.sum())


# The object builders deep inside a draw need the spectrum's instrument; a context variable keeps
# it out of every signature (and is safe across threads).
_NOMINAL_INSTRUMENT = _instrument(RESOLUTION)
_CURRENT_INSTRUMENT: ContextVar[_Instrument] = ContextVar("specvi_mini_instrument")


def _current_instrument() -> _Instrument:
    return _CURRENT_INSTRUMENT.get(_NOMINAL_INSTRUMENT)


@contextmanager
def _observed_with(instrument: _Instrument) -> Iterator[None]:
    token = _CURRENT_INSTRUMENT.set(instrument)
    try:
        yield
    finally:
        _CURRENT_INSTRUMENT.reset(token)


def _profile(centre: float, fwhm_kms: float, lorentz: float) -> tuple[slice, np.ndarray, float]:
    """Unit-peak pseudo-Voigt on the grid (instrumental width added) and its area in A."""
    width = centre * math.hypot(fwhm_kms, _current_instrument().fwhm_kms) / C_KMS
    reach = width * (3.0 + 40.0 * lorentz)
    window = _span(centre - reach, centre + reach)
    x2 = ((WAVELENGTH[window] - centre) / width) ** 2
    shape = (1.0 - lorentz) * np.exp(-4.0 * math.log(2.0) * x2)
    if lorentz > 0.0:
        shape += lorentz / (1.0 + 4.0 * x2)
    area = width * ((1.0 - lorentz) * _GAUSS_AREA + lorentz * math.pi / 2.0)
    return window, shape, area


def _convolve_lsf(values: np.ndarray) -> np.ndarray:
    kernel = _current_instrument().kernel
    half = kernel.size // 2
    return np.convolve(np.pad(values, half, mode="edge"), kernel, mode="valid")


def _band_profile(head: float, length: float, *, redward: bool) -> tuple[slice, np.ndarray]:
    """Saw-tooth band: full strength at the head, e-folding over ``length`` A away from it."""
    if redward:
        window = _span(head, head + 6.0 * length)
        return window, np.exp(-(WAVELENGTH[window] - head) / length)
    window = _span(head - 6.0 * length, head)
    return window, np.exp(-(head - WAVELENGTH[window]) / length)


class _Features:
    """Absorption features of one light source on the survey grid (rest lines shifted)."""

    def __init__(self, shift: float = 1.0) -> None:
        self.shift = shift
        self.band_tau = np.zeros(N_PIXELS)
        self.transmission = np.ones(N_PIXELS)

    def band(
        self, head: float, tau: float, length: float, *, redward: bool, end: float = math.inf
    ) -> None:
        """Add one band; ``end`` tapers off a band system that stops before it has faded."""
        if tau <= 0.0:
            return
        window, shape = _band_profile(head * self.shift, length * self.shift, redward=redward)
        if math.isfinite(end):
            distance = (WAVELENGTH[window] - end * self.shift) * (1.0 if redward else -1.0)
            shape = shape / (1.0 + np.exp(np.clip(distance / 12.0, -50.0, 50.0)))
        self.band_tau[window] += tau * shape

    def bands(self, table: Sequence[tuple[float, ...]], tau: float, **kw: Any) -> None:
        stretch = kw.get("stretch", 1.0)
        for head, relative, length, *end in table:
            self.band(
                head,
                tau * relative,
                length * stretch,
                redward=kw["redward"],
                end=end[0] if end else math.inf,
            )

    def line(self, centre: float, depth: float, fwhm_kms: float, lorentz: float = 0.0) -> None:
        if depth <= 0.0:
            return
        window, shape, _ = _profile(centre * self.shift, fwhm_kms, lorentz)
        self.transmission[window] *= 1.0 - min(depth, 0.97) * shape

    def render(self, continuum: np.ndarray) -> np.ndarray:
        return _convolve_lsf(continuum * np.exp(-self.band_tau)) * self.transmission


class _Emission:
    """Emission lines as a fraction of the local flux, so ``ew`` is the equivalent width in A."""

    def __init__(self, shift: float = 1.0) -> None:
        self.shift = shift
        self.relative = np.zeros(N_PIXELS)

    def line(
        self,
        centre: float,
        ew: float,
        fwhm_kms: float,
        *,
        separation_kms: float = 0.0,
        lorentz: float = 0.0,
    ) -> None:
        if ew <= 0.0:
            return
        peaks = (-0.5, 0.5) if separation_kms > 0.0 else (0.0,)
        for side in peaks:
            position = centre * self.shift * (1.0 + side * separation_kms / C_KMS)
            window, shape, area = _profile(position, fwhm_kms, lorentz)
            self.relative[window] += (ew / len(peaks)) * shape / area

    def apply(self, flux: np.ndarray) -> np.ndarray:
        return flux * (1.0 + self.relative)


def _planck(teff: float) -> np.ndarray:
    """Planck F_lambda normalised to 1 at 5500 A."""
    x = 1.4387769e8 / (WAVELENGTH * teff)
    reference = 5500.0**-5 / math.expm1(1.4387769e8 / (5500.0 * teff))
    return WAVELENGTH**-5 / np.expm1(x) / reference


def _power_law(alpha: float) -> np.ndarray:
    return (WAVELENGTH / 5500.0) ** -alpha


def _at(values: np.ndarray, wavelength: float) -> float:
    index = int(np.searchsorted(WAVELENGTH, wavelength))
    return float(np.median(values[max(index - 5, 0) : index + 6]))


def _doppler(velocity_kms: float) -> float:
    return 1.0 + velocity_kms / C_KMS


def _stellar_velocity(rng: np.random.Generator) -> float:
    """Disc stars scatter by ~40 km/s; about one in seven moves like a halo star."""
    spread = 150.0 if rng.random() < 0.15 else 40.0
    return float(np.clip(rng.normal(0.0, spread), -450.0, 450.0))


def _log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(10.0 ** rng.uniform(math.log10(low), math.log10(high)))


def _ramp(value: float, start: float, span: float) -> float:
    """0 above ``start``, rising linearly to 1 at ``start - span`` (cooler is stronger)."""
    return float(np.clip((start - value) / span, 0.0, 1.0))
