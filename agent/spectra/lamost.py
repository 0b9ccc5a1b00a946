"""LAMOST spectra: the old (2-D primary) and new (COADD table) layouts, and writing the new one."""

from __future__ import annotations

import gzip
import io
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
from astropy.io import fits

from agent.reading import SpectrumFormatError
from agent.resolution import Resolution, ResolutionError
from agent.spectra.fitsio import _has_column, _table_column
from agent.spectra.value import (
    Spectrum,
    ValidatedArrays,
    _finish,
    _finite_float,
    _json_safe,
    _pick,
    _redshift,
    frame_meta,
    validate_arrays,
)

_LAMOST_META = (
    "TELESCOP", "DATA_V", "CLASS", "SUBCLASS", "OBSID", "DESIG", "FILENAME", "LMJD", "MJD",
    "PLANID", "SPID", "FIBERID", "RA", "DEC", "Z", "Z_ERR", "ZFLAG", "SNRU", "SNRG", "SNRR",
    "SNRI", "SNRZ", "OBJTYPE", "OBJNAME", "TSOURCE", "HELIO_RV", "EXPTIME", "NEXP", "FIBERMAS",
    "FIB_MASK", "VERSPIPE", "NORM", "SYNTHET",
)  # fmt: skip


def _load_lamost_old(primary: fits.PrimaryHDU, source: str) -> Spectrum:
    image = np.asarray(primary.data, dtype=np.float64)
    where = f"{source} [primary HDU]"
    if image.shape[0] < 3:
        raise SpectrumFormatError(
            f"{where}: image of shape {image.shape} is not a LAMOST (5, N) spectrum image"
        )
    header = primary.header
    meta = _pick(header, _LAMOST_META)
    wavelength = image[2]
    mask_rows = image[3:5]
    if not _plausible_wavelength_grid(wavelength):
        wavelength = _log_linear_grid(header, image.shape[1], where)
        meta["wavelength_from_header"] = True
        # Pilot-survey files store other rows here; only integer-valued rows can be bit masks.
        mask_rows = mask_rows if _integer_valued(mask_rows) else mask_rows[:0]
    meta["layout"] = "LAMOST (5, N) primary image (<= DR7)"
    andmask = mask_rows[0] if mask_rows.shape[0] else None
    arrays = validate_arrays(wavelength, image[0], image[1], source=where, mask=andmask)
    return _lamost_spectrum(arrays, header, meta, source)


def _load_lamost_new(hdus: fits.HDUList, source: str) -> Spectrum:
    coadd = hdus["COADD"]
    where = f"{source} [HDU COADD]"
    rows = 0 if coadd.data is None else len(coadd.data)
    if rows != 1:
        raise SpectrumFormatError(f"{where}: expected one row of vector columns, found {rows}")
    wavelength = _table_column(coadd, "WAVELENGTH", source)[0]
    flux = _table_column(coadd, "FLUX", source)[0]
    ivar = _table_column(coadd, "IVAR", source)[0] if _has_column(coadd, "IVAR") else None
    andmask = _table_column(coadd, "ANDMASK", source)[0] if _has_column(coadd, "ANDMASK") else None
    arrays = validate_arrays(wavelength, flux, ivar, source=where, mask=andmask)
    meta = _pick(hdus[0].header, _LAMOST_META)
    meta["layout"] = "LAMOST COADD table (>= DR8)"
    return _lamost_spectrum(arrays, hdus[0].header, meta, source)


def _lamost_spectrum(
    arrays: ValidatedArrays, header: fits.Header, meta: dict[str, Any], source: str
) -> Spectrum:
    # CLASS/SUBCLASS stay in meta: they are pipeline guesses, not ground truth.
    meta.update(_survey_frame(header, "LAMOST spectra are in vacuum", source))
    return _finish(
        arrays,
        source=source,
        survey=_lamost_survey(header),
        object_id=_lamost_object_id(header),
        redshift=_redshift(header.get("Z")),
        ra=_finite_float(header.get("RA")),
        dec=_finite_float(header.get("DEC")),
        snr=_lamost_snr(header),
        meta=meta,
        resolution=_header_resolution(header, source),
    )


def _survey_frame(header: fits.Header, convention: str, source: str) -> dict[str, str]:
    """Vacuum, as the file's VACUUM card says, or by the survey's convention; a file that says
    VACUUM = F is refused rather than read in the wrong frame."""
    vacuum = header.get("VACUUM")
    if vacuum is False:
        raise SpectrumFormatError(
            f"{source}: VACUUM = F: air wavelengths in a survey layout whose wavelengths are vacuum"
        )
    if vacuum is True:
        return frame_meta("vacuum", "file", "VACUUM = T")
    return frame_meta("vacuum", "survey", convention)


def _header_resolution(header: fits.Header, source: str) -> Resolution | None:
    """specvet's RESOLVPW key (resolving power) when present; the survey default otherwise."""
    power = _finite_float(header.get("RESOLVPW"))
    if power is None:
        return None
    try:
        return Resolution.constant_r(power, source="file", note="RESOLVPW header key")
    except ResolutionError as exc:
        raise SpectrumFormatError(f"{source}: header key RESOLVPW: {exc}") from exc


def _lamost_survey(header: fits.Header) -> str:
    """'LAMOST', unless the file says another telescope wrote it (e.g. our synthetic benchmark)."""
    telescope = str(_json_safe(header.get("TELESCOP")) or "")
    return telescope if telescope and "LAMOST" not in telescope.upper() else "LAMOST"


def _lamost_object_id(header: fits.Header) -> str:
    for key in ("OBSID", "DESIG", "FILENAME"):
        value = _json_safe(header.get(key))
        if value not in (None, ""):
            return str(value)
    return ""


def _lamost_snr(header: fits.Header) -> float | None:
    for key in ("SNRR", "SNRG"):
        value = _finite_float(header.get(key))
        if value is not None and value >= 0:
            return value
    return None


def _plausible_wavelength_grid(values: np.ndarray) -> bool:
    return bool(
        np.all(np.isfinite(values))
        and np.all(np.diff(values) > 0)
        and values[0] >= 1000.0
        and values[-1] <= 100_000.0
    )


def _integer_valued(rows: np.ndarray) -> bool:
    return bool(np.all(np.isfinite(rows)) and np.all(rows >= 0) and np.all(rows == np.round(rows)))


def _log_linear_grid(header: fits.Header, size: int, where: str) -> np.ndarray:
    start = header.get("COEFF0", header.get("CRVAL1"))
    step = header.get("COEFF1", header.get("CD1_1"))
    if _finite_float(start) is None or _finite_float(step) is None:
        raise SpectrumFormatError(
            f"{where}: row 2 is not a wavelength grid and the header has no COEFF0/COEFF1"
        )
    reference_pixel = _finite_float(header.get("CRPIX1")) if "COEFF0" not in header else 1.0
    offset = 1.0 - (reference_pixel or 1.0)
    return 10.0 ** (float(start) + float(step) * (np.arange(size) + offset))


_FITS_KEY = re.compile(r"^[A-Z0-9_-]{1,8}$")
_LAMOST_META_KEYS = (
    "DATA_V", "CLASS", "SUBCLASS", "OBSID", "DESIG", "FILENAME", "LMJD", "MJD", "PLANID", "SPID",
    "FIBERID", "Z", "Z_ERR", "ZFLAG", "SNRU", "SNRG", "SNRR", "SNRI", "SNRZ", "OBJTYPE", "TSOURCE",
    "OBJNAME", "HELIO_RV", "EXPTIME", "NEXP", "FIB_MASK", "FIBERMAS", "VERSPIPE",
)  # fmt: skip


def save_lamost_fits(
    spectrum: Spectrum, path: str | os.PathLike[str], *, header: dict[str, Any] | None = None
) -> None:
    """Write ``spectrum`` in the LAMOST DR8+ layout (empty primary + one-row 'COADD' table).

    The bytes depend only on the input (no date keys; gzip with mtime=0 for a ``.gz`` path).
    ``header`` entries go to the primary header and win over the values derived from the spectrum.
    """
    target = Path(path)
    wavelength32 = np.asarray(spectrum.wavelength, dtype=np.float32)
    if wavelength32.size < 2 or np.any(np.diff(wavelength32) <= 0):
        raise SpectrumFormatError(
            f"{target}: wavelength grid is not strictly increasing at float32 precision"
        )
    primary = fits.PrimaryHDU(header=_lamost_primary_header(spectrum, header or {}, target))
    coadd = fits.BinTableHDU.from_columns(_lamost_coadd_columns(spectrum), name="COADD")
    buffer = io.BytesIO()
    fits.HDUList([primary, coadd]).writeto(buffer, output_verify="exception")
    data = buffer.getvalue()
    if target.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    target.write_bytes(data)


def _lamost_primary_header(spectrum: Spectrum, extra: dict[str, Any], target: Path) -> fits.Header:
    cards: dict[str, Any] = {"TELESCOP": "LAMOST", "DATA_V": "specvet"}
    for key in _LAMOST_META_KEYS:
        value = spectrum.meta.get(key)
        if isinstance(value, str | int | float | bool) and not _is_nan(value):
            cards[key] = value
    if spectrum.object_id.isdigit() and str(int(spectrum.object_id)) == spectrum.object_id:
        cards["OBSID"] = int(spectrum.object_id)
    elif spectrum.object_id:
        cards.pop("OBSID", None)
        cards["DESIG"] = spectrum.object_id
    if spectrum.ra is not None:
        cards["RA"] = float(spectrum.ra)
    if spectrum.dec is not None:
        cards["DEC"] = float(spectrum.dec)
    cards["Z"] = float(spectrum.redshift)
    if spectrum.snr is not None and np.isfinite(spectrum.snr):
        cards["SNRR"] = float(spectrum.snr)
    cards.update({"NORM": 0, "N_EXTEN": 2, "VACUUM": True})
    if spectrum.resolution is not None and spectrum.resolution.source in ("file", "user"):
        cards["RESOLVPW"] = round(spectrum.resolution.resolving_power_at(6000.0), 1)
    for key, value in extra.items():
        if not isinstance(key, str) or not _FITS_KEY.match(key):
            raise SpectrumFormatError(
                f"{target}: header key {key!r} must be an upper-case FITS keyword of <= 8 characters"
            )
        if not isinstance(value, str | int | float | bool):
            raise SpectrumFormatError(
                f"{target}: header value for {key} must be str, int, float or bool, "
                f"not {type(value).__name__}"
            )
        cards[key] = value
    return fits.Header(list(cards.items()))


def _lamost_coadd_columns(spectrum: Spectrum) -> list[fits.Column]:
    size = len(spectrum)
    assert spectrum.mask is not None
    mask_bits = spectrum.mask.astype(np.float32)
    arrays: dict[str, np.ndarray | None] = {
        "FLUX": np.asarray(spectrum.flux, dtype=np.float32),
        "IVAR": None if spectrum.ivar is None else np.asarray(spectrum.ivar, dtype=np.float32),
        "WAVELENGTH": np.asarray(spectrum.wavelength, dtype=np.float32),
        "ANDMASK": mask_bits,
        "ORMASK": mask_bits,
        "NORMALIZATION": np.full(size, -9999.0, dtype=np.float32),
    }
    # A spectrum without ivar is written without the IVAR column rather than with invented errors.
    return [
        fits.Column(name=name, format=f"{size}E", array=values[np.newaxis, :])
        for name, values in arrays.items()
        if values is not None
    ]


def _is_nan(value: object) -> bool:
    return isinstance(value, float) and not np.isfinite(value)
