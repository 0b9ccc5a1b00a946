"""Opening FITS bytes and reading table columns, shared by the LAMOST, SDSS and DESI readers."""

from __future__ import annotations

import io
import warnings

import numpy as np
from astropy.io import fits

from agent.reading import SpectrumFormatError


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
