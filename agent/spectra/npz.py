"""NPZ tables, and the NPZ bytes a Spectrum is stored as."""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np

from agent import bounded_json
from agent.reading import ReadLimits, SpectrumFormatError, read_npz
from agent.resolution import Resolution, ResolutionError
from agent.spectra.tables import (
    _FRAME_KEYS,
    _UNIT_KEYS,
    _ColumnSpec,
    _frame_name,
    _parse_column,
    _require_roles,
    _table_spectrum,
    _TableSettings,
)
from agent.spectra.value import Spectrum, validate_arrays


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
    if spectrum.sky is not None:
        arrays["sky"] = np.asarray(spectrum.sky, dtype=np.float64)
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
        header = bounded_json.loads(str(arrays["meta"]), what="'meta'")
    except ValueError as exc:
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
        sky=_stored_sky(arrays, validated.wavelength.size, source),
    )


def _stored_sky(arrays: dict[str, np.ndarray], n_pixels: int, source: str) -> np.ndarray | None:
    if "sky" not in arrays:
        return None
    sky = np.asarray(arrays["sky"], dtype=np.float64).ravel()
    if sky.size != n_pixels:
        raise SpectrumFormatError(f"{source}: 'sky' has {sky.size} pixels, flux {n_pixels}")
    return sky


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
