"""Class and redshift by chi-square against templates, the way DESI's Redrock does it.

Every template is fitted at each redshift of its class's grid (Redrock's: stars -0.002 to 0.002
in steps of 4e-5, i.e. -600 to +600 km/s by 12 km/s; galaxies -0.005 to 1.6 and quasars 0.05 to
5 on grids uniform in log10(1 + z), 3e-4 and 5e-4) as the template times a Legendre polynomial
of degree POLY_DEGREE (flux calibration and reddening), by linear least squares weighted by the
spectrum's inverse variance. Each minimum of chi2(z) is sampled finely around the grid point and
a parabola through the three lowest points gives z and its error (chi2 rises by 1 at z +- err;
Redrock's ``fitz.minfit``), the error scaled by sqrt(chi2 / dof) where that exceeds 1 (template
mismatch, not noise, then sets the residuals). Runs of exactly zero flux are filler, not data.

The class comes first: it is the class (STAR, GALAXY, QSO) of the lowest chi2, and its margin is
the chi2 difference to the best fit of any other class (``class_delta_chi2``). As in Redrock,
``delta_chi2`` of an alternative is the chi2 difference to the next fit at a redshift further
than MAX_VELO_DIFF_KMS (100 km/s for stars) away, and a difference below MIN_DELTA_CHI2 (9) is
Redrock's SMALL_DELTA_CHI2 warning. Each alternative gets a quality on MARZ's QOP scale (Hinton
et al. 2016; Marz's labels: 4 great, 3 good, 2 possible, 1 unknown, 6 "it's a star!"): the best
fit's from the smaller of its two margins (QUALITY_DELTA_CHI2), 6 instead of 3 or 4 when it is a
star (Marz's ``getAutoQOP``: a star is 6 once its fit would be 3 or better); an alternative at the
best fit's class and redshift shares its quality; another is 2 (possible) within MIN_DELTA_CHI2
of the best and 1 (unknown) otherwise.

Cost: one matrix product per template over its grid (the grid's template rows x the spectrum's
pixels, averaged to about the grid's step for the scan: COARSE_STEP_DEX), at most MAX_PIXELS
pixels (a longer spectrum is averaged down) and MAX_TEMPLATES templates; the minima are refined
on every pixel.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from agent.redshift import C_KMS, Template

# Bumped whenever a change to this module can change a fit's answer: fits stored by the web app
# (annotation.spectra.selectors.spectrum_redshift_fit) are keyed by it and the template set.
FIT_VERSION = "2"  # 2: telluric bands masked (TELLURIC_BANDS)
CLASSES = ("STAR", "GALAXY", "QSO")
CLASS_OF_KIND = {"star": "STAR", "galaxy": "GALAXY", "qso": "QSO"}
POLY_DEGREE = 3
MAX_PIXELS = 6000
MAX_TEMPLATES = 40
MIN_GOOD_PIXELS = 50
PADDING_RUN = 5
MIN_COVERAGE = 0.9  # of the spectrum's weight a template must cover at a redshift tried
MIN_DELTA_CHI2 = 9.0  # Redrock's constants.min_deltachi2 (ZWARN SMALL_DELTA_CHI2 below it)
MAX_VELO_DIFF_KMS = {"STAR": 100.0, "GALAXY": 1000.0, "QSO": 1000.0}  # Redrock's constants
MINIMA_PER_TEMPLATE = 3
PER_CLASS = 3  # alternatives kept per class (Redrock's nminima per spectype)
FINE_POINTS = 15  # Redrock's zminfit_npoints
# log10 wavelength per pixel of the coarse scan: about each class's grid step (stars: none)
COARSE_STEP_DEX = {"STAR": 0.0, "GALAXY": 3e-4, "QSO": 5e-4}
# (lower bound of the margin, QOP): the best fit's quality from min(delta_chi2, class margin).
QUALITY_DELTA_CHI2 = ((100.0, 4), (25.0, 3), (MIN_DELTA_CHI2, 2))
QUALITY_LABELS = {4: "great", 3: "good", 2: "possible", 1: "unknown", 6: "star"}
STAR_Z_LIMIT = 0.01  # |z| above this is no star's (3000 km/s); accepting one asks first
# The atmosphere's absorption bands, observed-frame Angstrom: O2 B (6870), H2O (7200), O2 A
# (7600), H2O (8200, 9300). Left in, they sit at the telescope's velocity whatever the star's
# and set a star's fit: the LAMOST A2 star (SNR 6 in g) fitted -72 +- 54 km/s against the
# survey's -320 +- 3 (4.6 sigma); masked, -322 +- 39 (the G7 star -63 +- 8 -> -35 +- 17,
# survey -42 +- 7). tests/agent/test_redshift_fit.py holds both.
TELLURIC_BANDS = ((6860.0, 6960.0), (7160.0, 7340.0), (7590.0, 7700.0), (8100.0, 8400.0),
                  (8900.0, 9800.0))  # fmt: skip


def z_grid(spectype: str) -> np.ndarray:
    """Redrock's default redshift grid of a class (templates.Template)."""
    if spectype == "STAR":
        return np.arange(-0.002, 0.00201, 4e-5)
    if spectype == "QSO":
        return 10.0 ** np.arange(math.log10(1.05), math.log10(1.0 + 5.0), 5e-4) - 1.0
    return 10.0 ** np.arange(math.log10(1.0 - 0.005), math.log10(1.0 + 1.6), 3e-4) - 1.0


@dataclass(frozen=True)
class Alternative:
    z: float
    z_err: float
    template: str
    kind: str  # the template's kind: star, galaxy, qso
    spectype: str  # STAR, GALAXY, QSO
    chi2: float
    delta_chi2: float = 0.0  # to the next fit further than MAX_VELO_DIFF_KMS (Redrock)
    chi2_above_best: float = 0.0
    quality: int = 1
    coefficients: tuple[float, ...] = ()

    @property
    def velocity_kms(self) -> float:
        """c z: a star's line-of-sight velocity (non-relativistic, as surveys quote it)."""
        return self.z * C_KMS

    @property
    def quality_label(self) -> str:
        return QUALITY_LABELS[self.quality]

    def as_dict(self) -> dict[str, Any]:
        return {
            "z": self.z,
            "z_err": self.z_err,
            "velocity_kms": self.velocity_kms,
            "velocity_err_kms": self.z_err * C_KMS,
            "template": self.template,
            "kind": self.kind,
            "spectype": self.spectype,
            "chi2": self.chi2,
            "delta_chi2": self.delta_chi2,
            "chi2_above_best": self.chi2_above_best,
            "quality": self.quality,
            "quality_label": self.quality_label,
        }


@dataclass(frozen=True)
class ClassFit:
    alternatives: tuple[Alternative, ...]  # lowest chi2 first
    spectype: str  # the class of the lowest chi2 ("" when nothing was fitted)
    class_delta_chi2: float  # to the best fit of another class (inf: no other class fitted)
    best_by_class: dict[str, float] = field(default_factory=dict)  # lowest chi2 per class
    n_pixels: int = 0
    n_templates: int = 0
    dof: int = 0
    note: str = ""

    @property
    def best(self) -> Alternative | None:
        return self.alternatives[0] if self.alternatives else None

    @property
    def small_delta_chi2(self) -> bool:
        best = self.best
        return best is not None and min(best.delta_chi2, self.class_delta_chi2) < MIN_DELTA_CHI2

    def as_dict(self) -> dict[str, Any]:
        return {
            "spectype": self.spectype,
            "class_delta_chi2": self.class_delta_chi2,
            "best_by_class": dict(self.best_by_class),
            "small_delta_chi2": self.small_delta_chi2,
            "n_pixels": self.n_pixels,
            "n_templates": self.n_templates,
            "dof": self.dof,
            "note": self.note,
        }


# --- the spectrum ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Prepared:
    wave: np.ndarray
    flux: np.ndarray
    weight: np.ndarray
    basis: np.ndarray  # (n_poly, pixels): Legendre polynomials over the range
    log_wave: np.ndarray
    wpp: np.ndarray  # weight x P_i x P_j, (n_poly^2, pixels): the normal matrix is rows^2 @ wpp.T
    wfp: np.ndarray  # weight x flux x P_i, (n_poly, pixels)

    @property
    def size(self) -> int:
        return int(self.wave.size)


def _noise_weights(flux: np.ndarray) -> np.ndarray:
    """Uniform weights from the pixel-to-pixel scatter where the file gives no variance."""
    scatter = 1.4826 * float(np.median(np.abs(np.diff(flux)))) / math.sqrt(2.0)
    if not scatter > 0:
        scatter = max(float(np.median(np.abs(flux))) * 1e-3, 1e-30)
    return np.full(flux.size, 1.0 / scatter**2)


def _made(wave: np.ndarray, values: np.ndarray, weight: np.ndarray) -> _Prepared:
    x = 2.0 * (wave - wave[0]) / max(wave[-1] - wave[0], 1e-9) - 1.0
    basis = np.polynomial.legendre.legvander(x, POLY_DEGREE).T
    n = basis.shape[0]
    wpp = (weight * basis[:, None, :] * basis[None, :, :]).reshape(n * n, -1)
    return _Prepared(wave, values, weight, basis, np.log10(wave), wpp, weight * values * basis)


def _averaged(wave: np.ndarray, values: np.ndarray, weight: np.ndarray, block: int) -> _Prepared:
    """Inverse-variance weighted means of ``block`` pixels at a time."""
    if block <= 1:
        return _made(wave, values, weight)
    n = wave.size // block * block
    w = weight[:n].reshape(-1, block)
    total = w.sum(axis=1)
    keep = total > 0
    mean_wave = (wave[:n].reshape(-1, block) * w).sum(axis=1)[keep] / total[keep]
    mean_flux = (values[:n].reshape(-1, block) * w).sum(axis=1)[keep] / total[keep]
    return _made(mean_wave, mean_flux, total[keep])


def _coarse(spec: _Prepared, spectype: str) -> _Prepared:
    """The spectrum averaged to about the class's grid step (the scan's pixels: a galaxy's
    3e-4 in log10(1 + z) spans three SDSS pixels), for the coarse scan only."""
    pixel = float(np.median(np.diff(spec.log_wave)))
    block = int(COARSE_STEP_DEX[spectype] / pixel) if pixel > 0 else 1
    return _averaged(spec.wave, spec.flux, spec.weight, block)


def _padding(flux: np.ndarray) -> np.ndarray:
    """Runs of PADDING_RUN or more pixels of exactly zero flux: filler, not data (LAMOST pads
    its red end with zeros yet gives them an inverse variance)."""
    zero = np.r_[False, flux == 0.0, False]
    edges = np.flatnonzero(np.diff(zero.astype(np.int8)))
    out = np.zeros(flux.size, dtype=bool)
    for start, stop in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
        if stop - start >= PADDING_RUN:
            out[start:stop] = True
    return out


def _prepare(
    wavelength: np.ndarray, flux: np.ndarray, ivar: np.ndarray | None, mask: np.ndarray | None
) -> _Prepared | None:
    wave = np.asarray(wavelength, dtype=float)
    values = np.asarray(flux, dtype=float)
    good = np.isfinite(wave) & np.isfinite(values) & (wave > 0)
    if ivar is not None:
        weights = np.asarray(ivar, dtype=float)
        good &= np.isfinite(weights) & (weights > 0)
    if mask is not None:
        good &= ~np.asarray(mask, dtype=bool)
    good &= ~_padding(values)
    for lo, hi in TELLURIC_BANDS:
        good &= ~((wave >= lo) & (wave <= hi))
    if good.sum() < MIN_GOOD_PIXELS:
        return None
    wave, values = wave[good], values[good]
    weight = np.asarray(ivar, dtype=float)[good] if ivar is not None else _noise_weights(values)
    return _averaged(wave, values, weight, math.ceil(wave.size / MAX_PIXELS))


# --- chi2 over a grid -------------------------------------------------------------------------


LOG_STEP = 1e-5  # log10 Angstrom: the uniform grid templates are resampled on (3 km/s)


@dataclass(frozen=True)
class _Resampled:
    """A template on a grid uniform in log10(wavelength), zero where it has no data, so that a
    redshift is an offset of the grid (one gather per redshift and pixel)."""

    start: float
    flux: np.ndarray
    lo: float  # Angstrom: where its data begin and end
    hi: float


def _resample(template: Template) -> _Resampled:
    t_wave = np.asarray(template.wavelength, dtype=float)
    t_flux = np.asarray(template.flux, dtype=float)
    usable = np.isfinite(t_wave) & np.isfinite(t_flux) & (t_wave > 0)
    t_wave, t_flux = t_wave[usable], t_flux[usable]
    if t_wave.size < 2:
        return _Resampled(0.0, np.zeros(2), 0.0, 0.0)
    start, stop = math.log10(t_wave[0]), math.log10(t_wave[-1])
    grid = 10.0 ** np.arange(start, stop, LOG_STEP)
    flux = np.interp(grid, t_wave, t_flux)
    # gaps in the template (masked pixels) stay gaps: no data there
    gap = np.interp(grid, t_wave, np.r_[np.diff(t_wave) > 50.0 * np.median(np.diff(t_wave)), 0])
    return _Resampled(start, np.where(gap > 0, 0.0, flux), float(t_wave[0]), float(t_wave[-1]))


def _shifted(
    resampled: _Resampled, log_wave: np.ndarray, zs: np.ndarray, exact: bool = True
) -> np.ndarray:
    """The template at each redshift on the observed pixels, (len(zs), pixels), 0 outside it:
    interpolated linearly (``exact``) or at the nearest grid point (the coarse scan: 1.5 km/s
    at most, a single gather)."""
    base = (log_wave - resampled.start) / LOG_STEP
    position = base[None, :] - (np.log10(1.0 + zs) / LOG_STEP)[:, None]
    last = resampled.flux.size - 1
    if not exact:
        index = np.rint(position).astype(np.int32)
        inside = (index >= 0) & (index <= last)
        return np.where(inside, resampled.flux[np.clip(index, 0, last)], 0.0)
    below = np.floor(position)
    fraction = position - below
    index = below.astype(np.int32)
    inside = (index >= 0) & (index < last)
    index = np.clip(index, 0, last - 1)
    rows = resampled.flux[index] * (1.0 - fraction) + resampled.flux[index + 1] * fraction
    return np.where(inside, rows, 0.0)


def _coverage(spec: _Prepared, resampled: _Resampled, zs: np.ndarray) -> np.ndarray:
    """The fraction of the spectrum's weight inside the template's range at each redshift."""
    cumulative = np.r_[0.0, np.cumsum(spec.weight)]
    lo = np.searchsorted(spec.wave, resampled.lo * (1.0 + zs), side="left")
    hi = np.searchsorted(spec.wave, resampled.hi * (1.0 + zs), side="right")
    return (cumulative[hi] - cumulative[lo]) / cumulative[-1]


def _chi2(spec: _Prepared, rows: np.ndarray, total: float) -> tuple[np.ndarray, np.ndarray]:
    """chi2 and coefficients of flux ~ row x polynomial for each row (batched normal
    equations); chi2 inf where the fit is singular."""
    n = spec.basis.shape[0]
    normal = (rows**2 @ spec.wpp.T).reshape(-1, n, n)
    rhs = rows @ spec.wfp.T
    scale = np.maximum(np.abs(np.diagonal(normal, axis1=1, axis2=2)).max(axis=1), 1e-300)
    normal = normal + 1e-12 * scale[:, None, None] * np.eye(n)
    try:
        coefficients = np.linalg.solve(normal, rhs[..., None])[..., 0]
    except np.linalg.LinAlgError:
        return np.full(rows.shape[0], np.inf), np.zeros((rows.shape[0], n))
    return total - np.einsum("ij,ij->i", rhs, coefficients), coefficients


def _chi2_at(
    spec: _Prepared, resampled: _Resampled, zs: np.ndarray, total: float, exact: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """chi2 (inf where the template covers under MIN_COVERAGE of the weight) and coefficients
    at each redshift, 256 redshifts at a time (bounded memory)."""
    chi2 = np.full(zs.size, np.inf)
    coefficients = np.zeros((zs.size, spec.basis.shape[0]))
    tried = np.flatnonzero(_coverage(spec, resampled, zs) >= MIN_COVERAGE)
    for start in range(0, tried.size, 256):
        part = tried[start : start + 256]
        chi2[part], coefficients[part] = _chi2(
            spec, _shifted(resampled, spec.log_wave, zs[part], exact), total
        )
    return chi2, coefficients


def _local_minima(chi2: np.ndarray) -> np.ndarray:
    finite = np.isfinite(chi2)
    left = np.r_[True, chi2[1:] <= chi2[:-1]]
    right = np.r_[chi2[:-1] <= chi2[1:], True]
    found = np.flatnonzero(finite & left & right)
    return found[np.argsort(chi2[found])]


def _parabola(zs: np.ndarray, chi2: np.ndarray) -> tuple[float, float] | None:
    """Redrock's minfit: chi2 = chi2_0 + ((z - z0) / err)^2 through three points; None when it
    opens downwards or its minimum lies outside them."""
    try:
        a, b, _ = np.polyfit(zs, chi2, 2)
    except (np.linalg.LinAlgError, ValueError):
        return None
    if not a > 0:
        return None
    z0 = -b / (2.0 * a)
    if not zs.min() <= z0 <= zs.max():
        return None
    return float(z0), float(1.0 / math.sqrt(a))


def _template_minima(
    spec: _Prepared, coarse: _Prepared, template: Template, spectype: str, total: float
) -> list[Alternative]:
    resampled = _resample(template)
    zs = z_grid(spectype)
    coarse_total = float(np.sum(coarse.weight * coarse.flux**2))
    chi2, _ = _chi2_at(coarse, resampled, zs, coarse_total, exact=False)
    found: list[Alternative] = []
    limit = MAX_VELO_DIFF_KMS[spectype]
    for index in _local_minima(chi2).tolist():
        if len(found) == MINIMA_PER_TEMPLATE:
            break
        if any(abs(zs[index] - a.z) / (1.0 + a.z) * C_KMS < limit for a in found):
            continue
        lo, hi = zs[max(index - 1, 0)], zs[min(index + 1, zs.size - 1)]
        fine = np.linspace(lo, hi, FINE_POINTS)
        fine_chi2, _ = _chi2_at(spec, resampled, fine, total)
        at = int(min(max(int(np.argmin(fine_chi2)), 1), FINE_POINTS - 2))
        parabola = _parabola(fine[at - 1 : at + 2], fine_chi2[at - 1 : at + 2])
        if parabola is None:
            continue  # Redrock's BAD_MINFIT: no minimum there (an edge of the grid)
        z, z_err = parabola
        final_chi2, coefficients = _chi2_at(spec, resampled, np.array([z]), total)
        if not np.isfinite(final_chi2[0]):
            continue
        row = _shifted(resampled, spec.log_wave, np.array([z]))[0]
        model = row * (coefficients[0] @ spec.basis)
        if np.mean(model < 0) > 0.1:  # Redrock's NEGATIVE_MODEL: a template turned upside down
            continue
        # the error scaled by sqrt(chi2 / dof) when the template leaves residuals beyond the noise
        z_err *= math.sqrt(max(1.0, float(final_chi2[0]) / max(spec.size - spec.basis.shape[0], 1)))
        found.append(
            Alternative(
                z=z,
                z_err=z_err,
                template=template.name,
                kind=template.kind,
                spectype=spectype,
                chi2=float(final_chi2[0]),
                coefficients=tuple(float(c) for c in coefficients[0]),
            )
        )
    return found


# --- the class, the alternatives and their quality ---------------------------------------------


def _dv_kms(a: Alternative, b: Alternative) -> float:
    return abs(a.z - b.z) / (1.0 + min(a.z, b.z)) * C_KMS


def _limit(a: Alternative, b: Alternative) -> float:
    return min(MAX_VELO_DIFF_KMS[a.spectype], MAX_VELO_DIFF_KMS[b.spectype])


def quality_of(margin: float, spectype: str) -> int:
    """MARZ's QOP for a best fit leading by ``margin`` in chi2 (6: a star once 3 or better)."""
    for bound, quality in QUALITY_DELTA_CHI2:
        if margin >= bound:
            return 6 if spectype == "STAR" and quality >= 3 else quality
    return 1


def _rated(candidates: list[Alternative], class_margin: float) -> tuple[Alternative, ...]:
    ranked = sorted(candidates, key=lambda a: a.chi2)
    best = ranked[0]
    out = []
    for i, alt in enumerate(ranked):
        farther = [o.chi2 - alt.chi2 for o in ranked[i + 1 :] if _dv_kms(o, alt) > _limit(o, alt)]
        delta = min(farther) if farther else math.inf
        above = alt.chi2 - best.chi2
        if i == 0:
            best_delta = min(
                (o.chi2 - best.chi2 for o in ranked[1:] if _dv_kms(o, best) > _limit(o, best)),
                default=math.inf,
            )
            quality = quality_of(min(best_delta, class_margin), best.spectype)
            best_quality = quality
        elif alt.spectype == best.spectype and _dv_kms(alt, best) <= _limit(alt, best):
            quality = best_quality
        else:
            quality = 2 if above < MIN_DELTA_CHI2 else 1
        out.append(replace(alt, delta_chi2=delta, chi2_above_best=above, quality=quality))
    return tuple(out)


def fit_class_and_redshift(
    wavelength: np.ndarray,
    flux: np.ndarray,
    *,
    templates: Sequence[Template],
    ivar: np.ndarray | None = None,
    mask: np.ndarray | None = None,
    n_best: int = 5,
) -> ClassFit:
    """The class and the best ``n_best`` alternatives (at most PER_CLASS per class, lowest chi2
    first) of an observed-frame spectrum (vacuum Angstrom) against rest-frame ``templates``."""
    notes = []
    if len(templates) > MAX_TEMPLATES:
        notes.append(f"{len(templates) - MAX_TEMPLATES} templates past {MAX_TEMPLATES} not tried")
    used = list(templates)[:MAX_TEMPLATES]
    spec = _prepare(wavelength, flux, ivar, mask)
    if spec is None:
        notes.insert(0, f"fewer than {MIN_GOOD_PIXELS} good pixels")
        return ClassFit((), "", math.inf, n_templates=len(used), note="; ".join(notes))
    total = float(np.sum(spec.weight * spec.flux**2))
    coarse = {c: _coarse(spec, c) for c in CLASSES}
    candidates: list[Alternative] = []
    for template in used:
        spectype = CLASS_OF_KIND.get(template.kind, "GALAXY")
        candidates += _template_minima(spec, coarse[spectype], template, spectype, total)
    dof = spec.size - spec.basis.shape[0]
    if not candidates:
        notes.insert(0, "no template covers the spectrum")
        return ClassFit((), "", math.inf, {}, spec.size, len(used), dof, "; ".join(notes))
    best_by_class = {
        c: min(a.chi2 for a in candidates if a.spectype == c)
        for c in CLASSES
        if any(a.spectype == c for a in candidates)
    }
    spectype = min(best_by_class, key=best_by_class.__getitem__)
    others = [v for c, v in best_by_class.items() if c != spectype]
    class_margin = min(others) - best_by_class[spectype] if others else math.inf
    kept: list[Alternative] = []
    for alt in sorted(candidates, key=lambda a: a.chi2):
        if sum(k.spectype == alt.spectype for k in kept) < PER_CLASS:
            kept.append(alt)
    rated = _rated(kept, class_margin)
    return ClassFit(
        rated[:n_best],
        spectype,
        class_margin,
        best_by_class,
        spec.size,
        len(used),
        dof,
        "; ".join(notes),
    )


def model_flux(alternative: Alternative, template: Template, wavelength: np.ndarray) -> np.ndarray:
    """The fitted model (template x polynomial) of an alternative on ``wavelength``; the
    polynomial spans the wavelengths given, as in the fit when they are the fitted pixels."""
    wave = np.asarray(wavelength, dtype=float)
    x = 2.0 * (wave - wave[0]) / max(wave[-1] - wave[0], 1e-9) - 1.0
    basis = np.polynomial.legendre.legvander(x, POLY_DEGREE).T
    row = _shifted(_resample(template), np.log10(wave), np.array([alternative.z]))[0]
    return row * (np.asarray(alternative.coefficients) @ basis)


def class_disagreement(spectype: str, class_delta_chi2: float, z: float, kind: str = "") -> str:
    """Why storing ``z`` (of an alternative of ``kind``, or typed) contradicts the fit's class;
    empty when it does not. A star's |z| is at most STAR_Z_LIMIT."""
    if not spectype:
        return ""
    margin = "" if not math.isfinite(class_delta_chi2) else f", by {class_delta_chi2:.0f} in chi2"
    if spectype == "STAR" and abs(z) > STAR_Z_LIMIT:
        return (
            f"the fit classes this spectrum as a STAR{margin}; z = {z:.5f} is no star's "
            f"(|z| <= {STAR_Z_LIMIT}, {STAR_Z_LIMIT * C_KMS:.0f} km/s)"
        )
    kind_class = CLASS_OF_KIND.get(kind, "")
    if kind_class and kind_class != spectype:
        return (
            f"the fit classes this spectrum as a {spectype}{margin}; this alternative is a "
            f"{kind_class} template's"
        )
    return ""
