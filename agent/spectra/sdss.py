"""SDSS spec files (COADD table with loglam)."""

from __future__ import annotations

from typing import Any

import numpy as np
from astropy.io import fits

from agent.resolution import Resolution
from agent.spectra.fitsio import _has_column, _table_column
from agent.spectra.lamost import _survey_frame
from agent.spectra.value import (
    Spectrum,
    _finish,
    _finite_float,
    _json_safe,
    _pick,
    _redshift,
    validate_arrays,
)

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
    sky = None
    if _has_column(coadd, "sky"):
        sky = _table_column(coadd, "sky", source).astype(np.float64)
        if loglam.size > 1 and loglam[0] > loglam[-1]:  # validate_arrays reversed the grid
            sky = sky[::-1]
    resolution = None
    if _has_column(coadd, "wdisp"):
        # wdisp is the LSF sigma in pixels of 1e-4 dex
        wave = 10.0**loglam
        sigma_pixels = _table_column(coadd, "wdisp", source).astype(np.float64)
        fwhm = 2.0 * np.sqrt(2.0 * np.log(2.0)) * sigma_pixels * wave * np.log(10.0) * 1e-4
        resolution = Resolution.from_fwhm_array(wave, fwhm, source="file", note="SDSS wdisp")
    primary = hdus[0].header
    meta = _pick(primary, _SDSS_PRIMARY_META)
    meta.update(_survey_frame(primary, "SDSS spectra are in vacuum", source))
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
        sky=sky,
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
