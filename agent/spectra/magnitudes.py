"""Spectra given as AB magnitudes (the IRAF ``onedstds`` standard-star tables: wavelength, AB
magnitude, bandpass): recognised from a declaration or a header, converted to flux density, and
never read as flux by default, since a magnitude read as flux turns the spectrum upside down
(brighter is smaller).

The conversion (Oke & Gunn 1983): f_nu = 10^(-0.4 (m_AB + 48.60)) erg s-1 cm-2 Hz-1, then
f_lambda = f_nu c / lambda^2 with lambda the vacuum wavelength in Angstrom and
c = 2.99792458e18 Angstrom s-1, giving erg s-1 cm-2 Angstrom-1.
"""

from __future__ import annotations

import math

import numpy as np

from agent.reading import SpectrumFormatError

AB_ZERO_POINT = 48.60  # m_AB = -2.5 log10(f_nu / erg s-1 cm-2 Hz-1) - 48.60
C_ANGSTROM_PER_S = 2.99792458e18
FLUX_UNIT = "erg s-1 cm-2 Angstrom-1"
CONVERSION = (
    "AB magnitude m to flux: f_nu = 10^(-0.4 (m + 48.60)) erg s-1 cm-2 Hz-1, "
    "f_lambda = f_nu c / lambda^2 (vacuum lambda in Angstrom) in erg s-1 cm-2 Angstrom-1"
)
# A magnitude outside this range is a placeholder for "no measurement" (99, -99), not a star.
USABLE_MAGNITUDES = (-30.0, 50.0)
# A headerless second column whose every value lies here, with a median of at least
# MAGNITUDE_LIKE_MEDIAN, looks like magnitudes (5-30 for stars and galaxies) and is not guessed.
MAGNITUDE_LIKE_RANGE = (0.0, 30.0)
MAGNITUDE_LIKE_MEDIAN = 5.0

AB_NAMES = frozenset(
    {"ab_mag", "abmag", "mag_ab", "m_ab", "ab_magnitude", "magnitude_ab", "ab", "ab_mags"}
)
OTHER_MAGNITUDE_NAMES = frozenset(
    {"mag", "mags", "magnitude", "magnitudes", "vega_mag", "vegamag", "st_mag", "stmag"}
)


def magnitude_unit(unit: str | None) -> str | None:
    """'ab' for an AB-magnitude unit ('mag(AB)', 'ABmag', 'AB mag', 'AB'), 'other' for another
    magnitude ('mag', 'Vega mag', 'STmag'), None for anything else."""
    if not unit:
        return None
    compact = unit.strip().lower().replace(" ", "").replace("_", "")
    if compact in {"ab", "abmag", "mag(ab)", "magab", "abmags", "abmagnitude"}:
        return "ab"
    if "mag" in compact:
        return "other"
    return None


def ab_to_flambda(magnitude: np.ndarray, wavelength_angstrom: np.ndarray) -> np.ndarray:
    """f_lambda (erg s-1 cm-2 Angstrom-1) of AB magnitudes at vacuum wavelengths in Angstrom;
    a magnitude outside USABLE_MAGNITUDES or not finite gives NaN (masked by the reader).

    >>> float(ab_to_flambda(np.array([0.0]), np.array([5500.0]))[0])  # doctest: +ELLIPSIS
    3.6...e-09
    """
    mags = np.asarray(magnitude, dtype=np.float64)
    low, high = USABLE_MAGNITUDES
    usable = np.isfinite(mags) & (mags >= low) & (mags <= high)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        f_nu = np.where(usable, 10.0 ** (-0.4 * (mags + AB_ZERO_POINT)), np.nan)
        wave = np.asarray(wavelength_angstrom, dtype=np.float64)
        return np.asarray(f_nu * C_ANGSTROM_PER_S / wave**2, dtype=np.float64)


def magnitude_error_to_flux_error(flux: np.ndarray, error_mag: np.ndarray) -> np.ndarray:
    """1-sigma flux error of a 1-sigma magnitude error: sigma_f = f 0.4 ln(10) sigma_m."""
    return np.asarray(np.abs(flux) * 0.4 * math.log(10.0) * error_mag, dtype=np.float64)


def looks_like_magnitudes(values: np.ndarray) -> bool:
    """Every finite value within MAGNITUDE_LIKE_RANGE and a median of at least
    MAGNITUDE_LIKE_MEDIAN: what a column of stellar or galaxy magnitudes looks like. A flux in
    physical units (1e-17 .. 1e-12), a normalised flux (around 1) or counts with noise around
    zero does not."""
    finite = values[np.isfinite(values)]
    if finite.size < 2:
        return False
    low, high = MAGNITUDE_LIKE_RANGE
    return bool(
        finite.min() >= low and finite.max() <= high and np.median(finite) >= MAGNITUDE_LIKE_MEDIAN
    )


def refuse_magnitude_like(values: np.ndarray, source: str, where: str) -> None:
    """A headerless flux column that looks like magnitudes is refused, never read as flux."""
    if not looks_like_magnitudes(values):
        return
    finite = values[np.isfinite(values)]
    raise SpectrumFormatError(
        f"{source}: headerless two-column table whose second column looks like magnitudes, "
        f"not flux (every value between {MAGNITUDE_LIKE_RANGE[0]:g} and "
        f"{MAGNITUDE_LIKE_RANGE[1]:g}, median {np.median(finite):.2f}): read as flux, a "
        "magnitude spectrum comes out upside down, so it is not guessed. Declare the columns "
        f"{where}: 'wavelength,ab_mag' for AB magnitudes (e.g. an IRAF onedstds standard), "
        "'wavelength,flux' if it is flux"
    )


def refuse_non_ab(unit_or_name: str, source: str, what: str, hint: str) -> SpectrumFormatError:
    return SpectrumFormatError(
        f"{source}: {what} {unit_or_name!r} holds magnitudes but does not say they are AB "
        "magnitudes: only AB magnitudes are converted to flux (Vega or ST magnitudes need a "
        "zero point per wavelength), and magnitudes are never read as flux. If they are AB, "
        f"{hint}"
    )


def refuse_magnitude_unit(unit: str | None, where: str) -> None:
    """A FITS spectrum whose flux unit is a magnitude is refused: FITS files name their columns,
    so there is nothing to declare, and magnitudes read as flux come out upside down."""
    if magnitude_unit(unit) is None:
        return
    raise SpectrumFormatError(
        f"{where}: the flux is in {unit!r}, magnitudes, not flux: read as flux the spectrum comes "
        "out upside down, and FITS magnitudes are not converted. Convert it to flux, or give "
        "it as a text table declared 'wavelength,ab_mag' if the magnitudes are AB"
    )
