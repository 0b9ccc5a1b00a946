"""What a FITS header says about a spectrum's wavelengths: the grid of a 1-D image (linear,
log10 or FITS log WCS, SDSS COEFF0/COEFF1), the unit, and the frame (air or vacuum)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from astropy import units
from astropy.io import fits

from agent.reading import SpectrumFormatError
from agent.spectra.value import _finite_float, _json_safe

_ANGSTROM_SPELLINGS = frozenset({"a", "aa", "å", "angstrom", "angstroms", "ang", "angs", "0.1 nm"})
_WAT_UNITS = re.compile(r"units=(\S+)", re.IGNORECASE)


def angstrom_per(unit: str | None, where: str) -> float:
    """Angstrom per ``unit`` of wavelength; length units only (None means Angstrom)."""
    if unit is None or not unit.strip() or unit.strip().lower() in _ANGSTROM_SPELLINGS:
        return 1.0
    spelled = {"angstroms": "Angstrom", "microns": "micron", "nanometers": "nm"}
    text = spelled.get(unit.strip().lower(), unit.strip())
    try:
        return float(units.Unit(text).to(units.AA))
    except (ValueError, TypeError, units.UnitsError) as exc:
        raise SpectrumFormatError(
            f"{where}: unknown wavelength unit {unit!r} (expected a length such as Angstrom, nm "
            "or micron)"
        ) from exc


def header_wavelength_unit(header: fits.Header) -> str | None:
    """CUNIT1, or the units= of IRAF's WAT1_001 card; None when the header names none."""
    unit = _json_safe(header.get("CUNIT1"))
    if isinstance(unit, str) and unit:
        return unit
    wat = _json_safe(header.get("WAT1_001"))
    if isinstance(wat, str) and (match := _WAT_UNITS.search(wat)):
        return match.group(1)
    return None


def header_grid(header: fits.Header, size: int, where: str) -> tuple[np.ndarray, dict[str, Any]]:
    """The wavelength of each of ``size`` pixels in Angstrom, and how it was worked out.

    SDSS COEFF0/COEFF1 (log10 Angstrom); otherwise CRVAL1 + step * (pixel - CRPIX1) with the step
    from CD1_1 or CDELT1, read as log10 Angstrom when DC-FLAG = 1, as the FITS WCS logarithmic
    axis when CTYPE1 is 'WAVE-LOG', and as linear otherwise.
    """
    pixel = np.arange(size, dtype=np.float64)
    coeff0, coeff1 = _finite_float(header.get("COEFF0")), _finite_float(header.get("COEFF1"))
    if coeff0 is not None and coeff1 is not None:
        return 10.0 ** (coeff0 + coeff1 * pixel), {"wavelength_grid": "log10 COEFF0/COEFF1"}
    start = _finite_float(header.get("CRVAL1"))
    step = _finite_float(header.get("CD1_1", header.get("CDELT1")))
    if start is None or step is None or step == 0.0:
        raise SpectrumFormatError(
            f"{where}: a 1-D image without a wavelength solution: the header needs CRVAL1 and "
            "CDELT1 or CD1_1 (or SDSS COEFF0/COEFF1)"
        )
    dc_flag = _finite_float(header.get("DC-FLAG"))
    if dc_flag is not None and dc_flag < 0:
        raise SpectrumFormatError(
            f"{where}: DC-FLAG = {dc_flag:g}: the image has no wavelength calibration"
        )
    # FITS pixels count from 1, and a missing CRPIX1 is 0 (WCS paper I), as astropy.wcs reads it
    reference = _finite_float(header.get("CRPIX1"))
    offset = pixel + 1.0 - (0.0 if reference is None else reference)
    ctype = str(_json_safe(header.get("CTYPE1")) or "").upper()
    scale = angstrom_per(header_wavelength_unit(header), where)
    if dc_flag == 1:
        return 10.0 ** (start + step * offset) * scale, {"wavelength_grid": "log10 (DC-FLAG = 1)"}
    if ctype.endswith("-LOG") and scale == 1.0 and 0 < start < 5.0:
        # SDSS/MaNGA write 'WAVE-LOG' over log10 Angstrom; read as FITS WCS paper III says,
        # CRVAL1 would be a wavelength of under 5 Angstrom, which no such spectrum starts at
        grid = 10.0 ** (start + step * offset)
        return grid, {"wavelength_grid": f"log10 (CTYPE1 = {ctype!r}, CRVAL1 = {start:g})"}
    if ctype.endswith("-LOG"):
        grid = start * np.exp(step * offset / start)
        return grid * scale, {"wavelength_grid": f"logarithmic (CTYPE1 = {ctype!r})"}
    grid = (start + step * offset) * scale
    if grid.size and 0 < start < 5.0 and 0 < abs(step) < 0.01 and scale == 1.0:
        # reported, not guessed: the range check refuses the grid with this hint
        raise SpectrumFormatError(
            f"{where}: CRVAL1 = {start:g} and step {step:g} give a grid of "
            f"{grid[0]:.4g}-{grid[-1]:.4g} Angstrom; they look like log10 Angstrom, but the "
            "header says neither DC-FLAG = 1 nor CTYPE1 = 'WAVE-LOG'"
        )
    return grid, {"wavelength_grid": "linear"}


_AIR = frozenset({"air", "a"})
_VACUUM = frozenset({"vac", "vacuum", "v"})


def header_frame(header: fits.Header, ctype_key: str = "CTYPE1") -> tuple[str, str] | None:
    """(frame, basis) from AIRORVAC, VACUUM, or an 'AWAV' axis; None when the header says
    nothing. 'WAVE' is vacuum in FITS WCS paper III, but writers put it over air wavelengths
    too (MaNGA's MILES templates), so it is not taken as a statement."""
    air_or_vacuum = _json_safe(header.get("AIRORVAC"))
    if isinstance(air_or_vacuum, str) and air_or_vacuum.lower() in _AIR | _VACUUM:
        frame = "air" if air_or_vacuum.lower() in _AIR else "vacuum"
        return frame, f"AIRORVAC = {air_or_vacuum!r}"
    vacuum = header.get("VACUUM")
    if isinstance(vacuum, bool):
        return ("vacuum" if vacuum else "air"), f"VACUUM = {'T' if vacuum else 'F'}"
    ctype = str(_json_safe(header.get(ctype_key)) or "").upper()
    if ctype.startswith("AWAV"):
        return "air", f"{ctype_key} = {ctype!r} (air by the FITS WCS standard)"
    return None


def header_flux_unit(header: fits.Header, key: str = "BUNIT") -> str | None:
    unit = _json_safe(header.get(key))
    return unit if isinstance(unit, str) and unit else None
