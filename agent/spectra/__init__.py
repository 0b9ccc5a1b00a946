"""Spectra in: one value type and one loader for every survey layout we support."""

from __future__ import annotations

import os
import re
from pathlib import Path

from astropy.io import fits

from agent.reading import ReadLimits as ReadLimits
from agent.reading import SpectrumFormatError as SpectrumFormatError
from agent.reading import SpectrumTooLarge as SpectrumTooLarge
from agent.reading import check_fits_structure, open_content, over_limit
from agent.spectra.desi import ArmPixels as ArmPixels
from agent.spectra.desi import _load_desi
from agent.spectra.desi import merge_arms as merge_arms
from agent.spectra.fitsio import _open_fits
from agent.spectra.lamost import _load_lamost_new, _load_lamost_old
from agent.spectra.lamost import save_lamost_fits as save_lamost_fits
from agent.spectra.npz import _load_npz
from agent.spectra.npz import spectrum_from_npz_bytes as spectrum_from_npz_bytes
from agent.spectra.npz import spectrum_to_npz_bytes as spectrum_to_npz_bytes
from agent.spectra.parquet import _load_parquet
from agent.spectra.sdss import _load_sdss
from agent.spectra.tables import _load_text
from agent.spectra.value import Spectrum as Spectrum
from agent.spectra.value import ValidatedArrays as ValidatedArrays
from agent.spectra.value import air_to_vacuum as air_to_vacuum
from agent.spectra.value import vacuum_to_air as vacuum_to_air
from agent.spectra.value import validate_arrays as validate_arrays

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
