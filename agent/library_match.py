"""The data-driven inspector: a spectrum compared with real library spectra of known type.

Astronomers type a star by laying its spectrum beside standards of known type (MKCLASS, Gray &
Corbally 2014; PyHammer, Roulston et al. 2020). This module does the same with the real
corpus' library spectra (MILES, STELIB, Pickles; ``agent.real_corpus``), **development part
only**, so the validation part stays unseen:

1. **Matched resolution and sampling.** Every spectrum (library or observed) is put on one of
   ``TIERS`` working resolutions: a constant FWHM in Å no finer than its own (a Gaussian of
   ``sqrt(tier^2 - own^2)`` is added), on a log-wavelength grid with three pixels per FWHM at
   7000 Å. An observed spectrum uses the finest tier at least as coarse as its own resolution
   and twice its pixel over ``TIER_SHARE`` of its range; its pixels (and library spectra, or
   their parts) coarser than a tier are left out of it. A spectrum coarser than the last tier
   is not compared at all ("resolution too coarse").
2. **Continuum divided out.** Each spectrum is divided by its upper envelope (the 90th
   percentile over ``ENVELOPE`` Å, smoothed, taken after a quartic trend in 1/λ is divided
   out and multiplied back), the same operator for both sides, so the lines
   and bands are compared and the continuum slope is not: reddening cannot be read as
   temperature. The extinction is then **fitted** separately: for each library spectrum,
   ln(observed envelope / library envelope) = c - 0.4 ln(10) E(B-V) k(λ) by weighted least
   squares, with k(λ) = A(λ)/E(B-V) of Cardelli, Clayton & Mathis (1989, ApJ 345, 245,
   eqs. 2-3) at R_V = 3.1 (``ccm89``).
3. **Velocity shift fitted.** The observed rest-frame spectrum is shifted by whole pixels over
   ±``MAX_SHIFT_KMS`` and the smallest distance kept per library spectrum.
4. **Distance.** D_k = sqrt(mean over the common good pixels of (o - t_k)^2 / (σ^2 + σ_m^2)),
   with σ the observed noise on the working grid and ``MODEL_SIGMA`` the star-to-star scatter
   a perfect match of type still shows. A library spectrum covering less than
   ``MIN_OVERLAP`` of the observed pixels is not compared.
5. **Class evidence** per task (``decide``): s = D(nearest negative) - D(nearest positive)
   over the library spectra labelled for the task, turned into P(YES) by a Platt scaling fitted
   on the development part with each object left out of its own library (``agent.bench.real
   calibrate``). The distance to the nearest labelled library spectrum tells whether the
   spectrum is inside what the library knows.

All comparisons are one matrix product per shift over the whole library (``LibraryMatcher``):
about 10-40 ms per spectrum on one CPU core at the finest tier; the library is prepared once
(tens of seconds) and kept in the cache (``library_cache_path``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from scipy import ndimage

from agent.spectra import Spectrum

C_KMS = 299_792.458
GRID = (3650.0, 9300.0)  # Å, rest frame: the corpus' optical range
# working FWHM (Å): MILES/STELIB/SDSS/LAMOST, mid, Pickles, and twice the coarsest for tables
# sampled up to 24 Å (a tabulated spectrum's FWHM is at least two of its pixels: the 16 Å bins
# of spectrophotometric standards are 32 Å)
TIERS = (4.0, 8.0, 24.0, 48.0)
# the share of a spectrum's range within GRID that must be fine enough for a tier: as
# MIN_OVERLAP, the share of its pixels a comparison with a library spectrum needs
TIER_SHARE = 0.7
PIXELS_PER_FWHM_AT = (3.0, 7000.0)
ENVELOPE = 250.0  # Å over which the upper envelope (continuum) is taken
ENVELOPE_PERCENTILE = 90.0
EDGE_TRIM = 40.0  # Å at each end of an observed spectrum where its envelope is one-sided
MODEL_SIGMA = 0.02  # star-to-star scatter of continuum-divided spectra of one type
MAX_SHIFT_KMS = 450.0
MIN_OVERLAP = 0.7
MIN_GRID_PIXELS = 200  # fewer good working pixels: nothing to compare
R_V = 3.1
TREND_DEGREE = 4
LIBRARY_SWITCH = "SPECVET_LIBRARY"  # "off": the rules answer alone
LIBRARY_VERSION = 3  # bump when the preparation changes: the cached library is rebuilt
# tasks the library can decide: those with library positives of at least 3 development objects
DECIDABLE = ("O", "B", "A", "MG")
# the neighbour vote (``decide``): the K_NEAREST nearest labelled library spectra, each weighted
# by exp(-(D^2 - D_min^2) / (2 VOTE_WIDTH)); chosen on the development part (5-fold by object)
K_NEAREST = 5
VOTE_WIDTH = 1.0
# the MK classification region (Gray & Corbally 2009; MKCLASS classifies on 3800-4600 Å): Ca II
# K and H, H-epsilon to H-gamma, He I 4026/4471, Mg II 4481, the G band; where the boundaries
# B9/A0 and A9/F0 are drawn. The whole-range distance is dominated by pixels that say little
# about them
MK_WINDOW = (3800.0, 4600.0)
MIN_MK_PIXELS = 30
CHI2_CAP = 25.0  # |chi2| beyond this is no more certain (and a missing letter is 1e3)
# the task letter of the tasks the MK-region fit decides
MK_LETTER = {"O": "O", "B": "B", "A": "A"}
_LETTERS = "OBAFGKM"


class LibraryUnavailable(RuntimeError):
    """The real-data cache is not built, so there is no library to compare with."""


# --- extinction --------------------------------------------------------------------------------


def ccm89(wavelength: np.ndarray, r_v: float = R_V) -> np.ndarray:
    """k(λ) = A(λ)/E(B-V) of Cardelli, Clayton & Mathis (1989, ApJ 345, 245): eq. 2 (infrared,
    0.3 <= x < 1.1 µm^-1) and eq. 3 (optical/NIR, 1.1 <= x <= 3.3), x = 1/λ in µm^-1;
    A(λ)/A(V) = a(x) + b(x)/R_V and A(λ)/E(B-V) = R_V a(x) + b(x). Wavelengths in Å."""
    x = 1.0e4 / np.asarray(wavelength, dtype=np.float64)
    if np.any((x < 0.3) | (x > 3.3)):
        raise ValueError(
            f"ccm89 covers 3030-33333 Å here (x 0.3-3.3 µm^-1), got {float(np.min(x)):.3f}-"
            f"{float(np.max(x)):.3f} µm^-1"
        )
    a = np.empty_like(x)
    b = np.empty_like(x)
    infrared = x < 1.1
    a[infrared] = 0.574 * x[infrared] ** 1.61
    b[infrared] = -0.527 * x[infrared] ** 1.61
    y = x[~infrared] - 1.82
    a[~infrared] = np.polyval(
        [0.32999, -0.77530, 0.01979, 0.72085, -0.02427, -0.50447, 0.17699, 1.0], y
    )
    b[~infrared] = np.polyval(
        [-2.09002, 5.30260, -0.62251, -5.38434, 1.07233, 2.28305, 1.41338, 0.0], y
    )
    return r_v * a + b


def redden(wavelength: np.ndarray, flux: np.ndarray, ebv: float) -> np.ndarray:
    """``flux`` seen through E(B-V) = ``ebv`` of CCM89 dust at R_V = 3.1."""
    return np.asarray(flux) * 10.0 ** (-0.4 * ebv * ccm89(wavelength))


# --- the working grid --------------------------------------------------------------------------


def grid(tier: float) -> np.ndarray:
    """The log-wavelength grid of a tier: PIXELS_PER_FWHM pixels per FWHM at 7000 Å."""
    per, at = PIXELS_PER_FWHM_AT
    step = math.log1p(tier / (per * at))
    n = int(math.floor(math.log(GRID[1] / GRID[0]) / step)) + 1
    return GRID[0] * np.exp(step * np.arange(n))


def own_fwhm(spectrum: Spectrum, wave: np.ndarray) -> np.ndarray:
    """The spectrum's FWHM (Å, rest frame) at rest wavelengths ``wave``: its resolution, or two
    pixels where it has none; never finer than two of its own pixels."""
    z = float(spectrum.redshift) if math.isfinite(spectrum.redshift) else 0.0
    rest = np.asarray(spectrum.rest_wavelength, dtype=np.float64)
    pixel = np.interp(wave, rest, np.abs(np.gradient(rest)))
    if spectrum.resolution is None:
        return 2.0 * pixel
    observed = [spectrum.resolution.fwhm_at(float(w) * (1.0 + z)) for w in wave]
    return np.maximum(np.asarray(observed) / (1.0 + z), 2.0 * pixel)


def pixel_fwhm(spectrum: Spectrum) -> np.ndarray:
    """The FWHM (Å, rest frame) at each of the spectrum's own pixels: its resolution, never
    finer than two of its pixels, a pixel's width being the nearer of its neighbours (a gap in
    the data is not a pixel: the pixels on its edges keep their own width)."""
    rest = np.asarray(spectrum.rest_wavelength, dtype=np.float64)
    if rest.size < 2:
        return np.full(rest.shape, math.inf)
    steps = np.abs(np.diff(rest))
    pixel = np.minimum(np.concatenate([steps[:1], steps]), np.concatenate([steps, steps[-1:]]))
    if spectrum.resolution is None:
        return 2.0 * pixel
    z = float(spectrum.redshift) if math.isfinite(spectrum.redshift) else 0.0
    probes = rest[:: max(rest.size // 64, 1)]
    observed = np.array([spectrum.resolution.fwhm_at(float(w) * (1.0 + z)) for w in probes])
    return np.maximum(np.interp(rest, probes, observed / (1.0 + z)), 2.0 * pixel)


def fine_enough(spectrum: Spectrum, tier: float) -> np.ndarray:
    """Whether each pixel's own FWHM is no coarser than ``tier``."""
    return pixel_fwhm(spectrum) <= tier * 1.02


def choose_tier(spectrum: Spectrum) -> float | None:
    """The finest tier at least as coarse as the spectrum's resolution (and two pixels) over
    at least TIER_SHARE of its range within GRID (its coarser parts, such as a CALSPEC model
    or NICMOS extension beyond 8000 Å, are left out at that tier, ``prepare``); None when that
    holds for no tier."""
    rest = np.asarray(spectrum.rest_wavelength, dtype=np.float64)
    inside = (rest >= GRID[0]) & (rest <= GRID[1])
    if np.count_nonzero(inside) < 10:
        return None
    fwhm = pixel_fwhm(spectrum)[inside]
    span = np.abs(np.gradient(rest))[inside]  # the share is of the wavelength range, not pixels
    for tier in TIERS:
        if np.sum(span[fwhm <= tier * 1.02]) >= TIER_SHARE * np.sum(span):
            return tier
    return None


@dataclass
class Prepared:
    """One spectrum on a tier's grid: continuum-divided flux, its envelope, weights."""

    tier: float
    flux: np.ndarray  # continuum-divided
    envelope: np.ndarray  # the divided-out continuum (its log is compared for E(B-V))
    good: np.ndarray  # bool
    sigma: float  # noise of ``flux`` per working pixel (0 for library spectra)
    coverage: tuple[float, float] = (0.0, 0.0)


def prepare(spectrum: Spectrum, tier: float, *, trim: float = EDGE_TRIM) -> Prepared | None:
    """``spectrum`` (rest frame) at the tier's resolution and sampling, continuum divided;
    None when fewer than MIN_GRID_PIXELS good working pixels are left."""
    rest = np.asarray(spectrum.rest_wavelength, dtype=np.float64)
    flux = np.asarray(spectrum.flux, dtype=np.float64)
    good = np.isfinite(flux) & np.isfinite(rest)
    if spectrum.mask is not None:
        good &= ~np.asarray(spectrum.mask, dtype=bool)
    ivar = None if spectrum.ivar is None else np.asarray(spectrum.ivar, dtype=np.float64)
    if ivar is not None:
        good &= np.isfinite(ivar) & (ivar > 0)
    good &= (rest >= GRID[0] - 3 * tier) & (rest <= GRID[1] + 3 * tier)
    good &= fine_enough(spectrum, tier)  # parts coarser than the tier are not compared
    if np.count_nonzero(good) < 20:
        return None
    w, f = rest[good], flux[good]
    order = np.argsort(w)
    w, f = w[order], f[order]
    low, high = max(float(w[0]), GRID[0]), min(float(w[-1]), GRID[1])
    if high - low < 10 * tier:
        return None
    # a fine linear grid: interpolation, then the Gaussian that brings it to the tier
    step = tier / 8.0
    fine = np.arange(low, high, step)
    values = np.interp(fine, w, f)
    # fine pixels farther than two own pixels (or a tier) from a good pixel are a gap
    gaps = np.diff(w)
    limit = np.maximum(2.5 * np.median(gaps), tier)
    index = np.clip(np.searchsorted(w, fine), 1, w.size - 1)
    holed = gaps[index - 1] > limit
    own = own_fwhm(spectrum, fine[:: max(fine.size // 16, 1)])
    probes = fine[:: max(fine.size // 16, 1)]
    extra = np.sqrt(np.clip(tier**2 - own**2, (0.25 * tier) ** 2, None)) / 2.3548 / step
    smoothed = np.empty_like(values)
    edges = np.searchsorted(fine, 0.5 * (probes[1:] + probes[:-1]))
    bounds = np.concatenate([[0], edges, [fine.size]])
    for sigma, start, stop in zip(extra, bounds[:-1], bounds[1:], strict=True):
        if stop > start:
            pad = int(4 * sigma) + 1
            lo, hi = max(start - pad, 0), min(stop + pad, fine.size)
            smoothed[start:stop] = ndimage.gaussian_filter1d(values[lo:hi], sigma)[
                start - lo : stop - lo
            ]
    badness = ndimage.gaussian_filter1d(holed.astype(np.float64), float(np.median(extra)))
    target = grid(tier)
    inside = (target >= low + trim) & (target <= high - trim)
    working = np.interp(target, fine, smoothed)
    usable = inside & (np.interp(target, fine, badness) < 0.3)
    if np.count_nonzero(usable) < MIN_GRID_PIXELS:
        return None
    filled = np.interp(target, target[usable], working[usable])
    trend = _smooth_trend(target, filled, usable)
    size = max(int(round(ENVELOPE / (target[target.size // 2] * (target[1] / target[0] - 1)))), 5)
    # the envelope is taken on the spectrum flattened by its smooth trend, so a smooth factor
    # (dust, a calibration tilt) leaves the continuum-divided spectrum as it was
    flat = filled / trend
    envelope = ndimage.percentile_filter(flat, ENVELOPE_PERCENTILE, size=size, mode="nearest")
    envelope = ndimage.uniform_filter1d(envelope, size, mode="nearest") * trend
    positive = usable & (envelope > 0)
    if np.count_nonzero(positive) < MIN_GRID_PIXELS:
        return None
    divided = np.where(positive, filled / np.where(envelope > 0, envelope, 1.0), 1.0)
    sigma = 0.0
    if ivar is not None:
        snr = np.abs(f) * np.sqrt(ivar[good][order])
        per_pixel = float(np.median(snr[(w >= low) & (w <= high)])) if snr.size else 0.0
        # the working pixel averages (working pixel / own pixel) own pixels
        own_pixel = float(np.median(gaps))
        pixel = float(target[target.size // 2] * (target[1] / target[0] - 1))
        boost = math.sqrt(max(pixel / max(own_pixel, 1e-6), 1.0))
        sigma = 1.0 / max(per_pixel * boost, 1e-3)
    return Prepared(tier, divided, envelope, positive, sigma, (low, high))


def _smooth_trend(wave: np.ndarray, flux: np.ndarray, usable: np.ndarray) -> np.ndarray:
    """exp of a quartic in 1/λ fitted to ln F (points more than 1σ below the fit dropped
    twice, so absorption lines do not pull it down): the smooth part of the spectrum that an
    extinction law (a smooth function of 1/λ) multiplies."""
    x = 1.0e4 / wave
    positive = usable & (flux > 0) & np.isfinite(flux)
    if np.count_nonzero(positive) < 20:
        return np.ones_like(flux)
    keep = positive.copy()
    log_flux = np.log(np.where(positive, flux, 1.0))
    centre = float(np.mean(x[positive]))
    coefficients = np.zeros(TREND_DEGREE + 1)
    for _ in range(3):
        coefficients = np.polyfit(x[keep] - centre, log_flux[keep], TREND_DEGREE)
        residual = log_flux - np.polyval(coefficients, x - centre)
        spread = float(np.std(residual[keep])) or 1e-6
        keep = positive & (residual > -spread)
        if np.count_nonzero(keep) < 20:
            break
    return np.exp(np.polyval(coefficients, x - centre))


# --- the library -----------------------------------------------------------------------------


@dataclass
class LibraryTier:
    """The library spectra usable at one tier, as matrices for one-product comparisons."""

    tier: float
    wave: np.ndarray
    ids: list[str]
    objects: list[str]  # object_key of each row
    types: list[str]
    labels: dict[str, np.ndarray]  # task -> +1 positive, 0 negative, -1 excluded
    mask: np.ndarray  # K x N float32 (1 good)
    masked: np.ndarray  # mask * flux
    masked_sq: np.ndarray  # mask * flux^2
    log_env: np.ndarray  # mask * ln(envelope)


@dataclass(frozen=True)
class Match:
    """An observed spectrum against the library at one tier."""

    tier: float
    distances: np.ndarray  # per library row (inf where not compared)
    shifts_kms: np.ndarray
    ebv: np.ndarray  # fitted E(B-V) per row
    ids: tuple[str, ...]
    types: tuple[str, ...]
    labels: dict[str, np.ndarray] = field(repr=False)
    # the same comparison over the MK classification region alone (``MK_WINDOW``); None where
    # the spectrum covers too little of it
    mk: Match | None = field(default=None, repr=False)
    # the observed spectrum as compared (its tier's grid, continuum divided): what the type
    # regression of rule-based/v7 reads (``agent.type_regression``)
    prepared: Prepared | None = field(default=None, repr=False, compare=False)

    def nearest(self, count: int = 3) -> list[dict[str, Any]]:
        order = np.argsort(self.distances)[:count]
        return [
            {
                "id": self.ids[i],
                "type": self.types[i],
                "distance": round(float(self.distances[i]), 3),
                "ebv": round(float(self.ebv[i]), 3),
                "shift_kms": round(float(self.shifts_kms[i]), 1),
            }
            for i in order
            if math.isfinite(self.distances[i])
        ]


@dataclass(frozen=True)
class TaskEvidence:
    """What the library says about one task."""

    task: str
    score: float  # D(nearest negative) - D(nearest positive); nan when undecidable
    nearest_positive: dict[str, Any] | None
    nearest_negative: dict[str, Any] | None
    nearest_distance: float  # to any library spectrum labelled for the task
    # share of YES among the K_NEAREST nearest labelled library spectra, distance-weighted;
    # nan where nothing could be compared
    vote: float = math.nan
    # their spectral type as a number (O0 = 0, B0 = 10, A0 = 20 ... M9 = 69), same weights;
    # nan where none of them has an MK type
    type_number: float = math.nan
    # over the MK classification region alone (``MK_WINDOW``): the neighbour vote, and the
    # template fit's class evidence chi2 = min over the other MK letters of the best D^2 minus
    # the task's letter's best D^2 (``letter_chi2``); nan where the region is not compared
    mk_vote: float = math.nan
    mk_chi2: float = math.nan
    # rule-based/v7: P(task) from the spectral type estimated by regression over the MK region
    # (``agent.type_regression``); nan where it was not estimated
    type_probability: float = math.nan


@cache
def type_number(spectral_type: str) -> float:
    """O0 = 0, B0 = 10, A0 = 20, F0 = 30 ... M9 = 69 for an MK type (a type without a digit
    counts as its letter's 5); nan for anything else (white dwarfs, carbon, Wolf-Rayet)."""
    from agent.real_corpus import parse_spectral_type

    parsed = parse_spectral_type(spectral_type)
    letter = None if parsed is None or parsed.kind != "MK" else parsed.letter
    if letter is None or letter not in _LETTERS:
        return math.nan
    return 10.0 * _LETTERS.index(letter) + (
        5.0 if parsed is None or parsed.digit is None else parsed.digit
    )


def neighbour_vote(
    distances: np.ndarray, labels: np.ndarray, types: Sequence[str]
) -> tuple[float, float]:
    """(vote, type number) of the K_NEAREST nearest rows with a label (``labels`` >= 0) and a
    finite distance: a row weighs exp(-(D^2 - D_min^2) / (2 VOTE_WIDTH)). One nearest spectrum
    decides nothing at a class boundary (a B9 and an A0 star look alike): the vote of a few
    says how mixed the neighbourhood is."""
    usable = np.flatnonzero(np.isfinite(distances) & (labels >= 0))
    if usable.size == 0:
        return math.nan, math.nan
    chosen = usable[np.argsort(distances[usable])[:K_NEAREST]]
    d = distances[chosen]
    weights = np.exp(-(d**2 - float(d.min()) ** 2) / (2.0 * VOTE_WIDTH))
    vote = float(np.sum(weights * (labels[chosen] == 1)) / np.sum(weights))
    numbers = np.array([type_number(types[i]) for i in chosen])
    typed = np.isfinite(numbers)
    number = (
        float(np.sum(weights[typed] * numbers[typed]) / np.sum(weights[typed]))
        if typed.any()
        else math.nan
    )
    return vote, number


def _entry_of(
    match: Match, index: np.ndarray, distances: np.ndarray
) -> tuple[float, dict[str, Any] | None]:
    if index.size == 0:
        return math.inf, None
    best = int(index[np.argmin(distances[index])])
    value = float(distances[best])
    if not math.isfinite(value):
        return math.inf, None
    return value, {
        "id": match.ids[best],
        "type": match.types[best],
        "distance": round(value, 3),
        "ebv": round(float(match.ebv[best]), 3),
        "shift_kms": round(float(match.shifts_kms[best]), 1),
    }


def decide(match: Match, task: str) -> TaskEvidence:
    """The library's evidence for ``task``: nearest positive and negative library spectra."""
    labels = match.labels.get(task)
    if labels is None:
        return TaskEvidence(task, math.nan, None, None, math.inf)
    d = match.distances
    positive, pos = _entry_of(match, np.flatnonzero(labels == 1), d)
    negative, neg = _entry_of(match, np.flatnonzero(labels == 0), d)
    nearest = min(positive, negative)
    if task not in DECIDABLE or not (math.isfinite(positive) and math.isfinite(negative)):
        score = math.nan
    else:
        score = negative - positive
    vote, number = neighbour_vote(d, labels, match.types)
    mk_vote, mk_chi2 = math.nan, math.nan
    mk = match.mk
    if mk is not None and task in MK_LETTER and task in mk.labels:
        mk_vote = neighbour_vote(mk.distances, mk.labels[task], mk.types)[0]
        mk_chi2 = letter_chi2(mk.distances, mk.types, MK_LETTER[task])
    return TaskEvidence(task, score, pos, neg, nearest, vote, number, mk_vote, mk_chi2)


def letter_chi2(distances: np.ndarray, types: Sequence[str], letter: str) -> float:
    """The class evidence of a template fit, as astronomers type a star (MKCLASS, PyHammer):
    the best template of each MK letter, and min over the other letters of its D^2 minus the
    best D^2 of ``letter`` (D^2 is chi^2 per pixel), capped at ±CHI2_CAP; positive when a
    spectrum of ``letter`` explains the data best. nan where nothing could be compared."""
    best = dict.fromkeys(_LETTERS, math.inf)
    for value, spectral_type in zip(distances, types, strict=True):
        number = type_number(spectral_type)
        if math.isfinite(value) and math.isfinite(number):
            key = _LETTERS[int(number // 10)]
            best[key] = min(best[key], float(value) ** 2)
    own = best[letter]
    other = min(v for key, v in best.items() if key != letter)
    if not (math.isfinite(own) or math.isfinite(other)):
        return math.nan
    return float(np.clip(other - own, -CHI2_CAP, CHI2_CAP))  # a letter absent: inf, capped


class LibraryMatcher:
    """The development library at every tier; ``match`` compares one spectrum with it."""

    def __init__(self, tiers: dict[float, LibraryTier]) -> None:
        self.tiers = tiers

    def match(
        self,
        spectrum: Spectrum,
        *,
        exclude_object: str | None = None,
        mk_region: bool = False,
        clock: dict[str, float] | None = None,
    ) -> Match | None:
        """The spectrum against the library at its tier; None when its resolution is coarser
        than every tier or too little of it is left to compare. ``exclude_object``: leave that
        object's library spectra out (the development part scored against itself);
        ``mk_region``: also compare over MK_WINDOW alone (``Match.mk``; rule-based/v6), its CPU
        seconds added to ``clock["mk"]``."""
        tier = choose_tier(spectrum)
        if tier is None or tier not in self.tiers:
            return None
        prepared = prepare(spectrum, tier)
        if prepared is None:
            return None
        match = dataclasses.replace(
            compare(prepared, self.tiers[tier], exclude_object), prepared=prepared
        )
        if not mk_region:
            return match
        started = time.process_time()
        mk = mk_match(prepared, self.tiers[tier], exclude_object)
        if clock is not None:
            clock["mk"] = clock.get("mk", 0.0) + time.process_time() - started
        return dataclasses.replace(match, mk=mk)


def mk_match(
    prepared: Prepared, library: LibraryTier, exclude_object: str | None = None
) -> Match | None:
    """The comparison over ``MK_WINDOW`` only (velocity and E(B-V) fitted there as over the
    whole range); None with fewer than MIN_MK_PIXELS good working pixels in it."""
    wave = library.wave
    inside = prepared.good & (wave >= MK_WINDOW[0]) & (wave <= MK_WINDOW[1])
    if np.count_nonzero(inside) < MIN_MK_PIXELS:
        return None
    window = Prepared(
        prepared.tier, prepared.flux, prepared.envelope, inside, prepared.sigma, prepared.coverage
    )
    return compare(window, library, exclude_object)


def compare(observed: Prepared, library: LibraryTier, exclude_object: str | None = None) -> Match:
    """Distances, shifts and E(B-V) of ``observed`` against every row of ``library``: the
    observed spectrum at every shift is one column of a matrix, so the whole comparison is four
    matrix products over the library (float32)."""
    n = observed.flux.size
    variance = observed.sigma**2 + MODEL_SIGMA**2
    pixel_kms = C_KMS * math.log(float(library.wave[1] / library.wave[0]))
    reach = max(int(math.ceil(MAX_SHIFT_KMS / pixel_kms)), 1)
    shifts = np.arange(-reach, reach + 1)
    weights = observed.good.astype(np.float64)
    o = np.zeros((n, shifts.size))
    g = np.zeros((n, shifts.size))
    for column, shift in enumerate(shifts):
        # observed pixel i + shift lies on library pixel i: the star moves at +shift pixels
        if shift >= 0:
            o[: n - shift, column], g[: n - shift, column] = observed.flux[shift:], weights[shift:]
        else:
            o[-shift:, column], g[-shift:, column] = observed.flux[:shift], weights[:shift]
    # E(B-V): ln(F_obs/F_lib) = c + x E with x = -0.4 ln(10) k(λ), on the envelopes (no shift)
    x = ccm89(library.wave) * (-0.4 * math.log(10.0))
    y = np.log(np.where(observed.good, observed.envelope, 1.0))
    columns = np.column_stack(
        [g, g * o * o, weights, weights * x, weights * x * x, weights * y, weights * x * y]
    ).astype(np.float32)
    on_mask = library.mask @ columns
    count, squares = on_mask[:, : shifts.size], on_mask[:, shifts.size : 2 * shifts.size]
    cross = library.masked @ (g * o).astype(np.float32)
    template = library.masked_sq @ g.astype(np.float32)
    residual = squares - 2.0 * cross + template
    needed = MIN_OVERLAP * float(weights.sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(count >= needed, residual / np.maximum(count, 1.0), np.inf)
    column = np.argmin(value, axis=1)
    best = value[np.arange(value.shape[0]), column].astype(np.float64)
    distances = np.sqrt(np.maximum(best, 0.0) / variance)
    s0, sx, sxx, sy_obs, sxy_obs = (
        on_mask[:, 2 * shifts.size + i].astype(np.float64) for i in range(5)
    )
    env = library.log_env @ np.column_stack([weights, weights * x]).astype(np.float32)
    sy = sy_obs - env[:, 0]
    sxy = sxy_obs - env[:, 1]
    with np.errstate(divide="ignore", invalid="ignore"):
        slope = (s0 * sxy - sx * sy) / (s0 * sxx - sx * sx)
    ebv = np.where(np.isfinite(slope), slope, np.nan)
    if exclude_object is not None:
        distances = np.where(np.asarray(library.objects) == exclude_object, np.inf, distances)
    return Match(
        library.tier,
        distances,
        shifts[column] * pixel_kms,
        ebv,
        tuple(library.ids),
        tuple(library.types),
        library.labels,
    )


# --- building and caching the library ---------------------------------------------------------


def library_cache_path() -> Path:
    from agent.real_corpus import MANIFEST_PATH, cache_dir

    digest = hashlib.sha256(MANIFEST_PATH.read_bytes()).hexdigest()[:12]
    return cache_dir() / "library" / f"development-v{LIBRARY_VERSION}-{digest}.npz"


def _library_entries() -> list[Any]:
    from agent.real_corpus import load_manifest, parse_spectral_type

    return [
        entry
        for entry in load_manifest("development")
        if entry.spectral_class == "STAR"
        and entry.source != "shared-lamost"
        and parse_spectral_type(entry.subclass) is not None
    ]


def build_library() -> dict[float, LibraryTier]:
    """Every development library spectrum prepared at each tier it is fine enough for."""
    from agent.real_corpus import TASKS, fetch, load_entry, object_key

    try:
        fetch(download=False, quiet=True)
    except Exception as exc:  # CorpusUnavailable: no cache, a changed wheel
        raise LibraryUnavailable(str(exc)) from exc
    entries = _library_entries()
    rows: dict[float, list[tuple[Any, Prepared]]] = {tier: [] for tier in TIERS}
    archives: dict[str, zipfile.ZipFile] = {}
    try:
        for entry in entries:
            spectrum = load_entry(entry, archives)
            finest = choose_tier(spectrum)
            if finest is None:
                continue
            for tier in TIERS:
                if tier >= finest:
                    prepared = prepare(spectrum, tier, trim=0.0)
                    if prepared is not None:
                        rows[tier].append((entry, prepared))
    finally:
        for archive in archives.values():
            archive.close()
    tiers: dict[float, LibraryTier] = {}
    for tier, members in rows.items():
        if members:
            tiers[tier] = library_tier(
                tier,
                [
                    (
                        e.id,
                        object_key(e.object),
                        e.subclass,
                        {task: e.label(task) for task in TASKS},
                        p,
                    )
                    for e, p in members
                ],
            )
    return tiers


def library_tier(
    tier: float, members: Sequence[tuple[str, str, str, dict[str, str | None], Prepared]]
) -> LibraryTier:
    """The matrices of one tier from (id, object key, type, {task: YES/NO/None}, prepared)."""
    mask = np.array([p.good for *_, p in members], dtype=np.float32)
    flux = np.array([p.flux for *_, p in members], dtype=np.float32)
    env = np.log(np.clip(np.array([p.envelope for *_, p in members]), 1e-30, None))
    tasks = sorted({task for _, _, _, labels, _ in members for task in labels})
    return LibraryTier(
        tier=tier,
        wave=grid(tier),
        ids=[m[0] for m in members],
        objects=[m[1] for m in members],
        types=[m[2] for m in members],
        labels={
            task: np.array(
                [-1 if m[3].get(task) is None else int(m[3].get(task) == "YES") for m in members]
            )
            for task in tasks
        },
        mask=mask,
        masked=mask * flux,
        masked_sq=mask * flux * flux,
        log_env=(mask * env).astype(np.float32),
    )


def save_library(tiers: dict[float, LibraryTier], path: Path) -> None:
    arrays: dict[str, np.ndarray] = {}
    meta: dict[str, Any] = {}
    for tier, lib in tiers.items():
        key = f"t{tier:g}"
        arrays[key + "_flux"] = (lib.masked).astype(np.float32)
        arrays[key + "_mask"] = lib.mask.astype(np.bool_)
        arrays[key + "_logenv"] = lib.log_env.astype(np.float32)
        meta[key] = {
            "tier": tier,
            "ids": lib.ids,
            "objects": lib.objects,
            "types": lib.types,
            "labels": {task: values.tolist() for task, values in lib.labels.items()},
        }
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.npz")
    np.savez_compressed(partial, **arrays)  # type: ignore[arg-type]
    partial.replace(path)


def read_library(path: Path) -> dict[float, LibraryTier]:
    with np.load(path) as data:
        meta = json.loads(bytes(data["meta"]).decode("utf-8"))
        tiers = {}
        for key, info in meta.items():
            mask = data[key + "_mask"].astype(np.float32)
            masked = data[key + "_flux"].astype(np.float32)
            log_env = data[key + "_logenv"].astype(np.float32)
            tier = float(info["tier"])
            tiers[tier] = LibraryTier(
                tier=tier,
                wave=grid(tier),
                ids=list(info["ids"]),
                objects=list(info["objects"]),
                types=list(info["types"]),
                labels={task: np.asarray(v) for task, v in info["labels"].items()},
                mask=mask,
                masked=masked,
                masked_sq=masked * masked,
                log_env=log_env,
            )
    return tiers


def default_matcher() -> LibraryMatcher | None:
    """The development library (built once and cached on disk); None when the real-data cache
    is not built here (nothing is downloaded) or ``SPECVET_LIBRARY=off`` switches it off (the
    web tests do: their spectra are built there, all outside the real library)."""
    if os.environ.get(LIBRARY_SWITCH, "").strip().lower() in ("off", "0", "no", "false"):
        return None
    return _default_matcher()


@cache
def _default_matcher() -> LibraryMatcher | None:
    try:
        path = library_cache_path()
        if path.exists():
            return LibraryMatcher(read_library(path))
        tiers = build_library()
    except (LibraryUnavailable, OSError, KeyError, ValueError):
        return None
    with contextlib.suppress(OSError):
        save_library(tiers, path)
    return LibraryMatcher(tiers)


def describe(evidence: TaskEvidence, task_name: str) -> str:
    """One sentence for the reasoning."""
    parts = []
    if evidence.nearest_positive:
        p = evidence.nearest_positive
        parts.append(
            f"nearest library {task_name} spectrum {p['id']} ({p['type']}) at distance "
            f"{p['distance']:.2f} (E(B-V) {p['ebv']:+.2f}, shift {p['shift_kms']:+.0f} km/s)"
        )
    if evidence.nearest_negative:
        n = evidence.nearest_negative
        parts.append(
            f"nearest other library spectrum {n['id']} ({n['type']}) at {n['distance']:.2f} "
            f"(E(B-V) {n['ebv']:+.2f})"
        )
    return "; ".join(parts) or "no library spectrum could be compared"


def task_list(values: Sequence[str]) -> tuple[str, ...]:
    return tuple(v.upper() for v in values)
