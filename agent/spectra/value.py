"""The Spectrum value, array validation, air/vacuum wavelengths and the fields readers share."""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from agent.reading import SpectrumFormatError
from agent.resolution import Resolution, survey_default


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
    # the sky the pipeline subtracted, same grid and flux unit (SDSS ``sky``), or None
    sky: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.wavelength = np.asarray(self.wavelength, dtype=np.float64)
        self.flux = np.asarray(self.flux, dtype=np.float64)
        if self.resolution is None and self.wavelength.size >= 2:
            self.resolution = survey_default(self.survey, self.wavelength)
        if self.ivar is not None:
            self.ivar = np.asarray(self.ivar, dtype=np.float64)
        if self.sky is not None:
            self.sky = np.asarray(self.sky, dtype=np.float64)
            if self.sky.shape != self.flux.shape:
                raise SpectrumFormatError(
                    f"sky has {self.sky.size} pixels, flux {self.flux.size}: not one grid"
                )
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

    def digest(self) -> str:
        """SHA-256 of everything a policy and the tool read: the arrays, the mask and the
        redshift (a rollout records it, so a result can be traced to the exact input)."""
        digest = hashlib.sha256()
        for name, array in (("wavelength", self.wavelength), ("flux", self.flux)):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(array, dtype="<f8").tobytes())
        digest.update(b"ivar")
        if self.ivar is not None:
            digest.update(np.ascontiguousarray(self.ivar, dtype="<f8").tobytes())
        digest.update(b"mask")
        assert self.mask is not None
        digest.update(np.packbits(np.asarray(self.mask, dtype=bool)).tobytes())
        digest.update(f"redshift={float(self.redshift)!r}".encode())
        return digest.hexdigest()


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

    A decreasing grid is reversed, carrying flux/ivar/mask along; a grid that is neither increasing
    nor decreasing (a duplicated wavelength, overlapping orders, shuffled rows) is refused: it is
    not one spectrum. Non-finite flux or ivar and ivar <= 0 are masked, never dropped.
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
    steps = np.diff(wave)
    if np.any(steps <= 0):
        order = np.argsort(wave, kind="stable")
        _refuse_duplicates(wave, order, source)
        if np.any(steps > 0):
            _refuse_unordered(wave, steps, source)
        wave, values, bad = wave[::-1], values[::-1], bad[::-1]
        inverse_variance = None if inverse_variance is None else inverse_variance[::-1]
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


def _refuse_unordered(wave: np.ndarray, steps: np.ndarray, source: str) -> None:
    rising = bool(steps[0] > 0)
    turn = int(np.flatnonzero((steps > 0) != rising)[0])
    raise SpectrumFormatError(
        f"{source}: not a spectrum: the wavelength grid is not monotonic: it "
        f"{'rises' if rising else 'falls'} to {wave[turn]:g} at pixel {turn}, then "
        f"{'falls' if rising else 'rises'} to {wave[turn + 1]:g} at pixel {turn + 1} (shuffled rows or overlapping "
        "orders are not one spectrum)"
    )


# --- what a spectrum file must hold -------------------------------------------------------------

MIN_SPECTRUM_PIXELS = 50
WAVELENGTH_RANGE = (1000.0, 30000.0)  # Angstrom: the ultraviolet to the near infrared


def refuse_non_spectrum(spectrum: Spectrum, source: str) -> None:
    """Refuse what a file holds when it cannot be a spectrum: too few pixels, or a wavelength
    grid that lies (almost) wholly outside 1,000-30,000 Angstrom."""
    size = len(spectrum)
    if size < MIN_SPECTRUM_PIXELS:
        raise SpectrumFormatError(
            f"{source}: not a spectrum: {size} pixels; a spectrum needs at least "
            f"{MIN_SPECTRUM_PIXELS}"
        )
    low, high = WAVELENGTH_RANGE
    wave = spectrum.wavelength
    inside = int(np.count_nonzero((wave >= low) & (wave <= high)))
    if inside < MIN_SPECTRUM_PIXELS:
        raise SpectrumFormatError(
            f"{source}: not a spectrum: the wavelength grid {wave[0]:.6g}-{wave[-1]:.6g} Angstrom "
            f"has {inside} pixels within {low:,.0f}-{high:,.0f} Angstrom; at least "
            f"{MIN_SPECTRUM_PIXELS} are needed (wavelengths in another unit? name it in the file "
            "or declare it)"
        )


# --- the wavelength frame ------------------------------------------------------------------------

FRAME_SOURCES = ("file", "survey", "declared", "assumed")


def frame_meta(frame: str, source: str, basis: str) -> dict[str, str]:
    """The meta entries that say in which frame the file's wavelengths were (they are vacuum in
    the Spectrum either way), who said so (``FRAME_SOURCES``), and on what basis."""
    assert frame in ("air", "vacuum") and source in FRAME_SOURCES
    return {
        "wavelength_frame": frame,
        "wavelength_frame_source": source,
        "wavelength_frame_basis": basis,
    }


def vacuum_wavelengths(wavelength: np.ndarray, frame: str, source: str) -> np.ndarray:
    """``wavelength`` (Angstrom, in ``frame``) in vacuum; bad values are refused by name."""
    if frame != "air":
        return wavelength
    if not np.all(np.isfinite(wavelength) & (wavelength > 0)):
        _check_wavelength_values(wavelength, source)
    return np.asarray(air_to_vacuum(wavelength), dtype=np.float64)


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
    sky: np.ndarray | None = None,
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
        sky=sky,
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


def iau_designation(ra: float | None, dec: float | None) -> str:
    """The IAU-style designation JHHMMSS.ss+DDMMSS.s of ICRS degrees (truncated, not rounded, as
    the IAU asks and LAMOST and SDSS print it); "" when either coordinate is unknown."""
    if ra is None or dec is None or not (math.isfinite(ra) and math.isfinite(dec)):
        return ""
    if not (0.0 <= ra < 360.0 and -90.0 <= dec <= 90.0):
        return ""
    hours = ra / 15.0
    hh = int(hours)
    mm = int((hours - hh) * 60.0)
    ss = math.floor(((hours - hh) * 60.0 - mm) * 60.0 * 100.0) / 100.0
    sign = "-" if dec < 0 else "+"
    degrees = abs(dec)
    dd = int(degrees)
    dm = int((degrees - dd) * 60.0)
    ds = math.floor(((degrees - dd) * 60.0 - dm) * 60.0 * 10.0) / 10.0
    return f"J{hh:02d}{mm:02d}{ss:05.2f}{sign}{dd:02d}{dm:02d}{ds:04.1f}"
