"""Spectra in: one value type and one loader for every survey layout we support."""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import re
import warnings
from array import array as packed_array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from astropy import units
from astropy.io import fits

from agent.reading import (
    FileContent,
    check_fits_structure,
    check_parquet_metadata,
    open_content,
    over_limit,
    read_npz,
)
from agent.reading import ReadLimits as ReadLimits
from agent.reading import SpectrumFormatError as SpectrumFormatError
from agent.reading import SpectrumTooLarge as SpectrumTooLarge
from agent.resolution import Resolution, ResolutionError, parse_user_value, survey_default


@dataclass
class Spectrum:
    """One 1-D spectrum in vacuum Angstrom, observed frame.

    ``mask`` is True where a pixel is bad (non-finite flux, zero ivar, survey mask bits);
    such pixels are kept, never dropped, so indices line up with the file.
    """

    wavelength: np.ndarray  # float64, strictly increasing, vacuum Angstrom, observed frame
    flux: np.ndarray  # float64, same length
    ivar: np.ndarray | None = None  # float64 inverse variance, or None when the file has none
    mask: np.ndarray | None = None  # bool, True = bad pixel; filled in __post_init__
    redshift: float = 0.0  # 0 when unknown
    survey: str = "unknown"  # "LAMOST", "SDSS", "DESI", "SpecVI-Bench", "SpecVI-mini", "table"
    object_id: str = ""
    ra: float | None = None
    dec: float | None = None
    snr: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # header keys worth keeping (JSON-safe)
    source: str = ""  # where it was read from: "path" or "path#row"
    # instrumental line-spread FWHM; filled from the survey default or the sampling when None
    resolution: Resolution | None = None

    def __post_init__(self) -> None:
        self.wavelength = np.asarray(self.wavelength, dtype=np.float64)
        self.flux = np.asarray(self.flux, dtype=np.float64)
        if self.resolution is None and self.wavelength.size >= 2:
            self.resolution = survey_default(self.survey, self.wavelength)
        if self.ivar is not None:
            self.ivar = np.asarray(self.ivar, dtype=np.float64)
        bad = ~np.isfinite(self.flux)
        if self.ivar is not None:
            with np.errstate(invalid="ignore"):
                bad |= ~np.isfinite(self.ivar) | (self.ivar <= 0)
        self.mask = bad if self.mask is None else (np.asarray(self.mask, dtype=bool) | bad)

    @property
    def rest_wavelength(self) -> np.ndarray:
        return self.wavelength / (1.0 + self.redshift)

    @property
    def good(self) -> np.ndarray:
        """Boolean array of usable pixels."""
        assert self.mask is not None
        return ~self.mask

    def __len__(self) -> int:
        return int(self.wavelength.size)


class ValidatedArrays(NamedTuple):
    """Arrays that passed :func:`validate_arrays`: sorted by wavelength, same length, mask filled.

    A NamedTuple so callers may unpack it: ``wavelength, flux, ivar, mask = validate_arrays(...)``.
    """

    wavelength: np.ndarray
    flux: np.ndarray
    ivar: np.ndarray | None
    mask: np.ndarray


def validate_arrays(
    wavelength: Any,
    flux: Any,
    ivar: Any = None,
    *,
    source: str,
    mask: Any = None,
) -> ValidatedArrays:
    """Check and normalise the arrays of one spectrum; raise SpectrumFormatError naming ``source``.

    A decreasing or permuted grid is sorted, carrying flux/ivar/mask along; a duplicated wavelength
    is refused. Non-finite flux or ivar and ivar <= 0 are masked, never dropped.
    """
    return _validate(wavelength, flux, ivar, source=source, mask=mask, min_pixels=2)


def _validate(
    wavelength: Any, flux: Any, ivar: Any, *, source: str, mask: Any, min_pixels: int
) -> ValidatedArrays:
    wave = _as_1d_float(wavelength, "wavelength", source)
    values = _as_1d_float(flux, "flux", source)
    inverse_variance = None if ivar is None else _as_1d_float(ivar, "ivar", source)
    bad = np.zeros(wave.size, dtype=bool) if mask is None else _as_1d_bool(mask, source)
    _check_lengths(source, wavelength=wave, flux=values, ivar=inverse_variance, mask=bad)
    if wave.size < min_pixels:
        raise SpectrumFormatError(
            f"{source}: a spectrum needs at least {min_pixels} pixels, got {wave.size}"
        )
    _check_wavelength_values(wave, source)
    if not np.isfinite(values).any():
        raise SpectrumFormatError(f"{source}: all flux values are non-finite (NaN or inf)")
    if np.any(np.diff(wave) <= 0):
        order = np.argsort(wave, kind="stable")
        _refuse_duplicates(wave, order, source)
        wave, values, bad = wave[order], values[order], bad[order]
        inverse_variance = None if inverse_variance is None else inverse_variance[order]
    bad = bad | ~np.isfinite(values)
    if inverse_variance is not None:
        with np.errstate(invalid="ignore"):
            bad |= ~np.isfinite(inverse_variance) | (inverse_variance <= 0)
    return ValidatedArrays(wave, values, inverse_variance, bad)


def _as_1d_float(values: Any, name: str, source: str) -> np.ndarray:
    try:
        array = np.array(values, dtype=np.float64)  # a copy: the caller's arrays stay untouched
    except (TypeError, ValueError) as exc:
        raise SpectrumFormatError(f"{source}: {name} is not a numeric array ({exc})") from exc
    if array.ndim != 1:
        raise SpectrumFormatError(
            f"{source}: {name} must be one-dimensional, got shape {array.shape}"
        )
    return array


def _as_1d_bool(values: Any, source: str) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise SpectrumFormatError(
            f"{source}: mask must be one-dimensional, got shape {array.shape}"
        )
    if array.dtype == bool:
        return array.copy()
    with np.errstate(invalid="ignore"):
        return np.asarray(array != 0, dtype=bool)


def _check_lengths(source: str, **arrays: np.ndarray | None) -> None:
    sizes = {name: array.size for name, array in arrays.items() if array is not None}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{name} has {size}" for name, size in sizes.items())
        raise SpectrumFormatError(f"{source}: length mismatch between arrays: {listed}")


def _check_wavelength_values(wave: np.ndarray, source: str) -> None:
    not_finite = np.flatnonzero(~np.isfinite(wave))
    if not_finite.size:
        index = int(not_finite[0])
        raise SpectrumFormatError(
            f"{source}: wavelength at pixel {index} is not finite ({wave[index]})"
        )
    not_positive = np.flatnonzero(wave <= 0)
    if not_positive.size:
        index = int(not_positive[0])
        raise SpectrumFormatError(
            f"{source}: wavelengths must be positive; pixel {index} has {wave[index]}"
        )


def _refuse_duplicates(wave: np.ndarray, order: np.ndarray, source: str) -> None:
    sorted_wave = wave[order]
    repeats = np.flatnonzero(np.diff(sorted_wave) == 0)
    if repeats.size:
        first = int(repeats[0])
        pixels = sorted(int(i) for i in order[first : first + 2])
        raise SpectrumFormatError(
            f"{source}: wavelength grid is not monotonic: duplicate wavelength "
            f"{sorted_wave[first]} at pixels {pixels[0]} and {pixels[1]}"
        )


# --- air and vacuum ------------------------------------------------------------------------------

# IAU convention: below 2000 A wavelengths are quoted in vacuum, so no conversion is applied there.
_AIR_VACUUM_LIMIT = 2000.0


def air_to_vacuum(wavelength_air: float | np.ndarray) -> float | np.ndarray:
    """Air -> vacuum Angstrom (IAU standard, Morton 2000; inverse formula by N. Piskunov)."""
    air = _positive_wavelengths(wavelength_air)
    sigma2 = (1e4 / air) ** 2
    index = (
        1.0
        + 8.336624212083e-5
        + 2.408926869968e-2 / (1.301065924522e2 - sigma2)
        + 1.599740894897e-4 / (3.892568793293e1 - sigma2)
    )
    vacuum = np.where(air >= _AIR_VACUUM_LIMIT, air * index, air)
    return float(vacuum) if vacuum.ndim == 0 else vacuum


def vacuum_to_air(wavelength_vacuum: float | np.ndarray) -> float | np.ndarray:
    """Vacuum -> air Angstrom (IAU standard, Morton 2000, eq. 3 with Edlen-type coefficients)."""
    vacuum = _positive_wavelengths(wavelength_vacuum)
    sigma2 = (1e4 / vacuum) ** 2
    index = 1.0 + 8.34254e-5 + 2.406147e-2 / (130.0 - sigma2) + 1.5998e-4 / (38.9 - sigma2)
    air = np.where(vacuum >= _AIR_VACUUM_LIMIT, vacuum / index, vacuum)
    return float(air) if air.ndim == 0 else air


def _positive_wavelengths(values: float | np.ndarray) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if not np.all(np.isfinite(array) & (array > 0)):
        raise ValueError("air/vacuum conversion needs positive, finite wavelengths in Angstrom")
    return array


# --- loading -------------------------------------------------------------------------------------

_FITS_MAGIC = b"SIMPLE  ="
_PARQUET_MAGIC = b"PAR1"
_ZIP_MAGIC = b"PK\x03\x04"
# Markup where a spectrum should be: a web or error page saved under a spectrum's name.
_HTML_START = re.compile(rb"(?:\xef\xbb\xbf)?\s*<(?:!doctype\s+html|html)\b", re.IGNORECASE)
_XML_START = re.compile(rb"(?:\xef\xbb\xbf)?\s*<\?xml\b", re.IGNORECASE)


def load_spectra(
    path: str | os.PathLike[str], *, limits: ReadLimits | None = None
) -> list[Spectrum]:
    """Read every spectrum in ``path``; the format is detected from the content, not the name.

    Supported: LAMOST (old and new layout), SDSS spec, DESI coadd, SpecVI-Bench parquet, CSV,
    whitespace ASCII and NPZ tables; any of them gzip-, bzip2- or xz-compressed. Reading stays
    within ``limits`` (default ``ReadLimits()``); past them it raises SpectrumTooLarge.
    """
    source = str(path)
    limits = limits or ReadLimits()
    with open_content(Path(path), source, limits) as content:
        head = content.head
        if head.startswith((_FITS_MAGIC, _PARQUET_MAGIC, _ZIP_MAGIC)):
            raw = content.read_all()
            if raw.startswith(_FITS_MAGIC):
                spectra = _load_fits(raw, source, limits)
            elif raw.startswith(_PARQUET_MAGIC):
                spectra = _load_parquet(raw, source, limits)
            else:
                spectra = _load_npz(raw, source, limits)
        elif _HTML_START.match(head):
            raise SpectrumFormatError(
                f"{source}: not a spectrum file: an HTML page (a web or error page saved as a "
                "file?)"
            )
        elif _XML_START.match(head):
            raise SpectrumFormatError(
                f"{source}: not a spectrum file: XML (VOTable is not supported)"
            )
        else:
            spectra = _load_text(content, source, limits)
    _check_counts(spectra, source, limits)
    return spectra


def _check_counts(spectra: list[Spectrum], source: str, limits: ReadLimits) -> None:
    if len(spectra) > limits.max_spectra:
        raise over_limit(source, f"{len(spectra)} spectra in one file", limits, "max_spectra")
    for spectrum in spectra:
        if len(spectrum) > limits.max_pixels:
            raise over_limit(
                spectrum.source or source,
                f"{len(spectrum)} pixels in one spectrum",
                limits,
                "max_pixels",
            )


def _finish(
    arrays: ValidatedArrays,
    *,
    source: str,
    survey: str,
    object_id: str = "",
    redshift: float = 0.0,
    ra: float | None = None,
    dec: float | None = None,
    snr: float | None = None,
    meta: dict[str, Any] | None = None,
    resolution: Resolution | None = None,
) -> Spectrum:
    return Spectrum(
        wavelength=arrays.wavelength,
        flux=arrays.flux,
        ivar=arrays.ivar,
        mask=arrays.mask,
        redshift=redshift,
        survey=survey,
        object_id=object_id,
        ra=ra,
        dec=dec,
        snr=snr if snr is not None else _median_snr(arrays),
        meta=meta or {},
        source=source,
        resolution=resolution,
    )


def _median_snr(arrays: ValidatedArrays) -> float | None:
    if arrays.ivar is None or not (~arrays.mask).any():
        return None
    good = ~arrays.mask
    return float(np.median(arrays.flux[good] * np.sqrt(arrays.ivar[good])))


def _python_scalar(value: Any) -> Any:
    # float32 table values come back as their shortest decimal (0.02, not 0.0199999995529...).
    if isinstance(value, np.floating) and value.dtype.itemsize < 8:
        return float(str(value))
    return value.item() if isinstance(value, np.generic) else value


def _json_safe(value: Any) -> Any:
    """A JSON-safe copy of a scalar header/table value, or None when it has no JSON form."""
    value = _python_scalar(value)
    if isinstance(value, bytes):
        value = value.decode("ascii", errors="replace")
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    return None


def _pick(mapping: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    picked: dict[str, Any] = {}
    for key in keys:
        if key in mapping:
            value = _json_safe(mapping[key])
            if value is not None:
                picked[key] = value
    return picked


def _finite_float(value: Any) -> float | None:
    try:
        number = float(_python_scalar(value))
    except (TypeError, ValueError):
        return None
    return number if np.isfinite(number) else None


def _redshift(value: Any) -> float:
    """Pipeline redshift; missing, non-finite or the -9999 sentinel (anything <= -1) means 0."""
    number = _finite_float(value)
    return 0.0 if number is None or number <= -1.0 else number


# --- FITS ----------------------------------------------------------------------------------------


def _load_fits(raw: bytes, source: str, limits: ReadLimits) -> list[Spectrum]:
    check_fits_structure(raw, source, limits)
    hdus = _open_fits(raw, source)
    names = [hdu.name.upper() for hdu in hdus]
    telescope = str(hdus[0].header.get("TELESCOP", "")).strip().upper()
    if "FIBERMAP" in names:
        targets = getattr(hdus["FIBERMAP"], "data", None)
        if targets is not None and len(targets) > limits.max_spectra:
            raise over_limit(
                source, f"{len(targets)} targets (FIBERMAP rows)", limits, "max_spectra"
            )
        return _load_desi(hdus, source)
    if "COADD" in names:
        coadd = hdus["COADD"]
        if not isinstance(coadd, fits.BinTableHDU):
            raise SpectrumFormatError(f"{source}: HDU COADD is not a binary table")
        columns = {name.upper() for name in coadd.columns.names}
        if "LOGLAM" in columns:
            return [_load_sdss(hdus, source)]
        if "WAVELENGTH" in columns:
            return [_load_lamost_new(hdus, source)]
        raise SpectrumFormatError(
            f"{source}: HDU COADD has neither a 'loglam' (SDSS) nor a 'WAVELENGTH' (LAMOST) "
            f"column; columns are {sorted(coadd.columns.names)}"
        )
    primary_data = hdus[0].data
    if primary_data is not None and primary_data.ndim == 2 and not telescope.startswith("SDSS"):
        return [_load_lamost_old(hdus[0], source)]
    if telescope.startswith("SDSS") or "SPECOBJ" in names or "SPALL" in names:
        raise SpectrumFormatError(f"{source}: SDSS file without the COADD HDU (missing HDU COADD)")
    if telescope == "LAMOST":
        raise SpectrumFormatError(
            f"{source}: LAMOST file with an empty primary HDU and no COADD HDU (missing HDU COADD)"
        )
    raise SpectrumFormatError(
        f"{source}: not a spectrum file: FITS layout not recognised (HDUs: {', '.join(names)})"
    )


def _open_fits(raw: bytes, source: str) -> fits.HDUList:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            hdus = fits.open(io.BytesIO(raw), memmap=False, lazy_load_hdus=False)
            for hdu in hdus:
                # Parse every card and read every data unit now: astropy is lazy, and a damaged
                # card or a truncated data unit would otherwise fail later with its own error.
                _ = [card.value for card in hdu.header.cards]
                _ = hdu.data
        except Exception as exc:  # astropy raises OSError, TypeError, ValueError... on bad bytes
            raise SpectrumFormatError(
                f"{source}: truncated or corrupt FITS file ({type(exc).__name__}: {exc})"
            ) from exc
    if any("truncated" in str(warning.message) for warning in caught):
        raise SpectrumFormatError(
            f"{source}: truncated FITS file (data shorter than the header says)"
        )
    if len(hdus) == 0:
        raise SpectrumFormatError(f"{source}: truncated or corrupt FITS file (no HDU)")
    return hdus


def _table_column(hdu: fits.BinTableHDU, name: str, source: str) -> np.ndarray:
    """Column ``name`` (case-insensitive) of a table HDU, or an error naming HDU and column."""
    if hdu.data is None or name.upper() not in {c.upper() for c in hdu.columns.names}:
        raise SpectrumFormatError(f"{source}: HDU {hdu.name} has no column {name!r}")
    return np.asarray(hdu.data[name])


def _has_column(hdu: fits.BinTableHDU, name: str) -> bool:
    return name.upper() in {c.upper() for c in hdu.columns.names}


# --- LAMOST ---

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


# --- SDSS ---

_SDSS_SPECOBJ_META = (
    "CLASS", "SUBCLASS", "Z", "Z_ERR", "ZWARNING", "PLATE", "MJD", "FIBERID", "SN_MEDIAN_ALL",
    "SPECOBJID", "OBJTYPE", "ELODIE_SPTYPE", "ELODIE_TEFF", "PLUG_RA", "PLUG_DEC",
)  # fmt: skip
_SDSS_PRIMARY_META = ("TELESCOP", "VERS2D", "RUN2D", "BUNIT", "PLATEID", "MJD", "FIBERID")


def _load_sdss(hdus: fits.HDUList, source: str) -> Spectrum:
    coadd = hdus["COADD"]
    where = f"{source} [HDU COADD]"
    loglam = _table_column(coadd, "loglam", source).astype(np.float64)
    flux = _table_column(coadd, "flux", source)
    ivar = _table_column(coadd, "ivar", source) if _has_column(coadd, "ivar") else None
    and_mask = _table_column(coadd, "and_mask", source) if _has_column(coadd, "and_mask") else None
    arrays = validate_arrays(10.0**loglam, flux, ivar, source=where, mask=and_mask)
    resolution = None
    if _has_column(coadd, "wdisp"):
        # wdisp is the LSF sigma in pixels of 1e-4 dex
        wave = 10.0**loglam
        sigma_pixels = _table_column(coadd, "wdisp", source).astype(np.float64)
        fwhm = 2.0 * np.sqrt(2.0 * np.log(2.0)) * sigma_pixels * wave * np.log(10.0) * 1e-4
        resolution = Resolution.from_fwhm_array(wave, fwhm, source="file", note="SDSS wdisp")
    primary = hdus[0].header
    meta = _pick(primary, _SDSS_PRIMARY_META)
    row = _sdss_specobj_row(hdus)
    if row is None:
        plate, mjd, fiber = primary.get("PLATEID"), primary.get("MJD"), primary.get("FIBERID")
        ra, dec, redshift, snr = primary.get("PLUG_RA"), primary.get("PLUG_DEC"), 0.0, None
        specobj_id = None
    else:
        meta.update(_pick(row, _SDSS_SPECOBJ_META))
        plate, mjd, fiber = row.get("PLATE"), row.get("MJD"), row.get("FIBERID")
        ra, dec = row.get("PLUG_RA"), row.get("PLUG_DEC")
        redshift, snr = _redshift(row.get("Z")), _finite_float(row.get("SN_MEDIAN_ALL"))
        specobj_id = _json_safe(row.get("SPECOBJID"))
    return _finish(
        arrays,
        source=source,
        survey="SDSS",
        object_id=_sdss_object_id(specobj_id, plate, mjd, fiber),
        redshift=redshift,
        ra=_finite_float(ra),
        dec=_finite_float(dec),
        snr=snr,
        meta=meta,
        resolution=resolution,
    )


def _sdss_specobj_row(hdus: fits.HDUList) -> dict[str, Any] | None:
    for name in ("SPECOBJ", "SPALL"):
        if name in [hdu.name.upper() for hdu in hdus]:
            table = hdus[name]
            if isinstance(table, fits.BinTableHDU) and table.data is not None and len(table.data):
                return {column.upper(): table.data[column][0] for column in table.columns.names}
    return None


def _sdss_object_id(specobj_id: Any, plate: Any, mjd: Any, fiber: Any) -> str:
    if specobj_id not in (None, "", 0, "0"):
        return str(specobj_id)
    try:
        return f"{int(plate):04d}-{int(mjd):05d}-{int(fiber):04d}"
    except (TypeError, ValueError):
        return ""


# --- DESI ---

_DESI_ARMS = ("B", "R", "Z")
_DESI_FIBERMAP_META = (
    "TARGETID", "OBJTYPE", "MORPHTYPE", "EBV", "FLUX_G", "FLUX_R", "FLUX_Z", "COADD_FIBERSTATUS",
    "DESI_TARGET", "BGS_TARGET", "MWS_TARGET", "SCND_TARGET", "GAIA_PHOT_G_MEAN_MAG", "PARALLAX",
)  # fmt: skip
_DESI_PRIMARY_META = (
    "SURVEY", "PROGRAM", "SPGRP", "SPGRPVAL", "HPXPIXEL", "HPXNSIDE", "TILEID", "SPECTRO",
    "PETAL", "NIGHT",
)  # fmt: skip
_COINCIDENT_RTOL = 1e-6


@dataclass(frozen=True)
class ArmPixels:
    """One DESI arm (B, R or Z) of one target."""

    wavelength: np.ndarray
    flux: np.ndarray
    ivar: np.ndarray
    mask: np.ndarray  # True = bad


def merge_arms(arms: list[ArmPixels], *, source: str) -> ValidatedArrays:
    """Merge spectrograph arms onto one strictly increasing grid.

    Pixels whose wavelengths agree within 1e-6 (relative) are one pixel: its flux is the
    inverse-variance weighted mean of the good pixels, its ivar their summed ivar. Bad pixels
    (mask, non-finite, ivar <= 0) join the weighting only when no good pixel is there, and then the
    merged pixel is masked. Pixels that do not coincide are interleaved.
    """
    if not arms:
        raise SpectrumFormatError(f"{source}: no spectrograph arm to merge")
    # An arm may be a single pixel; only the merged spectrum needs the usual two.
    checked = [
        _validate(arm.wavelength, arm.flux, arm.ivar, source=source, mask=arm.mask, min_pixels=1)
        for arm in arms
    ]
    wave = np.concatenate([arm.wavelength for arm in checked])
    flux = np.concatenate([arm.flux for arm in checked])
    ivar = np.concatenate([arm.ivar for arm in checked if arm.ivar is not None])
    bad = np.concatenate([arm.mask for arm in checked])
    order = np.argsort(wave, kind="stable")
    wave, flux, ivar, bad = wave[order], flux[order], ivar[order], bad[order]
    starts = np.flatnonzero(np.r_[True, np.diff(wave) > _COINCIDENT_RTOL * wave[1:]])
    merged_wave, merged_flux, merged_ivar, merged_bad = _merge_groups(wave, flux, ivar, bad, starts)
    return validate_arrays(merged_wave, merged_flux, merged_ivar, source=source, mask=merged_bad)


def _merge_groups(
    wave: np.ndarray, flux: np.ndarray, ivar: np.ndarray, bad: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    sizes = np.diff(np.r_[starts, wave.size])
    good = ~bad
    weights = np.where(good, ivar, 0.0)
    weight_sum = np.add.reduceat(weights, starts)
    weighted_flux = np.add.reduceat(np.where(good, flux, 0.0) * weights, starts)
    good_count = np.add.reduceat(good.astype(np.int64), starts)
    finite = np.isfinite(flux)
    finite_count = np.add.reduceat(finite.astype(np.int64), starts)
    finite_sum = np.add.reduceat(np.where(finite, flux, 0.0), starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        fallback_flux = np.where(finite_count > 0, finite_sum / finite_count, np.nan)
        merged_flux = np.where(good_count > 0, weighted_flux / weight_sum, fallback_flux)
    merged_ivar = weight_sum
    merged_wave = np.add.reduceat(wave, starts) / sizes
    # A pixel seen by one arm only keeps its own values exactly (no f*iv/iv rounding).
    single = sizes == 1
    merged_flux[single] = flux[starts[single]]
    merged_ivar[single] = ivar[starts[single]]
    merged_wave[single] = wave[starts[single]]
    merged_bad = good_count == 0
    return merged_wave, merged_flux, merged_ivar, merged_bad


def _load_desi(hdus: fits.HDUList, source: str) -> list[Spectrum]:
    fibermap = hdus["FIBERMAP"]
    if not isinstance(fibermap, fits.BinTableHDU) or fibermap.data is None:
        raise SpectrumFormatError(f"{source}: HDU FIBERMAP is not a table with rows")
    names = {hdu.name.upper() for hdu in hdus}
    arms = [arm for arm in _DESI_ARMS if f"{arm}_WAVELENGTH" in names]
    if not arms:
        raise SpectrumFormatError(
            f"{source}: DESI file without any B/R/Z arm (missing HDU B_WAVELENGTH, "
            "R_WAVELENGTH and Z_WAVELENGTH)"
        )
    target_ids = _table_column(fibermap, "TARGETID", source)
    arm_data = {arm: _desi_arm_arrays(hdus, arm, len(target_ids), source) for arm in arms}
    snr_by_target = _desi_snr(hdus, target_ids)
    primary_meta = _pick(hdus[0].header, _DESI_PRIMARY_META)
    spectra = []
    for row, target_id in enumerate(target_ids):
        where = f"{source}#row{row}"
        pixels = [
            ArmPixels(wave, flux[row], ivar[row], mask[row])
            for wave, flux, ivar, mask in arm_data.values()
        ]
        fibermap_row = {name.upper(): fibermap.data[name][row] for name in fibermap.columns.names}
        meta = {**primary_meta, **_pick(fibermap_row, _DESI_FIBERMAP_META), "arms": "".join(arms)}
        spectra.append(
            _finish(
                merge_arms(pixels, source=where),
                source=where,
                survey="DESI",
                object_id=str(int(target_id)),
                ra=_finite_float(fibermap_row.get("TARGET_RA")),
                dec=_finite_float(fibermap_row.get("TARGET_DEC")),
                snr=snr_by_target[row],
                meta=meta,
                resolution=_desi_resolution(hdus, arms, arm_data, row),
            )
        )
    return spectra


def _desi_resolution(
    hdus: fits.HDUList, arms: list[str], arm_data: dict[str, Any], row: int
) -> Resolution | None:
    """FWHM from the second moment of each pixel's resolution-matrix row (11 diagonals)."""
    names = {hdu.name.upper() for hdu in hdus}
    waves, widths = [], []
    for arm in arms:
        if f"{arm}_RESOLUTION" not in names:
            continue
        # Only this target's slice is converted: converting the whole (targets x diagonals x
        # pixels) matrix once per target made a many-target coadd quadratic to read.
        matrix = hdus[f"{arm}_RESOLUTION"].data
        if matrix is None:
            continue
        if matrix.ndim == 2:
            matrix = matrix[np.newaxis]
        wave = arm_data[arm][0]
        if matrix.ndim != 3 or matrix.shape[0] <= row or matrix.shape[2] != wave.size:
            continue
        kernel = np.clip(np.asarray(matrix[row], dtype=np.float64), 0.0, None)
        offsets = np.arange(kernel.shape[0]) - kernel.shape[0] // 2
        total = kernel.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            sigma = np.sqrt((offsets[:, None] ** 2 * kernel).sum(axis=0) / total)
        step = np.abs(np.gradient(wave)) if wave.size > 1 else np.ones(1)
        waves.append(wave)
        widths.append(2.0 * np.sqrt(2.0 * np.log(2.0)) * sigma * step)
    if not waves:
        return None
    return Resolution.from_fwhm_array(
        np.concatenate(waves), np.concatenate(widths), source="file", note="DESI resolution matrix"
    )


def _desi_arm_arrays(
    hdus: fits.HDUList, arm: str, n_targets: int, source: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    names = {hdu.name.upper() for hdu in hdus}
    for part in ("FLUX", "IVAR"):
        if f"{arm}_{part}" not in names:
            raise SpectrumFormatError(
                f"{source}: DESI file has {arm}_WAVELENGTH but missing HDU {arm}_{part}"
            )
    wave = np.asarray(hdus[f"{arm}_WAVELENGTH"].data, dtype=np.float64)
    flux = np.atleast_2d(np.asarray(hdus[f"{arm}_FLUX"].data, dtype=np.float64))
    ivar = np.atleast_2d(np.asarray(hdus[f"{arm}_IVAR"].data, dtype=np.float64))
    if f"{arm}_MASK" in names:
        mask = np.atleast_2d(np.asarray(hdus[f"{arm}_MASK"].data) != 0)
    else:
        mask = np.zeros_like(flux, dtype=bool)
    expected = (n_targets, wave.size)
    for part, array in (("FLUX", flux), ("IVAR", ivar), ("MASK", mask)):
        if array.shape != expected:
            raise SpectrumFormatError(
                f"{source}: HDU {arm}_{part} has shape {array.shape}, expected {expected} "
                f"(FIBERMAP rows x {arm}_WAVELENGTH length)"
            )
    return wave, flux, ivar, mask


def _desi_snr(hdus: fits.HDUList, target_ids: np.ndarray) -> list[float | None]:
    if "SCORES" not in {hdu.name.upper() for hdu in hdus}:
        return [None] * len(target_ids)
    scores = hdus["SCORES"]
    if not isinstance(scores, fits.BinTableHDU) or scores.data is None:
        return [None] * len(target_ids)
    columns = [
        f"MEDIAN_COADD_SNR_{arm}"
        for arm in _DESI_ARMS
        if _has_column(scores, f"MEDIAN_COADD_SNR_{arm}")
    ]
    if _has_column(scores, "TARGETID"):
        row_of = {int(t): i for i, t in enumerate(scores.data["TARGETID"])}
        rows = [row_of.get(int(t)) for t in target_ids]
    else:
        rows = [i if i < len(scores.data) else None for i in range(len(target_ids))]
    result: list[float | None] = []
    for row in rows:
        values = [] if row is None else [_finite_float(scores.data[c][row]) for c in columns]
        finite = [v for v in values if v is not None]
        result.append(float(np.mean(finite)) if finite else None)
    return result


# --- SpecVI-Bench parquet ------------------------------------------------------------------------

_PARQUET_COLUMNS = ("data_source", "reward_model", "extra_info")
_CREATE_KWARGS_PATH = ("tools_kwargs", "spectral_visualization_tool", "create_kwargs")


_PARQUET_BATCH_ROWS = 16


def _load_parquet(raw: bytes, source: str, limits: ReadLimits) -> list[Spectrum]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    errors = (pa.ArrowException, OSError, ValueError)
    try:
        parquet = pq.ParquetFile(io.BytesIO(raw))
        present = [name for name in _PARQUET_COLUMNS if name in parquet.schema_arrow.names]
        metadata = parquet.metadata
    except errors as exc:
        raise SpectrumFormatError(f"{source}: truncated or corrupt parquet file ({exc})") from exc
    if "extra_info" not in present:
        raise SpectrumFormatError(f"{source}: parquet file has no column 'extra_info'")
    check_parquet_metadata(metadata, present, source, limits)
    # Batch by batch, counting what is decoded: the footer's sizes are only the file's word.
    spectra: list[Spectrum] = []
    decoded = 0
    batches = parquet.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=present)
    while True:
        try:
            batch = next(batches, None)
            if batch is None:
                break
            decoded += batch.nbytes
            if decoded > limits.max_uncompressed_bytes:
                raise over_limit(
                    source,
                    f"more than {limits.max_uncompressed_bytes} bytes of decoded columns",
                    limits,
                    "max_uncompressed_bytes",
                )
            rows = batch.to_pylist()
        except SpectrumFormatError:
            raise
        except errors as exc:
            raise SpectrumFormatError(
                f"{source}: truncated or corrupt parquet file ({exc})"
            ) from exc
        if len(spectra) + len(rows) > limits.max_spectra:
            raise over_limit(source, "more rows (spectra) than allowed", limits, "max_spectra")
        first = len(spectra)
        spectra.extend(_specvi_row(row, first + i, source) for i, row in enumerate(rows))
    if not spectra:
        raise SpectrumFormatError(f"{source}: parquet file has no rows")
    return spectra


def _specvi_row(row: dict[str, Any], index: int, source: str) -> Spectrum:
    where = f"{source}#row{index}"
    extra = _as_mapping(row.get("extra_info"), "extra_info", where)
    kwargs: Any = extra
    dotted = "extra_info"
    for key in _CREATE_KWARGS_PATH:
        dotted = f"{dotted}.{key}"
        kwargs = _as_mapping(kwargs.get(key), dotted, where)
    for key in ("wavelength", "flux"):
        if kwargs.get(key) is None:
            raise SpectrumFormatError(f"{where}: missing {dotted}.{key}")
    arrays = validate_arrays(kwargs["wavelength"], kwargs["flux"], source=where)
    data_source = str(row.get("data_source") or "")
    reward = row.get("reward_model")
    reward = reward if isinstance(reward, dict) else {}
    meta = {
        "data_source": data_source,
        "ground_truth": _json_safe(reward.get("ground_truth")),
        "index": _json_safe(extra.get("index")),
        "split": _json_safe(extra.get("split")),
        "task": _json_safe(extra.get("task")),
    }
    name = _json_safe(extra.get("name"))
    object_id = (
        str(name)
        if name not in (None, "")
        else str(meta["index"] if meta["index"] is not None else index)
    )
    survey = "SpecVI-mini" if data_source.startswith("specvi-mini") else "SpecVI-Bench"
    return _finish(
        arrays,
        source=where,
        survey=survey,
        object_id=object_id,
        redshift=_redshift(kwargs.get("redshift")),
        meta=meta,
    )


def _as_mapping(value: Any, dotted: str, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise SpectrumFormatError(f"{where}: {dotted} is not valid JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise SpectrumFormatError(f"{where}: missing {dotted}")
    return value


# --- plain tables --------------------------------------------------------------------------------

_WAVELENGTH_NAMES = frozenset({"wave", "wavelength", "lambda", "lam", "wl", "wavelen"})
_FLUX_NAMES = frozenset({"flux", "f", "fl", "flam", "flux_density"})
_ERROR_NAMES = frozenset(
    {
        "error",
        "err",
        "sigma",
        "flux_err",
        "flux_error",
        "uncertainty",
        "unc",
        "e",
        "flux_sigma",
        "noise",
    }
)
_IVAR_NAMES = frozenset({"ivar", "inverse_variance", "invvar", "flux_ivar"})
_MASK_NAMES = frozenset({"mask", "and_mask", "andmask", "bad"})
_FRAME_SUFFIXES = {"_air": "air", "_vac": "vacuum", "_vacuum": "vacuum"}
_ANGSTROM_SPELLINGS = frozenset({"a", "aa", "å", "angstrom", "angstroms", "ang", "angs"})
_UNIT_KEYS = frozenset({"wavelength_unit", "wave_unit", "wavelength_units", "unit_wavelength"})
_FRAME_KEYS = frozenset(
    {"wavelength_frame", "frame", "medium", "wavelength_medium", "air_or_vacuum"}
)
_DIRECTIVE_KEY = re.compile(r"[A-Za-z][\w ]*")
_CONTROL_BYTES = bytes(b for b in range(32) if b not in b"\t\n\v\f\r")
_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"  # where str.splitlines splits
_MAX_HEADER_CHARS = 10_000  # a table header line longer than this is not a table header
_MAX_LINE_CHARS = 100_000  # nor is any line longer than this a table row
_TEXT_CHUNK = 1 << 18  # characters decoded at a time


@dataclass(frozen=True)
class _ColumnSpec:
    role: str  # "wavelength" | "flux" | "error" | "ivar" | "mask" | "other"
    name: str
    unit: str | None
    frame: str | None


@dataclass
class _TableSettings:
    """What the comment lines (or NPZ scalar keys) say about the table."""

    wavelength_unit: str | None = None
    frame: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


def _load_text(content: FileContent, source: str, limits: ReadLimits) -> list[Spectrum]:
    """A CSV or whitespace table, parsed line by line as it is decompressed."""
    if b"\x00" in content.head:
        raise _binary_content(source)
    settings = _TableSettings()
    comments: list[str] = []
    table: _TableRows | None = None
    lines = _TextLines(content, source, chunk=min(_TEXT_CHUNK, limits.max_uncompressed_bytes // 64))
    for number, line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            comment = stripped.lstrip("#").strip()
            if table is None:
                comments.append(comment)
            _read_directive(comment, settings, source)
            continue
        if table is None:
            table = _TableRows.start(number, stripped, comments, source, limits)
        else:
            table.add(number, stripped)
    if lines.control > content.count // 100:
        raise _binary_content(source)
    if table is None:
        raise SpectrumFormatError(f"{source}: not a spectrum file: no data rows")
    ignored = [spec.name for spec in table.columns if spec.role == "other"]
    return [_table_spectrum(table.arrays(), table.columns, settings, source, ignored)]


def _binary_content(source: str) -> SpectrumFormatError:
    return SpectrumFormatError(
        f"{source}: not a spectrum file: binary content is not FITS, parquet, NPZ or gzip"
    )


class _TextLines:
    """The lines of a text file, numbered as ``str.splitlines`` numbers the whole text, read a
    chunk at a time. UTF-8, or Latin-1 for a line that is not; a UTF-8 byte order mark (Excel's
    "CSV UTF-8") is dropped. ``control`` counts the control characters read so far.
    """

    def __init__(self, content: FileContent, source: str, *, chunk: int) -> None:
        self.content = content
        self.source = source
        self.chunk = max(chunk, 4096)
        self.control = 0

    def __iter__(self) -> Iterator[tuple[int, str]]:
        reader = io.TextIOWrapper(
            io.BufferedReader(self.content),
            encoding="utf-8",
            errors="surrogateescape",
            newline=None,
        )
        number = 0
        carry = ""
        chunk = reader.read(self.chunk).removeprefix("\ufeff")
        while True:
            self._check(chunk)
            text = carry + chunk
            lines = text.splitlines()
            carry = lines.pop() if chunk and lines and text[-1] not in _LINE_BREAKS else ""
            if len(carry) > _MAX_LINE_CHARS or any(len(line) > _MAX_LINE_CHARS for line in lines):
                raise SpectrumFormatError(
                    f"{self.source}: not a spectrum file: a line has more than "
                    f"{_MAX_LINE_CHARS} characters, too long for a table header or row"
                )
            if not text.isascii():
                lines = [piece for line in lines for piece in _decoded_line(line)]
            for line in lines:
                number += 1
                yield number, line
            if not chunk:
                return
            chunk = reader.read(self.chunk)

    def _check(self, chunk: str) -> None:
        if "\x00" in chunk:
            raise _binary_content(self.source)
        raw = chunk.encode("utf-8", "surrogateescape")
        self.control += len(raw) - len(raw.translate(None, _CONTROL_BYTES))


def _decoded_line(line: str) -> list[str]:
    """A line that is not UTF-8 read as Latin-1 (where NEL, 0x85, also ends a line)."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return line.encode("utf-8", "surrogateescape").decode("latin-1").splitlines() or [""]
    return [line]


def _read_directive(comment: str, settings: _TableSettings, source: str) -> None:
    separator = min((i for i in (comment.find(":"), comment.find("=")) if i >= 0), default=-1)
    key, value = comment[:separator].strip(), comment[separator + 1 :].strip()
    if separator < 0 or not value or not _DIRECTIVE_KEY.fullmatch(key):
        return
    key = key.lower().replace(" ", "_")
    if key in _FRAME_KEYS:
        settings.frame = _frame_name(value, source)
    elif key in _UNIT_KEYS:
        settings.wavelength_unit = value
    elif key in {"units", "unit"}:
        for part in re.split(r"[,;]\s*|\s+(?=\w+\s*=)", value):
            name, _, unit = part.partition("=")
            if unit and _role(_normalise_name(name)[0]) == "wavelength":
                settings.wavelength_unit = unit.strip()
            elif not unit and key == "unit":
                settings.wavelength_unit = name.strip()
    else:
        settings.extra[key] = value


def _frame_name(value: str, source: str) -> str:
    lowered = value.strip().strip("'\"").lower()
    if lowered in {"air"}:
        return "air"
    if lowered in {"vacuum", "vac"}:
        return "vacuum"
    raise SpectrumFormatError(f"{source}: wavelength frame {value!r} is neither 'air' nor 'vacuum'")


def _table_header(
    rows: list[tuple[int, str]], comments: list[str], delimiter: str | None, source: str
) -> tuple[list[_ColumnSpec], list[tuple[int, str]]]:
    first_tokens = _split_header(rows[0][1], delimiter)
    if not all(_is_number(token) for token in first_tokens):
        return _column_specs(first_tokens, source), rows[1:]
    width = len(_split_row(rows[0][1], delimiter))
    if comments:
        tokens = _split_header(comments[-1], delimiter)
        if len(tokens) == width and _role(_parse_column(tokens[0]).name) == "wavelength":
            return _column_specs(tokens, source), rows
    if width not in (2, 3):
        raise SpectrumFormatError(
            f"{source}: headerless table with {width} columns; expected 2 or 3 "
            "(wavelength, flux[, error]) or a header line naming the columns"
        )
    names = ["wavelength", "flux", "error"][:width]
    return _column_specs(names, source), rows


def _split_header(line: str, delimiter: str | None) -> list[str]:
    if delimiter:
        return [token.strip().strip("'\"") for token in next(csv.reader([line]))]
    tokens: list[str] = []
    for word in line.split():
        # "wavelength (micron)" and "wavelength [nm]": a bracketed unit belongs to the name before
        if tokens and (word[0] in "[(" or _unclosed_bracket(tokens[-1])):
            tokens[-1] = f"{tokens[-1]} {word}"
        else:
            tokens.append(word)
    return tokens


def _unclosed_bracket(token: str) -> bool:
    return token.count("(") + token.count("[") > token.count(")") + token.count("]")


def _split_row(line: str, delimiter: str | None) -> list[str]:
    return [token.strip() for token in line.split(delimiter)] if delimiter else line.split()


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def _normalise_name(name: str) -> tuple[str, str | None]:
    lowered = name.strip().lower().replace(" ", "_").replace("-", "_")
    for suffix, frame in _FRAME_SUFFIXES.items():
        if lowered.endswith(suffix) and _role(lowered[: -len(suffix)]) == "wavelength":
            return lowered[: -len(suffix)], frame
    return lowered, None


def _role(name: str) -> str:
    for role, names in (
        ("wavelength", _WAVELENGTH_NAMES),
        ("flux", _FLUX_NAMES),
        ("error", _ERROR_NAMES),
        ("ivar", _IVAR_NAMES),
        ("mask", _MASK_NAMES),
    ):
        if name in names:
            return role
    return "other"


def _parse_column(token: str) -> _ColumnSpec:
    raw_name, unit = _split_unit(token)
    name, frame = _normalise_name(raw_name)
    return _ColumnSpec(role=_role(name), name=raw_name.strip(), unit=unit or None, frame=frame)


def _split_unit(token: str) -> tuple[str, str | None]:
    """'wavelength[nm]' / 'wavelength (micron)' -> (name, unit); a plain name has no unit."""
    stripped = token.strip()
    opening = min((i for i in (stripped.find("["), stripped.find("(")) if i > 0), default=-1)
    if opening < 0 or stripped[-1] not in "])":
        return stripped, None
    return stripped[:opening].strip(), stripped[opening + 1 : -1].strip() or None


def _column_specs(tokens: list[str], source: str) -> list[_ColumnSpec]:
    specs = [_parse_column(token) for token in tokens]
    _require_roles(specs, source)
    return specs


def _require_roles(specs: list[_ColumnSpec], source: str) -> None:
    roles = [spec.role for spec in specs if spec.role != "other"]
    for required, accepted in (("wavelength", _WAVELENGTH_NAMES), ("flux", _FLUX_NAMES)):
        if required not in roles:
            raise SpectrumFormatError(
                f"{source}: missing column {required!r} (found {[s.name for s in specs]}; "
                f"accepted names: {sorted(accepted)})"
            )
    repeated = sorted({role for role in roles if roles.count(role) > 1})
    if repeated:
        raise SpectrumFormatError(f"{source}: more than one column for {repeated}")


class _TableRows:
    """Data rows parsed as they stream in; only the columns a spectrum uses are kept.

    The kept numbers count against ``max_uncompressed_bytes`` as well as ``max_pixels``: a
    gzipped table of short rows holds more bytes as float64 than as text.
    """

    def __init__(
        self, columns: list[_ColumnSpec], delimiter: str | None, source: str, limits: ReadLimits
    ) -> None:
        self.columns = columns
        self.width = len(columns)
        self.delimiter = delimiter
        self.source = source
        self.limits = limits
        self.kept = [i for i, spec in enumerate(columns) if spec.role != "other"]
        self.keep_all = len(self.kept) == self.width
        self.max_rows = min(limits.max_pixels, limits.max_uncompressed_bytes // (8 * self.width))
        self.values = packed_array("d")  # row-major, 8 bytes a number
        self.rows = 0

    @classmethod
    def start(
        cls,
        number: int,
        first: str,
        comments: list[str],
        source: str,
        limits: ReadLimits,
    ) -> _TableRows:
        if len(first) > _MAX_HEADER_CHARS:
            raise SpectrumFormatError(
                f"{source}: not a spectrum file: line {number} has {len(first)} characters, "
                "too long for a table header or row"
            )
        delimiter = "," if "," in first else None
        columns, data_rows = _table_header([(number, first)], comments, delimiter, source)
        table = cls(columns, delimiter, source, limits)
        for row_number, row in data_rows:
            table.add(row_number, row)
        return table

    def add(self, number: int, line: str) -> None:
        if self.rows >= self.max_rows:
            raise self._too_many()
        tokens = line.split(self.delimiter) if self.delimiter else line.split()
        if len(tokens) != self.width:
            raise SpectrumFormatError(
                f"{self.source}: length mismatch at line {number}: {len(tokens)} values, "
                f"but the table has {self.width} columns"
            )
        try:
            values = [float(token) for token in tokens]
        except ValueError:
            values = self._slow_values(number, tokens)
        self.values.extend(values if self.keep_all else [values[i] for i in self.kept])
        self.rows += 1

    def _slow_values(self, number: int, tokens: list[str]) -> list[float]:
        values = []
        for column, raw in enumerate(tokens):
            token = raw.strip()
            try:
                values.append(float(token) if token else np.nan)
            except ValueError:
                raise SpectrumFormatError(
                    f"{self.source}: line {number}, column {column + 1}: {token!r} is not a number"
                ) from None
        return values

    def arrays(self) -> dict[str, np.ndarray]:
        if not self.rows:
            raise SpectrumFormatError(f"{self.source}: table has a header but no data rows")
        values = np.frombuffer(self.values, dtype=np.float64).reshape(self.rows, -1)
        return {self.columns[i].role: values[:, j] for j, i in enumerate(self.kept)}

    def _too_many(self) -> SpectrumTooLarge:
        if self.rows >= self.limits.max_pixels:
            return over_limit(
                self.source,
                f"more than {self.limits.max_pixels} rows (pixels) in one spectrum",
                self.limits,
                "max_pixels",
            )
        return over_limit(
            self.source,
            f"more than {self.rows} rows of {self.width} numbers, more than "
            f"{self.limits.max_uncompressed_bytes} bytes as float64",
            self.limits,
            "max_uncompressed_bytes",
        )


def _table_spectrum(
    arrays: dict[str, np.ndarray],
    columns: list[_ColumnSpec],
    settings: _TableSettings,
    source: str,
    ignored: list[str],
) -> Spectrum:
    for role, array in arrays.items():
        if array.ndim != 1:
            raise SpectrumFormatError(
                f"{source}: {role} must be one-dimensional, got shape {array.shape}"
            )
    _check_lengths(source, **arrays)
    wave_spec = next(spec for spec in columns if spec.role == "wavelength")
    unit = wave_spec.unit or settings.wavelength_unit
    frame = wave_spec.frame or settings.frame or "vacuum"
    wavelength = np.asarray(arrays["wavelength"], dtype=np.float64) * _angstrom_per(unit, source)
    meta: dict[str, Any] = {
        "wavelength_unit_in_file": unit or "Angstrom",
        "wavelength_frame_in_file": frame,
    }
    if frame == "air":
        wavelength = _air_column_to_vacuum(wavelength, source)
    ivar, mask = _table_ivar(arrays)
    if ignored:
        meta["ignored_columns"] = ignored
    if settings.extra:
        meta["header"] = dict(settings.extra)
    validated = validate_arrays(wavelength, arrays["flux"], ivar, source=source, mask=mask)
    resolution = _directive_resolution(settings.extra, source)
    return _finish(validated, source=source, survey="table", meta=meta, resolution=resolution)


_RESOLUTION_KEYS = {"resolution": "", "resolving_power": "", "r": "", "fwhm": "fwhm="}
_RESOLUTION_KEYS |= {"lsf_fwhm": "fwhm=", "instrumental_fwhm": "fwhm="}


def _directive_resolution(extra: dict[str, str], source: str) -> Resolution | None:
    """``# resolution: 1800`` / ``# R = 1800`` / ``# fwhm: 2.5`` (Angstrom) in a table header."""
    for key, prefix in _RESOLUTION_KEYS.items():
        if key in extra:
            try:
                parsed = parse_user_value(prefix + extra[key])
            except ResolutionError as exc:
                raise SpectrumFormatError(f"{source}: header directive {key!r}: {exc}") from exc
            return Resolution(parsed.wavelength, parsed.fwhm, "file", f"table header {key}")
    return None


def _air_column_to_vacuum(wavelength: np.ndarray, source: str) -> np.ndarray:
    if not np.all(np.isfinite(wavelength) & (wavelength > 0)):
        _check_wavelength_values(wavelength, source)
    return np.asarray(air_to_vacuum(wavelength), dtype=np.float64)


def _table_ivar(arrays: dict[str, np.ndarray]) -> tuple[np.ndarray | None, np.ndarray | None]:
    mask = arrays["mask"] != 0 if "mask" in arrays else None
    if "ivar" in arrays:
        return arrays["ivar"], mask
    if "error" not in arrays:
        return None, mask
    error = np.asarray(arrays["error"], dtype=np.float64)
    usable = np.isfinite(error) & (error > 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ivar = np.where(usable, 1.0 / error**2, 0.0)
    bad = ~usable if mask is None else (mask | ~usable)
    return ivar, bad


def _angstrom_per(unit: str | None, source: str) -> float:
    """Angstrom per ``unit`` of wavelength; length units only."""
    if unit is None or unit.strip().lower() in _ANGSTROM_SPELLINGS:
        return 1.0
    try:
        parsed = units.Unit(unit.strip())
        return float(parsed.to(units.AA))
    except (ValueError, TypeError, units.UnitsError) as exc:
        raise SpectrumFormatError(
            f"{source}: unknown wavelength unit {unit!r} (expected a length such as "
            "Angstrom, nm or micron)"
        ) from exc


# --- NPZ ---


def _load_npz(raw: bytes, source: str, limits: ReadLimits) -> list[Spectrum]:
    arrays = _npz_arrays(raw, source, limits)
    if {"wavelength", "flux", "mask", "meta"} <= arrays.keys():
        spectrum = _spectrum_from_npz_arrays(arrays, source)
        spectrum.source = source
        return [spectrum]
    arrays = _positional_npz_names(arrays)
    settings = _TableSettings()
    columns: list[_ColumnSpec] = []
    values: dict[str, np.ndarray] = {}
    for key, array in arrays.items():
        lowered = key.lower()
        if lowered in _UNIT_KEYS:
            settings.wavelength_unit = str(array)
        elif lowered in _FRAME_KEYS:
            settings.frame = _frame_name(str(array), source)
        else:
            spec = _parse_column(key)
            if spec.role != "other":
                values[spec.role] = _npz_column(array, key, source)
            columns.append(spec)
    _require_roles(columns, source)
    ignored = [spec.name for spec in columns if spec.role == "other"]
    return [_table_spectrum(values, columns, settings, source, ignored)]


def _positional_npz_names(arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``np.savez(f, wave, flux[, err])`` stores arr_0.. : read them as wavelength, flux[, error]."""
    positional = [f"arr_{i}" for i in range(len(arrays))]
    if sorted(arrays) != positional or len(arrays) not in (2, 3):
        return arrays
    return dict(zip(("wavelength", "flux", "error"), (arrays[k] for k in positional), strict=False))


def _npz_arrays(raw: bytes, source: str, limits: ReadLimits | None) -> dict[str, np.ndarray]:
    """The archive's arrays; ``limits=None`` for our own stored bytes (checked when uploaded)."""
    return read_npz(raw, source, limits)


def _npz_column(array: np.ndarray, key: str, source: str) -> np.ndarray:
    try:
        return np.asarray(array, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise SpectrumFormatError(f"{source}: array {key!r} is not numeric ({exc})") from exc


# --- writing the LAMOST new layout ---------------------------------------------------------------

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
    arrays: dict[str, np.ndarray] = {
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


# --- NPZ bytes for storage -----------------------------------------------------------------------


def spectrum_to_npz_bytes(spectrum: Spectrum) -> bytes:
    """Compressed NPZ with wavelength, flux, mask[, ivar] and a JSON ``meta`` string."""
    assert spectrum.mask is not None
    header = {
        "redshift": float(spectrum.redshift),
        "survey": spectrum.survey,
        "object_id": spectrum.object_id,
        "ra": spectrum.ra,
        "dec": spectrum.dec,
        "snr": spectrum.snr,
        "meta": spectrum.meta,
        "source": spectrum.source,
        "resolution": None if spectrum.resolution is None else spectrum.resolution.as_dict(),
    }
    arrays: dict[str, np.ndarray] = {
        "wavelength": np.asarray(spectrum.wavelength, dtype=np.float64),
        "flux": np.asarray(spectrum.flux, dtype=np.float64),
        "mask": np.asarray(spectrum.mask, dtype=bool),
        "meta": np.array(json.dumps(header, default=_json_default)),
    }
    if spectrum.ivar is not None:
        arrays["ivar"] = np.asarray(spectrum.ivar, dtype=np.float64)
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]
    return buffer.getvalue()


def spectrum_from_npz_bytes(data: bytes) -> Spectrum:
    """Inverse of :func:`spectrum_to_npz_bytes`."""
    source = "NPZ bytes"
    arrays = _npz_arrays(data, source, None)
    missing = sorted({"wavelength", "flux", "mask", "meta"} - arrays.keys())
    if missing:
        raise SpectrumFormatError(f"{source}: missing array(s) {missing}")
    return _spectrum_from_npz_arrays(arrays, source)


def _spectrum_from_npz_arrays(arrays: dict[str, np.ndarray], source: str) -> Spectrum:
    try:
        header = json.loads(str(arrays["meta"]))
    except json.JSONDecodeError as exc:
        raise SpectrumFormatError(f"{source}: 'meta' is not valid JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise SpectrumFormatError(f"{source}: 'meta' must be a JSON object")
    validated = validate_arrays(
        arrays["wavelength"], arrays["flux"], arrays.get("ivar"), source=source, mask=arrays["mask"]
    )
    return Spectrum(
        wavelength=validated.wavelength,
        flux=validated.flux,
        ivar=validated.ivar,
        mask=validated.mask,
        redshift=float(header.get("redshift") or 0.0),
        survey=str(header.get("survey", "unknown")),
        object_id=str(header.get("object_id", "")),
        ra=header.get("ra"),
        dec=header.get("dec"),
        snr=header.get("snr"),
        meta=dict(header.get("meta") or {}),
        source=str(header.get("source", "")),
        resolution=_stored_resolution(header.get("resolution"), source),
    )


def _stored_resolution(value: Any, source: str) -> Resolution | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpectrumFormatError(f"{source}: 'resolution' in meta must be an object")
    try:
        return Resolution.from_dict(value)
    except ResolutionError as exc:
        raise SpectrumFormatError(f"{source}: 'resolution' in meta: {exc}") from exc


def _json_default(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")
