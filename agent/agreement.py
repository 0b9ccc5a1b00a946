"""Agreement between raters of reasoning trajectories (paper section 4.5 and appendix G).

Experts score each trajectory on the 0-5 rubric of Table 7, LLM judges score the same
trajectories, and experts compare two models pairwise (win/tie/loss). This module holds the
statistics the app shows: Spearman correlations (heatmap), Krippendorff's alpha and Cohen's kappa
(reliability), score histograms and CDFs (distributions), the items raters disagree on most, and
win/tie/loss shares with Bradley-Terry strengths (pairwise preference).

Conventions:
- A missing rating is None or NaN. Statistics over two series use the items both have
  (pairwise-complete); Krippendorff's alpha uses every unit with at least two ratings, as its
  definition does.
- A statistic that is undefined for its input (too few values, no variation at all) is None,
  never a number that merely looks meaningful.
- Ratings must be one of ``categories`` (default the rubric scores 0..5); anything else raises a
  ``ValueError`` that names the position and the value.
- Bradley-Terry strengths are normalized to geometric mean 1 (equivalently, log-strengths sum to
  0), so ``strength[a] / strength[b]`` is the odds that ``a`` is preferred to ``b``.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal, NamedTuple, TypeVar, cast

import krippendorff
import numpy as np
from scipy import stats

RUBRIC: dict[int, str] = {  # paper Table 7, verbatim
    0: "Complete hallucination. The explanation is entirely incorrect or physically implausible.",
    1: "Mostly wrong. The majority of the explanation is incorrect or misleading.",
    2: "More wrong than correct. Some valid elements exist, but errors dominate the reasoning.",
    3: "Mostly correct. The main reasoning is sound but contains noticeable errors.",
    4: "Nearly correct. The explanation is largely accurate with only minor issues.",
    5: "Fully correct. A coherent, accurate, and physically consistent description.",
}
SCORES: tuple[int, ...] = tuple(RUBRIC)
Level = Literal["nominal", "ordinal", "interval", "ratio"]
LEVELS: tuple[Level, ...] = ("nominal", "ordinal", "interval", "ratio")
KAPPA_WEIGHTS = (None, "linear", "quadratic")
OUTCOMES = ("A", "tie", "B")  # pairwise outcome relative to model A
TIE = "tie"

Rating = float | int | None
Comparison = tuple[str, str] | tuple[str, str, str]  # (winner, loser) or (a, b, "tie")
Item = TypeVar("Item", bound=Hashable)  # an item key (str blind id, int pk, ...)


class RaterPairKappa(NamedTuple):
    rater_a: str
    rater_b: str
    n_common: int  # items both raters scored
    kappa: float | None


class ItemDisagreement(NamedTuple):
    item: Hashable
    spread: float  # max - min of the item's ratings
    std: float  # population standard deviation (ddof=0) of the item's ratings


class StrengthInterval(NamedTuple):
    estimate: float
    lo: float
    hi: float


@dataclass(frozen=True)
class PreferenceShares:
    """Win/tie/loss counts of model A against model B on one data set."""

    wins: int
    ties: int
    losses: int

    @property
    def n(self) -> int:
        return self.wins + self.ties + self.losses

    @property
    def win(self) -> float:
        return self.wins / self.n

    @property
    def tie(self) -> float:
        return self.ties / self.n

    @property
    def loss(self) -> float:
        return self.losses / self.n

    def as_dict(self) -> dict[str, float]:
        return {
            "n": self.n,
            "wins": self.wins,
            "ties": self.ties,
            "losses": self.losses,
            "win": self.win,
            "tie": self.tie,
            "loss": self.loss,
        }


@dataclass(frozen=True)
class RatingMatrix:
    """Ratings as a units x raters matrix (None where a rater did not rate an item)."""

    items: Sequence[Hashable]
    raters: list[str]
    rows: list[list[Rating]]


# --- values ------------------------------------------------------------------------------------


def is_missing(value: Any) -> bool:
    """True for None and NaN, the two spellings of "not rated"."""
    return value is None or (isinstance(value, numbers.Real) and math.isnan(value))


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{where} must be a number; got {value!r}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{where} must be finite; got {value!r}")
    return number


def _category_index(categories: Sequence[Any]) -> dict[Any, int]:
    """Position of each category; the sequence order is the ordinal order."""
    if isinstance(categories, str | bytes) or not isinstance(categories, Sequence):
        raise ValueError(f"categories must be a sequence; got {categories!r}")
    index: dict[Any, int] = {}
    for position, category in enumerate(categories):
        if isinstance(category, bool) or is_missing(category):
            raise ValueError(f"categories[{position}] = {category!r} cannot be a category")
        if category in index:
            raise ValueError(f"categories repeats {category!r}")
        index[category] = position
    if not index:
        raise ValueError("categories is empty")
    return index


def _position(value: Any, index: Mapping[Any, int], where: str) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{where} = {value!r} is a bool, not a rating")
    try:
        return index[value]
    except (KeyError, TypeError):
        shown = ", ".join(map(repr, index))
        raise ValueError(f"{where} = {value!r} is not one of the categories {shown}") from None


def _ratings_of(ratings: Sequence[Rating] | Mapping[Any, Rating], where: str) -> list[float]:
    """The present ratings of one item (list or rater -> rating mapping); None/NaN left out."""
    values = ratings.values() if isinstance(ratings, Mapping) else ratings
    if isinstance(values, str | bytes):
        raise ValueError(f"{where} must be a list of ratings; got {values!r}")
    return [
        _number(value, f"{where}[{position}]")
        for position, value in enumerate(values)
        if not is_missing(value)
    ]


def _check_same_length(x: Sequence[Any], y: Sequence[Any], what: str) -> None:
    if len(x) != len(y):
        raise ValueError(f"{what} needs two series of equal length; got {len(x)} and {len(y)}")


# --- correlation -------------------------------------------------------------------------------


def spearman(x: Sequence[Rating], y: Sequence[Rating]) -> float | None:
    """Spearman's rho with average ranks for ties, over the pairs where both values are present.

    None with fewer than 2 complete pairs or when either side is constant over those pairs.
    """
    _check_same_length(x, y, "spearman")
    pairs = [
        (_number(a, f"x[{i}]"), _number(b, f"y[{i}]"))
        for i, (a, b) in enumerate(zip(x, y, strict=True))
        if not is_missing(a) and not is_missing(b)
    ]
    xs, ys = zip(*pairs, strict=True) if pairs else ((), ())
    if len(set(xs)) < 2 or len(set(ys)) < 2:  # scipy would warn and return NaN
        return None
    return float(stats.spearmanr(xs, ys).statistic)


def spearman_matrix(
    series: Mapping[str, Sequence[Rating]],
) -> tuple[list[str], list[list[float | None]]]:
    """Names and the symmetric matrix of pairwise-complete Spearman correlations (heatmap).

    Every series lists the same items in the same order (e.g. "Human" = mean expert score per
    item, then one series per judge). The diagonal is 1.0, or None for a constant series.
    """
    names = list(series)
    lengths = {name: len(values) for name, values in series.items()}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"spearman_matrix needs series of equal length; got {lengths}")
    matrix: list[list[float | None]] = [[None] * len(names) for _ in names]
    for i, j in combinations(range(len(names)), 2):
        matrix[i][j] = matrix[j][i] = spearman(series[names[i]], series[names[j]])
    for i, name in enumerate(names):
        matrix[i][i] = spearman(series[name], series[name])
    return names, matrix


# --- reliability -------------------------------------------------------------------------------


def rating_matrix(ratings_by_rater: Mapping[str, Mapping[Item, Rating]]) -> RatingMatrix:
    """The units x raters matrix of rater -> {item: rating}, items in order of first appearance."""
    raters = list(ratings_by_rater)
    items = list(dict.fromkeys(item for rater in raters for item in ratings_by_rater[rater]))
    rows = [[ratings_by_rater[rater].get(item) for rater in raters] for item in items]
    return RatingMatrix(items=items, raters=raters, rows=rows)


def krippendorff_alpha(
    ratings: Sequence[Sequence[Rating]],
    level: str = "ordinal",
    categories: Sequence[Any] = SCORES,
) -> float | None:
    """Krippendorff's alpha over a units x raters matrix (None/NaN = not rated).

    The `krippendorff` package computes it from the coincidence matrix as in Krippendorff
    (2011), "Computing Krippendorff's Alpha-Reliability"; this function checks the input. Units
    with fewer than two ratings cannot be paired and do not count. ``level`` picks the
    difference function d: nominal, ordinal (ranks through the marginals n_g, so unused
    categories and their spacing do not matter), interval ((c - k)^2) or ratio. None when no
    unit has two ratings, or when every pairable rating is the same value (no variation).
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {', '.join(LEVELS)}; got {level!r}")
    index = _category_index(categories)
    counts = _value_counts(ratings, index)
    if len(index) < 2 or not (counts.sum(axis=1) >= 2).any():
        return None
    domain: list[float] | np.ndarray = np.arange(len(index))
    if level in ("interval", "ratio"):
        domain = [_number(category, f"{level} category") for category in index]
        if level == "ratio" and min(domain) < 0:
            raise ValueError(f"ratio level needs categories >= 0; got {min(domain)}")
    with np.errstate(invalid="ignore"):  # 0/0 when every pairable rating is the same value
        alpha = krippendorff.alpha(
            # level is one of LEVELS (checked above), which the str parameter cannot say.
            value_counts=counts,
            value_domain=domain,
            level_of_measurement=cast(Level, level),
        )
    return None if math.isnan(alpha) else float(alpha)


def _value_counts(ratings: Sequence[Sequence[Rating]], index: Mapping[Any, int]) -> np.ndarray:
    """How many raters gave each unit each category: shape (units, categories)."""
    if isinstance(ratings, str | bytes) or not isinstance(ratings, Sequence):
        raise ValueError(f"ratings must be a units x raters matrix; got {type(ratings).__name__}")
    counts = np.zeros((len(ratings), len(index)), dtype=np.int64)
    n_raters: int | None = None
    for unit, row in enumerate(ratings):
        if isinstance(row, str | bytes) or not isinstance(row, Sequence):
            raise ValueError(f"ratings[{unit}] must be a row of ratings; got {row!r}")
        if n_raters is not None and len(row) != n_raters:
            raise ValueError(
                f"ratings[{unit}] has {len(row)} raters but the rows before have {n_raters}"
            )
        n_raters = len(row)
        for rater, value in enumerate(row):
            if not is_missing(value):
                counts[unit, _position(value, index, f"ratings[{unit}][{rater}]")] += 1
    return counts


def cohen_kappa(
    a: Sequence[Rating],
    b: Sequence[Rating],
    *,
    weights: str | None = None,
    categories: Sequence[Any] = SCORES,
) -> float | None:
    """Cohen's kappa of two raters over the items both rated (weighted when asked).

    kappa = 1 - sum(w * observed) / sum(w * expected), with w_ij = [i != j] (unweighted),
    |i - j| / (K - 1) (linear) or ((i - j) / (K - 1))^2 (quadratic) on category positions.
    None when no item was rated by both, or when chance disagreement is 0 (both raters used a
    single, identical category).
    """
    _check_same_length(a, b, "cohen_kappa")
    if weights not in KAPPA_WEIGHTS:
        raise ValueError(f"weights must be None, 'linear' or 'quadratic'; got {weights!r}")
    index = _category_index(categories)
    pairs = [
        (_position(x, index, f"a[{i}]"), _position(y, index, f"b[{i}]"))
        for i, (x, y) in enumerate(zip(a, b, strict=True))
        if not is_missing(x) and not is_missing(y)
    ]
    if len({position for pair in pairs for position in pair}) < 2:  # chance disagreement 0
        return None
    # Imported here: scikit-learn costs about 0.5 s to import, and the site imports this module
    # at start-up for pages that never compute a kappa.
    from sklearn.metrics import cohen_kappa_score

    first, second = zip(*pairs, strict=True)
    # sklearn's linear weight is |i - j|, not |i - j| / (K - 1): kappa is the same.
    return float(cohen_kappa_score(first, second, labels=list(range(len(index))), weights=weights))


def pairwise_kappas(
    ratings_by_rater: Mapping[str, Mapping[Item, Rating]],
    *,
    weights: str | None = "quadratic",
    categories: Sequence[Any] = SCORES,
) -> list[RaterPairKappa]:
    """Cohen's kappa for every pair of raters over the items both rated.

    Quadratic weights by default because the rubric is ordinal: a 4 against a 5 is a smaller
    disagreement than a 0 against a 5. Pairs come in the order of the raters in the mapping.
    """
    results = []
    for rater_a, rater_b in combinations(ratings_by_rater, 2):
        first, second = ratings_by_rater[rater_a], ratings_by_rater[rater_b]
        common = [
            item
            for item in first
            if item in second and not is_missing(first[item]) and not is_missing(second[item])
        ]
        kappa = cohen_kappa(
            [first[item] for item in common],
            [second[item] for item in common],
            weights=weights,
            categories=categories,
        )
        results.append(RaterPairKappa(rater_a, rater_b, len(common), kappa))
    return results


# --- distributions -----------------------------------------------------------------------------


def score_histogram(scores: Sequence[Rating], *, categories: Sequence[Any] = SCORES) -> list[int]:
    """How many scores fall in each category (0..5 by default).

    A missing score raises: leave unscored items out and report them separately, so the
    histogram never hides them.
    """
    index = _category_index(categories)
    counts = [0] * len(index)
    for position, score in enumerate(scores):
        if is_missing(score):
            raise ValueError(
                f"scores[{position}] is missing; leave unscored items out and count them apart"
            )
        counts[_position(score, index, f"scores[{position}]")] += 1
    return counts


def score_cdf(scores: Sequence[Rating], *, categories: Sequence[Any] = SCORES) -> list[float]:
    """P(score <= category) for each category, from the empirical distribution."""
    counts = score_histogram(scores, categories=categories)
    total = sum(counts)
    if total == 0:
        raise ValueError("score_cdf needs at least one score; got none")
    running, cdf = 0, []
    for count in counts:
        running += count
        cdf.append(running / total)
    return cdf


def mean_scores(
    ratings_by_item: Mapping[Item, Sequence[Rating] | Mapping[Any, Rating]],
) -> dict[Item, float]:
    """The mean rating of each item (e.g. the human mean), over the ratings present."""
    means: dict[Item, float] = {}
    for item, ratings in ratings_by_item.items():
        values = _present_ratings(item, ratings)
        means[item] = math.fsum(values) / len(values)
    return means


def disagreement(
    ratings_by_item: Mapping[Item, Sequence[Rating] | Mapping[Any, Rating]],
) -> list[ItemDisagreement]:
    """Items by how much their raters disagree: largest spread first, then largest std.

    Items with equal spread and std keep their input order.
    """
    rows = []
    for item, ratings in ratings_by_item.items():
        values = _present_ratings(item, ratings)
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
        rows.append(ItemDisagreement(item, max(values) - min(values), std))
    return sorted(rows, key=lambda row: (-row.spread, -row.std))


def _present_ratings(
    item: Hashable, ratings: Sequence[Rating] | Mapping[Any, Rating]
) -> list[float]:
    values = _ratings_of(ratings, f"ratings of item {item!r}")
    if not values:
        raise ValueError(f"item {item!r} has no ratings; leave it out or rate it first")
    return values


# --- pairwise preference -----------------------------------------------------------------------


def win_tie_loss(outcomes: Mapping[str, Sequence[str]]) -> dict[str, PreferenceShares]:
    """Win/tie/loss counts and shares of model A per data set.

    ``outcomes`` maps a data set name to its comparisons, each "A" (A preferred), "tie" or "B".
    """
    shares = {}
    for dataset, labels in outcomes.items():
        if isinstance(labels, str) or not labels:
            raise ValueError(f"data set {dataset!r} needs a non-empty list of outcomes")
        normalized = [
            _outcome(label, f"outcomes[{dataset!r}][{i}]") for i, label in enumerate(labels)
        ]
        shares[dataset] = PreferenceShares(
            wins=normalized.count("A"), ties=normalized.count(TIE), losses=normalized.count("B")
        )
    return shares


def _outcome(label: Any, where: str) -> str:
    if isinstance(label, str):
        cleaned = label.strip()
        if cleaned.upper() in ("A", "B"):
            return cleaned.upper()
        if cleaned.lower() == TIE:
            return TIE
    raise ValueError(f"{where} = {label!r} is not one of 'A', 'tie', 'B'")


def comparisons_from_outcomes(
    model_a: str, model_b: str, outcomes: Sequence[str]
) -> list[Comparison]:
    """Turn "A"/"tie"/"B" outcomes into Bradley-Terry comparisons between two named models."""
    if model_a == model_b:
        raise ValueError(f"model_a and model_b must differ; both are {model_a!r}")
    as_comparison: dict[str, Comparison] = {
        "A": (model_a, model_b),
        "B": (model_b, model_a),
        TIE: (model_a, model_b, TIE),
    }
    return [as_comparison[_outcome(label, f"outcomes[{i}]")] for i, label in enumerate(outcomes)]


def bradley_terry(
    comparisons: Sequence[Comparison],
    *,
    prior: float = 0.0,
    iterations: int = 10_000,
    tol: float = 1e-12,
) -> dict[str, float]:
    """Bradley-Terry strengths by the MM algorithm of Hunter (2004), geometric mean 1.

    Each comparison is ``(winner, loser)`` or ``(a, b, "tie")``; a tie counts as half a win for
    each side. ``prior`` adds that many virtual ties between every pair of models, which shrinks
    strengths toward 1 and makes them finite when some model never wins. With ``prior == 0`` the
    maximum-likelihood strengths exist only when every split of the models into two groups has a
    model in each group beating (or tying) one in the other; otherwise this raises ValueError.
    """
    _check_fit_settings(prior, iterations, tol)
    models, contributions = _encode(comparisons)
    wins = contributions.sum(axis=0)[None]
    strengths = _fit_strengths(wins, models, prior, iterations, tol, what="the comparisons")
    return {model: float(s) for model, s in zip(models, strengths[0], strict=True)}


def bradley_terry_bootstrap(
    comparisons: Sequence[Comparison],
    *,
    n_boot: int = 1000,
    seed: int,
    ci: float = 0.95,
    prior: float = 0.0,
    iterations: int = 10_000,
    tol: float = 1e-12,
) -> dict[str, StrengthInterval]:
    """Strength of each model with a percentile bootstrap interval.

    The estimate is ``bradley_terry(comparisons, prior=prior)``; the interval holds the central
    ``ci`` share of the strengths refitted on ``n_boot`` resamples of the comparisons drawn with
    replacement (same size, numpy ``default_rng(seed)``, so the result is reproducible). With few
    comparisons a resample often has a model that never wins; with ``prior == 0`` that raises
    ValueError, so pass a small prior (e.g. 0.5) for small samples.
    """
    _check_fit_settings(prior, iterations, tol)
    if isinstance(n_boot, bool) or not isinstance(n_boot, int) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive int; got {n_boot!r}")
    if not 0.0 < ci < 1.0:
        raise ValueError(f"ci must be between 0 and 1; got {ci!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an int; got {seed!r}")
    models, contributions = _encode(comparisons)
    estimate = _fit_strengths(
        contributions.sum(axis=0)[None], models, prior, iterations, tol, what="the comparisons"
    )[0]
    n = len(contributions)
    counts = np.random.default_rng(seed).multinomial(n, np.full(n, 1.0 / n), size=n_boot)
    resampled = np.einsum("bn,nij->bij", counts.astype(float), contributions)
    strengths = _fit_strengths(resampled, models, prior, iterations, tol, what="bootstrap resample")
    low, high = np.quantile(strengths, [(1.0 - ci) / 2.0, (1.0 + ci) / 2.0], axis=0)
    return {
        model: StrengthInterval(float(estimate[i]), float(low[i]), float(high[i]))
        for i, model in enumerate(models)
    }


def _check_fit_settings(prior: float, iterations: int, tol: float) -> None:
    if _number(prior, "prior") < 0:
        raise ValueError(f"prior must be >= 0; got {prior!r}")
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise ValueError(f"iterations must be a positive int; got {iterations!r}")
    if not _number(tol, "tol") > 0:
        raise ValueError(f"tol must be > 0; got {tol!r}")


def _encode(comparisons: Sequence[Comparison]) -> tuple[list[str], np.ndarray]:
    """Models in order of first appearance, and the wins each comparison adds: shape (n, k, k)."""
    if isinstance(comparisons, str) or not comparisons:
        raise ValueError("bradley_terry needs a non-empty list of comparisons")
    parsed = [_comparison(item, i) for i, item in enumerate(comparisons)]
    models = list(dict.fromkeys(model for first, second, _ in parsed for model in (first, second)))
    position = {model: i for i, model in enumerate(models)}
    contributions = np.zeros((len(parsed), len(models), len(models)))
    for row, (first, second, tied) in enumerate(parsed):
        i, j = position[first], position[second]
        if tied:
            contributions[row, i, j] = contributions[row, j, i] = 0.5
        else:
            contributions[row, i, j] = 1.0
    return models, contributions


def _comparison(item: Any, index: int) -> tuple[str, str, bool]:
    where = f"comparisons[{index}]"
    if isinstance(item, str) or not isinstance(item, Sequence) or len(item) not in (2, 3):
        raise ValueError(f"{where} must be (winner, loser) or (a, b, 'tie'); got {item!r}")
    if len(item) == 3 and item[2] != TIE:
        raise ValueError(f"{where} has third element {item[2]!r}; only 'tie' is allowed there")
    first, second = item[0], item[1]
    if not isinstance(first, str) or not isinstance(second, str) or not first or not second:
        raise ValueError(f"{where} must name two models as non-empty strings; got {item!r}")
    if first == second:
        raise ValueError(f"{where} compares {first!r} with itself")
    return first, second, len(item) == 3


def _fit_strengths(
    wins: np.ndarray, models: list[str], prior: float, iterations: int, tol: float, *, what: str
) -> np.ndarray:
    """MM iterations on a batch of win matrices (b, k, k); returns strengths (b, k)."""
    size = len(models)
    off_diagonal = 1.0 - np.eye(size)
    wins = wins + off_diagonal * (prior / 2.0)
    if prior == 0:
        _check_estimable(wins, models, what)
    total_wins = wins.sum(axis=2)
    games = wins + wins.transpose(0, 2, 1)
    strengths = np.ones(wins.shape[:2])
    for _ in range(iterations):
        denominator = (games / (strengths[:, :, None] + strengths[:, None, :])).sum(axis=2)
        updated = total_wins / denominator
        updated /= np.exp(np.log(updated).mean(axis=1, keepdims=True))
        change = np.max(np.abs(np.log(updated) - np.log(strengths)))
        strengths = updated
        if change < tol:
            return strengths
    raise RuntimeError(
        f"Bradley-Terry MM did not converge within {iterations} iterations (tol {tol}); "
        "raise iterations or pass a small prior"
    )


def _check_estimable(wins: np.ndarray, models: list[str], what: str) -> None:
    """Raise unless, in every win matrix, each model reaches every other through wins/ties."""
    size = len(models)
    reach = (wins > 0) | np.eye(size, dtype=bool)
    for _ in range(max(1, math.ceil(math.log2(size)))):
        reach = (reach.astype(np.int64) @ reach.astype(np.int64)) > 0
    broken = np.flatnonzero(~reach.all(axis=(1, 2)))
    if broken.size == 0:
        return
    batch = int(broken[0])
    start = int(np.flatnonzero(~reach[batch].all(axis=1))[0])
    group = [models[j] for j in np.flatnonzero(reach[batch, start])]
    where = what if wins.shape[0] == 1 else f"{what} {batch + 1} of {wins.shape[0]}"
    raise ValueError(
        f"in {where}, no model in {group} beats or ties a model outside that group, so "
        "maximum-likelihood strengths do not exist; pass prior > 0 (virtual ties per pair)"
    )
