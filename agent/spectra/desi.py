"""DESI coadd files: B/R/Z arms merged per target."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from astropy.io import fits

from agent.reading import SpectrumFormatError
from agent.resolution import Resolution
from agent.spectra.fitsio import _has_column, _table_column
from agent.spectra.value import (
    Spectrum,
    ValidatedArrays,
    _finish,
    _finite_float,
    _pick,
    _validate,
    frame_meta,
    validate_arrays,
)

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
        meta.update(frame_meta("vacuum", "survey", "DESI spectra are in vacuum"))
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
