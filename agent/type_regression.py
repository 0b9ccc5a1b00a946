"""A continuous spectral type estimated from the spectrum (rule-based/v7), as astronomers type a
star: MKCLASS (Gray & Corbally 2014) reads the classification region 3800-5000 Å against
standards; The Cannon (Ness et al. 2015) learns labels from the spectra of a labelled set.

The type number t (O0 = 0, B0 = 10, A0 = 20, F0 = 30 ... M9 = 69;
``agent.library_match.type_number``, parsed by ``agent.real_corpus.parse_spectral_type``) is
learned from the development library alone, per working resolution (``TIERS``):

1. **Features.** The continuum-divided spectrum the library comparison prepares
   (``agent.library_match.prepare``) over ``TYPE_WINDOW``, the observed one shifted onto the
   library grid by the velocity of its nearest library spectrum (the shift the comparison
   fitted); reddening is divided out with the continuum.
2. **Regression.** The library spectra's principal components (a pixel a spectrum lacks is
   filled by the library mean there); a spectrum's coordinates are fitted on its good pixels
   only, so a gap does not bias them; then kernel ridge regression of t on the first
   ``components`` coordinates (a Gaussian kernel whose width is ``width`` times the median
   distance between library spectra; t is not linear in the spectrum: the Balmer lines peak at
   A0 and weaken both ways). Hyper-parameters chosen on the development part by 5-fold
   cross-validation grouped by object (``agent.bench.type_cv``).
3. **Uncertainty.** The residuals of a 5-fold cross-validation by object inside the training
   spectra, as a function of the estimate (Gaussian-smoothed root mean square,
   ``SIGMA_SMOOTHING`` subtypes wide, at least ``SIGMA_FLOOR``): the posterior of t is
   N(t_hat, sigma(t_hat)), and P(task) integrates it over the task's range (``TASK_RANGES``:
   B is 9.5 <= t < 19.5, so B9.5 is B and A0 is A).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from agent.library_match import C_KMS, LibraryTier, Match, grid, type_number

TYPE_WINDOW = (3800.0, 5000.0)  # Å: the MK classification region and Hβ
MIN_WINDOW_SHARE = 0.6  # a spectrum with fewer good window pixels is not typed
TASK_RANGES = {"O": (-math.inf, 9.5), "B": (9.5, 19.5), "A": (19.5, 29.5)}
SIGMA_SMOOTHING = 3.0  # subtypes over which the cross-validated residuals are pooled
SIGMA_FLOOR = 0.7  # subtypes: never more certain than the labels themselves (B9.5 / A0)
FOLDS = 5


@dataclass(frozen=True)
class Hyper:
    components: int = 16
    width: float = 1.0  # kernel width, times the median distance between library spectra
    ridge: float = 0.03


# chosen on the development part by ``python -m agent.bench.type_cv`` (5-fold by object): B0-F5
# types to a median of 1.07 subtypes and combined A 0.924 balanced accuracy (8 components 1.30
# and 0.910, 24: 1.20 and 0.917, width 0.7: 1.16 and 0.924; width 2 with ridge 0.01 is equal
# within one spectrum: 1.05, and 0.925 or 0.918 by the combiner's L2)
DEFAULT_HYPER = Hyper()


@dataclass(frozen=True)
class TypeFeatures:
    """One spectrum over ``TYPE_WINDOW`` on its tier's grid, velocity-aligned."""

    tier: float
    flux: np.ndarray
    good: np.ndarray  # bool


def window(tier: float) -> np.ndarray:
    wave = grid(tier)
    return (wave >= TYPE_WINDOW[0]) & (wave <= TYPE_WINDOW[1])


def observed_features(match: Match | None) -> TypeFeatures | None:
    """The compared spectrum (``Match.prepared``) over the window, shifted by the velocity of
    its nearest library spectrum; None where too little of the window is good."""
    if match is None or match.prepared is None:
        return None
    finite = np.isfinite(match.distances)
    if not finite.any():
        return None
    nearest = int(np.argmin(np.where(finite, match.distances, np.inf)))
    wave = grid(match.tier)
    pixel_kms = C_KMS * math.log(float(wave[1] / wave[0]))
    shift = int(round(float(match.shifts_kms[nearest]) / pixel_kms))
    flux = np.ones_like(match.prepared.flux)
    good = np.zeros(flux.size, dtype=bool)
    n = flux.size
    # observed pixel i + shift lies on library pixel i (``agent.library_match.compare``)
    if shift >= 0:
        flux[: n - shift], good[: n - shift] = (
            match.prepared.flux[shift:],
            match.prepared.good[shift:],
        )
    else:
        flux[-shift:], good[-shift:] = match.prepared.flux[:shift], match.prepared.good[:shift]
    inside = window(match.tier)
    features = TypeFeatures(match.tier, flux[inside], good[inside])
    if np.count_nonzero(features.good) < MIN_WINDOW_SHARE * features.good.size:
        return None
    return features


def fold_of_object(key: str, folds: int = FOLDS) -> int:
    """The fold of an object (its key's hash): as ``agent.bench.real_cv.fold_of``."""
    return int(hashlib.sha256(key.encode("utf-8")).hexdigest(), 16) % folds


@dataclass(frozen=True)
class TrainingSet:
    """The typed library spectra of one tier over the window."""

    tier: float
    flux: np.ndarray  # m x n
    good: np.ndarray  # m x n bool
    types: np.ndarray  # m type numbers
    objects: tuple[str, ...]


def training_set(library: LibraryTier) -> TrainingSet:
    inside = window(library.tier)
    good = library.mask[:, inside] > 0.5
    flux = np.where(good, library.masked[:, inside], 1.0).astype(np.float64)
    types = np.array([type_number(t) for t in library.types])
    keep = np.isfinite(types) & (good.mean(axis=1) >= MIN_WINDOW_SHARE)
    return TrainingSet(
        library.tier,
        flux[keep],
        good[keep],
        types[keep],
        tuple(o for o, k in zip(library.objects, keep, strict=True) if k),
    )


def subset(data: TrainingSet, rows: np.ndarray) -> TrainingSet:
    return TrainingSet(
        data.tier,
        data.flux[rows],
        data.good[rows],
        data.types[rows],
        tuple(data.objects[i] for i in np.flatnonzero(rows)),
    )


@dataclass(frozen=True)
class TierModel:
    """Principal components and a kernel ridge regression of t on their coordinates."""

    tier: float
    mean: np.ndarray
    components: np.ndarray  # k x n
    scale: np.ndarray  # k: the coordinates' spread (coordinates are divided by it)
    train: np.ndarray  # m x k coordinates of the training spectra
    dual: np.ndarray  # m
    offset: float
    gamma: float
    sigma_at: np.ndarray  # estimates at which the cross-validated residual spread is known
    sigma: np.ndarray

    def coordinates(self, flux: np.ndarray, good: np.ndarray) -> np.ndarray:
        """Least-squares coordinates fitted on the good pixels of one spectrum or a stack."""
        flux = np.atleast_2d(flux)
        good = np.atleast_2d(good)
        out = np.empty((flux.shape[0], self.components.shape[0]))
        for row in range(flux.shape[0]):
            g = good[row]
            basis = self.components[:, g].T
            out[row] = np.linalg.lstsq(basis, flux[row, g] - self.mean[g], rcond=None)[0]
        return out / self.scale

    def predict(self, coordinates: np.ndarray) -> np.ndarray:
        return _kernel(coordinates, self.train, self.gamma) @ self.dual + self.offset

    def spread(self, estimate: float) -> float:
        return float(np.interp(estimate, self.sigma_at, self.sigma))


def _kernel(a: np.ndarray, b: np.ndarray, gamma: float) -> np.ndarray:
    squared = np.sum(a * a, axis=1)[:, None] + np.sum(b * b, axis=1)[None, :] - 2.0 * a @ b.T
    return np.exp(-gamma * np.maximum(squared, 0.0))


def fit_tier(
    data: TrainingSet, hyper: Hyper = DEFAULT_HYPER, *, inner_folds: int = FOLDS
) -> TierModel:
    """The regression of one tier; ``inner_folds`` > 1 also estimates its uncertainty by a
    cross-validation grouped by object inside ``data`` (else a flat ``SIGMA_FLOOR``)."""
    model = _fit_point(data, hyper)
    if inner_folds <= 1:
        return model
    folds = np.array([fold_of_object(o, inner_folds) for o in data.objects])
    estimates = np.full(data.types.size, np.nan)
    for k in range(inner_folds):
        test = folds == k
        if test.all() or not test.any():
            continue
        inner = _fit_point(subset(data, ~test), hyper)
        estimates[test] = inner.predict(inner.coordinates(data.flux[test], data.good[test]))
    done = np.isfinite(estimates)
    at, spread = residual_spread(estimates[done], data.types[done])
    return TierModel(**{**model.__dict__, "sigma_at": at, "sigma": spread})


def residual_spread(estimates: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """sigma(t_hat): the Gaussian-smoothed RMS of the residuals, on a grid of t_hat."""
    at = np.arange(-5.0, 75.0, 1.0)
    if estimates.size == 0:
        return at, np.full(at.size, SIGMA_FLOOR)
    residual2 = (estimates - types) ** 2
    weights = np.exp(-0.5 * ((at[:, None] - estimates[None, :]) / SIGMA_SMOOTHING) ** 2)
    weights += 1e-12
    rms = np.sqrt((weights @ residual2) / weights.sum(axis=1))
    return at, np.maximum(rms, SIGMA_FLOOR)


def _fit_point(data: TrainingSet, hyper: Hyper) -> TierModel:
    counts = data.good.sum(axis=0)
    mean = np.where(counts > 0, (data.flux * data.good).sum(axis=0) / np.maximum(counts, 1), 1.0)
    filled = np.where(data.good, data.flux, mean)
    _, values, vt = np.linalg.svd(filled - mean, full_matrices=False)
    k = min(hyper.components, vt.shape[0])
    components = vt[:k]
    scale = np.maximum(values[:k] / math.sqrt(max(data.types.size - 1, 1)), 1e-9)
    model = TierModel(
        data.tier, mean, components, scale, np.zeros((0, k)), np.zeros(0), 0.0, 1.0,
        np.array([0.0, 1.0]), np.array([SIGMA_FLOOR, SIGMA_FLOOR]),
    )  # fmt: skip
    train = model.coordinates(data.flux, data.good)
    squared = np.sum((train[:, None, :] - train[None, :, :]) ** 2, axis=2)
    median = float(np.median(squared[np.triu_indices(train.shape[0], 1)])) or 1.0
    gamma = 1.0 / (2.0 * hyper.width**2 * median)
    offset = float(np.mean(data.types))
    gram = _kernel(train, train, gamma)
    dual = np.linalg.solve(gram + hyper.ridge * np.eye(gram.shape[0]), data.types - offset)
    return TierModel(**{**model.__dict__, "train": train, "dual": dual, "offset": offset,
                        "gamma": gamma})  # fmt: skip


@dataclass(frozen=True)
class TypeEstimator:
    """The regression of every tier: t_hat, sigma and P(task) of a spectrum."""

    models: Mapping[float, TierModel]

    def estimate(self, features: TypeFeatures | None) -> tuple[float, float]:
        """(t_hat, sigma); (nan, nan) where the spectrum cannot be typed."""
        if features is None or features.tier not in self.models:
            return math.nan, math.nan
        model = self.models[features.tier]
        t_hat = float(model.predict(model.coordinates(features.flux, features.good))[0])
        return t_hat, model.spread(t_hat)

    def probability(self, task: str, features: TypeFeatures | None) -> float:
        t_hat, sigma = self.estimate(features)
        return task_probability(task, t_hat, sigma)


def task_probability(task: str, t_hat: float, sigma: float) -> float:
    """P(low <= t < high) under N(t_hat, sigma) for the task's range; nan where the task has
    no type range or the type is unknown."""
    if task.upper() not in TASK_RANGES or not (math.isfinite(t_hat) and math.isfinite(sigma)):
        return math.nan
    low, high = TASK_RANGES[task.upper()]
    return float(norm.cdf(high, t_hat, sigma) - norm.cdf(low, t_hat, sigma))


def fit_estimator(
    tiers: Mapping[float, LibraryTier],
    held_out: Collection[str] = (),
    hyper: Hyper = DEFAULT_HYPER,
    *,
    inner_folds: int = FOLDS,
    shuffle_seed: int | None = None,
) -> TypeEstimator:
    """Every tier's regression fitted on the library spectra of objects not in ``held_out``.
    ``shuffle_seed``: the types permuted among the training spectra (a control that must
    fail)."""
    excluded = set(held_out)
    models = {}
    for tier, library in tiers.items():
        data = training_set(library)
        keep = np.array([o not in excluded for o in data.objects], dtype=bool)
        data = subset(data, keep)
        if data.types.size < 10:
            continue
        if shuffle_seed is not None:
            permuted = np.random.default_rng(shuffle_seed).permutation(data.types)
            data = TrainingSet(data.tier, data.flux, data.good, permuted, data.objects)
        models[tier] = fit_tier(data, hyper, inner_folds=inner_folds)
    return TypeEstimator(models)


_DEFAULT: list[tuple[Mapping[float, LibraryTier], TypeEstimator]] = []


def default_type_estimator(tiers: Mapping[float, LibraryTier]) -> TypeEstimator:
    """The regression fitted on the whole development library (``tiers``: the default
    matcher's), once per library (a few seconds of CPU)."""
    for known, estimator in _DEFAULT:
        if known is tiers:
            return estimator
    estimator = fit_estimator(tiers)
    _DEFAULT.append((tiers, estimator))
    return estimator
