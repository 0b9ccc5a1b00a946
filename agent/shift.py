"""The shift sentinel: do a run's spectra come from the distribution its model was calibrated on?

Each spectrum is summarised by five features: its S/N (DER_SNR, Stoehr et al. 2008, read from
the flux alone, so library spectra without errors have one too), its resolving power at 5500 A
(or the nearest covered wavelength), the blue and red ends of its coverage, and its distance to
the nearest real library spectrum (``library_distance``; ``LibraryDistance`` below computes one
from continuum-normalised spectra and can be swapped for another, e.g. the data-driven
inspector's, through the same call signature).

Each feature of the run (or of a subset of it) is compared with the calibration set's by two
statistics, and a feature has shifted only when both say so:

- the two-sample Kolmogorov-Smirnov test (distribution-free, for any continuous feature, with a
  p-value, so the false-alarm rate is set: ALPHA for the whole check, Bonferroni-divided among
  every feature and subset tested), and
- the population stability index over bins at the pooled sample's deciles, PSI =
  sum (p_run - p_ref) ln(p_run / p_ref), whose conventional reading (Siddiqi 2006, credit
  scoring; Yurdakul 2018) is < 0.1 stable, 0.1-0.25 moderate, >= 0.25 a significant shift.

KS alone flags a large run for a trivial difference (its power grows with n); PSI alone has no
control of sampling noise for a small run (a 10-spectrum run scatters by ~0.3 from noise). The
conjunction asks for a difference that is both real and large. Features with ties (resolution
from a survey default) are binned at the pooled deciles, so a point mass is its own bin.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from agent.spectra.value import Spectrum

FEATURES = ("snr", "resolving_power", "blue_edge", "red_edge", "library_distance")
FEATURE_LABELS = {
    "snr": "S/N (DER_SNR)",
    "resolving_power": "resolving power at 5500 Å",
    "blue_edge": "blue end of coverage (Å)",
    "red_edge": "red end of coverage (Å)",
    "library_distance": "distance to the nearest library spectrum",
}
ALPHA = 0.01  # false-alarm rate of one whole check (every feature and subset together)
PSI_SHIFT = 0.25  # a significant shift (0.1-0.25: moderate)
PSI_BINS = 10
PSI_FLOOR = 1e-4  # an empty bin's share, so the logarithm stays finite
MIN_RUN = 10  # a run or subset with fewer spectra is not tested (too little power)
MIN_REFERENCE = 20  # nor against a calibration set of fewer spectra
R_WAVELENGTH = 5500.0

SpectrumDistance = Callable[[Spectrum], float]


# --- features of one spectrum -------------------------------------------------------------------


def der_snr(flux: np.ndarray) -> float | None:
    """DER_SNR (Stoehr et al. 2008): median flux over 1.482602/sqrt(6) median |2f_i - f_i-2 -
    f_i+2|; None when fewer than 5 finite pixels or no noise is measurable."""
    values = flux[np.isfinite(flux)]
    if values.size < 5:
        return None
    noise = 0.6052697 * float(np.median(np.abs(2.0 * values[2:-2] - values[:-4] - values[4:])))
    signal = float(np.median(values))
    if noise <= 0.0 or not math.isfinite(noise):
        return None
    return signal / noise


def spectrum_features(
    spectrum: Spectrum, distance: SpectrumDistance | None = None
) -> dict[str, float | None]:
    """The five features of one spectrum; ``library_distance`` is None without ``distance``."""
    good = ~spectrum.mask if spectrum.mask is not None else np.ones(len(spectrum), dtype=bool)
    good &= np.isfinite(spectrum.flux)
    wave = spectrum.wavelength[good] if good.any() else spectrum.wavelength
    flux = spectrum.flux[good] if good.any() else spectrum.flux
    blue, red = float(wave.min()), float(wave.max())
    at = min(max(R_WAVELENGTH, blue), red)
    power = spectrum.resolution.resolving_power_at(at) if spectrum.resolution else None
    return {
        "snr": der_snr(flux),
        "resolving_power": power,
        "blue_edge": blue,
        "red_edge": red,
        "library_distance": distance(spectrum) if distance is not None else None,
    }


# --- distance to the library --------------------------------------------------------------------

GRID = np.exp(np.linspace(math.log(3900.0), math.log(7400.0), 256))  # R ~ 400 bins
CONTINUUM_BINS = 31  # running-median width (~8 % of the grid) taken as the continuum
MIN_OVERLAP = 0.5  # of the grid covered by both, or the distance is NO_OVERLAP
NO_OVERLAP = 10.0  # larger than any distance between covered spectra (they are ~0.01-0.3)


def embed(spectrum: Spectrum) -> np.ndarray:
    """The spectrum on GRID (bin means of good pixels, vacuum Angstrom), divided by its
    running-median continuum, minus one: line depths, blind to flux scale and reddening.
    NaN where the spectrum has no pixel."""
    good = np.isfinite(spectrum.flux)
    if spectrum.mask is not None:
        good &= ~spectrum.mask
    wave, flux = spectrum.wavelength[good], spectrum.flux[good]
    edges = np.sqrt(GRID[1:] * GRID[:-1])
    edges = np.concatenate([[GRID[0] ** 2 / edges[0]], edges, [GRID[-1] ** 2 / edges[-1]]])
    index = np.searchsorted(edges, wave) - 1
    inside = (index >= 0) & (index < GRID.size)
    sums = np.bincount(index[inside], weights=flux[inside], minlength=GRID.size)
    counts = np.bincount(index[inside], minlength=GRID.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        binned = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    covered = (wave.min() <= GRID) & (wave.max() >= GRID) if wave.size else GRID < 0
    empty = covered & ~np.isfinite(binned)
    if empty.any() and np.isfinite(binned).sum() >= 2:  # coarser pixels than bins
        known = np.isfinite(binned)
        binned[empty] = np.interp(GRID[empty], GRID[known], binned[known])
    binned[~covered] = np.nan
    continuum = _running_median(binned, CONTINUUM_BINS)
    with np.errstate(invalid="ignore", divide="ignore"):
        normalised = binned / continuum - 1.0
    normalised[~np.isfinite(normalised) | ~(continuum > 0)] = np.nan
    return np.asarray(normalised, dtype=np.float64)


def _running_median(values: np.ndarray, width: int) -> np.ndarray:
    half = width // 2
    padded = np.concatenate([np.full(half, np.nan), values, np.full(half, np.nan)])
    windows = np.lib.stride_tricks.sliding_window_view(padded, width)
    with np.errstate(invalid="ignore"):
        out = np.full(values.size, np.nan)
        enough = np.sum(np.isfinite(windows), axis=1) >= half
        if enough.any():
            out[enough] = np.nanmedian(windows[enough], axis=1)
    return out


@dataclass(frozen=True)
class LibraryDistance:
    """Root-mean-square difference of continuum-normalised line depths (``embed``) to the
    nearest library spectrum, over the bins both cover; NO_OVERLAP when they share less than
    MIN_OVERLAP of the grid. Immutable after construction (shared between threads)."""

    vectors: np.ndarray = field(repr=False)  # (library spectra, GRID.size), NaN where uncovered
    names: tuple[str, ...] = ()

    @classmethod
    def from_spectra(cls, spectra: Iterable[tuple[str, Spectrum]]) -> LibraryDistance:
        names, rows = [], []
        for name, spectrum in spectra:
            vector = embed(spectrum)
            if np.isfinite(vector).mean() >= MIN_OVERLAP:
                names.append(name)
                rows.append(vector)
        return cls(vectors=np.array(rows).reshape(len(rows), GRID.size), names=tuple(names))

    def __call__(self, spectrum: Spectrum) -> float:
        return self.of_vector(embed(spectrum))

    def of_vector(self, vector: np.ndarray, exclude: str | None = None) -> float:
        """Distance of an embedded spectrum; ``exclude`` leaves out the library spectra of that
        name (a library spectrum's own object, when the library's own spectra are measured)."""
        if not len(self.names):
            return NO_OVERLAP
        both = np.isfinite(self.vectors) & np.isfinite(vector)[None, :]
        if exclude is not None:
            both &= np.array([name != exclude for name in self.names])[:, None]
        shared = both.sum(axis=1)
        squared = np.where(both, (self.vectors - np.nan_to_num(vector)[None, :]) ** 2, 0.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            rms = np.sqrt(squared.sum(axis=1) / shared)
        rms[shared < MIN_OVERLAP * GRID.size] = np.inf
        best = float(np.min(rms))
        return best if math.isfinite(best) else NO_OVERLAP


def corpus_library_distance(split: str = "development") -> LibraryDistance | None:
    """A LibraryDistance over the real corpus's ``split`` (never validation for tuning), or
    None when the corpus is not in the cache (``make real-data``)."""
    from agent.real_corpus import CorpusUnavailable, load_corpus, object_key

    try:
        corpus = load_corpus(split)
    except (CorpusUnavailable, OSError):
        return None
    return LibraryDistance.from_spectra(
        (object_key(entry.object), spectrum) for entry, spectrum in corpus
    )


# --- two-sample statistics ----------------------------------------------------------------------


def psi(
    reference: Sequence[float] | np.ndarray,
    sample: Sequence[float] | np.ndarray,
    bins: int = PSI_BINS,
) -> float:
    """Population stability index of ``sample`` against ``reference`` over bins at the pooled
    values' quantiles (a value tied across a quantile is one bin, so point masses count).

    >>> round(psi([1.0, 2.0, 3.0, 4.0] * 5, [1.0, 2.0, 3.0, 4.0] * 5), 6)
    0.0
    """
    ref, run = np.asarray(reference, dtype=float), np.asarray(sample, dtype=float)
    pooled = np.concatenate([ref, run])
    edges = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, bins + 1)[1:-1]))
    p_ref = np.bincount(np.searchsorted(edges, ref, side="right"), minlength=edges.size + 1)
    p_run = np.bincount(np.searchsorted(edges, run, side="right"), minlength=edges.size + 1)
    p_ref = np.maximum(p_ref / ref.size, PSI_FLOOR)
    p_run = np.maximum(p_run / run.size, PSI_FLOOR)
    return float(np.sum((p_run - p_ref) * np.log(p_run / p_ref)))


@dataclass(frozen=True)
class FeatureShift:
    feature: str
    n_run: int
    n_reference: int
    ks: float
    p_value: float
    psi: float
    run_median: float
    reference_median: float
    shifted: bool

    def as_dict(self) -> dict[str, Any]:
        return {
            "feature": self.feature,
            "label": FEATURE_LABELS[self.feature],
            "n_run": self.n_run,
            "n_reference": self.n_reference,
            "ks": round(self.ks, 4),
            "p_value": float(f"{self.p_value:.3g}"),
            "psi": round(self.psi, 4),
            "run_median": _round(self.run_median),
            "reference_median": _round(self.reference_median),
            "shifted": self.shifted,
        }


def _round(value: float) -> float | None:
    return float(f"{value:.4g}") if math.isfinite(value) else None


def _values(rows: Iterable[Mapping[str, float | None]], feature: str) -> np.ndarray:
    out = [row.get(feature) for row in rows]
    return np.array([v for v in out if v is not None and not math.isnan(v)], dtype=float)


def compare_feature(
    feature: str,
    reference: Sequence[Mapping[str, float | None]],
    sample: Sequence[Mapping[str, float | None]],
    *,
    alpha: float,
) -> FeatureShift | None:
    """KS and PSI of one feature; None when either side has too few values to test."""
    ref, run = _values(reference, feature), _values(sample, feature)
    if run.size < MIN_RUN or ref.size < MIN_REFERENCE:
        return None
    result = stats.ks_2samp(run, ref)
    ks, p_value = float(result.statistic), float(result.pvalue)
    index = psi(ref, run)
    return FeatureShift(
        feature=feature,
        n_run=int(run.size),
        n_reference=int(ref.size),
        ks=ks,
        p_value=p_value,
        psi=index,
        run_median=float(np.median(run)),
        reference_median=float(np.median(ref)),
        shifted=p_value < alpha and index >= PSI_SHIFT,
    )


@dataclass(frozen=True)
class GroupShift:
    """One run or subset (``key``: "" for the whole run, else e.g. "survey=STELIB")."""

    key: str
    n: int
    features: tuple[FeatureShift, ...]
    tested: bool

    @property
    def shifted(self) -> bool:
        return any(feature.shifted for feature in self.features)

    def as_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "n": self.n,
            "tested": self.tested,
            "shifted": self.shifted,
            "shifted_features": [f.feature for f in self.features if f.shifted],
            "features": [f.as_dict() for f in self.features],
        }


def compare_groups(
    reference: Mapping[str, Sequence[Mapping[str, float | None]]],
    groups: Mapping[str, Sequence[Mapping[str, float | None]]],
    *,
    alpha: float = ALPHA,
    features: Sequence[str] = FEATURES,
) -> list[GroupShift]:
    """Each group of the run (``""``: the whole run, then subsets such as "survey=SDSS")
    against the calibration set's group of the same key when it has at least MIN_REFERENCE
    spectra (a subset of a survey the calibration set covers is compared with that survey;
    the whole run with the calibration set's spectra of the run's surveys), else against the
    whole calibration set (``reference[""]``). The check's ``alpha`` is divided among every
    (group, feature) pair that can be tested."""

    surveys = [key for key in groups if key]
    same_surveys = [row for key in surveys for row in reference.get(key) or ()]

    def against(key: str) -> Sequence[Mapping[str, float | None]]:
        own = same_surveys if key == "" else reference.get(key) or ()
        return own if len(own) >= MIN_REFERENCE else reference[""]

    testable = [
        (key, feature)
        for key, rows in groups.items()
        if len(rows) >= MIN_RUN
        for feature in features
        if _values(rows, feature).size >= MIN_RUN
        and _values(against(key), feature).size >= MIN_REFERENCE
    ]
    each = alpha / max(1, len(testable))
    out = []
    for key, rows in groups.items():
        compared = [compare_feature(f, against(key), rows, alpha=each) for f in features]
        found = tuple(c for c in compared if c is not None)
        out.append(GroupShift(key=key, n=len(rows), features=found, tested=bool(found)))
    return out


def grouped(
    rows: Sequence[tuple[str, Mapping[str, float | None]]],
) -> dict[str, list[Mapping[str, float | None]]]:
    """{"": every row, "survey=<s>": the rows of each survey} from (survey, features) pairs."""
    groups: dict[str, list[Mapping[str, float | None]]] = {"": [f for _, f in rows]}
    for survey, features in rows:
        groups.setdefault(f"survey={survey}", []).append(features)
    return groups


def held_groups(groups: Sequence[GroupShift]) -> list[str]:
    """The groups whose confident answers are held: each shifted survey subset; the whole run
    ("") only when no subset of it has shifted on its own (a shift spread over surveys too
    small to test alone), since a mixture with a shifted subset differs as a whole too."""
    subsets = [group.key for group in groups if group.key and group.shifted]
    if subsets:
        return subsets
    return [group.key for group in groups if group.key == "" and group.shifted]
