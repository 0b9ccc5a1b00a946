"""FITS binary tables of one spectrum, behind an empty (or any) primary HDU: one row per pixel
(STSDAS/CALSPEC, IRAF tables) or one row of array columns (ESO Phase 3 spectra, X-shooter).

Column roles come from the column names (and the wavelength unit from TUNITn); a column whose
role the name does not make clear is left out, never taken for an uncertainty."""

from __future__ import annotations

from typing import Any

import numpy as np
from astropy.io import fits

from agent.reading import ReadLimits, SpectrumFormatError, over_limit
from agent.spectra.images import _ivar_from, _kept, _resolution, _survey
from agent.spectra.magnitudes import refuse_magnitude_unit
from agent.spectra.value import (
    Spectrum,
    _finish,
    frame_meta,
    vacuum_wavelengths,
    validate_arrays,
)
from agent.spectra.wcs import angstrom_per, header_frame

_ROLES: dict[str, frozenset[str]] = {
    "wavelength": frozenset({"WAVE", "WAVELENGTH", "LAMBDA", "LAM", "WL", "WAVELEN", "AWAV"}),
    "loglam": frozenset({"LOGLAM", "LOGLAMBDA", "LOG_WAVE", "LOGWAVE"}),
    "flux": frozenset({"FLUX", "FLAM", "F_LAMBDA", "FLUX_DENSITY", "FLUXDENSITY", "SPEC"}),
    "sigma": frozenset(
        {
            "ERR",
            "ERROR",
            "SIGMA",
            "FLUX_ERR",
            "FLUX_ERROR",
            "ERR_FLUX",
            "ERROR_FLUX",
            "STATERROR",
            "UNCERTAINTY",
            "NOISE",
            "FLUX_SIGMA",
            "E_FLUX",
            "FLUXERR",
        }
    ),  # fmt: skip
    "ivar": frozenset({"IVAR", "INVVAR", "INVERSE_VARIANCE", "FLUX_IVAR"}),
    "variance": frozenset({"VAR", "VARIANCE", "FLUX_VAR"}),
    "mask": frozenset({"MASK", "QUAL", "QUALITY", "DQ", "AND_MASK", "ANDMASK"}),
}
# more pixels than this share without a usable error: the column is not read as uncertainties
MISSING_ERRORS = 0.1
_FRAME_SUFFIXES = {"_AIR": "air", "_VAC": "vacuum", "_VACUUM": "vacuum"}


def _role(name: str) -> tuple[str, str | None]:
    """(role, frame the name states) of a column name; role "other" when unclear."""
    upper = name.strip().upper()
    for suffix, frame in _FRAME_SUFFIXES.items():
        if upper.endswith(suffix) and upper[: -len(suffix)] in _ROLES["wavelength"]:
            return "wavelength", frame
    if upper == "AWAV":
        return "wavelength", "air"
    for role, names in _ROLES.items():
        if upper in names:
            return role, None
    return "other", None


def spectrum_table(hdus: fits.HDUList) -> Any | None:
    """The first table HDU with a wavelength and a flux column, or None."""
    for hdu in hdus[1:]:
        if isinstance(hdu, fits.BinTableHDU | fits.TableHDU) and hdu.data is not None:
            roles = {_role(name)[0] for name in hdu.columns.names}
            if "flux" in roles and roles & {"wavelength", "loglam"}:
                return hdu
    return None


def load_table(hdus: fits.HDUList, table: Any, source: str, limits: ReadLimits) -> Spectrum:
    where = f"{source} [HDU {table.name or hdus.index_of(table)}]"
    columns = _columns_by_role(table, where)
    rows = len(table.data)
    one_row = rows == 1 and np.ndim(table.data[columns["flux"]]) == 2
    size = table.data[columns["flux"]].shape[-1] if one_row else rows
    if size > limits.max_pixels:
        raise over_limit(where, f"{size} pixels in one spectrum", limits, "max_pixels")
    if not one_row and np.ndim(table.data[columns["flux"]]) != 1:
        raise SpectrumFormatError(
            f"{where}: {rows} rows of array columns; one spectrum per file is read (one row of "
            "arrays, or one row per pixel)"
        )

    def values(name: str) -> np.ndarray:
        column = table.data[name]
        read = np.asarray(column[0] if one_row else column, dtype=np.float64).reshape(-1)
        return _nulls_to_nan(read, table.header, table.columns.names.index(name) + 1)

    meta: dict[str, Any] = {
        "layout": "table, one row of arrays" if one_row else "table, one row per pixel",
        "columns_used": dict(columns),
    }
    wavelength, frame = _table_wavelength(table, columns, values, hdus[0].header, where)
    ivar = None
    for kind in ("ivar", "sigma", "variance"):
        if kind in columns:
            ivar = _ivar_from(values(columns[kind]), kind)
            if kind != "ivar":
                ivar = _unless_mostly_missing(ivar, values(columns["flux"]), columns[kind], meta)
            break
    mask = values(columns["mask"]) != 0 if "mask" in columns else None
    refuse_magnitude_unit(_unit(table, columns["flux"]), f"{where} column {columns['flux']}")
    arrays = validate_arrays(wavelength, values(columns["flux"]), ivar, source=where, mask=mask)
    primary = hdus[0].header
    meta.update(_kept(primary, table.header))
    flux_unit = _unit(table, columns["flux"])
    if flux_unit:
        meta["flux_unit"] = flux_unit
    ignored = [n for n in table.columns.names if n not in columns.values()]
    if ignored:
        meta["ignored_columns"] = ignored
    meta.update(frame)
    return _finish(
        arrays,
        source=source,
        survey=_survey(primary, table.header),
        object_id=str(meta.get("OBJECT", "")),
        meta=meta,
        resolution=_resolution(table.header, primary, source),
    )


def _nulls_to_nan(read: np.ndarray, header: fits.Header, number: int) -> np.ndarray:
    """``read`` with the column's declared null value (TNULLn) as NaN. The FITS standard gives
    TNULLn to integer columns only, so astropy ignores it on floating ones, but CALSPEC writes
    TNULLn = 1.6e38 on its float columns and puts that value where STATERROR is unknown
    (p177d_stis_001 below 5300 Å): read as an error it made every line there look
    insignificant."""
    null = header.get(f"TNULL{number}")
    if isinstance(null, bool) or not isinstance(null, int | float):
        return read
    if not np.issubdtype(read.dtype, np.floating):
        return read
    # a float32 column holds the null rounded to single precision
    return np.where(np.isclose(read, float(null), rtol=1e-6, atol=0.0), np.nan, read)


def _unless_mostly_missing(
    ivar: np.ndarray, flux: np.ndarray, name: str, meta: dict[str, Any]
) -> np.ndarray | None:
    """None when the error column has no usable value (NaN, 0) for more than a tenth of the
    pixels with a flux: CALSPEC leaves STATERROR blank over the Oke and Hayes parts, and
    reading a missing uncertainty as a bad pixel masked their whole optical range (p041c_001:
    0 good pixels of 7,681)."""
    measured = np.isfinite(flux)
    if not measured.any():
        return ivar
    missing = int(np.count_nonzero(measured & (ivar <= 0)))
    if missing <= MISSING_ERRORS * int(np.count_nonzero(measured)):
        return ivar
    meta["uncertainty_left_out"] = (
        f"column {name} has no usable value (NaN or <= 0) for {missing} of "
        f"{int(np.count_nonzero(measured))} pixels: read as unknown, not as bad pixels"
    )
    return None


def _columns_by_role(table: Any, where: str) -> dict[str, str]:
    found: dict[str, list[str]] = {}
    for name in table.columns.names:
        role = _role(name)[0]
        if role != "other":
            found.setdefault(role, []).append(name)
    errors = [name for role in ("sigma", "ivar", "variance") for name in found.get(role, [])]
    repeated = {role: names for role, names in found.items() if len(names) > 1}
    if len(errors) > 1:
        repeated["uncertainty"] = errors
    if "wavelength" in found and "loglam" in found:
        repeated["wavelength"] = found["wavelength"] + found["loglam"]
    if repeated:
        listed = "; ".join(f"{role}: {', '.join(names)}" for role, names in repeated.items())
        raise SpectrumFormatError(
            f"{where}: more than one column for the same role ({listed}); which one to read is "
            "not guessed"
        )
    return {role: names[0] for role, names in found.items()}


def _unit(table: Any, name: str) -> str | None:
    unit = table.columns[name].unit
    return str(unit).strip() or None if unit is not None else None


def _table_wavelength(
    table: Any, columns: dict[str, str], values: Any, primary: fits.Header, where: str
) -> tuple[np.ndarray, dict[str, str]]:
    if "loglam" in columns:
        wavelength = 10.0 ** values(columns["loglam"])
        name = columns["loglam"]
    else:
        name = columns["wavelength"]
        wavelength = values(name) * angstrom_per(_unit(table, name), f"{where} column {name}")
    named = _role(name)[1]
    said = (
        (named, f"column name {name!r}")
        if named
        else header_frame(table.header) or header_frame(primary)
    )
    if said is None:
        return wavelength, frame_meta("vacuum", "assumed", "the file names no frame")
    frame, basis = said
    return vacuum_wavelengths(wavelength, frame, where), frame_meta(frame, "file", basis)
