"""Instrumental resolution: the line-spread function's FWHM as a function of wavelength.

Every :class:`agent.spectra.Spectrum` carries one. Where it comes from, best first:

- ``"file"``: the file records it (SDSS ``wdisp``, DESI resolution matrices, a table directive
  ``# resolution: 1800`` or ``# fwhm: 2.5``, specvet's own ``RESOLVPW`` header key);
- ``"survey default"``: the survey's published resolving power (LAMOST LRS R ~ 1800; SDSS
  legacy R ~ 1500 at 3800 A to 2500 at 9000 A; DESI B/R/Z arms 2000-3200 / 3200-4100 /
  4100-5100);
- ``"sampling estimate"``: a bare table is assumed Nyquist-sampled, FWHM = 2 pixels. Real data are
  rarely sampled more coarsely than that, so this is an upper limit on R;
- ``"user"``: set by whoever uploaded the spectrum (it overrides the others).

Line widths measured on a spectrum are the intrinsic width convolved with this FWHM; for
Gaussian profiles they add in quadrature (:func:`intrinsic_fwhm`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

C_KMS = 299_792.458
SOURCES = ("file", "survey default", "sampling estimate", "user")
FWHM_PER_SIGMA = 2.0 * math.sqrt(2.0 * math.log(2.0))
MAX_NODES = 64
# a line narrower than this multiple of the instrumental FWHM cannot be told from unresolved
RESOLVED_FACTOR = 1.15

LAMOST_R = 1800.0
SDSS_R_NODES = ((3800.0, 1500.0), (9200.0, 2500.0))
DESI_R_NODES = ((3600.0, 2000.0), (5780.0, 3200.0), (7570.0, 4100.0), (9824.0, 5100.0))


class ResolutionError(ValueError):
    """A resolution that cannot be used: non-positive, non-finite, or nodes out of order."""


@dataclass(frozen=True)
class Resolution:
    """FWHM (Angstrom, observed frame) at increasing wavelength nodes, linear in between and
    constant beyond the ends."""

    wavelength: tuple[float, ...]
    fwhm: tuple[float, ...]
    source: str
    note: str = ""

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ResolutionError(
                f"resolution source must be one of {SOURCES}, got {self.source!r}"
            )
        if not self.wavelength or len(self.wavelength) != len(self.fwhm):
            raise ResolutionError(
                f"resolution needs as many FWHM values as wavelength nodes (>= 1), got "
                f"{len(self.wavelength)} and {len(self.fwhm)}"
            )
        nodes, widths = np.asarray(self.wavelength), np.asarray(self.fwhm)
        if not (np.all(np.isfinite(nodes)) and np.all(np.isfinite(widths))):
            raise ResolutionError("resolution nodes and FWHM values must be finite")
        if np.any(widths <= 0) or np.any(nodes <= 0):
            raise ResolutionError("resolution nodes and FWHM values must be positive")
        if np.any(np.diff(nodes) <= 0):
            raise ResolutionError("resolution wavelength nodes must be strictly increasing")

    # --- construction ------------------------------------------------------------------------

    @classmethod
    def constant_r(
        cls, resolving_power: float, *, source: str, note: str = "", span: Sequence[float] = ()
    ) -> Resolution:
        """R constant over ``span`` (default 3000-11000 A): FWHM grows in proportion to lambda."""
        if not (math.isfinite(resolving_power) and resolving_power > 0):
            raise ResolutionError(f"resolving power must be positive, got {resolving_power!r}")
        low, high = (float(span[0]), float(span[-1])) if len(span) >= 2 else (3000.0, 11000.0)
        return cls((low, high), (low / resolving_power, high / resolving_power), source, note)

    @classmethod
    def from_r_nodes(
        cls, nodes: Sequence[tuple[float, float]], *, source: str, note: str = ""
    ) -> Resolution:
        """From (wavelength, R) pairs."""
        return cls(
            tuple(float(w) for w, _ in nodes),
            tuple(float(w) / float(r) for w, r in nodes),
            source,
            note,
        )

    @classmethod
    def from_fwhm_array(
        cls, wavelength: np.ndarray, fwhm: np.ndarray, *, source: str, note: str = ""
    ) -> Resolution | None:
        """Per-pixel FWHM (Angstrom) reduced to at most MAX_NODES medians; None when no pixel
        has a finite positive value."""
        wave = np.asarray(wavelength, dtype=np.float64)
        width = np.asarray(fwhm, dtype=np.float64)
        usable = np.isfinite(wave) & np.isfinite(width) & (width > 0)
        if not usable.any():
            return None
        wave, width = wave[usable], width[usable]
        order = np.argsort(wave)
        chunks = np.array_split(order, min(MAX_NODES, wave.size))
        nodes = [(float(np.median(wave[c])), float(np.median(width[c]))) for c in chunks if c.size]
        unique: dict[float, float] = dict(nodes)
        keys = sorted(unique)
        return cls(tuple(keys), tuple(unique[k] for k in keys), source, note)

    @classmethod
    def from_sampling(cls, wavelength: np.ndarray, *, note: str = "") -> Resolution:
        """Nyquist assumption: FWHM = 2 pixel widths, as medians over up to MAX_NODES chunks."""
        wave = np.asarray(wavelength, dtype=np.float64)
        if wave.size < 2:
            raise ResolutionError("a sampling estimate needs at least two pixels")
        steps = np.gradient(wave)
        estimated = cls.from_fwhm_array(
            wave, 2.0 * np.abs(steps), source="sampling estimate", note=note or "2 pixels"
        )
        assert estimated is not None
        return estimated

    # --- queries -----------------------------------------------------------------------------

    def fwhm_at(self, wavelength: float) -> float:
        """FWHM in Angstrom at an observed-frame wavelength."""
        if len(self.wavelength) == 1:
            return self.fwhm[0]
        if len(self.wavelength) == 2 and self._is_constant_r():
            # a constant-R pair extrapolates as constant R, not as a constant width
            return float(wavelength) * self.fwhm[0] / self.wavelength[0]
        return float(np.interp(wavelength, self.wavelength, self.fwhm))

    def resolving_power_at(self, wavelength: float) -> float:
        return float(wavelength) / self.fwhm_at(wavelength)

    def velocity_fwhm_at(self, wavelength: float) -> float:
        """Instrumental FWHM in km/s at an observed-frame wavelength (frame-independent)."""
        return C_KMS * self.fwhm_at(wavelength) / float(wavelength)

    def _is_constant_r(self) -> bool:
        (w0, w1), (f0, f1) = self.wavelength, self.fwhm
        return abs(f0 / w0 - f1 / w1) <= 1e-9 * (f0 / w0)

    def describe(self, wavelength: float = 6000.0) -> str:
        """e.g. 'R ≈ 1800 at 6000 Å (FWHM 3.33 Å, 167 km/s; survey default: LAMOST LRS)'."""
        fwhm = self.fwhm_at(wavelength)
        where = f"{self.source}: {self.note}" if self.note else self.source
        return (
            f"R ≈ {wavelength / fwhm:.0f} at {wavelength:.0f} Å (FWHM {fwhm:.2f} Å, "
            f"{self.velocity_fwhm_at(wavelength):.0f} km/s; {where})"
        )

    # --- storage -----------------------------------------------------------------------------

    def as_dict(self) -> dict[str, Any]:
        return {
            "wavelength": list(self.wavelength),
            "fwhm": list(self.fwhm),
            "source": self.source,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Resolution:
        try:
            return cls(
                tuple(float(w) for w in data["wavelength"]),
                tuple(float(f) for f in data["fwhm"]),
                str(data["source"]),
                str(data.get("note", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            if isinstance(exc, ResolutionError):
                raise
            raise ResolutionError(f"not a resolution record: {exc}") from exc


def survey_default(survey: str, wavelength: np.ndarray) -> Resolution:
    """The resolution a spectrum of ``survey`` has when its file does not record one."""
    name = survey.upper()
    if "LAMOST" in name or name in {"SPECVI-BENCH", "SPECVI-MINI"}:
        return Resolution.constant_r(LAMOST_R, source="survey default", note="LAMOST LRS")
    if name.startswith("SDSS"):
        return Resolution.from_r_nodes(SDSS_R_NODES, source="survey default", note="SDSS")
    if name.startswith("DESI"):
        return Resolution.from_r_nodes(DESI_R_NODES, source="survey default", note="DESI B/R/Z")
    return Resolution.from_sampling(wavelength)


def parse_user_value(text: str) -> Resolution:
    """A resolution typed by a person or written in a table directive: ``1800`` or ``R=1800``
    (resolving power), ``2.5 A`` / ``fwhm=2.5`` (FWHM in Angstrom) or ``150 km/s``."""
    value = text.strip().lower().replace(" ", "")
    try:
        if value.startswith("fwhm="):
            return _fwhm_angstrom(float(value[5:].rstrip("aå")))
        if value.endswith("km/s"):
            kms = float(value[:-4])
            if not (math.isfinite(kms) and kms > 0):
                raise ResolutionError(f"an instrumental FWHM must be positive, got {text!r}")
            return Resolution.constant_r(C_KMS / kms, source="user", note=f"FWHM {kms:g} km/s")
        if value.endswith(("a", "å", "angstrom")):
            return _fwhm_angstrom(float(value.rstrip("angstromå")))
        power = float(value.removeprefix("r="))
    except ValueError as exc:
        raise ResolutionError(
            f"resolution {text!r} is not a resolving power (1800, R=1800), an FWHM in Angstrom "
            "(2.5 A, fwhm=2.5) or a velocity (150 km/s)"
        ) from exc
    return Resolution.constant_r(power, source="user", note=f"R = {power:g}")


def _fwhm_angstrom(fwhm: float) -> Resolution:
    if not (math.isfinite(fwhm) and fwhm > 0):
        raise ResolutionError(f"an instrumental FWHM must be positive, got {fwhm!r}")
    return Resolution((5000.0,), (fwhm,), "user", f"FWHM {fwhm:g} Å")


def intrinsic_fwhm(measured_kms: float, instrumental_kms: float) -> float:
    """Quadrature subtraction: sqrt(measured² - instrumental²), 0 when not wider than the LSF."""
    if not (math.isfinite(measured_kms) and math.isfinite(instrumental_kms)):
        return measured_kms
    return math.sqrt(max(measured_kms**2 - instrumental_kms**2, 0.0))


def is_resolved(measured_kms: float, instrumental_kms: float) -> bool:
    """Whether a measured width is clearly wider than the line-spread function."""
    return measured_kms >= RESOLVED_FACTOR * instrumental_kms
