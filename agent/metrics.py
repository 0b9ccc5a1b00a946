"""Evaluation metrics: classification (paper Table 1) and tool use (SPECTRA eqs. 12-15).

Conventions, chosen so the numbers match the paper's exact-match rule:
- A prediction is "YES", "NO" or None (no valid \\boxed{} answer). None is never correct; for the
  positive-class F1 it counts as "not YES" (a false negative on a positive, nothing on a negative).
- Ratios with an empty denominator are 0.0 (precision with no positive predictions, F1 with no
  positives at all), as scikit-learn does with zero_division=0.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Confusion:
    tp: int = 0
    fp: int = 0
    tn: int = 0
    fn: int = 0  # includes positives without a valid answer
    no_answer_pos: int = 0  # positives without a valid YES/NO (also counted in fn)
    no_answer_neg: int = 0  # negatives without a valid YES/NO (wrong, but not false positives)

    @property
    def n(self) -> int:
        return self.tp + self.fp + self.tn + self.fn + self.no_answer_neg

    @property
    def no_answer(self) -> int:
        return self.no_answer_pos + self.no_answer_neg

    def as_dict(self) -> dict[str, int]:
        return asdict(self)


def _ratio(numerator: float, denominator: float) -> float:
    return numerator / denominator if denominator else 0.0


def confusion(labels: Sequence[str], predictions: Sequence[str | None]) -> Confusion:
    """Count outcomes for ground-truth labels "YES"/"NO" and predictions "YES"/"NO"/None."""
    if len(labels) != len(predictions):
        raise ValueError(
            f"labels and predictions differ in length: {len(labels)} != {len(predictions)}"
        )
    tp = fp = tn = fn = no_answer_pos = no_answer_neg = 0
    for label, prediction in zip(labels, predictions, strict=True):
        if label not in ("YES", "NO"):
            raise ValueError(f"ground-truth label must be YES or NO, got {label!r}")
        answered = prediction in ("YES", "NO")
        if label == "YES":
            if prediction == "YES":
                tp += 1
            else:
                fn += 1
                no_answer_pos += 0 if answered else 1
        elif prediction == "YES":
            fp += 1
        elif prediction == "NO":
            tn += 1
        else:
            no_answer_neg += 1
    return Confusion(
        tp=tp, fp=fp, tn=tn, fn=fn, no_answer_pos=no_answer_pos, no_answer_neg=no_answer_neg
    )


@dataclass(frozen=True)
class ClassificationReport:
    n: int
    accuracy: float
    precision: float
    recall: float
    f1: float
    confusion: Confusion


def classification_report(
    labels: Sequence[str], predictions: Sequence[str | None]
) -> ClassificationReport:
    counts = confusion(labels, predictions)
    n = len(labels)
    correct = counts.tp + counts.tn
    return ClassificationReport(
        n=n,
        accuracy=_ratio(correct, n),
        precision=_ratio(counts.tp, counts.tp + counts.fp),
        recall=_ratio(counts.tp, counts.tp + counts.fn),
        f1=_ratio(2 * counts.tp, 2 * counts.tp + counts.fp + counts.fn),
        confusion=counts,
    )


def balanced_accuracy(labels: Sequence[str], predictions: Sequence[str | None]) -> float:
    """The mean of the true-positive and true-negative rates over the classes present (a part
    without positives is its accuracy on negatives); a prediction of None is wrong."""
    counts = confusion(labels, predictions)
    rates = [
        counts.tp / (counts.tp + counts.fn) if counts.tp + counts.fn else None,
        counts.tn / (counts.n - counts.tp - counts.fn)
        if counts.n - counts.tp - counts.fn
        else None,
    ]
    present = [rate for rate in rates if rate is not None]
    return sum(present) / len(present) if present else math.nan


def balanced_accuracy_interval(
    labels: Sequence[str],
    predictions: Sequence[str | None],
    groups: Sequence[str],
    *,
    level: float = 0.95,
    draws: int = 2000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Balanced accuracy with a percentile bootstrap interval that resamples whole groups.

    Spectra of one star are not independent answers (a misread star is usually misread in each
    of its spectra), so the groups (objects) are what is drawn with replacement. A draw that
    holds no positive is scored on the classes it has, as ``balanced_accuracy`` scores a part.
    Returns (the point estimate, the interval's low and high ends).
    """
    if not len(labels) == len(predictions) == len(groups):
        raise ValueError("labels, predictions and groups differ in length")
    if not 0.0 < level < 1.0 or draws < 1:
        raise ValueError(f"need 0 < level < 1 and draws >= 1; got {level}, {draws}")
    point = balanced_accuracy(labels, predictions)
    if not labels:
        return point, math.nan, math.nan
    names = sorted(set(groups))
    index = {name: position for position, name in enumerate(names)}
    where = np.array([index[group] for group in groups])
    positive = np.array([label == "YES" for label in labels])
    right = np.array([p == y for p, y in zip(predictions, labels, strict=True)])
    # per group: positives, positives right, negatives, negatives right
    per_group = np.stack(
        [
            np.bincount(where, weights=mask, minlength=len(names))
            for mask in (positive, positive & right, ~positive, ~positive & right)
        ]
    )
    picks = np.random.default_rng(seed).integers(0, len(names), size=(draws, len(names)))
    weights = np.zeros((draws, len(names)))
    np.add.at(weights, (np.arange(draws)[:, None], picks), 1.0)
    pos, pos_right, neg, neg_right = (weights @ per_group.T).T
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = np.stack([pos_right / pos, neg_right / neg])
    scores = np.nanmean(rates, axis=0)
    tail = (1.0 - level) / 2.0
    low, high = np.quantile(scores, [tail, 1.0 - tail])
    return point, float(low), float(high)


def macro_average(reports: Mapping[str, ClassificationReport]) -> dict[str, float]:
    """Unweighted means of accuracy and F1 across tasks (paper Table 1 "Avg")."""
    if not reports:
        return {"accuracy": 0.0, "f1": 0.0}
    values = list(reports.values())
    return {
        "accuracy": sum(r.accuracy for r in values) / len(values),
        "f1": sum(r.f1 for r in values) / len(values),
    }


# --- tool use (SPECTRA section 5.2) ---------------------------------------------------------


def tool_execution_reliability(outcomes: Sequence[bool]) -> float | None:
    """TER, eq. 13: the share of attempted tool calls that succeeded. None when none attempted."""
    if not outcomes:
        return None
    return sum(1 for ok in outcomes if ok) / len(outcomes)


def point_biserial(binary: Sequence[bool], values: Sequence[float]) -> float:
    """Pearson correlation of a 0/1 vector with another vector; 0.0 when either is constant."""
    if len(binary) != len(values):
        raise ValueError("point_biserial needs vectors of equal length")
    n = len(binary)
    if n < 2:
        return 0.0
    xs = [1.0 if b else 0.0 for b in binary]
    ys = [float(v) for v in values]
    mean_x = sum(xs) / n
    mean_y = sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    syy = sum((y - mean_y) ** 2 for y in ys)
    if sxx == 0 or syy == 0:
        return 0.0
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True))
    return sxy / math.sqrt(sxx * syy)


def task_tool_alignment(
    usage: Sequence[set[str]], success: Sequence[bool], kinds: Sequence[str]
) -> float:
    """TTAC, eq. 14: mean over tool kinds of r(used kind k in trajectory i, trajectory i correct)."""
    if not kinds:
        return 0.0
    successes = [1.0 if ok else 0.0 for ok in success]
    return sum(point_biserial([k in used for used in usage], successes) for k in kinds) / len(kinds)


def tool_selectivity(call_kinds: Sequence[str], kinds: Sequence[str]) -> float:
    """TSS, eq. 15: KL(P || U) of the empirical call distribution over `kinds` against uniform.

    With a single kind (one tool and no finer breakdown) it is 0 by definition.
    """
    if not call_kinds or len(kinds) < 2:
        return 0.0
    counts = Counter(call_kinds)
    unknown = set(counts) - set(kinds)
    if unknown:
        raise ValueError(f"calls of kinds not in the kind list: {sorted(unknown)}")
    total = len(call_kinds)
    uniform = 1.0 / len(kinds)
    return sum((c / total) * math.log((c / total) / uniform) for c in counts.values() if c > 0)


def tool_instrumental_utility(ter: float | None, ttac: float, tss: float) -> float:
    """TIU, eq. 12: TER x (1 + TTAC) / 2 x tanh(TSS). 0 when no tool call was attempted."""
    if ter is None:
        return 0.0
    return ter * (1.0 + ttac) / 2.0 * math.tanh(tss)
