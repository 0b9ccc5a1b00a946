"""Statistics the vetting loop rests on (plain Python, no Django): recalibration on vetted labels,
the confidence threshold that meets a target purity, stratified audit estimates and the rate of
known-answer (gold) items. docs/explanations/calibration-and-triage.md states why each method.

- `recalibrate`: Platt scaling on the log-odds of the raw P(YES), with Platt's smoothed targets
  and a Gaussian prior on the identity map (``agent.calibration.fit_platt``).
- `purity_threshold`: the lowest recalibrated P(YES) above which the YES verdicts' estimated
  purity reaches the target, with a bootstrap interval over the vetted labels.
- `stratified_ratio`: purity or completeness from a stratified audit sample, with an interval
  from the strata's Jeffreys posteriors.
- `gold_rate`: the share of known-answer items a vetter is shown, falling with their record.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from agent.calibration import PlattScaling, fit_platt

CLIP = 1e-6
# The prior's precision on (slope, intercept): the pull of a handful of labels, so 5 labels move
# the raw curve part of the way towards what they show and 100 overrule it.
PRIOR_STRENGTH = 2.0
MIN_LABELS = 2  # fewer: no fit (the raw confidence stands)
BOOTSTRAP_RESAMPLES = 200
POSTERIOR_DRAWS = 4000
INTERVAL = 0.95


def logit(probability: float) -> float:
    p = min(max(probability, CLIP), 1.0 - CLIP)
    return math.log(p / (1.0 - p))


def raw_p_yes(verdict: str, confidence: float | None) -> float:
    """The agent's P(YES): its confidence in its verdict turned round for a NO; 0.5 without a
    verdict or a confidence."""
    if confidence is None or verdict not in ("YES", "NO"):
        return 0.5
    return confidence if verdict == "YES" else 1.0 - confidence


def recalibrate(
    raw: Sequence[float], truth: Sequence[bool], *, prior_strength: float = PRIOR_STRENGTH
) -> PlattScaling:
    """P(YES | vetted) as a logistic curve of the raw log-odds (see the module docstring)."""
    if len(raw) < MIN_LABELS:
        raise ValueError(f"recalibration needs at least {MIN_LABELS} vetted labels; got {len(raw)}")
    return fit_platt([logit(p) for p in raw], list(truth), prior_strength=prior_strength)


def apply_fit(fit: Callable[[float], float], raw: float) -> float:
    return fit(logit(raw))


def wilson_interval(successes: int, total: int, *, level: float = INTERVAL) -> tuple[float, float]:
    """Wilson score interval of a proportion (scipy); (0, 1) with no trial."""
    if total <= 0:
        return 0.0, 1.0
    ci = stats.binomtest(successes, total).proportion_ci(confidence_level=level, method="wilson")
    return float(ci.low), float(ci.high)


def _threshold(population: np.ndarray, target: float) -> float | None:
    """The lowest P(YES) t whose YES set {q >= t} has mean q >= target (the mean of the top k
    never rises as k grows, so the largest such k gives t); None when not even the surest does."""
    if population.size == 0:
        return None
    ordered = np.sort(population)[::-1]
    running = np.cumsum(ordered) / np.arange(1, ordered.size + 1)
    meets = np.nonzero(running >= target)[0]
    if meets.size == 0:
        return None
    return float(ordered[meets[-1]])


def _logits(raw: np.ndarray) -> np.ndarray:
    """``logit`` of each element (numpy: may differ from ``math`` in the last bit)."""
    p = np.clip(raw, CLIP, 1.0 - CLIP)
    return np.log(p / (1.0 - p))


def _platt(fit: PlattScaling, scores: np.ndarray) -> np.ndarray:
    """``fit`` applied to each score, as ``PlattScaling.__call__`` computes one."""
    return 1.0 / (1.0 + np.exp(-np.clip(fit.slope * scores + fit.intercept, -40.0, 40.0)))


@dataclass(frozen=True)
class _Population:
    """The YES verdicts' raw P(YES) in descending order, with their log-odds (sorted once for
    every fit: a Platt curve is monotone, so the fitted values come out sorted too, reversed
    when the slope is negative). 16 bytes per YES verdict, and as much again during a fit."""

    raw: np.ndarray
    scores: np.ndarray

    @classmethod
    def of(cls, population_raw: Sequence[float] | np.ndarray) -> _Population:
        raw = np.sort(np.asarray(population_raw, dtype=np.float64))[::-1]
        return cls(raw=raw, scores=_logits(raw))

    def threshold(self, fit: PlattScaling, target: float) -> float | None:
        """``_threshold`` of the population's recalibrated P(YES) under ``fit``."""
        if self.raw.size == 0:
            return None
        fitted = _platt(fit, self.scores)
        raw = self.raw
        if fit.slope < 0:
            fitted, raw = fitted[::-1], raw[::-1]
        if np.any(fitted[1:] > fitted[:-1]):  # rounding broke the order somewhere: sort
            order = np.argsort(-fitted, kind="stable")
            fitted, raw = fitted[order], raw[order]
        running = np.cumsum(fitted) / np.arange(1, fitted.size + 1)
        meets = np.nonzero(running >= target)[0]
        if meets.size == 0:
            return None
        # the value as ``apply_fit`` gives it, which triage compares each verdict's with: the
        # numpy value may differ in the last bit and move every verdict of that confidence
        return apply_fit(fit, float(raw[meets[-1]]))


@dataclass(frozen=True)
class ThresholdEstimate:
    threshold: float | None  # None: no threshold meets the target (every YES goes to experts)
    low: float | None
    high: float | None  # None: some resamples found no threshold
    resamples: int
    labelled_above: int  # vetted labels with recalibrated P(YES) >= threshold
    labelled_yes_above: int
    labelled_purity_low: float | None
    labelled_purity_high: float | None


def purity_threshold(
    *,
    population_raw: Sequence[float] | np.ndarray,
    labelled_raw: Sequence[float],
    labelled_truth: Sequence[bool],
    target: float,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = 0,
) -> ThresholdEstimate:
    """The recalibrated-P(YES) threshold for auto-accepting YES verdicts at ``target`` purity.

    The purity of {q >= t} is estimated by the mean recalibrated q of the YES verdicts above t
    (``population_raw``: their raw P(YES)); the fit comes from the vetted labels. The interval
    is the 2.5-97.5 % percentile of the threshold over bootstrap resamples of the labels (each
    refitted). The vetted labels above the threshold give a second, direct check: their share
    of YES with its Wilson interval.
    """
    if not 0.5 <= target < 1.0:
        raise ValueError(f"target purity must be in [0.5, 1); got {target}")
    if len(labelled_raw) != len(labelled_truth):
        raise ValueError("labelled_raw and labelled_truth differ in length")
    # 201 fits over 10^5-10^6 YES verdicts, each applied one by one in Python, took minutes
    population = _Population.of(population_raw)
    labels_raw = list(labelled_raw)
    truth = list(labelled_truth)
    fit = recalibrate(labels_raw, truth)
    threshold = population.threshold(fit, target)
    label_scores = np.asarray([logit(p) for p in labels_raw])  # as ``recalibrate`` computes them
    label_truth = np.asarray(truth, dtype=bool)
    rng = np.random.default_rng(seed)
    found: list[float] = []
    missing = 0
    for _ in range(resamples):
        pick = rng.integers(0, len(truth), len(truth))
        refit = fit_platt(
            label_scores[pick].tolist(), label_truth[pick].tolist(), prior_strength=PRIOR_STRENGTH
        )
        value = population.threshold(refit, target)
        if value is None:
            missing += 1
        else:
            found.append(value)
    tail = (1.0 - INTERVAL) / 2.0
    low = float(np.quantile(found, tail)) if found else None
    high = None if missing > tail * resamples or not found else float(np.quantile(found, 1 - tail))
    above_truth = [
        truth[i]
        for i, p in enumerate(labels_raw)
        if threshold is not None and apply_fit(fit, p) >= threshold
    ]
    above, yes_above = len(above_truth), sum(above_truth)
    purity_low, purity_high = wilson_interval(yes_above, above) if above else (None, None)
    return ThresholdEstimate(
        threshold=threshold,
        low=low,
        high=high,
        resamples=resamples,
        labelled_above=above,
        labelled_yes_above=yes_above,
        labelled_purity_low=purity_low,
        labelled_purity_high=purity_high,
    )


# --- stratified audit estimates ----------------------------------------------------------------


@dataclass(frozen=True)
class Stratum:
    key: str
    population: int  # N_h: candidates in the stratum when the sample was drawn
    labelled: int  # m_h: sampled candidates with a vetted YES or NO label
    yes: int  # y_h: of them, labelled YES


@dataclass(frozen=True)
class StratifiedEstimate:
    value: float | None  # None: a stratum the estimate needs has no label yet
    low: float | None
    high: float | None
    unlabelled_strata: tuple[str, ...]


def stratified_ratio(
    strata: Sequence[Stratum],
    *,
    numerator: Callable[[Stratum], bool],
    denominator: Callable[[Stratum], bool],
    weight_by_yes: bool,
    seed: int = 0,
) -> StratifiedEstimate:
    """sum_{h in num} N_h p_h / sum_{h in den} N_h w_h, p_h = y_h / m_h the stratum's share of
    YES, w_h = p_h (``weight_by_yes``: completeness, the true YES found) or 1 (purity).

    The interval draws every p_h from its Jeffreys posterior Beta(y_h + 1/2, m_h - y_h + 1/2),
    so a stratum all of whose labels agree still has a width, and one with no label spreads
    over [0, 1]; the ratio's 2.5-97.5 % percentiles over the draws are the interval.
    """
    used = [s for s in strata if s.population > 0 and (numerator(s) or denominator(s))]
    if not used:
        return StratifiedEstimate(None, None, None, ())
    missing = tuple(s.key for s in used if s.labelled == 0)
    rng = np.random.default_rng(seed)
    population = np.asarray([s.population for s in used], dtype=np.float64)
    in_num = np.asarray([numerator(s) for s in used])
    in_den = np.asarray([denominator(s) for s in used])
    draws = rng.beta(
        np.asarray([s.yes + 0.5 for s in used]),
        np.asarray([s.labelled - s.yes + 0.5 for s in used]),
        size=(POSTERIOR_DRAWS, len(used)),
    )

    def ratio(p: np.ndarray) -> np.ndarray:
        top = (p * population * in_num).sum(axis=-1)
        bottom = ((p if weight_by_yes else np.ones_like(p)) * population * in_den).sum(axis=-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(bottom > 0, top / np.where(bottom > 0, bottom, 1.0), np.nan)

    sampled = ratio(draws)
    sampled = sampled[~np.isnan(sampled)]
    tail = (1.0 - INTERVAL) / 2.0
    low, high = (
        (float(np.quantile(sampled, tail)), float(np.quantile(sampled, 1 - tail)))
        if sampled.size
        else (None, None)
    )
    value = None
    if not missing:
        point = ratio(np.asarray([s.yes / s.labelled for s in used]))
        value = None if math.isnan(float(point)) else float(point)
    return StratifiedEstimate(value, low, high, missing)


# --- gold items ------------------------------------------------------------------------------

GOLD_START = 0.20
GOLD_FLOOR = 0.02
GOLD_HALVING = 25  # items vetted for the rate to halve


def gold_rate(items_vetted: int) -> float:
    """Share of known-answer items shown to a vetter with ``items_vetted`` items behind them:
    20 % for a newcomer, halving every 25 items, never under 2 % (Zooniverse-style)."""
    return max(GOLD_FLOOR, GOLD_START * 0.5 ** (max(items_vetted, 0) / GOLD_HALVING))
