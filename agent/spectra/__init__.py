"""Spectra in: one value type and one loader for every survey layout we support."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
from astropy.io import fits

from agent.reading import ReadLimits as ReadLimits
from agent.reading import SpectrumFormatError as SpectrumFormatError
from agent.reading import SpectrumTooLarge as SpectrumTooLarge
from agent.reading import check_fits_structure, open_content, over_limit
from agent.spectra.declared import Declared as Declared
from agent.spectra.desi import ArmPixels as ArmPixels
from agent.spectra.desi import _load_desi
from agent.spectra.desi import merge_arms as merge_arms
from agent.spectra.fits_tables import load_table, spectrum_table
from agent.spectra.fitsio import _open_fits
from agent.spectra.images import is_spectrum_image_layout, load_image
from agent.spectra.lamost import _load_lamost_new, _load_lamost_old
from agent.spectra.lamost import save_lamost_fits as save_lamost_fits
from agent.spectra.npz import _load_npz
from agent.spectra.npz import spectrum_from_npz_bytes as spectrum_from_npz_bytes
from agent.spectra.npz import spectrum_to_npz_bytes as spectrum_to_npz_bytes
from agent.spectra.parquet import _load_parquet
from agent.spectra.sdss import _load_sdss
from agent.spectra.tables import _load_text
from agent.spectra.value import MIN_SPECTRUM_PIXELS as MIN_SPECTRUM_PIXELS
from agent.spectra.value import WAVELENGTH_RANGE as WAVELENGTH_RANGE
from agent.spectra.value import Spectrum as Spectrum
from agent.spectra.value import ValidatedArrays as ValidatedArrays
from agent.spectra.value import air_to_vacuum as air_to_vacuum
from agent.spectra.value import frame_meta, refuse_non_spectrum, vacuum_wavelengths
from agent.spectra.value import vacuum_to_air as vacuum_to_air
from agent.spectra.value import validate_arrays as validate_arrays

_FITS_MAGIC = b"SIMPLE  ="
_PARQUET_MAGIC = b"PAR1"
_ZIP_MAGIC = b"PK\x03\x04"
# Markup where a spectrum should be: a web or error page saved under a spectrum's name.
_HTML_START = re.compile(rb"(?:\xef\xbb\xbf)?\s*<(?:!doctype\s+html|html)\b", re.IGNORECASE)
_XML_START = re.compile(rb"(?:\xef\xbb\xbf)?\s*<\?xml\b", re.IGNORECASE)


def load_spectra(
    path: str | os.PathLike[str],
    *,
    limits: ReadLimits | None = None,
    declared: Declared | None = None,
) -> list[Spectrum]:
    """Read every spectrum in ``path``; the format is detected from the content, not the name.

    Supported: LAMOST (old and new layout), SDSS spec and spSpec, DESI coadd, 1-D FITS images
    with a wavelength WCS, multi-extension FITS images, FITS tables (one row per pixel or one
    row of arrays), SpecVI-Bench parquet, CSV, whitespace ASCII and NPZ tables; any of them
    gzip-, bzip2- or xz-compressed. Reading stays within ``limits`` (default ``ReadLimits()``);
    past them it raises SpectrumTooLarge. ``declared`` says what the file may not: the columns of
    a text table, the wavelength frame. What is not a spectrum (fewer than
    MIN_SPECTRUM_PIXELS pixels, a grid outside WAVELENGTH_RANGE, a grid that is not monotonic)
    is refused with the reason.
    """
    source = str(path)
    limits = limits or ReadLimits()
    declared = declared or Declared()
    with open_content(Path(path), source, limits) as content:
        head = content.head
        if declared.columns is not None and head.startswith((_FITS_MAGIC, _PARQUET_MAGIC)):
            raise SpectrumFormatError(
                f"{source}: declared columns apply to text tables; this file is "
                f"{'FITS' if head.startswith(_FITS_MAGIC) else 'parquet'}, whose columns are "
                "named in the file"
            )
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
            spectra = _load_text(content, source, limits, declared.columns)
    _check_counts(spectra, source, limits)
    for spectrum in spectra:
        refuse_non_spectrum(spectrum, spectrum.source or source)
        _apply_declared_frame(spectrum, declared.frame, spectrum.source or source)
    return spectra


def _apply_declared_frame(spectrum: Spectrum, frame: str | None, source: str) -> None:
    """The declared frame replaces an assumed one; it may not contradict what a file says."""
    said, said_by = (
        spectrum.meta.get("wavelength_frame"),
        spectrum.meta.get("wavelength_frame_source"),
    )
    if frame is None:
        return
    if said_by in ("file", "survey") and said != frame:
        basis = spectrum.meta.get("wavelength_frame_basis", said_by)
        raise SpectrumFormatError(
            f"{source}: declared {frame} wavelengths, but the file says {said} ({basis})"
        )
    if said_by in ("file", "survey"):
        return
    if frame == "air":
        assumed = spectrum.wavelength
        spectrum.wavelength = vacuum_wavelengths(spectrum.wavelength, "air", source)
        if "flux_from_ab_magnitudes" in spectrum.meta:
            # f_lambda = f_nu c / lambda^2 was taken at the assumed (vacuum) wavelengths
            _rescale_flux(spectrum, (assumed / spectrum.wavelength) ** 2)
    spectrum.meta = {**spectrum.meta, **frame_meta(frame, "declared", "declared on upload")}
    if "wavelength_frame_in_file" in spectrum.meta:
        spectrum.meta["wavelength_frame_in_file"] = frame


def _rescale_flux(spectrum: Spectrum, factor: np.ndarray) -> None:
    spectrum.flux = spectrum.flux * factor
    if spectrum.ivar is not None:
        spectrum.ivar = spectrum.ivar / factor**2


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
    repaired: list[str] = []
    hdus = _open_fits(raw, source, repaired)
    spectra = _fits_spectra(hdus, source, limits)
    if repaired:
        for spectrum in spectra:
            spectrum.meta = {**spectrum.meta, "header_cards_repaired": repaired[:50]}
    return spectra


def _fits_spectra(hdus: fits.HDUList, source: str, limits: ReadLimits) -> list[Spectrum]:
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
    if _is_lamost_image(hdus[0], telescope):
        return [_load_lamost_old(hdus[0], source)]
    generic = _generic_fits(hdus, source, limits)
    if generic is not None:
        return generic
    if telescope.startswith("SDSS") or "SPECOBJ" in names or "SPALL" in names:
        raise SpectrumFormatError(f"{source}: SDSS file without the COADD HDU (missing HDU COADD)")
    if telescope == "LAMOST":
        raise SpectrumFormatError(
            f"{source}: LAMOST file with an empty primary HDU and no COADD HDU (missing HDU COADD)"
        )
    raise SpectrumFormatError(
        f"{source}: not a spectrum file: FITS layout not recognised (HDUs: {', '.join(names)}; "
        "read are 1-D images with a wavelength WCS, FLUX/ERROR/WAVELENGTH image extensions, "
        "tables with wavelength and flux columns, and the LAMOST, SDSS and DESI layouts)"
    )


def _generic_fits(hdus: fits.HDUList, source: str, limits: ReadLimits) -> list[Spectrum] | None:
    """A table with wavelength and flux columns, or a spectrum image; None when neither."""
    try:
        table = spectrum_table(hdus)
        if table is not None:
            return [load_table(hdus, table, source, limits)]
        if is_spectrum_image_layout(hdus):
            return [load_image(hdus, source, limits)]
    except SpectrumFormatError:
        raise
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        # astropy converts columns and header values lazily; a damaged TFORM or TDIM fails here
        raise SpectrumFormatError(
            f"{source}: corrupt FITS table or image ({type(exc).__name__}: {exc})"
        ) from exc
    return None


def _is_lamost_image(primary: fits.PrimaryHDU, telescope: str) -> bool:
    """LAMOST's (5, N) primary image (<= DR7): any 2-D primary image of a few rows that is not
    SDSS's spSpec and has no IRAF band names."""
    data = primary.data
    if data is None or data.ndim != 2 or data.shape[0] == 1 or telescope.startswith("SDSS"):
        return False
    return "BANDID1" not in primary.header
