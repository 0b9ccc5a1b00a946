"""FITS images of one spectrum: a 1-D image with a wavelength WCS (IRAF, stellar libraries),
IRAF's (band, aperture, pixel) cube, SDSS spSpec's (row, pixel) image, and multi-extension
layouts (flux, error or variance, wavelength and mask in image extensions of their own)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from astropy.io import fits

from agent.reading import ReadLimits, SpectrumFormatError, over_limit
from agent.resolution import Resolution, ResolutionError
from agent.spectra.magnitudes import refuse_magnitude_unit
from agent.spectra.value import (
    Spectrum,
    _finish,
    _finite_float,
    _json_safe,
    frame_meta,
    vacuum_wavelengths,
    validate_arrays,
)
from agent.spectra.wcs import (
    angstrom_per,
    header_flux_unit,
    header_frame,
    header_grid,
    header_wavelength_unit,
)

FLUX_EXTENSIONS = ("FLUX", "SCI", "SPEC", "SPECTRUM")
_ERROR_EXTENSIONS = {
    "ERROR": "sigma", "ERR": "sigma", "SIGMA": "sigma", "NOISE": "sigma", "UNCERTAINTY": "sigma",
    "IVAR": "ivar", "INVVAR": "ivar", "VARIANCE": "variance", "VAR": "variance",
}  # fmt: skip
_WAVELENGTH_EXTENSIONS = ("WAVELENGTH", "WAVE", "LAMBDA")
_MASK_EXTENSIONS = ("MASK", "QUAL", "QUALITY", "DQ")
# RA and DEC are kept as written: headers give them in degrees, hours, radians or sexagesimal.
_KEPT_KEYS = (
    "OBJECT", "TELESCOP", "INSTRUME", "DATE-OBS", "EXPTIME", "SPTYPE", "SPECTYPE", "BUNIT",
    "ORIGIN", "RA", "DEC", "EQUINOX",
)  # fmt: skip
_RESOLUTION_KEYS = ("RESOLVPW", "SPEC_RES")


def image_pixels(hdu: fits.hdu.base.ExtensionHDU | fits.PrimaryHDU) -> int:
    """Values in an image HDU, from its header (nothing is converted)."""
    header = hdu.header
    axes = int(header.get("NAXIS", 0) or 0)
    return (
        math.prod(int(header.get(f"NAXIS{n}", 0) or 0) for n in range(1, axes + 1)) if axes else 0
    )


def is_spectrum_image_layout(hdus: fits.HDUList) -> bool:
    """A flux image: a named flux extension, or a primary image of one spectrum."""
    names = {hdu.name.upper() for hdu in hdus}
    if any(
        _is_image(hdus[name]) and hdus[name].data is not None
        for name in FLUX_EXTENSIONS
        if name in names
    ):
        return True
    return _is_image(hdus[0]) and hdus[0].data is not None


def load_image(hdus: fits.HDUList, source: str, limits: ReadLimits) -> Spectrum:
    flux_hdu = _flux_hdu(hdus)
    where = f"{source} [HDU {flux_hdu.name or 0}]"
    header = flux_hdu.header
    primary = hdus[0].header
    flux, sigma, mask, layout = _image_rows(flux_hdu, hdus[0], source, where, limits)
    meta: dict[str, Any] = {"layout": layout}
    ivar = None
    for name, kind in _ERROR_EXTENSIONS.items():
        if _has_image(hdus, name):
            ivar = _ivar_from(_extension(hdus, name, flux.size, source, limits), kind)
            meta["error_from"] = f"HDU {name} ({kind})"
            break
    if ivar is None and sigma is not None:
        ivar = _ivar_from(sigma, "sigma")
    for name in _MASK_EXTENSIONS:
        if _has_image(hdus, name):
            mask = _extension(hdus, name, flux.size, source, limits) != 0
            break
    wavelength, frame = _wavelengths(hdus, header, primary, flux.size, where, source, limits, meta)
    refuse_magnitude_unit(header_flux_unit(header) or header_flux_unit(primary), f"{where} BUNIT")
    arrays = validate_arrays(wavelength, flux, ivar, source=where, mask=mask)
    meta.update(_kept(primary, header))
    flux_unit = header_flux_unit(header) or header_flux_unit(primary)
    if flux_unit:
        meta["flux_unit"] = flux_unit
    meta.update(frame)
    return _finish(
        arrays,
        source=source,
        survey=_survey(primary, header),
        object_id=str(meta.get("OBJECT", "")),
        meta=meta,
        resolution=_resolution(header, primary, source),
    )


def _flux_hdu(hdus: fits.HDUList) -> Any:
    names = [hdu.name.upper() for hdu in hdus]
    for name in FLUX_EXTENSIONS:
        if name in names and _is_image(hdus[name]) and hdus[name].data is not None:
            return hdus[name]
    return hdus[0]


def _has_image(hdus: fits.HDUList, name: str) -> bool:
    """An image extension ``name`` with data (an empty one is left out, as if absent)."""
    names = {hdu.name.upper() for hdu in hdus}
    return name in names and _is_image(hdus[name]) and hdus[name].data is not None


def _is_image(hdu: Any) -> bool:
    return isinstance(hdu, fits.PrimaryHDU | fits.ImageHDU | fits.CompImageHDU)


def _image_rows(
    hdu: Any, primary: fits.PrimaryHDU, source: str, where: str, limits: ReadLimits
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None, str]:
    """(flux, sigma or None, mask or None, layout) of an image; the pixel count is checked
    against the limits before anything is converted."""
    shape = tuple(int(axis) for axis in hdu.data.shape)
    size = shape[-1]
    if size > limits.max_pixels:
        raise over_limit(where, f"{size} pixels in one spectrum", limits, "max_pixels")
    header = hdu.header
    squeezed = tuple(axis for axis in shape[:-1] if axis != 1)
    if not squeezed:
        return _floats(hdu.data.reshape(-1)), None, None, "1-D image"
    if len(squeezed) == 1 and _has_bands(header, squeezed[0]):
        bands = hdu.data.reshape(squeezed[0], size)
        sigma_band = _band(header, squeezed[0], ("sigma", "error"))
        sigma = None if sigma_band is None else _floats(bands[sigma_band])
        return _floats(bands[0]), sigma, None, "IRAF image (band, aperture, pixel)"
    if len(shape) == 2 and _is_sdss_spspec(header, primary, shape):
        rows = hdu.data
        return _floats(rows[0]), _floats(rows[2]), _floats(rows[3]) != 0, "SDSS spSpec image"
    raise SpectrumFormatError(
        f"{where}: an image of shape {shape} is not one spectrum (several apertures or rows "
        "without band names: BANDIDn)"
    )


def _floats(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)


def _has_bands(header: fits.Header, count: int) -> bool:
    return all(f"BANDID{n}" in header for n in range(1, count + 1))


def _band(header: fits.Header, count: int, words: tuple[str, ...]) -> int | None:
    for n in range(2, count + 1):
        text = str(header.get(f"BANDID{n}", "")).lower()
        if any(word in text for word in words):
            return n - 1
    return None


def _is_sdss_spspec(header: fits.Header, primary: fits.PrimaryHDU, shape: tuple[int, ...]) -> bool:
    telescope = str(primary.header.get("TELESCOP", header.get("TELESCOP", ""))).upper()
    return telescope.startswith("SDSS") and "COEFF0" in header and shape[0] >= 4


def _extension(
    hdus: fits.HDUList, name: str, size: int, source: str, limits: ReadLimits
) -> np.ndarray:
    hdu = hdus[name]
    if image_pixels(hdu) > limits.max_pixels:
        raise over_limit(
            f"{source} [HDU {name}]", f"{image_pixels(hdu)} values", limits, "max_pixels"
        )
    values = None if hdu.data is None else _floats(hdu.data).reshape(-1)
    if values is None or values.size != size:
        found = 0 if values is None else values.size
        raise SpectrumFormatError(
            f"{source}: length mismatch between HDUs: the flux has {size} pixels, HDU {name} "
            f"has {found}"
        )
    return values


def _ivar_from(values: np.ndarray, kind: str) -> np.ndarray:
    if kind == "ivar":
        return values
    variance = values**2 if kind == "sigma" else values
    usable = np.isfinite(variance) & (variance > 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return np.where(usable, 1.0 / np.where(usable, variance, 1.0), 0.0)


def _wavelengths(
    hdus: fits.HDUList,
    header: fits.Header,
    primary: fits.Header,
    size: int,
    where: str,
    source: str,
    limits: ReadLimits,
    meta: dict[str, Any],
) -> tuple[np.ndarray, dict[str, str]]:
    wave_name = next((n for n in _WAVELENGTH_EXTENSIONS if _has_image(hdus, n)), None)
    if wave_name is not None:
        wave_header = hdus[wave_name].header
        unit = header_flux_unit(wave_header) or header_wavelength_unit(wave_header)
        wavelength = _extension(hdus, wave_name, size, source, limits) * angstrom_per(unit, where)
        meta["wavelength_grid"] = f"HDU {wave_name}"
        said = header_frame(wave_header) or header_frame(header) or header_frame(primary)
    else:
        wavelength, grid = header_grid(header, size, where)
        meta.update(grid)
        said = header_frame(header) or header_frame(primary)
    if said is None:
        return wavelength, frame_meta("vacuum", "assumed", "the header names no frame")
    return vacuum_wavelengths(wavelength, said[0], where), frame_meta(said[0], "file", said[1])


def _kept(primary: fits.Header, header: fits.Header) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key in _KEPT_KEYS:
        value = _json_safe(header.get(key, primary.get(key)))
        if value not in (None, ""):
            kept[key] = value
    return kept


def _survey(primary: fits.Header, header: fits.Header) -> str:
    for key in ("TELESCOP", "INSTRUME"):
        value = _json_safe(primary.get(key, header.get(key)))
        if isinstance(value, str) and value:
            return "SDSS" if value.upper().startswith("SDSS") else value[:40]
    return "FITS"


def _resolution(header: fits.Header, primary: fits.Header, source: str) -> Resolution | None:
    for key in _RESOLUTION_KEYS:
        power = _finite_float(header.get(key, primary.get(key)))
        if power is not None and power > 0:
            try:
                return Resolution.constant_r(power, source="file", note=f"{key} header key")
            except ResolutionError as exc:
                raise SpectrumFormatError(f"{source}: header key {key}: {exc}") from exc
    return None
