"""Writers of small spectrum files in the exact survey layouts (shared/design/data_formats.md §1).

Each writer returns what it wrote (as the reader should see it, float32 rounding included), so a
test can compare the loaded spectrum with the file content rather than with the reader's logic.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from astropy.io import fits
from PIL import Image

LAMOST_N_PIXELS = 3908
LAMOST_COEFF0 = 3.5682
LAMOST_COEFF1 = 1e-4
SDSS_COEFF0 = 3.5798
DESI_ARM_RANGES = {"B": (3600.0, 2751), "R": (5760.0, 2326), "Z": (7520.0, 2881)}
DESI_STEP = 0.8
DESI_UNIQUE_PIXELS = 7781  # B+R+Z minus the 51 + 126 pixels the arms share (data_formats.md)


@dataclass(frozen=True)
class WrittenSpectrum:
    """The arrays a fixture file holds, as float64, in file order."""

    wavelength: np.ndarray
    flux: np.ndarray
    ivar: np.ndarray
    and_mask: np.ndarray


@dataclass(frozen=True)
class DesiArm:
    """One DESI arm for all targets of a coadd: wavelength (nwave,), the rest (ntarget, nwave)."""

    wavelength: np.ndarray
    flux: np.ndarray
    ivar: np.ndarray
    mask: np.ndarray  # uint32 bits, 0 = good


def _write(path: Path | str, hdus: fits.HDUList) -> Path:
    target = Path(path)
    buffer = io.BytesIO()
    hdus.writeto(buffer)
    data = buffer.getvalue()
    target.write_bytes(gzip.compress(data, mtime=0) if target.name.endswith(".gz") else data)
    return target


def _default_arrays(size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    flux = 100.0 + 10.0 * np.sin(np.linspace(0.0, 20.0, size)) + rng.normal(0.0, 1.0, size)
    ivar = np.full(size, 0.04)
    return flux, ivar


def _as32(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


# --- LAMOST -------------------------------------------------------------------------------------

LAMOST_HEADER: dict[str, Any] = {
    "FILENAME": "spec-55859-F5902_sp01-001.fits",
    "OBSID": 101001,
    "DATA_V": "LAMOST DR7",
    "TELESCOP": "LAMOST",
    "LMJD": 55859,
    "MJD": 55858,
    "PLANID": "F5902",
    "RA": 332.202274,
    "DEC": -2.056767,
    "DESIG": "LAMOST J220848.54-020324.3",
    "FIBERID": 1,
    "SPID": 1,
    "OBJTYPE": "Star",
    "VACUUM": True,
    "CLASS": "STAR",
    "SUBCLASS": "G7",
    "Z": -0.0001387,
    "Z_ERR": 2.408e-05,
    "SNRU": 0.7,
    "SNRG": 12.22,
    "SNRR": 27.16,
    "SNRI": 36.14,
    "SNRZ": 21.07,
}


def lamost_wavelength(n_pixels: int = LAMOST_N_PIXELS) -> np.ndarray:
    return 10.0 ** (LAMOST_COEFF0 + LAMOST_COEFF1 * np.arange(n_pixels))


def write_lamost_old(
    path: Path | str,
    *,
    n_pixels: int = LAMOST_N_PIXELS,
    flux: Sequence[float] | np.ndarray | None = None,
    ivar: Sequence[float] | np.ndarray | None = None,
    and_mask: Sequence[float] | np.ndarray | None = None,
    wavelength_row: Sequence[float] | np.ndarray | None = None,
    header: dict[str, Any] | None = None,
    drop_keys: Sequence[str] = (),
    seed: int = 0,
) -> WrittenSpectrum:
    """LAMOST <= DR7: primary float32 image (5, N) rows flux, ivar, wavelength, andmask, ormask.

    ``wavelength_row`` replaces row 2 (e.g. a pilot-survey continuum-subtracted spectrum); the
    header always carries COEFF0/COEFF1 as the real files do.
    """
    default_flux, default_ivar = _default_arrays(n_pixels, seed)
    rows = np.zeros((5, n_pixels), dtype=np.float32)
    rows[0] = _as32(default_flux if flux is None else flux)
    rows[1] = _as32(default_ivar if ivar is None else ivar)
    rows[2] = _as32(lamost_wavelength(n_pixels) if wavelength_row is None else wavelength_row)
    rows[3] = _as32(np.zeros(n_pixels) if and_mask is None else and_mask)
    rows[4] = rows[3]
    primary = fits.PrimaryHDU(rows)
    cards = {**LAMOST_HEADER, **(header or {})}
    cards.update(
        {
            "EXTNAME": "Flux",
            "EXTEN0": "Flux, Inverse, Wavelength, Andmask, Ormask",
            "N_EXTEN": 1,
            "COEFF0": LAMOST_COEFF0,
            "COEFF1": LAMOST_COEFF1,
            "CRVAL1": LAMOST_COEFF0,
            "CD1_1": LAMOST_COEFF1,
            "CRPIX1": 1,
            "DC-FLAG": 1,
        }
    )
    for key, value in cards.items():
        if key not in drop_keys:
            primary.header[key] = value
    _write(path, fits.HDUList([primary]))
    return WrittenSpectrum(
        wavelength=rows[2].astype(np.float64),
        flux=rows[0].astype(np.float64),
        ivar=rows[1].astype(np.float64),
        and_mask=rows[3].astype(np.float64),
    )


def write_lamost_new(
    path: Path | str,
    *,
    n_pixels: int = LAMOST_N_PIXELS,
    columns: dict[str, np.ndarray] | None = None,
    header: dict[str, Any] | None = None,
    seed: int = 0,
) -> WrittenSpectrum:
    """LAMOST >= DR8: empty primary + BINTABLE 'COADD', one row of vector columns (float32).

    ``columns`` replaces or adds vector columns by name; a value of None removes the column.
    """
    flux, ivar = _default_arrays(n_pixels, seed)
    vectors: dict[str, Any] = {
        "FLUX": flux,
        "IVAR": ivar,
        "WAVELENGTH": lamost_wavelength(n_pixels),
        "ANDMASK": np.zeros(n_pixels),
        "ORMASK": np.zeros(n_pixels),
        "NORMALIZATION": np.full(n_pixels, -9999.0),
    }
    vectors.update(columns or {})
    table_columns = [
        fits.Column(name=name, format=f"{np.size(values)}E", array=_as32(values)[np.newaxis, :])
        for name, values in vectors.items()
        if values is not None
    ]
    primary = fits.PrimaryHDU()
    cards = {**LAMOST_HEADER, "DATA_V": "LAMOST DR9", "SUBCLASS": "A2", **(header or {})}
    cards.update({"N_EXTEN": 2, "NORM": 0})
    for key, value in cards.items():
        primary.header[key] = value
    coadd = fits.BinTableHDU.from_columns(table_columns, name="COADD")
    _write(path, fits.HDUList([primary, coadd]))

    def column(name: str) -> np.ndarray:
        values = vectors.get(name)
        return np.array([]) if values is None else _as32(values).astype(np.float64)

    return WrittenSpectrum(column("WAVELENGTH"), column("FLUX"), column("IVAR"), column("ANDMASK"))


# --- SDSS ---------------------------------------------------------------------------------------


def write_sdss_spec(
    path: Path | str,
    *,
    n_pixels: int = 300,
    specobj_hdu: str | None = "SPECOBJ",
    include_coadd: bool = True,
    redshift: float = 0.1,
    object_class: str = "GALAXY",
    subclass: str = "STARFORMING",
    plate: int = 266,
    mjd: int = 51602,
    fiber: int = 1,
    specobj_id: str | None = None,
    sn_median_all: float = 12.5,
    flux: Sequence[float] | np.ndarray | None = None,
    and_mask: Sequence[int] | np.ndarray | None = None,
    drop_columns: Sequence[str] = (),
    seed: int = 1,
) -> WrittenSpectrum:
    """SDSS spec-PLATE-MJD-FIBER: HDU1 COADD one row per pixel (lower-case columns), HDU2
    SPECOBJ (``specobj_hdu='SPALL'`` for the BOSS name, None to leave it out), HDU3 SPZLINE."""
    default_flux, ivar = _default_arrays(n_pixels, seed)
    loglam = _as32(SDSS_COEFF0 + 1e-4 * np.arange(n_pixels))
    pixel_flux = _as32(default_flux if flux is None else flux)
    mask_bits = np.asarray(np.zeros(n_pixels) if and_mask is None else and_mask, dtype=np.int32)
    coadd_columns = {
        "flux": ("E", pixel_flux),
        "loglam": ("E", loglam),
        "ivar": ("E", _as32(ivar)),
        "and_mask": ("J", mask_bits),
        "or_mask": ("J", mask_bits),
        "wdisp": ("E", np.full(n_pixels, 1.1, dtype=np.float32)),
        "sky": ("E", np.full(n_pixels, 3.0, dtype=np.float32)),
        "model": ("E", pixel_flux),
    }
    primary = fits.PrimaryHDU()
    for key, value in {
        "TELESCOP": "SDSS 2.5-M",
        "VERS2D": "v5_3_12",
        "PLUG_RA": 146.71421,
        "PLUG_DEC": -1.0413043,
        "FIBERID": fiber,
        "MJD": mjd,
        "PLATEID": plate,
        "BUNIT": "1E-17 erg/cm^2/s/Ang",
        "VACUUM": True,
        "COEFF0": float(loglam[0]),
        "COEFF1": 1e-4,
    }.items():
        primary.header[key] = value
    hdus = [primary]
    if include_coadd:
        hdus.append(
            fits.BinTableHDU.from_columns(
                [
                    fits.Column(name=name, format=fmt, array=values)
                    for name, (fmt, values) in coadd_columns.items()
                    if name not in drop_columns
                ],
                name="COADD",
            )
        )
    if specobj_hdu is not None:
        hdus.append(
            _sdss_specobj(
                specobj_hdu,
                redshift,
                object_class,
                subclass,
                plate,
                mjd,
                fiber,
                specobj_id,
                sn_median_all,
            )
        )
    hdus.append(
        fits.BinTableHDU.from_columns(
            [
                fits.Column(name="LINENAME", format="13A", array=np.array(["H_alpha"])),
                fits.Column(name="LINEWAVE", format="D", array=np.array([6564.61])),
                fits.Column(name="LINEEW", format="E", array=np.array([-12.0])),
            ],
            name="SPZLINE",
        )
    )
    _write(path, fits.HDUList(hdus))
    return WrittenSpectrum(
        wavelength=10.0 ** loglam.astype(np.float64),
        flux=pixel_flux.astype(np.float64),
        ivar=_as32(ivar).astype(np.float64),
        and_mask=mask_bits.astype(np.float64),
    )


def _sdss_specobj(
    name: str,
    redshift: float,
    object_class: str,
    subclass: str,
    plate: int,
    mjd: int,
    fiber: int,
    specobj_id: str | None,
    sn_median_all: float,
) -> fits.BinTableHDU:
    columns = [
        fits.Column(name="PLATE", format="J", array=np.array([plate])),
        fits.Column(name="MJD", format="J", array=np.array([mjd])),
        fits.Column(name="FIBERID", format="J", array=np.array([fiber])),
        fits.Column(name="PLUG_RA", format="D", array=np.array([146.71421])),
        fits.Column(name="PLUG_DEC", format="D", array=np.array([-1.0413043])),
        fits.Column(name="CLASS", format="6A", array=np.array([object_class])),
        fits.Column(name="SUBCLASS", format="21A", array=np.array([subclass])),
        fits.Column(name="Z", format="E", array=np.array([redshift], dtype=np.float32)),
        fits.Column(name="Z_ERR", format="E", array=np.array([1e-5], dtype=np.float32)),
        fits.Column(name="ZWARNING", format="J", array=np.array([0])),
        fits.Column(name="SN_MEDIAN_ALL", format="E", array=np.array([sn_median_all])),
        fits.Column(name="SN_MEDIAN", format="5E", array=np.full((1, 5), sn_median_all)),
        fits.Column(name="ELODIE_SPTYPE", format="12A", array=np.array(["unknown"])),
    ]
    if specobj_id is not None:
        columns.append(fits.Column(name="SPECOBJID", format="19A", array=np.array([specobj_id])))
    return fits.BinTableHDU.from_columns(columns, name=name)


# --- DESI ---------------------------------------------------------------------------------------


def desi_default_arms(n_targets: int, seed: int = 2) -> dict[str, DesiArm]:
    """Arms on the real DESI grids (0.8 A steps; B 3600-5800, R 5760-7620, Z 7520-9824)."""
    rng = np.random.default_rng(seed)
    arms = {}
    for arm, (start, size) in DESI_ARM_RANGES.items():
        wavelength = start + DESI_STEP * np.arange(size)
        flux = rng.normal(5.0, 0.5, (n_targets, size)).astype(np.float32)
        ivar = np.full((n_targets, size), 4.0, dtype=np.float32)
        arms[arm] = DesiArm(wavelength, flux, ivar, np.zeros((n_targets, size), dtype=np.uint32))
    return arms


def write_desi_coadd(
    path: Path | str,
    n_targets: int = 2,
    *,
    arms: dict[str, DesiArm] | None = None,
    skip_hdus: Sequence[str] = (),
    with_scores: bool = True,
    with_resolution: bool = False,
) -> dict[str, DesiArm]:
    """DESI coadd: PRIMARY, FIBERMAP, EXP_FIBERMAP, {B,R,Z}_{WAVELENGTH,FLUX,IVAR,MASK[,RESOLUTION]},
    SCORES. MASK is uint32 (astropy stores it as int32 with BZERO=2147483648)."""
    arms = desi_default_arms(n_targets) if arms is None else arms
    target_ids = 39627000000000000 + np.arange(n_targets, dtype=np.int64)
    primary = fits.PrimaryHDU()
    for key, value in {
        "SPGRP": "healpix",
        "SPGRPVAL": 9557,
        "HPXPIXEL": 9557,
        "HPXNSIDE": 64,
        "HPXNEST": True,
        "SURVEY": "main",
        "PROGRAM": "dark",
        "INFIL000": "spectra-main-dark-9557.fits",
    }.items():
        primary.header[key] = value
    hdus: list[fits.hdu.base.ExtensionHDU | fits.PrimaryHDU] = [
        primary,
        _desi_fibermap(target_ids),
        fits.BinTableHDU.from_columns(
            [
                fits.Column(name="TARGETID", format="K", array=target_ids),
                fits.Column(name="NIGHT", format="J", array=np.full(n_targets, 20210510)),
                fits.Column(name="EXPID", format="J", array=np.full(n_targets, 90000)),
            ],
            name="EXP_FIBERMAP",
        ),
    ]
    for arm, data in arms.items():
        hdus.append(
            fits.ImageHDU(np.asarray(data.wavelength, dtype=np.float64), name=f"{arm}_WAVELENGTH")
        )
        hdus[-1].header["BUNIT"] = "Angstrom"
        hdus.append(fits.ImageHDU(_as32(data.flux), name=f"{arm}_FLUX"))
        hdus.append(fits.ImageHDU(_as32(data.ivar), name=f"{arm}_IVAR"))
        hdus.append(fits.ImageHDU(np.asarray(data.mask, dtype=np.uint32), name=f"{arm}_MASK"))
        if with_resolution:
            resolution = np.zeros((n_targets, 11, data.wavelength.size), dtype=np.float32)
            hdus.append(fits.ImageHDU(resolution, name=f"{arm}_RESOLUTION"))
    if with_scores:
        hdus.append(_desi_scores(target_ids, arms))
    _write(path, fits.HDUList([hdu for hdu in hdus if hdu.name not in skip_hdus]))
    return arms


def _desi_fibermap(target_ids: np.ndarray) -> fits.BinTableHDU:
    n_targets = target_ids.size
    objtypes = np.array(["TGT" if i % 3 != 2 else "SKY" for i in range(n_targets)])
    return fits.BinTableHDU.from_columns(
        [
            fits.Column(name="TARGETID", format="K", array=target_ids),
            fits.Column(name="COADD_FIBERSTATUS", format="J", array=np.zeros(n_targets)),
            fits.Column(name="TARGET_RA", format="D", array=150.0 + 0.01 * np.arange(n_targets)),
            fits.Column(name="TARGET_DEC", format="D", array=2.0 + 0.01 * np.arange(n_targets)),
            fits.Column(name="OBJTYPE", format="3A", array=objtypes),
            fits.Column(name="MORPHTYPE", format="4A", array=np.full(n_targets, "PSF")),
            fits.Column(name="EBV", format="E", array=np.full(n_targets, 0.02)),
            fits.Column(name="FLUX_G", format="E", array=np.full(n_targets, 10.0)),
            fits.Column(name="FLUX_R", format="E", array=np.full(n_targets, 12.0)),
            fits.Column(name="FLUX_Z", format="E", array=np.full(n_targets, 14.0)),
            fits.Column(name="DESI_TARGET", format="K", array=np.full(n_targets, 4)),
            fits.Column(name="MWS_TARGET", format="K", array=np.zeros(n_targets)),
        ],
        name="FIBERMAP",
    )


def _desi_scores(target_ids: np.ndarray, arms: dict[str, DesiArm]) -> fits.BinTableHDU:
    columns = [fits.Column(name="TARGETID", format="K", array=target_ids)]
    for offset, arm in enumerate(arms):
        snr = 2.0 * (offset + 1) + np.arange(target_ids.size)  # B: 2, R: 4, Z: 6 (+1 per target)
        columns.append(fits.Column(name=f"MEDIAN_COADD_SNR_{arm}", format="E", array=snr))
        columns.append(
            fits.Column(name=f"TSNR2_LRG_{arm}", format="E", array=np.ones(target_ids.size))
        )
    return fits.BinTableHDU.from_columns(columns, name="SCORES")


# --- SpecVI-Bench parquet -----------------------------------------------------------------------


def tiny_png() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (2, 2), (255, 255, 255)).save(buffer, format="PNG")
    return buffer.getvalue()


def specvi_row(
    wavelength: Sequence[float],
    flux: Sequence[float],
    redshift: float | None = 0.0,
    *,
    data_source: str = "specvi-mini",
    ground_truth: str = "YES",
    task: str = "cv",
    index: int = 0,
    name: str = "object 0",
    split: str = "test",
) -> dict[str, Any]:
    """One verl row in the SpecVI-Bench layout (common.md)."""
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": "<image>\nAnalyze the provided spectrum."}],
        "images": [{"bytes": tiny_png()}],
        "ability": "spectral_inspection",
        "reward_model": {"style": "rule", "ground_truth": ground_truth},
        "extra_info": {
            "index": index,
            "name": name,
            "split": split,
            "task": task,
            "tools_kwargs": {
                "spectral_visualization_tool": {
                    "create_kwargs": {
                        "wavelength": [float(w) for w in wavelength],
                        "flux": [float(f) for f in flux],
                        "redshift": redshift,
                    }
                }
            },
        },
    }


def write_specvi_parquet(path: Path | str, rows: Sequence[dict[str, Any]]) -> Path:
    target = Path(path)
    pq.write_table(pa.Table.from_pylist(list(rows)), target)
    return target


# --- plain tables -------------------------------------------------------------------------------


def _table_lines(
    columns: Sequence[Sequence[float]],
    header: Sequence[str] | None,
    separator: str,
    comments: Sequence[str],
) -> str:
    lines = [f"# {comment}" for comment in comments]
    if header is not None:
        lines.append(separator.join(header))
    lines.extend(
        separator.join(repr(float(value)) for value in row) for row in zip(*columns, strict=True)
    )
    return "\n".join(lines) + "\n"


def write_table_csv(
    path: Path | str,
    wavelength: Sequence[float],
    flux: Sequence[float],
    error: Sequence[float] | None = None,
    *,
    header: Sequence[str] | None = ("wavelength", "flux", "error"),
    comments: Sequence[str] = (),
) -> Path:
    """Comma-separated table; ``header=None`` writes no header line."""
    columns = [wavelength, flux] + ([error] if error is not None else [])
    names = None if header is None else list(header)[: len(columns)]
    target = Path(path)
    target.write_text(_table_lines(columns, names, ",", comments))
    return target


def write_table_ascii(
    path: Path | str,
    wavelength: Sequence[float],
    flux: Sequence[float],
    error: Sequence[float] | None = None,
    *,
    header: Sequence[str] | None = ("wavelength", "flux", "error"),
    comments: Sequence[str] = (),
) -> Path:
    """Whitespace-separated table; ``header=None`` writes no header line."""
    columns = [wavelength, flux] + ([error] if error is not None else [])
    names = None if header is None else list(header)[: len(columns)]
    target = Path(path)
    target.write_text(_table_lines(columns, names, "  ", comments))
    return target


def write_table_npz(path: Path | str, **arrays: Any) -> Path:
    """NPZ with the given named arrays (e.g. wavelength=..., flux=..., wavelength_unit='nm')."""
    target = Path(path)
    with target.open("wb") as handle:
        np.savez(handle, **{name: np.asarray(value) for name, value in arrays.items()})
    return target
