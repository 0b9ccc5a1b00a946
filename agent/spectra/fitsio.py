"""Opening FITS bytes and reading table columns, shared by the LAMOST, SDSS and DESI readers."""

from __future__ import annotations

import io
import re
import warnings
from typing import Any

import numpy as np
from astropy.io import fits
from astropy.io.fits.verify import VerifyError

from agent.reading import SpectrumFormatError


def _open_fits(raw: bytes, source: str, repaired: list[str] | None = None) -> fits.HDUList:
    """The HDUs of ``raw``, every card parsed and every data unit read.

    A card astropy cannot parse (an unquoted string, a value with a stray character) is fixed
    the way astropy's ``verify('silentfix')`` fixes it, or dropped; its keyword goes to
    ``repaired``. Damage to the structure (BITPIX, NAXISn, a truncated data unit) is refused.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            hdus = fits.open(io.BytesIO(raw), memmap=False, lazy_load_hdus=False)
        except Exception as exc:  # astropy raises OSError, TypeError, ValueError... on bad bytes
            raise SpectrumFormatError(f"{source}: {_header_damage(raw, exc)}") from exc
        for index, hdu in enumerate(hdus):
            # Parse every card and read every data unit now: astropy is lazy, and a damaged
            # card or a truncated data unit would otherwise fail later with its own error.
            try:
                _repair_cards(hdu.header, f"HDU {index}", repaired)
                _ = hdu.data
            except Exception as exc:
                raise SpectrumFormatError(
                    f"{source}: {_data_damage(raw, index, hdu, exc)}"
                ) from exc
    if any("truncated" in str(warning.message) for warning in caught):
        raise SpectrumFormatError(
            f"{source}: truncated FITS file (data shorter than the header says)"
        )
    if len(hdus) == 0:
        raise SpectrumFormatError(f"{source}: truncated or corrupt FITS file (no HDU)")
    return hdus


FITS_BLOCK = 2880  # bytes: a FITS file is whole blocks of headers and data


def _header_damage(raw: bytes, exc: Exception) -> str:
    """Why astropy could not read the headers, in the reader's words (issue 37: a truncated
    upload showed "TypeError: buffer is too small for requested array")."""
    if not raw:
        return "empty file (0 bytes)"
    if not raw.startswith(b"SIMPLE  ="):
        return "not a FITS file (it does not begin with the SIMPLE card)"
    if len(raw) % FITS_BLOCK:
        return (
            f"truncated FITS file: it ends after {len(raw):,} bytes, inside a header "
            f"(a FITS file is whole {FITS_BLOCK:,}-byte blocks)"
        )
    return f"corrupt FITS header ({_plain(exc)})"


def _data_damage(raw: bytes, index: int, hdu: Any, exc: Exception) -> str:
    """Why HDU ``index``'s header or data could not be read: a data unit the file ends inside
    says how many bytes the header announced and where the file ends."""
    name = hdu.name or ("PRIMARY" if index == 0 else "unnamed")
    offset = getattr(hdu, "_data_offset", None)
    size = getattr(hdu, "size", None)
    if isinstance(offset, int) and isinstance(size, int) and offset + size > len(raw):
        return (
            f"truncated FITS file: HDU {index} ({name}) announces {size:,} bytes of data from "
            f"byte {offset:,}, but the file ends at byte {len(raw):,}"
        )
    return f"corrupt FITS data in HDU {index} ({name}): {_plain(exc)}"


def _plain(exc: Exception) -> str:
    """astropy's own message, without the Python exception's class name."""
    return str(exc).strip() or "unreadable"


_STRUCTURE_KEYS = re.compile(r"(?:SIMPLE|XTENSION|BITPIX|NAXIS\d*|PCOUNT|GCOUNT|END|EXTEND)")


def _repair_cards(header: fits.Header, where: str, repaired: list[str] | None) -> None:
    broken: list[str] = []
    for card in header.cards:
        try:
            _ = card.value
        except VerifyError:
            broken.append(card.keyword)
    for keyword in broken:
        if _STRUCTURE_KEYS.fullmatch(keyword):
            raise VerifyError(f"{where}: structural card {keyword} cannot be parsed")
        card = header.cards[keyword]
        try:
            card.verify("silentfix")
            _ = card.value
        except (VerifyError, ValueError):
            del header[keyword]
            if repaired is not None:
                repaired.append(f"{where} {keyword} (dropped)")
            continue
        if repaired is not None:
            repaired.append(f"{where} {keyword}")


def _table_column(hdu: fits.BinTableHDU, name: str, source: str) -> np.ndarray:
    """Column ``name`` (case-insensitive) of a table HDU, or an error naming HDU and column."""
    if hdu.data is None or name.upper() not in {c.upper() for c in hdu.columns.names}:
        raise SpectrumFormatError(f"{source}: HDU {hdu.name} has no column {name!r}")
    return np.asarray(hdu.data[name])


def _has_column(hdu: fits.BinTableHDU, name: str) -> bool:
    return name.upper() in {c.upper() for c in hdu.columns.names}
