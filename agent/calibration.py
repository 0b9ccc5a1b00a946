"""Self-consistency verdicts, calibration and triage curves (paper section 6's open gap).

- `majority_verdict`: the answer over a candidate's rollouts and its vote share.
- `reliability_bins` / `expected_calibration_error`: is a 0.8 confidence right 80% of the time?
- `f1_coverage_curve`: the F1 of the automatic decisions when the least confident share of
  candidates is sent to experts instead; a team reads its threshold off this curve.
- `fit_platt` / `PlattScaling`: a raw score turned into a calibrated P(YES).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import optimize

from agent.metrics import classification_report


def majority_verdict(predictions: Sequence[str | None]) -> tuple[str | None, float]:
    """(verdict, vote share) over rollouts. Rollouts without an answer count in the total.

    A tie between YES and NO gives no verdict (None) with share 0.5: that is a case for experts.
    """
    if not predictions:
        return None, 0.0
    yes = sum(1 for p in predictions if p == "YES")
    no = sum(1 for p in predictions if p == "NO")
    if yes == no:
        return (None, 0.5) if yes else (None, 0.0)
    winner, count = ("YES", yes) if yes > no else ("NO", no)
    return winner, count / len(predictions)


@dataclass(frozen=True)
class ReliabilityBin:
    low: float
    high: float
    count: int
    mean_confidence: float | None
    accuracy: float | None


def reliability_bins(
    confidences: Sequence[float], correct: Sequence[bool], *, n_bins: int = 10, low: float = 0.0
) -> list[ReliabilityBin]:
    """Equal-width confidence bins on [low, 1]; the last bin includes 1.0."""
    # Not sklearn's calibration_curve: it has no `low`, puts a value on an edge in the lower
    # bin (here the upper one) and drops empty bins and the counts the plots and ECE use.
    if len(confidences) != len(correct):
        raise ValueError("confidences and correct differ in length")
    if n_bins < 1 or not 0.0 <= low < 1.0:
        raise ValueError(f"need n_bins >= 1 and 0 <= low < 1; got {n_bins}, {low}")
    width = (1.0 - low) / n_bins
    sums = [[0, 0.0, 0] for _ in range(n_bins)]  # count, confidence sum, correct count
    for confidence, ok in zip(confidences, correct, strict=True):
        if not low <= confidence <= 1.0:
            raise ValueError(f"confidence {confidence} is outside [{low}, 1]")
        index = min(int((confidence - low) / width), n_bins - 1)
        sums[index][0] += 1
        sums[index][1] += confidence
        sums[index][2] += 1 if ok else 0
    bins = []
    for index, (count, confidence_sum, correct_count) in enumerate(sums):
        bins.append(
            ReliabilityBin(
                low=low + index * width,
                high=low + (index + 1) * width,
                count=int(count),
                mean_confidence=confidence_sum / count if count else None,
                accuracy=correct_count / count if count else None,
            )
        )
    return bins


def expected_calibration_error(bins: Sequence[ReliabilityBin]) -> float:
    total = sum(b.count for b in bins)
    if not total:
        return 0.0
    return sum(
        b.count / total * abs(b.accuracy - b.mean_confidence)
        for b in bins
        if b.count and b.accuracy is not None and b.mean_confidence is not None
    )


def calibrated_ece_quantile(
    confidences: Sequence[float],
    *,
    quantile: float = 0.95,
    draws: int = 2000,
    n_bins: int = 10,
    seed: int = 0,
) -> float:
    """The ECE a perfectly calibrated inspector reaches at ``quantile`` with these confidences.

    ECE is biased upward on few answers: each bin's accuracy is a binomial draw around its
    confidence, so even a calibrated inspector shows |accuracy - confidence| > 0. Drawing each
    answer right with probability equal to its own confidence ``draws`` times gives the ECE
    distribution under calibration; an observed ECE above its 95th percentile is
    miscalibration, one below it cannot be told from sampling noise at this size.
    """
    if not 0.0 < quantile < 1.0 or draws < 1:
        raise ValueError(f"need 0 < quantile < 1 and draws >= 1; got {quantile}, {draws}")
    values = np.asarray(confidences, dtype=np.float64)
    if values.size == 0:
        return math.nan
    if np.any((values < 0.0) | (values > 1.0)):
        raise ValueError("confidences must lie in [0, 1]")
    # the bin index exactly as reliability_bins computes it (value / width, not value * n_bins)
    index = np.minimum((values / (1.0 / n_bins)).astype(np.int64), n_bins - 1)
    confidence_sums = np.bincount(index, weights=values, minlength=n_bins)
    correct = np.random.default_rng(seed).random((draws, values.size)) < values
    # per draw and bin: |correct count - confidence sum| / n, summed over bins (ECE's definition)
    correct_sums = np.stack(
        [np.bincount(index, weights=row, minlength=n_bins) for row in correct.astype(np.float64)]
    )
    eces = np.abs(correct_sums - confidence_sums).sum(axis=1) / values.size
    return float(np.quantile(eces, quantile))


@dataclass(frozen=True)
class CoveragePoint:
    coverage: float  # share of candidates decided automatically
    threshold: float  # lowest confidence among them
    n_automatic: int
    f1: float
    accuracy: float


def f1_coverage_curve(
    labels: Sequence[str], predictions: Sequence[str | None], confidences: Sequence[float]
) -> list[CoveragePoint]:
    """F1 and accuracy of the k most confident automatic decisions, for every k.

    Ties in confidence are kept together (a threshold cannot split them).
    """
    if not (len(labels) == len(predictions) == len(confidences)):
        raise ValueError("labels, predictions and confidences differ in length")
    order = sorted(range(len(labels)), key=lambda i: -confidences[i])
    points: list[CoveragePoint] = []
    n = len(order)
    for k in range(1, n + 1):
        if k < n and confidences[order[k]] == confidences[order[k - 1]]:
            continue
        chosen = order[:k]
        report = classification_report(
            [labels[i] for i in chosen], [predictions[i] for i in chosen]
        )
        points.append(
            CoveragePoint(
                coverage=k / n,
                threshold=confidences[order[k - 1]],
                n_automatic=k,
                f1=report.f1,
                accuracy=report.accuracy,
            )
        )
    return points


# --- Platt scaling -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlattScaling:
    """P(YES) = logistic(slope * score + intercept) (Platt 1999)."""

    slope: float
    intercept: float

    def __call__(self, score: float) -> float:
        value = self.slope * score + self.intercept
        return 1.0 / (1.0 + math.exp(-max(min(value, 40.0), -40.0)))


def fit_platt(
    scores: Sequence[float],
    labels: Sequence[bool],
    *,
    intercept: bool = True,
    prior_strength: float = 0.0,
) -> PlattScaling:
    """Platt's fit of a logistic curve to raw scores, with his smoothed targets
    ((N+ + 1)/(N+ + 2) for positives, 1/(N- + 2) for negatives) so separable data cannot drive
    the slope to infinity. ``intercept=False`` fits the slope alone (a temperature), which
    keeps every decision and only rescales the confidence: the choice when a task has too few
    positives to place a threshold.

    ``prior_strength`` > 0 adds a Gaussian prior centred on the identity (slope 1, intercept 0)
    with that precision, a MAP fit: with few labels the curve stays near the raw scores (when
    they are log-odds) and moves only as far as the labels pull it.
    """
    if prior_strength < 0:
        raise ValueError(f"prior_strength must be >= 0; got {prior_strength}")
    if len(scores) != len(labels):
        raise ValueError("scores and labels differ in length")
    if not scores:
        raise ValueError("fit_platt needs at least one score")
    x = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels, dtype=bool)
    positives, negatives = int(y.sum()), int((~y).sum())
    target = np.where(y, (positives + 1.0) / (positives + 2.0), 1.0 / (negatives + 2.0))

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        slope, offset = params[0], params[1] if intercept else 0.0
        z = np.clip(slope * x + offset, -40.0, 40.0)
        p = 1.0 / (1.0 + np.exp(-z))
        value = float(np.sum(np.logaddexp(0.0, z) - target * z))
        value += 0.5 * prior_strength * ((slope - 1.0) ** 2 + offset**2)
        gradient = p - target
        grad = np.array(
            [
                float(np.sum(gradient * x)) + prior_strength * (slope - 1.0),
                float(np.sum(gradient)) + prior_strength * offset,
            ]
        )
        return value, grad if intercept else grad[:1]

    start = np.array([1.0, 0.0]) if intercept else np.array([1.0])
    result = optimize.minimize(loss, start, jac=True, method="BFGS")
    slope = float(result.x[0])
    offset = float(result.x[1]) if intercept else 0.0
    return PlattScaling(slope, offset)


# --- beta calibration ----------------------------------------------------------------------------


def _log_sigmoid(value: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -value)


@dataclass(frozen=True)
class BetaCalibration:
    """P(YES) = logistic(a * ln q - b * ln(1 - q) + c) with q = logistic(score) (Kull, Silva
    Filho & Flach 2017): a Platt curve whose two tails bend apart, for scores whose YES and NO
    sides are spread differently, as they are where one class is rare. a = b is Platt scaling.
    """

    a: float
    b: float
    c: float

    def __call__(self, score: float) -> float:
        x = np.asarray([max(min(score, 40.0), -40.0)], dtype=np.float64)
        # ln q = log_sigmoid(s); ln(1 - q) = log_sigmoid(-s)
        value = self.a * float(_log_sigmoid(x)[0]) - self.b * float(_log_sigmoid(-x)[0]) + self.c
        return 1.0 / (1.0 + math.exp(-max(min(value, 40.0), -40.0)))


def fit_beta(scores: Sequence[float], labels: Sequence[bool]) -> BetaCalibration:
    """Beta calibration fitted by maximum likelihood on Platt's smoothed targets (which keep a
    rare class from driving the curve to 0 or 1), with a, b >= 0 so P(YES) rises with the score.
    """
    if len(scores) != len(labels):
        raise ValueError("scores and labels differ in length")
    if not scores:
        raise ValueError("fit_beta needs at least one score")
    x = np.clip(np.asarray(scores, dtype=np.float64), -40.0, 40.0)
    y = np.asarray(labels, dtype=bool)
    positives, negatives = int(y.sum()), int((~y).sum())
    target = np.where(y, (positives + 1.0) / (positives + 2.0), 1.0 / (negatives + 2.0))
    features = np.stack([_log_sigmoid(x), -_log_sigmoid(-x), np.ones_like(x)], axis=1)

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        z = np.clip(features @ params, -40.0, 40.0)
        p = 1.0 / (1.0 + np.exp(-z))
        value = float(np.sum(np.logaddexp(0.0, z) - target * z))
        return value, features.T @ (p - target)

    result = optimize.minimize(
        loss,
        np.array([1.0, 1.0, 0.0]),
        jac=True,
        method="L-BFGS-B",
        bounds=[(0.0, None), (0.0, None), (None, None)],
    )
    a, b, c = (float(v) for v in result.x)
    return BetaCalibration(a, b, c)


Calibrator = Callable[[float], float]  # a raw evidence score -> P(YES)


def calibrator_from_dict(fit: Mapping[str, Any]) -> Calibrator:
    """The calibration a stored fit describes: beta calibration when it has a, b and c, Platt
    scaling (slope, intercept) otherwise."""
    if fit.get("method") == "beta":
        return BetaCalibration(float(fit["a"]), float(fit["b"]), float(fit["c"]))
    return PlattScaling(float(fit["slope"]), float(fit["intercept"]))
