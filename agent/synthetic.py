"""SpecVI-mini: a physically motivated SYNTHETIC benchmark for the inspection tasks.

No reachable package ships real optical spectra of the rare classes (data_formats.md section 2),
so the demo and the benchmark use spectra built here. Every product says it is synthetic: the
spectra (``survey="SpecVI-mini"``, ``meta["synthetic"]``), the FITS headers (TELESCOP, SYNTHET),
the manifest (``"synthetic": true``) and the parquet ``data_source``. The rendered images do not:
the tool draws a synthetic spectrum exactly as it would draw the same arrays from a survey file.

How a spectrum is made:

- **Grid and instrument**: the LAMOST low-resolution grid (log10 step 1e-4 from 3699.99 A, 3908
  pixels to 9097 A, vacuum). Each spectrum draws its own resolving power, log-uniform in
  RESOLUTION_RANGE (LAMOST and SDSS spectra span about R 1200-2500), applied as a Gaussian
  line-spread function in log-lambda and recorded in the spectrum's ``resolution``
  (``RESOLVPW`` in the FITS header) and in the manifest.
- **Source**: a Planck continuum (plus power laws for quasars and discs), molecular bands as
  saw-tooth optical depths (TiO/VO/ZrO/CaH sharp at the head and recovering to the red; C2 Swan
  and CN sharp on the red side and fading to the blue), atomic lines as pseudo-Voigt profiles with
  widths in km/s (instrumental width added in quadrature), double-peaked disc emission for CVs,
  pressure-broadened merging Balmer series for DA white dwarfs, redshifted lines for quasars;
  radial velocities of tens of km/s with a halo-like tail to a few hundred.
- **Observation** (what the two real LAMOST files in ``shared/data/lamost`` show): reddening and
  interstellar lines; a flux-calibration tilt; telluric O2 A/B and water bands; a two-arm
  throughput whose blue end falls off below ~4500 A (the real files have S/N(3750-3900 A) /
  S/N(6000-7000 A) = 0.020 for the G7 star and 0.076 for the A2 star, 0.14 and 0.35 at 4000-4500
  A; FGK and A stars drawn here get medians of about 0.03 and 0.05, 0.24 and 0.35), with the
  dichroic junction near 5700-5900 A (a throughput dip, a flux step and a calibration bump);
  Poisson + sky + read noise for a red S/N drawn log-uniform in 5-80; imperfectly subtracted sky
  lines (5577, 5890/5896, 6300/6363 A, OH bands redward of 6800 A: scale and wavelength errors
  leave residuals and P-Cygni-like wiggles); cosmic-ray spikes and masked bad pixels (ivar = 0).
- **Hard negatives** (the paper's rejection sampling): for each task a weak classifier (nearest
  class means of coarse continuum-normalised flux, fitted on a fixed set of plain draws) scores
  each candidate negative; a negative is kept only when that classifier calls it positive (its
  score reaches the score of the 25th-percentile positive), trying up to HARD_NEGATIVE_TRIES draws
  and keeping the most positive-looking one if none passes. The classes therefore overlap on the
  obvious feature and are not separable by one threshold on it.

What the generator drew (the ``subtype`` and ``params``) goes to the manifest for analysis only;
it never reaches a spectrum's ``meta`` or a FITS header, so policies cannot see it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import warnings
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from agent.resolution import Resolution
from agent.spectra import Spectrum, air_to_vacuum
from agent.tasks import SPECVI_BENCH_CODES, build_prompt, get_task

GENERATOR_VERSION = "specvi-mini-2.0"
SURVEY = "SpecVI-mini"
DATA_SOURCE = "specvi-mini"
MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 2
BENCH_TASKS = ("CV", "CS", "SS", "MG", "WD")
CROSS_TASKS = ("O", "B", "A")
SPLITS = ("train", "test")

LOG10_START = 3.5682  # LAMOST COEFF0: pixel 0 at 3699.99 A
LOG10_STEP = 1e-4  # LAMOST COEFF1
N_PIXELS = 3908
RESOLUTION = 1800.0  # LAMOST LRS nominal; each spectrum draws its own in RESOLUTION_RANGE
RESOLUTION_RANGE = (1200.0, 2500.0)
C_KMS = 299_792.458
INSTRUMENT_FWHM_KMS = C_KMS / RESOLUTION
PIXEL_KMS = C_KMS * LOG10_STEP * math.log(10.0)
SNR_RANGE = (5.0, 80.0)
HARD_NEGATIVE_TRIES = 12

WAVELENGTH = 10.0 ** (LOG10_START + LOG10_STEP * np.arange(N_PIXELS))
WAVELENGTH.setflags(write=False)

_FWHM_TO_SIGMA = 1.0 / (2.0 * math.sqrt(2.0 * math.log(2.0)))
_GAUSS_AREA = 0.5 * math.sqrt(math.pi / math.log(2.0))  # area of a unit-peak Gaussian per FWHM
_SNR_WINDOW = (6000.0, 7000.0)  # where a spectrum's S/N is defined (LAMOST r band)


def _vac(*air: float) -> tuple[float, ...]:
    return tuple(float(air_to_vacuum(value)) for value in air)


def _balmer(n: int) -> float:
    """Vacuum wavelength of the Balmer line from level n, scaled to H-alpha = 6564.61 A."""
    return 6564.61 * (5.0 / 36.0) / (0.25 - 1.0 / n**2)


# --- line and band lists (vacuum Angstrom; air laboratory values converted) ---------------------

BALMER_N = tuple(range(3, 17))
HE_I = tuple(
    zip(
        _vac(3819.61, 4026.19, 4387.93, 4471.48, 4713.15, 4921.93, 5015.68, 5875.62, 6678.15),
        (0.5, 1.0, 0.6, 1.0, 0.35, 0.6, 0.4, 0.8, 0.6),
        strict=True,
    )
)
HE_I_7065 = _vac(7065.19)[0]
HE_II = tuple(zip(_vac(4199.83, 4541.59, 4685.70, 5411.52), (0.7, 1.0, 1.2, 1.0), strict=True))
HE_II_4686 = HE_II[2][0]
BOWEN = _vac(4634.14, 4640.64, 4647.42, 4650.25)
CA_K, CA_H = _vac(3933.66, 3968.47)
CA_I = _vac(4226.73)[0]
G_BAND = _vac(4304.0)[0]
MG_B = _vac(5167.32, 5172.68, 5183.60)
MG_II = _vac(4481.23)[0]
SI_III = _vac(4552.62)[0]
SI_IV = _vac(4088.86, 4116.10)
NA_D = _vac(5889.95, 5895.92)
NA_I_8190 = _vac(8183.26, 8194.82)
K_I = _vac(7664.90, 7698.96)
CA_TRIPLET = tuple(zip(_vac(8498.02, 8542.09, 8662.14), (0.55, 1.0, 0.8), strict=True))
O_I_7774 = _vac(7773.4)[0]
O_I_8446 = _vac(8446.4)[0]
FE_II = _vac(4923.92, 5018.44, 5169.03)
BA_II, SR_II = _vac(4554.03, 4077.71)
DIBS = tuple(
    zip(_vac(4428.2, 5780.5, 6283.8), (1.0, 0.5, 0.6), (1300.0, 110.0, 200.0), strict=True)
)
NEBULAR = {
    "[Ne III] 3869": _vac(3868.76)[0],
    "[O III] 4960": _vac(4958.91)[0],
    "[O III] 5008": _vac(5006.84)[0],
    "[N II] 6550": _vac(6548.05)[0],
    "[N II] 6585": _vac(6583.45)[0],
    "[S II] 6718": _vac(6716.44)[0],
    "[S II] 6733": _vac(6730.82)[0],
    "[Ar III] 7138": _vac(7135.79)[0],
    "[O I] 6302": _vac(6300.30)[0],
}

# (head, relative optical depth, e-folding length in A). Heads are approximate to a few A.
TIO_BANDS = tuple(
    zip(
        _vac(4762, 4954, 5167, 5448, 5847, 6159, 6651, 7054, 7589, 8432),
        (0.45, 0.55, 0.7, 0.8, 0.6, 0.9, 0.85, 1.0, 0.8, 0.5),
        (55, 65, 80, 100, 120, 150, 140, 180, 150, 160),
        strict=True,
    )
)
VO_BANDS = tuple(zip(_vac(7334, 7851, 7865), (1.0, 0.9, 0.9), (90, 70, 90), strict=True))
# CaH: the 6382 head and the 6750-7000 A trough (ends before the 7042-7046 pseudo-continuum).
CAH_BANDS = ((_vac(6382)[0], 0.6, 45.0, math.inf), (_vac(6750)[0], 1.0, 400.0, 7005.0))
ZRO_BANDS = tuple(
    zip(
        _vac(4619.8, 4626.1, 4640.6, 5551.7, 5718.1, 6229.0, 6345.0, 6474.0),
        (0.5, 0.5, 0.8, 0.7, 0.6, 0.6, 0.8, 1.0),
        (25, 25, 35, 50, 55, 60, 70, 85),
        strict=True,
    )
)
LAO_BANDS = tuple(zip(_vac(7403, 7910), (1.0, 0.8), (60, 60), strict=True))  # heads unverified
SWAN_BANDS = tuple(
    zip(
        _vac(4383, 4737, 5165, 5636, 6122),
        (0.5, 0.8, 1.0, 0.8, 0.5),
        (60, 90, 110, 120, 130),
        strict=True,
    )
)
CN_VIOLET_BANDS = tuple(zip(_vac(3883, 4216), (1.0, 0.8), (60, 60), strict=True))
CN_RED_BANDS = tuple(  # approximate heads of the red system; drawn blue-shaded like Swan
    zip(
        _vac(6925, 7088, 7259, 7875, 8067, 8320),
        (0.4, 0.8, 0.4, 0.9, 0.7, 0.5),
        (70, 90, 80, 100, 100, 100),
        strict=True,
    )
)

# Quasar lines: (rest vacuum A, equivalent width range A, broad?)
QUASAR_LINES = (
    (1215.67, (60.0, 150.0), True),
    (1240.14, (5.0, 15.0), True),
    (1397.61, (5.0, 12.0), True),
    (1549.06, (20.0, 60.0), True),
    (1908.73, (10.0, 30.0), True),
    (2799.12, (20.0, 60.0), True),
    (3728.48, (2.0, 8.0), False),
    (3869.85, (1.0, 3.0), False),
    (4102.89, (4.0, 10.0), True),
    (4341.68, (10.0, 30.0), True),
    (4862.68, (40.0, 120.0), True),
    (4960.30, (2.0, 12.0), False),
    (5008.24, (6.0, 36.0), False),
    (5877.25, (3.0, 10.0), True),
    (6564.61, (150.0, 400.0), True),
    (6585.27, (5.0, 30.0), False),
    (6718.29, (2.0, 8.0), False),
    (6732.67, (2.0, 8.0), False),
)
LYMAN_ALPHA = 1215.67

# Night-sky emission (vacuum A, peak relative to the sky continuum). OH positions approximate.
SKY_LINES = tuple(
    zip(
        _vac(
            5577.34, 6300.30, 6363.78, 5889.95, 5895.92, 4358.34, 5460.74, 5769.60, 5790.66,
            6863.96, 7316.28, 7340.89, 7369.25, 7794.11, 7821.50, 7913.71, 7993.33,
            8344.60, 8399.17, 8430.17, 8827.10, 8885.85, 8943.40, 8988.38,
        ),
        (
            8.0, 4.0, 1.5, 1.5, 1.2, 1.5, 2.0, 0.8, 0.8,
            1.5, 2.5, 2.5, 2.0, 3.0, 3.0, 3.5, 3.5,
            4.0, 4.0, 4.5, 5.0, 5.0, 5.0, 4.5,
        ),
        strict=True,
    )
)  # fmt: skip


# --- spectrum primitives -------------------------------------------------------------------------


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


# --- stellar photospheres ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Gravity:
    balmer_depth: float
    balmer_width: float
    balmer_n_max: int
    balmer_growth: float  # fractional width increase per Balmer order above H-beta
    pressure: float  # scales gravity-sensitive lines (Na I, Mg b, Ca I, CaH)
    ca_triplet: float


_GRAVITY = {
    "dwarf": _Gravity(1.0, 1.0, 15, 0.05, 1.0, 0.85),
    "giant": _Gravity(0.9, 0.55, 17, 0.03, 0.25, 1.3),
    "subdwarf": _Gravity(0.95, 1.35, 13, 0.1, 0.8, 0.6),
}
# A fixed forest of weak blended metal lines (vacuum A, relative strength) for cool photospheres.
_METAL_FOREST = tuple(
    zip(
        np.random.default_rng(20260).uniform(3900.0, 6900.0, 90).round(1).tolist(),
        np.random.default_rng(20261).uniform(0.2, 1.0, 90).round(2).tolist(),
        strict=True,
    )
)


def _balmer_series(
    features: _Features,
    depth: float,
    fwhm_kms: float,
    *,
    lorentz: float,
    n_max: int,
    growth: float,
) -> None:
    """H-alpha to H16; orders above ``n_max`` merge into the pseudo-continuum."""
    for n in BALMER_N:
        if n == 3:
            features.line(_balmer(3), 0.85 * depth, 0.7 * fwhm_kms, lorentz)
            continue
        fade = float(np.clip((n_max + 1 - n) / 3.0, 0.0, 1.0)) * 0.97 ** (n - 4)
        features.line(_balmer(n), depth * fade, fwhm_kms * (1.0 + growth * (n - 4)), lorentz)


def _photosphere(
    features: _Features,
    rng: np.random.Generator,
    teff: float,
    *,
    gravity: str,
    vsini: float,
    metals: float = 1.0,
) -> None:
    """Atomic lines of a normal star from O to M, strengths following temperature and gravity."""
    g = _GRAVITY[gravity]
    logt = math.log10(teff)
    rotation = 1.6 * vsini
    x = math.log10(teff / 9500.0)
    depth = 0.06 + 0.52 * math.exp(-((x / (0.25 if x < 0 else 0.42)) ** 2))
    width = 250.0 + 1000.0 * math.exp(-((x / (0.2 if x < 0 else 0.45)) ** 2))
    _balmer_series(
        features,
        depth * g.balmer_depth * rng.uniform(0.9, 1.1),
        math.hypot(width * g.balmer_width * rng.uniform(0.9, 1.1), rotation),
        lorentz=0.5 if 7000.0 < teff < 20000.0 else 0.3,
        n_max=g.balmer_n_max,
        growth=g.balmer_growth,
    )
    narrow = math.hypot(120.0, rotation)
    if teff > 10000.0:
        he_i = 0.13 * math.exp(-(((logt - 4.32) / (0.15 if logt < 4.32 else 0.25)) ** 2))
        for centre, strength in HE_I:
            features.line(centre, he_i * strength, math.hypot(250.0, rotation))
    if teff > 29000.0:
        he_ii = 0.15 * min((teff - 29000.0) / 11000.0, 1.0)
        for centre, strength in HE_II:
            features.line(centre, he_ii * strength, math.hypot(300.0, rotation))
    features.line(SI_III, 0.06 * math.exp(-(((logt - 4.38) / 0.06) ** 2)), narrow)
    for centre in SI_IV:
        features.line(centre, 0.05 * math.exp(-(((logt - 4.5) / 0.05) ** 2)), narrow)
    features.line(MG_II, 0.12 * math.exp(-(((logt - 4.0) / 0.13) ** 2)) * metals, narrow)
    ca_k = 0.02 + 0.78 * _ramp(teff, 11000.0, 5000.0)
    ca_width = math.hypot(250.0 + 500.0 * _ramp(teff, 6500.0, 2500.0), rotation)
    features.line(CA_K, ca_k * min(metals * 1.2, 1.0), ca_width, 0.3)
    features.line(CA_H, 0.9 * ca_k * min(metals * 1.2, 1.0), ca_width, 0.3)
    features.line(
        O_I_7774, 0.12 * math.exp(-(((logt - 3.9) / 0.06) ** 2)) / g.pressure**0.3, narrow
    )
    _cool_atomic_lines(features, teff, g, rotation, metals)


def _cool_atomic_lines(
    features: _Features, teff: float, g: _Gravity, rotation: float, metals: float
) -> None:
    cool = _ramp(teff, 7500.0, 3000.0)
    if cool <= 0.0:
        return
    pressure_wings = g.pressure * _ramp(teff, 4800.0, 1500.0)
    narrow = math.hypot(150.0, rotation)
    features.line(CA_I, 0.5 * _ramp(teff, 6800.0, 2800.0) * (0.6 + 0.4 * g.pressure), narrow, 0.3)
    features.line(G_BAND, 0.25 * _ramp(teff, 7000.0, 1800.0) * metals, 1300.0)
    for centre, weight in zip(MG_B, (0.7, 0.85, 1.0), strict=True):
        features.line(centre, 0.4 * cool * weight * (0.85 + 0.3 * g.pressure) * metals, narrow)
    for centre in NA_D:
        features.line(
            centre, 0.45 * cool * (0.9 + 0.3 * g.pressure), narrow + 500.0 * pressure_wings, 0.3
        )
    for centre in K_I:
        features.line(centre, 0.3 * _ramp(teff, 4800.0, 1500.0) * (0.5 + g.pressure), narrow)
    na_i = 0.03 + 0.4 * g.pressure * _ramp(teff, 4800.0, 1500.0)
    for centre in NA_I_8190:
        features.line(centre, na_i, narrow + 150.0 * pressure_wings, 0.3)
    ca_t = 0.45 * _ramp(teff, 8500.0, 2500.0) * g.ca_triplet
    ca_t *= 1.0 - 0.45 * g.pressure * _ramp(teff, 4000.0, 1000.0)
    for centre, weight in CA_TRIPLET:
        features.line(centre, ca_t * weight * metals**0.5, math.hypot(220.0, rotation), 0.3)
    for centre, weight in _METAL_FOREST:
        features.line(centre, 0.15 * cool * weight * metals, narrow)


def _tio_tau(subclass: float) -> float:
    """TiO optical depth scale for an M subclass (negative values: late K)."""
    return 0.12 + 0.28 * subclass if subclass >= 0 else 0.12 * math.exp(1.5 * subclass)


def _m_molecules(features: _Features, subclass: float, *, dwarf: bool, tio_scale: float) -> None:
    features.bands(TIO_BANDS, _tio_tau(subclass) * tio_scale, redward=True)
    if subclass > 5.5:
        features.bands(VO_BANDS, 0.12 * (subclass - 5.5), redward=True)
    cah = 0.25 + 0.25 * max(subclass, -0.9) if dwarf else 0.03
    features.bands(CAH_BANDS, cah, redward=True)


@dataclass(frozen=True)
class _Object:
    flux: np.ndarray  # intrinsic flux on WAVELENGTH, arbitrary scale
    params: dict[str, Any]


_SPECTRAL_TYPES = (
    (45000, "O4"), (40000, "O5"), (37000, "O6"), (35000, "O7"), (33000, "O8"), (31500, "O9"),
    (30000, "B0"), (25000, "B1"), (21000, "B2"), (17000, "B3"), (15000, "B5"), (13000, "B7"),
    (11500, "B8"), (10500, "B9"), (9700, "A0"), (9000, "A2"), (8300, "A5"), (7600, "A8"),
    (7300, "F0"), (6600, "F5"), (6000, "G0"), (5600, "G5"), (5200, "K0"), (4800, "K2"),
    (4400, "K5"), (4000, "K7"), (3850, "M0"),
)  # fmt: skip


def _spectral_type(teff: float) -> str:
    return min(_SPECTRAL_TYPES, key=lambda item: abs(math.log(item[0] / teff)))[1]


def _rounded(params: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: float(f"{value:.4g}") if isinstance(value, float) else value
        for key, value in params.items()
    }


def _normal_star(
    rng: np.random.Generator, teff: float, *, gravity: str, vsini: float, **extra: Any
) -> tuple[_Features, dict[str, Any]]:
    features = _Features(_doppler(_stellar_velocity(rng)))
    _photosphere(features, rng, teff, gravity=gravity, vsini=vsini)
    params = {"teff": teff, "spectral_type": _spectral_type(teff), "gravity": gravity}
    return features, {**params, "vsini": vsini, **extra}


def _o_star(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(31000.0, 45000.0)
    features, params = _normal_star(rng, teff, gravity="dwarf", vsini=rng.uniform(60.0, 300.0))
    emission = _Emission(features.shift)
    if rng.random() < 0.2:  # Of star
        for centre in BOWEN[:2]:
            emission.line(centre, rng.uniform(0.2, 0.8), 300.0)
        emission.line(HE_II_4686, rng.uniform(0.3, 1.5), 600.0)
        params["of"] = True
    return _Object(emission.apply(features.render(_planck(teff))), params)


def _b_star(rng: np.random.Generator) -> _Object:
    teff = _log_uniform(rng, 10500.0, 30000.0)
    gravity = "giant" if rng.random() < 0.2 else "dwarf"
    features, params = _normal_star(rng, teff, gravity=gravity, vsini=rng.uniform(20.0, 300.0))
    return _Object(features.render(_planck(teff)), params)


def _be_star(rng: np.random.Generator) -> _Object:
    teff = _log_uniform(rng, 12000.0, 28000.0)
    features, params = _normal_star(rng, teff, gravity="dwarf", vsini=rng.uniform(150.0, 400.0))
    emission = _Emission(features.shift)
    ew = _log_uniform(rng, 4.0, 50.0)
    fwhm = rng.uniform(250.0, 650.0)
    separation = rng.uniform(0.3, 0.55) * fwhm if rng.random() < 0.6 else 0.0
    emission.line(_balmer(3), ew, fwhm - 0.6 * separation, separation_kms=separation)
    emission.line(_balmer(4), ew * rng.uniform(0.08, 0.2), fwhm - 0.6 * separation)
    if rng.random() < 0.3:
        for centre in FE_II:
            emission.line(centre, rng.uniform(0.2, 1.0), 300.0)
    if rng.random() < 0.3:
        emission.line(O_I_8446, rng.uniform(0.5, 3.0), 300.0)
    params.update({"halpha_ew": ew, "halpha_fwhm_kms": fwhm, "peak_separation_kms": separation})
    return _Object(emission.apply(features.render(_planck(teff))), params)


def _a_star(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(7300.0, 10200.0)
    gravity = "giant" if rng.random() < 0.15 else "dwarf"
    features, params = _normal_star(rng, teff, gravity=gravity, vsini=rng.uniform(10.0, 250.0))
    return _Object(features.render(_planck(teff)), params)


def _fgk_dwarf(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(4400.0, 7300.0)
    vsini = rng.uniform(2.0, 20.0 + 60.0 * _ramp(-teff, -6200.0, 1000.0))
    features, params = _normal_star(rng, teff, gravity="dwarf", vsini=vsini)
    if teff < 4500.0:
        _m_molecules(features, (3850.0 - teff) / 160.0, dwarf=True, tio_scale=1.0)
    return _Object(features.render(_planck(teff)), params)


def _k_giant(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(3900.0, 4900.0)
    features, params = _normal_star(rng, teff, gravity="giant", vsini=rng.uniform(1.0, 10.0))
    _m_molecules(features, (3850.0 - teff) / 150.0, dwarf=False, tio_scale=1.0)
    return _Object(features.render(_planck(teff)), params)


def _m_giant_features(
    rng: np.random.Generator, subclass: float, *, tio_scale: float
) -> tuple[_Features, float, dict[str, Any]]:
    teff = 3850.0 - 95.0 * subclass
    features, params = _normal_star(rng, teff, gravity="giant", vsini=rng.uniform(1.0, 8.0))
    _m_molecules(features, subclass, dwarf=False, tio_scale=tio_scale)
    params["spectral_type"] = f"M{subclass:.1f} III"
    return features, teff, params


def _mira_emission(
    rng: np.random.Generator, shift: float, subclass: float, params: dict[str, Any]
) -> _Emission:
    emission = _Emission(shift)
    if subclass > 4.0 and rng.random() < 0.2:  # Mira: Balmer emission, H-delta/H-gamma strongest
        for n, weight in ((3, 0.3), (4, 0.6), (5, 1.0), (6, 1.0)):
            emission.line(_balmer(n), weight * rng.uniform(2.0, 15.0), 80.0)
        params["mira"] = True
    return emission


def _m_giant(rng: np.random.Generator) -> _Object:
    subclass = rng.uniform(0.0, 7.5)
    features, teff, params = _m_giant_features(rng, subclass, tio_scale=rng.uniform(0.85, 1.15))
    emission = _mira_emission(rng, features.shift, subclass, params)
    return _Object(emission.apply(features.render(_planck(teff))), params)


def _s_star_like(rng: np.random.Generator, *, ms: bool) -> _Object:
    subclass = rng.uniform(1.0, 6.0)
    tio_scale = rng.uniform(0.45, 0.85) if ms else rng.uniform(0.0, 0.3)
    features, teff, params = _m_giant_features(rng, subclass, tio_scale=tio_scale)
    zro = rng.uniform(0.12, 0.4) if ms else rng.uniform(0.3, 1.2)
    features.bands(ZRO_BANDS, zro, redward=True)
    if subclass > 3.0:
        features.bands(LAO_BANDS, rng.uniform(0.0, 0.3), redward=True)
    params.update({"spectral_type": ("MS" if ms else "S") + f"{subclass:.0f}", "zro_tau": zro})
    params["tio_scale"] = tio_scale
    emission = _mira_emission(rng, features.shift, subclass, params)
    return _Object(emission.apply(features.render(_planck(teff))), params)


def _m_dwarf_features(
    rng: np.random.Generator, subclass: float, shift: float | None = None
) -> tuple[_Features, float]:
    teff = 3850.0 - 160.0 * subclass
    features = _Features(shift if shift is not None else _doppler(_stellar_velocity(rng)))
    _photosphere(features, rng, teff, gravity="dwarf", vsini=rng.uniform(1.0, 15.0))
    _m_molecules(features, subclass, dwarf=True, tio_scale=rng.uniform(0.85, 1.15))
    return features, teff


def _m_dwarf(rng: np.random.Generator) -> _Object:
    subclass = 6.0 * rng.random() ** 1.3
    features, teff = _m_dwarf_features(rng, subclass)
    params = {"teff": teff, "spectral_type": f"M{subclass:.1f} V", "gravity": "dwarf"}
    return _Object(features.render(_planck(teff)), params)


def _dme(rng: np.random.Generator) -> _Object:
    subclass = rng.uniform(1.0, 6.0)
    features, teff = _m_dwarf_features(rng, subclass)
    emission = _Emission(features.shift)
    ew = _log_uniform(rng, 1.5, 15.0)
    width = rng.uniform(20.0, 90.0)
    emission.line(_balmer(3), ew, width)
    higher = ew * rng.uniform(0.6, 1.3)
    for n in range(4, 9):
        emission.line(_balmer(n), higher, width)
        higher *= rng.uniform(0.6, 0.95)
    calcium = rng.uniform(2.0, 12.0)
    emission.line(CA_K, calcium, width)
    emission.line(CA_H, 0.8 * calcium, width)
    if rng.random() < 0.25:
        emission.line(HE_I[7][0], rng.uniform(0.2, 1.0), width)
    params = {"teff": teff, "spectral_type": f"M{subclass:.1f} Ve", "halpha_ew": ew}
    return _Object(emission.apply(features.render(_planck(teff))), params | {"width_kms": width})


# --- carbon stars --------------------------------------------------------------------------------


def _carbon(
    rng: np.random.Generator,
    *,
    teff: float,
    gravity: str,
    swan: float,
    cn_violet: float,
    cn_red: float,
    blanketing: float,
    variety: str,
) -> _Object:
    metals = 0.5 if variety == "C-H" else 1.0
    features = _Features(_doppler(_stellar_velocity(rng)))
    _photosphere(features, rng, teff, gravity=gravity, vsini=rng.uniform(1.0, 8.0), metals=metals)
    features.bands(SWAN_BANDS, swan, redward=False)
    features.bands(CN_VIOLET_BANDS, cn_violet, redward=False)
    features.bands(CN_RED_BANDS, cn_red, redward=False)
    for centre in NA_D:
        features.line(centre, rng.uniform(0.5, 0.8), 400.0, 0.3)
    if variety == "C-H":
        features.line(G_BAND, rng.uniform(0.45, 0.7), 1500.0)
        features.line(BA_II, rng.uniform(0.1, 0.25), 200.0)
        features.line(SR_II, rng.uniform(0.1, 0.25), 200.0)
    continuum = _planck(teff) * np.exp(-blanketing * (4500.0 / WAVELENGTH) ** 4)
    params = {"teff": teff, "spectral_type": variety, "gravity": gravity, "swan_tau": swan}
    return _Object(features.render(continuum), params | {"cn_red_tau": cn_red})


def _carbon_n(rng: np.random.Generator) -> _Object:
    return _carbon(
        rng,
        teff=rng.uniform(2600.0, 3300.0),
        gravity="giant",
        swan=rng.uniform(0.8, 1.8),
        cn_violet=rng.uniform(0.8, 1.5),
        cn_red=rng.uniform(0.4, 1.0),
        blanketing=rng.uniform(0.5, 2.0),
        variety="C-N",
    )


def _carbon_r(rng: np.random.Generator) -> _Object:
    return _carbon(
        rng,
        teff=rng.uniform(3800.0, 4800.0),
        gravity="giant",
        swan=rng.uniform(0.5, 1.2),
        cn_violet=rng.uniform(0.4, 0.9),
        cn_red=rng.uniform(0.2, 0.6),
        blanketing=rng.uniform(0.0, 0.5),
        variety="C-R",
    )


def _carbon_ch(rng: np.random.Generator) -> _Object:
    return _carbon(
        rng,
        teff=rng.uniform(4200.0, 5200.0),
        gravity="giant",
        swan=rng.uniform(0.12, 0.6),
        cn_violet=rng.uniform(0.3, 0.7),
        cn_red=rng.uniform(0.1, 0.4),
        blanketing=rng.uniform(0.0, 0.3),
        variety="C-H",
    )


def _dwarf_carbon(rng: np.random.Generator) -> _Object:
    return _carbon(
        rng,
        teff=rng.uniform(3800.0, 5000.0),
        gravity="dwarf",
        swan=rng.uniform(0.3, 1.4),
        cn_violet=rng.uniform(0.2, 0.5),
        cn_red=rng.uniform(0.1, 0.4),
        blanketing=rng.uniform(0.0, 0.5),
        variety="dC",
    )


# --- white dwarfs and hot subdwarfs --------------------------------------------------------------


def _da_balmer(features: _Features, rng: np.random.Generator, teff: float) -> dict[str, float]:
    logt = math.log10(teff)
    hot = logt > 4.1
    depth = 0.08 + 0.52 * math.exp(-(((logt - 4.1) / (0.35 if hot else 0.2)) ** 2))
    width = 2200.0 + 3800.0 * math.exp(-(((logt - 4.1) / 0.25) ** 2))
    depth *= rng.uniform(0.9, 1.1)
    width *= rng.uniform(0.85, 1.2)  # mass (surface gravity) spread
    n_max = 9 + int(rng.integers(0, 2)) + (1 if teff < 10000.0 else 0)
    _balmer_series(features, depth, width, lorentz=0.75, n_max=n_max, growth=0.22)
    return {"balmer_depth": depth, "hbeta_fwhm_kms": width}


def _white_dwarf(rng: np.random.Generator, teff: float, **params: Any) -> tuple[_Features, dict]:
    features = _Features(_doppler(rng.normal(30.0, 30.0)))  # gravitational redshift + motion
    return features, {"teff": teff, **params}


def _da_wd(rng: np.random.Generator) -> _Object:
    teff = _log_uniform(rng, 7500.0, 40000.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DA")
    params.update(_da_balmer(features, rng, teff))
    return _Object(features.render(_planck(teff)), params)


def _dah_wd(rng: np.random.Generator) -> _Object:
    teff = _log_uniform(rng, 8000.0, 30000.0)
    field_mg = rng.uniform(3.0, 40.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DAH", field_mg=field_mg)
    logt = math.log10(teff)
    depth = (0.1 + 0.35 * math.exp(-(((logt - 4.1) / 0.3) ** 2))) * 0.6
    for n in range(3, 8):
        centre = _balmer(n)
        split = 4.67e-13 * centre**2 * field_mg * 1e6  # normal Zeeman triplet spacing in A
        for offset in (-split, 0.0, split):
            features.line(centre + offset, depth, 1500.0 + 200.0 * n, 0.4)
    return _Object(features.render(_planck(teff)), params)


def _db_wd(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(12000.0, 30000.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DB")
    strength = 0.1 + 0.2 * math.exp(-(((math.log10(teff) - 4.35) / 0.12) ** 2))
    width = rng.uniform(1200.0, 2500.0)
    for centre, relative in HE_I:
        features.line(centre, strength * relative, width, 0.5)
    return _Object(features.render(_planck(teff)), params | {"he_depth": strength})


def _do_wd(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(45000.0, 100000.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DO")
    depth, width = rng.uniform(0.08, 0.2), rng.uniform(1500.0, 3000.0)
    for (centre, _), relative in zip(HE_II, (0.5, 0.6, 1.0, 0.7), strict=True):
        features.line(centre, depth * relative, width, 0.4)
    return _Object(features.render(_planck(teff)), params)


def _dc_wd(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(5000.0, 11000.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DC")
    return _Object(features.render(_planck(teff)), params)


def _dz_wd(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(6000.0, 12000.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DZ")
    depth, width = rng.uniform(0.3, 0.75), rng.uniform(1500.0, 3500.0)
    features.line(CA_K, depth, width, 0.5)
    features.line(CA_H, 0.85 * depth, width, 0.5)
    for centre in MG_B:
        features.line(centre, rng.uniform(0.0, 0.15), 1500.0)
    for centre in NA_D:
        features.line(centre, rng.uniform(0.0, 0.15), 1500.0)
    features.line(CA_I, rng.uniform(0.0, 0.2), 1200.0)
    return _Object(features.render(_planck(teff)), params)


def _dq_wd(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(5500.0, 10000.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DQ")
    swan = rng.uniform(0.3, 1.2)
    features.bands(SWAN_BANDS, swan, redward=False, stretch=1.2)
    return _Object(features.render(_planck(teff)), params | {"swan_tau": swan})


def _sdb(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(22000.0, 38000.0)
    features = _Features(_doppler(_stellar_velocity(rng)))
    depth, width = rng.uniform(0.28, 0.45), rng.uniform(1300.0, 2200.0)
    _balmer_series(
        features, depth, width, lorentz=0.5, n_max=12 + int(rng.integers(0, 2)), growth=0.12
    )
    helium = rng.uniform(0.01, 0.06)
    for centre, relative in HE_I:
        features.line(centre, helium * relative, 400.0)
    params = {"teff": teff, "spectral_type": "sdB", "hbeta_fwhm_kms": width}
    return _Object(features.render(_planck(teff)), params)


def _sdo(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(40000.0, 70000.0)
    features = _Features(_doppler(_stellar_velocity(rng)))
    _balmer_series(
        features,
        rng.uniform(0.1, 0.25),
        rng.uniform(1000.0, 1800.0),
        lorentz=0.4,
        n_max=12,
        growth=0.1,
    )
    depth, width = rng.uniform(0.05, 0.15), rng.uniform(800.0, 1600.0)
    for centre, relative in HE_II:
        features.line(centre, depth * relative, width, 0.3)
    for centre, relative in HE_I:
        features.line(centre, rng.uniform(0.0, 0.03) * relative, 500.0)
    return _Object(features.render(_planck(teff)), {"teff": teff, "spectral_type": "sdO"})


def _sda(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(7000.0, 9200.0)
    features = _Features(_doppler(_stellar_velocity(rng)))
    _photosphere(features, rng, teff, gravity="subdwarf", vsini=rng.uniform(5.0, 40.0), metals=0.4)
    params = {"teff": teff, "spectral_type": "sdA", "gravity": "subdwarf"}
    return _Object(features.render(_planck(teff)), params)


# --- cataclysmic variables -----------------------------------------------------------------------


def _donor(rng: np.random.Generator, shift: float) -> tuple[np.ndarray, float]:
    subclass = rng.uniform(2.0, 5.5)
    features, teff = _m_dwarf_features(rng, subclass, shift)
    return features.render(_planck(teff)), subclass


def _add_at(base: np.ndarray, extra: np.ndarray, fraction: float, wavelength: float) -> np.ndarray:
    """Add ``extra`` scaled to make up ``fraction`` of the total flux at ``wavelength``."""
    if fraction <= 0.0:
        return base
    scale = _at(base, wavelength) * fraction / (1.0 - fraction) / _at(extra, wavelength)
    return base + scale * extra


def _disc_emission(
    emission: _Emission,
    rng: np.random.Generator,
    *,
    halpha_ew: float,
    component_fwhm: float,
    separation: float,
    he_ii: float,
) -> None:
    """Balmer, He I, He II and weaker disc lines with a flat CV Balmer decrement."""
    line = {"fwhm_kms": component_fwhm, "separation_kms": separation}
    emission.line(_balmer(3), halpha_ew, **line)
    hbeta = halpha_ew * rng.uniform(0.3, 0.7)
    strength = hbeta
    for n in range(4, 10):
        emission.line(_balmer(n), strength, **line)
        strength *= rng.uniform(0.6, 0.9)
    helium = {5877.25: (0.08, 0.2), 6679.99: (0.04, 0.1), HE_I_7065: (0.03, 0.07)}
    for centre, (low, high) in helium.items():
        emission.line(centre, halpha_ew * rng.uniform(low, high), **line)
    for centre, low, high in (
        (HE_I[3][0], 0.1, 0.3),
        (HE_I[5][0], 0.05, 0.15),
        (HE_I[6][0], 0.04, 0.12),
    ):
        emission.line(centre, hbeta * rng.uniform(low, high), **line)
    if he_ii > 0.0:
        emission.line(HE_II_4686, hbeta * he_ii, component_fwhm, separation_kms=0.7 * separation)
        for centre in BOWEN:
            emission.line(centre, 0.25 * hbeta * he_ii * rng.uniform(0.3, 1.0), 500.0)
    if rng.random() < 0.3:
        for centre in FE_II:
            emission.line(centre, rng.uniform(0.5, 3.0), **line)
    if rng.random() < 0.25:
        for centre, weight in CA_TRIPLET:
            emission.line(centre, weight * rng.uniform(1.0, 6.0), **line)


def _inclination(rng: np.random.Generator) -> float:
    return math.degrees(math.acos(rng.uniform(0.05, 1.0)))


def _cv_dwarf_nova(rng: np.random.Generator) -> _Object:
    shift = _doppler(_stellar_velocity(rng))
    wd_teff, disc_teff = rng.uniform(11000.0, 25000.0), rng.uniform(6000.0, 14000.0)
    white_dwarf = _Features(shift)
    _balmer_series(
        white_dwarf,
        rng.uniform(0.2, 0.45),
        rng.uniform(3000.0, 5000.0),
        lorentz=0.7,
        n_max=10,
        growth=0.2,
    )
    wd_flux = white_dwarf.render(_planck(wd_teff))
    disc = _convolve_lsf(_planck(disc_teff) * _power_law(rng.uniform(-0.5, 0.5)))
    flux = _add_at(disc, wd_flux, rng.uniform(0.2, 0.7), 4500.0)
    donor, subclass = _donor(rng, shift)
    donor_fraction = rng.uniform(0.0, 0.6)
    flux = _add_at(flux, donor, donor_fraction, 7500.0)
    inclination = _inclination(rng)
    separation = 2.0 * rng.uniform(400.0, 750.0) * math.sin(math.radians(inclination))
    component = rng.uniform(600.0, 1200.0)
    halpha = _log_uniform(rng, 15.0, 200.0)
    he_ii = rng.uniform(0.05, 0.4) if rng.random() < 0.3 else 0.0
    emission = _Emission(shift)
    _disc_emission(
        emission,
        rng,
        halpha_ew=halpha,
        component_fwhm=component,
        separation=separation,
        he_ii=he_ii,
    )
    params = {"wd_teff": wd_teff, "disc_teff": disc_teff, "inclination_deg": inclination}
    params |= {
        "halpha_ew": halpha,
        "peak_separation_kms": separation,
        "donor_fraction": donor_fraction,
        "donor_subclass": subclass,
    }
    return _Object(emission.apply(flux), params | {"component_fwhm_kms": component, "he_ii": he_ii})


def _cv_polar(rng: np.random.Generator) -> _Object:
    shift = _doppler(_stellar_velocity(rng))
    wd_teff = rng.uniform(9000.0, 20000.0)
    continuum = _planck(wd_teff)
    for _ in range(int(rng.integers(1, 4))):  # cyclotron humps
        centre, width = rng.uniform(4000.0, 8500.0), rng.uniform(300.0, 600.0)
        continuum = continuum * (
            1.0 + rng.uniform(0.2, 0.8) * np.exp(-0.5 * ((WAVELENGTH - centre) / width) ** 2)
        )
    flux = _convolve_lsf(continuum)
    donor, _ = _donor(rng, shift)
    flux = _add_at(flux, donor, rng.uniform(0.1, 0.6), 7500.0)
    emission = _Emission(shift)
    fwhm = rng.uniform(450.0, 1100.0)
    halpha = _log_uniform(rng, 20.0, 150.0)
    hbeta = halpha * rng.uniform(0.5, 0.9)
    emission.line(_balmer(3), halpha, fwhm)
    emission.line(_balmer(3) * (1 + rng.uniform(-300, 300) / C_KMS), 0.15 * halpha, 150.0)
    strength = hbeta
    for n in range(4, 10):
        emission.line(_balmer(n), strength, fwhm)
        strength *= rng.uniform(0.7, 0.95)
    he_ii = rng.uniform(0.4, 1.0)
    emission.line(HE_II_4686, hbeta * he_ii, fwhm)
    for centre in BOWEN:
        emission.line(centre, 0.25 * hbeta * he_ii * rng.uniform(0.2, 0.6), 500.0)
    for centre, relative in HE_I:
        emission.line(centre, halpha * rng.uniform(0.05, 0.15) * relative, fwhm)
    params = {"wd_teff": wd_teff, "halpha_ew": halpha, "fwhm_kms": fwhm, "he_ii": he_ii}
    return _Object(emission.apply(flux), params)


def _cv_high_state(rng: np.random.Generator) -> _Object:
    shift = _doppler(_stellar_velocity(rng))
    disc_teff = rng.uniform(15000.0, 40000.0)
    disc = _Features(shift)
    depth, width = rng.uniform(0.1, 0.25), rng.uniform(2500.0, 5000.0)
    _balmer_series(disc, depth, width, lorentz=0.3, n_max=12, growth=0.05)
    for centre, relative in HE_I:
        disc.line(centre, rng.uniform(0.02, 0.07) * relative, rng.uniform(2000.0, 3500.0))
    flux = disc.render(_planck(disc_teff) * _power_law(rng.uniform(-0.3, 0.3)))
    donor, _ = _donor(rng, shift)
    flux = _add_at(flux, donor, rng.uniform(0.0, 0.08), 7500.0)
    emission = _Emission(shift)
    core = 0.0
    if rng.random() < 0.75:
        core = rng.uniform(1.0, 10.0)
        core_width = rng.uniform(500.0, 1200.0)
        emission.line(_balmer(3), core, core_width)
        emission.line(_balmer(4), rng.uniform(0.0, 2.0), core_width)
    if rng.random() < 0.5:
        emission.line(HE_II_4686, rng.uniform(0.5, 4.0), rng.uniform(400.0, 1000.0))
        if rng.random() < 0.6:
            for centre in BOWEN:
                emission.line(centre, rng.uniform(0.1, 0.6), 500.0)
    params = {"disc_teff": disc_teff, "balmer_depth": depth, "hbeta_fwhm_kms": width}
    return _Object(emission.apply(flux), params | {"halpha_core_ew": core})


def _cv_wd_dominated(rng: np.random.Generator) -> _Object:
    shift = _doppler(_stellar_velocity(rng))
    wd_teff = rng.uniform(11000.0, 17000.0)
    white_dwarf = _Features(shift)
    _balmer_series(
        white_dwarf,
        rng.uniform(0.3, 0.5),
        rng.uniform(3500.0, 5500.0),
        lorentz=0.75,
        n_max=10,
        growth=0.22,
    )
    flux = white_dwarf.render(_planck(wd_teff))
    donor, _ = _donor(rng, shift)
    flux = _add_at(flux, donor, rng.uniform(0.0, 0.15), 7500.0)
    inclination = _inclination(rng)
    separation = 2.0 * rng.uniform(700.0, 1100.0) * math.sin(math.radians(inclination))
    halpha = _log_uniform(rng, 15.0, 80.0)
    emission = _Emission(shift)
    _disc_emission(
        emission,
        rng,
        halpha_ew=halpha,
        component_fwhm=rng.uniform(500.0, 900.0),
        separation=separation,
        he_ii=0.0,
    )
    params = {"wd_teff": wd_teff, "inclination_deg": inclination, "halpha_ew": halpha}
    return _Object(emission.apply(flux), params | {"peak_separation_kms": separation})


# --- extragalactic and nebular contaminants ------------------------------------------------------


def _quasar(rng: np.random.Generator) -> _Object:
    redshift = rng.uniform(0.08, 2.8)
    shift = 1.0 + redshift
    rest = WAVELENGTH / shift
    continuum = (rest / 3000.0) ** -rng.uniform(1.0, 2.0)
    for centre, width in ((2450.0, 250.0), (4900.0, 350.0)):  # Fe II pseudo-continuum humps
        continuum = continuum * (
            1.0 + rng.uniform(0.05, 0.3) * np.exp(-0.5 * ((rest - centre) / width) ** 2)
        )
    features = _Features(shift)
    forest = _span(0.0, LYMAN_ALPHA * shift)
    if forest.stop > forest.start:
        for centre in rng.uniform(WAVELENGTH[0], LYMAN_ALPHA * shift, 60):
            features.line(centre / shift, rng.uniform(0.1, 0.7), rng.uniform(60.0, 200.0))
    emission = _Emission(shift)
    broad = rng.uniform(2000.0, 7000.0)
    for centre, (low, high), is_broad in QUASAR_LINES:
        emission.line(
            centre, rng.uniform(low, high), broad if is_broad else rng.uniform(250.0, 600.0)
        )
    flux = emission.apply(features.render(continuum))
    return _Object(flux, {"redshift": redshift, "broad_fwhm_kms": broad, "spectral_type": "QSO"})


def _planetary_nebula(rng: np.random.Generator) -> _Object:
    shift = _doppler(_stellar_velocity(rng))
    central_star = _convolve_lsf(_planck(rng.uniform(50000.0, 100000.0)))
    emission = _Emission(shift)
    width = rng.uniform(20.0, 45.0)
    oiii = _log_uniform(rng, 200.0, 2000.0)
    hbeta = oiii / rng.uniform(3.0, 15.0)
    halpha = hbeta * rng.uniform(2.9, 4.5)
    nii = halpha * rng.uniform(0.1, 2.0)
    lines = {
        NEBULAR["[O III] 5008"]: oiii,
        NEBULAR["[O III] 4960"]: oiii / 3.0,
        _balmer(4): hbeta,
        _balmer(5): 0.47 * hbeta,
        _balmer(6): 0.26 * hbeta,
        _balmer(3): halpha,
        NEBULAR["[N II] 6585"]: nii,
        NEBULAR["[N II] 6550"]: nii / 3.0,
        5877.25: 0.13 * hbeta,
        HE_II_4686: rng.uniform(0.0, 0.8) * hbeta,
        NEBULAR["[Ne III] 3869"]: rng.uniform(0.3, 1.0) * hbeta,
        NEBULAR["[S II] 6718"]: rng.uniform(0.05, 0.2) * halpha,
        NEBULAR["[S II] 6733"]: rng.uniform(0.05, 0.2) * halpha,
        NEBULAR["[Ar III] 7138"]: 0.1 * hbeta,
        NEBULAR["[O I] 6302"]: rng.uniform(0.0, 0.1) * hbeta,
    }
    for centre, ew in lines.items():
        emission.line(centre, ew, width)
    params = {"spectral_type": "PN", "oiii_ew": oiii, "hbeta_ew": hbeta}
    return _Object(emission.apply(central_star), params)


# --- the observation: survey-like noise and artifacts --------------------------------------------


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


# --- tasks: which objects are positives and which are hard negatives -----------------------------

_KINDS: dict[str, Callable[[np.random.Generator], _Object]] = {
    "cv_dwarf_nova": _cv_dwarf_nova,
    "cv_polar": _cv_polar,
    "cv_high_state": _cv_high_state,
    "cv_wd_dominated": _cv_wd_dominated,
    "dme": _dme,
    "be_star": _be_star,
    "quasar": _quasar,
    "planetary_nebula": _planetary_nebula,
    "o_star": _o_star,
    "b_star": _b_star,
    "a_star": _a_star,
    "fgk_dwarf": _fgk_dwarf,
    "k_giant": _k_giant,
    "m_giant": _m_giant,
    "m_dwarf": _m_dwarf,
    "s_star": lambda rng: _s_star_like(rng, ms=False),
    "ms_star": lambda rng: _s_star_like(rng, ms=True),
    "carbon_n": _carbon_n,
    "carbon_r": _carbon_r,
    "carbon_ch": _carbon_ch,
    "dwarf_carbon": _dwarf_carbon,
    "da_wd": _da_wd,
    "dah_wd": _dah_wd,
    "db_wd": _db_wd,
    "do_wd": _do_wd,
    "dc_wd": _dc_wd,
    "dz_wd": _dz_wd,
    "dq_wd": _dq_wd,
    "sdb": _sdb,
    "sdo": _sdo,
    "sda": _sda,
}

# task -> (positive kinds with weights, negative kinds with weights)
TASK_MIXES: dict[str, tuple[dict[str, float], dict[str, float]]] = {
    "CV": (
        {"cv_dwarf_nova": 0.45, "cv_polar": 0.15, "cv_high_state": 0.25, "cv_wd_dominated": 0.15},
        {
            "dme": 0.28, "be_star": 0.2, "quasar": 0.15, "planetary_nebula": 0.05, "da_wd": 0.1,
            "a_star": 0.04, "b_star": 0.04, "sdb": 0.04, "fgk_dwarf": 0.05, "m_dwarf": 0.05,
        },
    ),
    "CS": (
        {"carbon_n": 0.4, "carbon_r": 0.25, "carbon_ch": 0.2, "dwarf_carbon": 0.15},
        {
            "m_giant": 0.3, "s_star": 0.15, "ms_star": 0.05, "k_giant": 0.15, "dq_wd": 0.05,
            "fgk_dwarf": 0.1, "m_dwarf": 0.2,
        },
    ),
    "SS": (
        {"s_star": 0.65, "ms_star": 0.35},
        {
            "m_giant": 0.45, "carbon_n": 0.1, "carbon_r": 0.05, "k_giant": 0.1, "m_dwarf": 0.2,
            "fgk_dwarf": 0.1,
        },
    ),
    "MG": (
        {"m_giant": 1.0},
        {
            "m_dwarf": 0.35, "dme": 0.1, "k_giant": 0.25, "s_star": 0.08, "carbon_n": 0.07,
            "fgk_dwarf": 0.15,
        },
    ),
    "WD": (
        {
            "da_wd": 0.6, "dah_wd": 0.04, "db_wd": 0.12, "dc_wd": 0.1, "dz_wd": 0.05,
            "dq_wd": 0.05, "do_wd": 0.04,
        },
        {
            "a_star": 0.3, "b_star": 0.1, "sdb": 0.15, "sdo": 0.05, "sda": 0.15,
            "cv_wd_dominated": 0.05, "cv_high_state": 0.05, "fgk_dwarf": 0.1, "quasar": 0.05,
        },
    ),
    "O": (
        {"o_star": 1.0},
        {
            "b_star": 0.45, "a_star": 0.1, "sdb": 0.15, "sdo": 0.1, "do_wd": 0.05,
            "fgk_dwarf": 0.05, "be_star": 0.1,
        },
    ),
    "B": (
        {"b_star": 0.9, "be_star": 0.1},
        {"o_star": 0.25, "a_star": 0.35, "sdb": 0.15, "da_wd": 0.1, "db_wd": 0.05, "fgk_dwarf": 0.1},
    ),
    "A": (
        {"a_star": 1.0},
        {"b_star": 0.3, "fgk_dwarf": 0.3, "da_wd": 0.1, "sda": 0.15, "sdb": 0.05, "dz_wd": 0.1},
    ),
}  # fmt: skip


# --- public API ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SyntheticSample:
    index: int
    task: str
    label: bool
    subtype: str  # the kind of object drawn: generator internals, for analysis only
    spectrum: Spectrum
    split: str
    params: dict[str, Any] = field(default_factory=dict)  # drawn parameters, analysis only


def task_codes() -> tuple[str, ...]:
    return tuple(TASK_MIXES)


def subtypes(task: str, label: bool) -> tuple[str, ...]:
    """The kinds of object that can be drawn as positives (label True) or negatives of ``task``."""
    return tuple(TASK_MIXES[_task_code(task)][0 if label else 1])


def object_id(task: str, split: str, index: int) -> str:
    return f"SVM-{_task_code(task)}-{split}-{index:04d}"


def generate_sample(
    task: str,
    label: bool,
    *,
    rng: np.random.Generator,
    index: int = 0,
    split: str = "train",
    subtype: str | None = None,
    snr: float | None = None,
    resolving_power: float | None = None,
) -> SyntheticSample:
    """One synthetic spectrum for ``task``: a positive (label True) or a negative drawn from the
    task's contaminant mix (:func:`draw_hard_negative` keeps only the confusable ones).

    ``subtype`` forces the kind of object (it must belong to that task and label); ``snr`` forces
    the S/N, otherwise drawn log-uniform in SNR_RANGE; ``resolving_power`` forces R, otherwise
    drawn log-uniform in RESOLUTION_RANGE.
    """
    code = _task_code(task)
    _check_split(split)
    if not isinstance(label, bool | np.bool_):
        raise ValueError(f"label must be True or False, got {label!r}")
    if snr is not None and not (math.isfinite(snr) and snr > 0):
        raise ValueError(f"snr must be a positive finite number, got {snr!r}")
    if resolving_power is not None and not (
        math.isfinite(resolving_power) and 300.0 <= resolving_power <= 20000.0
    ):
        raise ValueError(f"resolving_power must be in 300-20000, got {resolving_power!r}")
    mix = TASK_MIXES[code][0 if label else 1]
    if subtype is None:
        kinds, weights = zip(*mix.items(), strict=True)
        subtype = kinds[_weighted_choice(rng, weights)]
    elif subtype not in mix:
        side = "positive" if label else "negative"
        raise ValueError(f"subtype {subtype!r} is not a {side} of task {code}; use {sorted(mix)}")
    return _make_sample(
        code,
        bool(label),
        subtype,
        rng,
        index=index,
        split=split,
        snr=snr,
        resolving_power=resolving_power,
    )


def _make_sample(
    code: str,
    label: bool,
    subtype: str,
    rng: np.random.Generator,
    *,
    index: int = 0,
    split: str = "train",
    snr: float | None = None,
    resolving_power: float | None = None,
) -> SyntheticSample:
    power = (
        float(resolving_power)
        if resolving_power is not None
        else round(_log_uniform(rng, *RESOLUTION_RANGE), 1)
    )
    with _observed_with(_instrument(power)):
        drawn = _KINDS[subtype](rng)
        observation = _observe(drawn.flux, rng, snr)
    identifier = object_id(code, split, index)
    spectrum = Spectrum(
        wavelength=WAVELENGTH.copy(),
        flux=observation.flux,
        ivar=observation.ivar,
        mask=observation.mask,
        redshift=0.0,
        survey=SURVEY,
        object_id=identifier,
        snr=round(observation.snr, 2),
        meta={"synthetic": True, "generator": GENERATOR_VERSION},
        source=f"{DATA_SOURCE}:{identifier}",
        resolution=Resolution.constant_r(power, source="file", note="per-spectrum LSF"),
    )
    params = _rounded(drawn.params | observation.conditions) | {"resolving_power": power}
    return SyntheticSample(index, code, label, subtype, spectrum, split, params)


def draw_hard_negative(
    task: str, *, rng: np.random.Generator, index: int = 0, split: str = "train"
) -> SyntheticSample:
    """A negative the task's weak classifier calls positive (the paper's rejection sampling).

    The kind of contaminant is drawn from the task's negative mix first, so the mix keeps its
    weights; then objects of that kind are drawn until one's baseline score reaches the weak
    classifier's threshold, else the highest-scoring of HARD_NEGATIVE_TRIES is kept. The params
    record the baseline score, whether it passed and how many draws it took.
    """
    code = _task_code(task)
    baseline = _baseline(code)
    best: tuple[float, SyntheticSample, int] | None = None
    for draw in range(1, HARD_NEGATIVE_TRIES + 1):
        candidate = generate_sample(code, False, rng=rng, index=index, split=split)
        score = baseline.score(candidate.spectrum)
        if best is None or score > best[0]:
            best = (score, candidate, draw)
        if score >= baseline.threshold:
            break
    assert best is not None
    score, sample, draws = best
    extra = {"baseline_score": score, "baseline_positive": score >= baseline.threshold}
    return dataclasses.replace(sample, params=_rounded(sample.params | extra | {"draws": draws}))


def generate_split(
    task: str,
    split: str,
    *,
    n_pos: int,
    n_neg: int,
    seed: int,
    hard_negatives: bool = True,
) -> list[SyntheticSample]:
    """``n_pos`` positives and ``n_neg`` negatives in a seeded shuffled order (index = position).

    Each spectrum's random stream comes from (seed, task, split, label, k), so the k-th positive
    is the same spectrum whatever the split sizes, and other splits and tasks never change.
    Negatives are rejection-sampled (:func:`draw_hard_negative`) unless ``hard_negatives`` is
    False, which draws them straight from the contaminant mix.
    """
    code = _task_code(task)
    _check_split(split)
    for name, value in (("n_pos", n_pos), ("n_neg", n_neg), ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 0:
            raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    base = [int(seed), zlib.crc32(code.encode()), zlib.crc32(split.encode())]
    order = np.random.default_rng(np.random.SeedSequence([*base, 2, n_pos, n_neg]))
    members = [(True, k) for k in range(n_pos)] + [(False, k) for k in range(n_neg)]
    permutation = order.permutation(len(members))
    samples = []
    for index, member in enumerate(permutation):
        label, k = members[int(member)]
        rng = np.random.default_rng(np.random.SeedSequence([*base, int(label), k]))
        if label or not hard_negatives:
            samples.append(generate_sample(code, label, rng=rng, index=index, split=split))
        else:
            samples.append(draw_hard_negative(code, rng=rng, index=index, split=split))
    return samples


def default_split_sizes(scale: float = 1.0) -> dict[str, dict[str, int]]:
    """Per-task split sizes: train balanced 1:1, test 1:5 as SpecVI-Bench (paper Table 5)."""
    if not (isinstance(scale, int | float) and math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive number, got {scale!r}")
    base = {"train": (20, 20), "test": (10, 50)}
    return {
        split: {"n_pos": max(1, round(pos * scale)), "n_neg": max(1, round(neg * scale))}
        for split, (pos, neg) in base.items()
    }


def write_benchmark(
    out_dir: Path | str,
    *,
    seed: int = 20260,
    tasks: Sequence[str] = BENCH_TASKS,
    sizes: Mapping[str, Mapping[str, int]] | None = None,
    with_parquet: bool = True,
) -> Path:
    """Write FITS files, ``manifest.json`` and SpecVI-Bench parquet files; return the manifest.

    Layout: ``spectra/{task}/{split}/{object_id}.fits`` (LAMOST new layout),
    ``data/{split}_{bench code}.parquet`` and ``manifest.json``, plus a README.md.
    """
    from agent.spectra import save_lamost_fits

    out = Path(out_dir)
    codes = [_task_code(task) for task in tasks]
    if len(set(codes)) != len(codes):
        raise ValueError(f"tasks must not repeat, got {list(tasks)}")
    split_sizes = _checked_sizes(sizes if sizes is not None else default_split_sizes())
    out.mkdir(parents=True, exist_ok=True)
    entries: list[dict[str, Any]] = []
    parquet_files: list[str] = []
    for code in codes:
        for split, size in split_sizes.items():
            samples = generate_split(
                code, split, n_pos=size["n_pos"], n_neg=size["n_neg"], seed=seed
            )
            for sample in samples:
                relative = (
                    Path("spectra") / code.lower() / split / f"{sample.spectrum.object_id}.fits"
                )
                (out / relative).parent.mkdir(parents=True, exist_ok=True)
                save_lamost_fits(sample.spectrum, out / relative, header=_fits_header(sample))
                entries.append(_manifest_entry(sample, relative))
            if with_parquet:
                parquet_files.append(_write_parquet(out, code, split, samples))
    manifest = {
        "name": SURVEY,
        "version": MANIFEST_VERSION,
        "generator_version": GENERATOR_VERSION,
        "seed": int(seed),
        "synthetic": True,
        "description": _README.strip(),
        "wavelength_frame": "vacuum",
        "grid": {"log10_start": LOG10_START, "log10_step": LOG10_STEP, "n_pixels": N_PIXELS},
        "resolution": {
            "per_spectrum": "resolving power drawn log-uniform, constant over the spectrum",
            "range": list(RESOLUTION_RANGE),
            "nominal": RESOLUTION,
        },
        "hard_negatives": {
            "method": "rejection sampling against a weak classifier (nearest class means of "
            "coarse continuum-normalised flux)",
            "threshold": f"score of the {100 * (1 - _BASELINE_RECALL):.0f}th-percentile positive",
            "max_draws": HARD_NEGATIVE_TRIES,
        },
        "tasks": codes,
        "sizes": split_sizes,
        "parquet": parquet_files,
        "samples": entries,
    }
    path = out / MANIFEST_NAME
    path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    (out / "README.md").write_text(_README.lstrip(), encoding="utf-8")
    return path


def load_manifest(out_dir: Path | str) -> list[dict[str, Any]]:
    """The per-sample entries of a written benchmark (directory or manifest path)."""
    path = Path(out_dir)
    if path.is_dir():
        path = path / MANIFEST_NAME
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ValueError(f"SpecVI-mini manifest {path}: cannot be read ({error})") from error
    except json.JSONDecodeError as error:
        raise ValueError(f"SpecVI-mini manifest {path}: not valid JSON ({error})") from error
    if not isinstance(document, dict) or document.get("synthetic") is not True:
        raise ValueError(f"SpecVI-mini manifest {path}: not a synthetic benchmark manifest")
    samples = document.get("samples")
    if not isinstance(samples, list):
        raise ValueError(f"SpecVI-mini manifest {path}: field 'samples' must be a list")
    return samples


# --- the weak classifier behind the hard negatives ------------------------------------------------

_BASELINE_BINS = 128
_BASELINE_BIN_STARTS = np.linspace(0, N_PIXELS, _BASELINE_BINS + 1).astype(int)[:-1]
_BASELINE_CONTINUUM_BINS = 15
_BASELINE_TRAIN = 32  # plain draws per class the classifier is fitted on
_BASELINE_SEED = 20271
_BASELINE_RECALL = 0.5  # it calls positive whatever scores like the top 75 % of positives


@dataclass(frozen=True)
class _Baseline:
    """Nearest class means on coarse continuum-normalised flux: score = w . x - offset."""

    weights: np.ndarray
    offset: float
    threshold: float

    def score(self, spectrum: Spectrum) -> float:
        shape = _coarse_shape(spectrum.flux, spectrum.ivar)
        return float(np.sum(self.weights * shape)) - self.offset


def baseline_score(task: str, spectrum: Spectrum) -> float:
    """The task's weak-classifier score of a spectrum on the SpecVI-mini grid (>= the value of
    :func:`baseline_threshold` means the weak classifier calls it positive)."""
    if spectrum.flux.shape != (N_PIXELS,):
        raise ValueError(f"the weak classifier needs the {N_PIXELS}-pixel SpecVI-mini grid")
    return _baseline(_task_code(task)).score(spectrum)


def baseline_threshold(task: str) -> float:
    return _baseline(_task_code(task)).threshold


def _coarse_shape(flux: np.ndarray, ivar: np.ndarray) -> np.ndarray:
    """Flux in log-wavelength bins over a running median of neighbouring bins, minus 1: bands
    and strong lines without the continuum slope; 0 where a bin's S/N is below 3."""
    weight = np.add.reduceat(ivar, _BASELINE_BIN_STARTS)
    weighted = np.add.reduceat(ivar * flux, _BASELINE_BIN_STARTS)
    mean = weighted / np.where(weight > 0, weight, 1.0)
    reliable = (weight > 0) & (mean * np.sqrt(weight) >= 3.0)
    values = np.where(reliable, mean, np.nan)
    half = _BASELINE_CONTINUUM_BINS // 2
    windows = np.lib.stride_tricks.sliding_window_view(
        np.pad(values, half, mode="edge"), _BASELINE_CONTINUUM_BINS
    )
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN windows at a dead blue end
        continuum = np.nanmedian(windows, axis=1)
        shape = values / continuum - 1.0
    usable = reliable & np.isfinite(shape) & (continuum > 0)
    return np.clip(np.where(usable, shape, 0.0), -1.0, 1.0)


@cache
def _baseline(code: str) -> _Baseline:
    """Fitted on the task's positives against an archive-like background (every kind of object
    the generator makes that is not a positive, equally weighted), as the paper's weak
    classifier is fitted on catalogue members against the survey archive."""
    positive_kinds = TASK_MIXES[code][0]
    background = [kind for kind in _KINDS if kind not in positive_kinds]
    shapes: dict[bool, list[np.ndarray]] = {True: [], False: []}
    for label in (True, False):
        for k in range(_BASELINE_TRAIN):
            key = [_BASELINE_SEED, zlib.crc32(code.encode()), int(label), k]
            rng = np.random.default_rng(np.random.SeedSequence(key))
            if label:
                kinds, weights = zip(*positive_kinds.items(), strict=True)
                kind = kinds[_weighted_choice(rng, weights)]
            else:
                kind = background[int(rng.integers(len(background)))]
            spectrum = _make_sample(code, label, kind, rng).spectrum
            shapes[label].append(_coarse_shape(spectrum.flux, spectrum.ivar))
    positives, negatives = np.array(shapes[True]), np.array(shapes[False])
    weights = positives.mean(axis=0) - negatives.mean(axis=0)
    midpoint = (positives.mean(axis=0) + negatives.mean(axis=0)) / 2.0
    offset = float(np.sum(weights * midpoint))
    scores = np.sum(positives * weights, axis=1) - offset
    threshold = float(np.quantile(scores, 1.0 - _BASELINE_RECALL))
    return _Baseline(weights, offset, threshold)


# --- helpers of the public API -------------------------------------------------------------------


def _task_code(task: str) -> str:
    code = get_task(task).code
    if code not in TASK_MIXES:
        raise ValueError(f"task {task!r} has no SpecVI-mini generator (have {list(TASK_MIXES)})")
    return code


def _check_split(split: str) -> None:
    if not isinstance(split, str) or not split.isidentifier() or not split.islower():
        raise ValueError(f"split must be a lower-case name like 'train' or 'test', got {split!r}")


def _weighted_choice(rng: np.random.Generator, weights: Sequence[float]) -> int:
    cumulative = np.cumsum(weights)
    return int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))


def _checked_sizes(sizes: Mapping[str, Mapping[str, int]]) -> dict[str, dict[str, int]]:
    checked = {}
    for split, size in sizes.items():
        _check_split(split)
        if not isinstance(size, Mapping) or set(size) != {"n_pos", "n_neg"}:
            raise ValueError(
                f"sizes[{split!r}] must be {{'n_pos': int, 'n_neg': int}}, got {size!r}"
            )
        checked[split] = {"n_pos": size["n_pos"], "n_neg": size["n_neg"]}
    return checked


def bench_code(task: str) -> str:
    """SpecVI-Bench file code of a task: cv, cc, ss, gm, wd (o, b, a for cross tasks)."""
    code = _task_code(task)
    return {value: key for key, value in SPECVI_BENCH_CODES.items()}.get(code, code.lower())


def _fits_header(sample: SyntheticSample) -> dict[str, Any]:
    spectrum = sample.spectrum
    return {
        "TELESCOP": SURVEY,
        "SYNTHET": True,
        "DATA_V": GENERATOR_VERSION,
        "OBJTYPE": "SYNTHETIC",
        "DESIG": spectrum.object_id,
        "FILENAME": f"{spectrum.object_id}.fits",
        "Z": 0.0,
        "VACUUM": True,
        "HELIO": True,
        "SNRR": float(spectrum.snr or 0.0),
        "COMMENT": "Synthetic SpecVI-mini spectrum, not an observation.",
    }


def _manifest_entry(sample: SyntheticSample, relative: Path) -> dict[str, Any]:
    return {
        "object_id": sample.spectrum.object_id,
        "file": relative.as_posix(),
        "task": sample.task,
        "bench_task": bench_code(sample.task),
        "label": "YES" if sample.label else "NO",
        "subtype": sample.subtype,
        "split": sample.split,
        "index": sample.index,
        "snr": sample.spectrum.snr,
        "resolving_power": sample.params["resolving_power"],
        "params": sample.params,
    }


def _write_parquet(out: Path, code: str, split: str, samples: Sequence[SyntheticSample]) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agent.tool import SpectralVisualizationTool

    prompt = build_prompt(get_task(code))
    rows = []
    for sample in samples:
        image = SpectralVisualizationTool(sample.spectrum).render_full()
        if image.png is None:
            raise ValueError(f"{sample.spectrum.object_id}: the full view could not be rendered")
        rows.append(
            {
                "data_source": DATA_SOURCE,
                "prompt": [{"role": "user", "content": prompt}],
                "images": [{"bytes": image.png}],
                "ability": "spectral_inspection",
                "reward_model": {"style": "rule", "ground_truth": "YES" if sample.label else "NO"},
                "extra_info": {
                    "index": sample.index,
                    "name": sample.spectrum.object_id,
                    "split": split,
                    "task": bench_code(code),
                    "tools_kwargs": {
                        "spectral_visualization_tool": {
                            "create_kwargs": {
                                "wavelength": sample.spectrum.wavelength.tolist(),
                                "flux": sample.spectrum.flux.tolist(),
                                "redshift": 0.0,
                            }
                        }
                    },
                },
            }
        )
    relative = Path("data") / f"{split}_{bench_code(code)}.parquet"
    (out / relative).parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=_parquet_schema(pa))
    pq.write_table(table, out / relative, compression="zstd")
    return relative.as_posix()


def _parquet_schema(pa: Any) -> Any:
    create_kwargs = pa.struct(
        [
            ("wavelength", pa.list_(pa.float64())),
            ("flux", pa.list_(pa.float64())),
            ("redshift", pa.float64()),
        ]
    )
    tool = pa.struct([("create_kwargs", create_kwargs)])
    extra_info = pa.struct(
        [
            ("index", pa.int64()),
            ("name", pa.string()),
            ("split", pa.string()),
            ("task", pa.string()),
            ("tools_kwargs", pa.struct([("spectral_visualization_tool", tool)])),
        ]
    )
    return pa.schema(
        [
            ("data_source", pa.string()),
            ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
            ("images", pa.list_(pa.struct([("bytes", pa.binary())]))),
            ("ability", pa.string()),
            ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", pa.string())])),
            ("extra_info", extra_info),
        ]
    )


_README = """
# SpecVI-mini (SYNTHETIC)

Every spectrum here is synthetic: made by specvet's SpecVI-mini generator, not observed by any
telescope. It mimics LAMOST low-resolution spectra (log-linear vacuum grid 3700-9100 A, a
resolving power drawn per spectrum in R 1200-2500 and recorded as RESOLVPW, relative flux, ivar
with Poisson, sky and read noise, a blue end with a few per cent of the red S/N, sky-line and OH
residuals, telluric bands, the dichroic junction near 5700-5900 A, flux-calibration tilts, cosmic
rays, radial velocities and masked bad pixels) and builds each object from physically motivated
ingredients (Planck continua, molecular bands with the right shading, pseudo-Voigt lines, disc
emission profiles, pressure-broadened white-dwarf Balmer lines, redshifted quasar lines).

Each task (CV, CS, SS, MG, WD; O, B, A on request) has positives and hard negatives: negatives are
rejection-sampled, keeping those a weak classifier calls positive, as in the Spec-o3 paper. Train
splits are balanced, test splits are about 1:5 like SpecVI-Bench. Use it to exercise the
pipeline, never to claim performance on real spectra.

Files: spectra/{task}/{split}/{object_id}.fits (LAMOST new layout, TELESCOP='SpecVI-mini',
SYNTHET=T), data/{split}_{task}.parquet (SpecVI-Bench/verl rows, data_source 'specvi-mini'),
manifest.json (per sample: file, task, label, subtype, split, snr, resolving power, generator
parameters including the weak classifier's score; the subtype and parameters are for analysis and
must not be shown to a policy).
"""
