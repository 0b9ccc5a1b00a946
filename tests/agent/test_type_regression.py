"""The spectral-type regression of rule-based/v7 (agent.type_regression): the type numbers it
learns, P(task) as the integral of its posterior, that it recovers held-out types better than a
constant, and a control that must fail (types shuffled among the training spectra). The
real-data tests skip where the real-data cache cannot be built."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from agent.library_match import C_KMS, Match, Prepared, grid, type_number
from agent.type_regression import (
    MIN_WINDOW_SHARE,
    TASK_RANGES,
    Hyper,
    TrainingSet,
    fit_tier,
    fold_of_object,
    observed_features,
    subset,
    task_probability,
    training_set,
    window,
)


@pytest.mark.parametrize(
    ("text", "number", "task"),
    [
        ("B9.5V", 19.0, "B"),  # B9.5 is a B star: below the 19.5 boundary
        ("A0Iae", 20.0, "A"),  # a supergiant keeps its letter
        ("A0", 20.0, "A"),
        ("07Ia", 7.0, "O"),  # MILES writes O7 Ia as '07Ia'
        ("B0.5II", 10.0, "B"),
        ("A9V", 29.0, "A"),
        ("F0V", 30.0, None),
        ("M2III", 62.0, None),
    ],
)
def test_it_maps_spectral_types_to_numbers_inside_their_tasks_ranges(
    text: str, number: float, task: str | None
) -> None:
    assert type_number(text) == number
    inside = [name for name, (low, high) in TASK_RANGES.items() if low <= number < high]
    assert inside == ([task] if task else [])


def test_it_has_no_type_number_for_white_dwarfs_and_carbon_stars() -> None:
    assert math.isnan(type_number("DA2")) and math.isnan(type_number("C5"))


@pytest.mark.parametrize(("t_hat", "sigma"), [(20.3, 0.8), (19.6, 2.0), (5.0, 3.0), (33.0, 4.0)])
def test_it_integrates_the_posterior_over_the_tasks_range(t_hat: float, sigma: float) -> None:
    for task, (low, high) in TASK_RANGES.items():
        expected = integrate.quad(
            lambda t: stats.norm.pdf(t, t_hat, sigma), max(low, t_hat - 12 * sigma), high
        )[0]
        assert task_probability(task, t_hat, sigma) == pytest.approx(expected, abs=1e-6)
    # the three ranges are adjacent: O, B and A together are P(t < 29.5)
    total = sum(task_probability(task, t_hat, sigma) for task in TASK_RANGES)
    assert total == pytest.approx(stats.norm.cdf(29.5, t_hat, sigma), abs=1e-9)


def test_it_gives_no_probability_without_a_type_or_a_range() -> None:
    assert math.isnan(task_probability("A", math.nan, 1.0))
    assert math.isnan(task_probability("MG", 62.0, 1.0))


def _synthetic(n: int, seed: int) -> TrainingSet:
    """Spectra whose lines follow the type as stars' do: a Balmer-like line deepest at t = 20
    and weakening both ways (not linear in t), a metal-like line growing with t."""
    rng = np.random.default_rng(seed)
    types = rng.uniform(0.0, 60.0, n).round()
    pixels = np.arange(200)
    balmer = np.exp(-0.5 * ((pixels - 60) / 4.0) ** 2)
    metal = np.exp(-0.5 * ((pixels - 140) / 3.0) ** 2)
    depth_balmer = 0.6 * np.exp(-0.5 * ((types - 20.0) / 10.0) ** 2)
    depth_metal = 0.5 / (1.0 + np.exp(-(types - 35.0) / 6.0))
    flux = 1.0 - depth_balmer[:, None] * balmer - depth_metal[:, None] * metal
    flux += rng.normal(0.0, 0.01, flux.shape)
    good = rng.uniform(size=flux.shape) > 0.05  # a few bad pixels everywhere
    return TrainingSet(4.0, flux, good, types, tuple(f"star{i}" for i in range(n)))


def _held_out_error(data: TrainingSet, test: TrainingSet, hyper: Hyper) -> tuple[float, float]:
    model = fit_tier(data, hyper, inner_folds=1)
    estimates = model.predict(model.coordinates(test.flux, test.good))
    constant = float(np.median(data.types))
    return float(np.mean(np.abs(estimates - test.types))), float(
        np.mean(np.abs(constant - test.types))
    )


def test_it_recovers_held_out_types_of_synthetic_spectra_far_better_than_a_constant() -> None:
    error, constant = _held_out_error(_synthetic(300, 1), _synthetic(100, 2), Hyper(8, 1.0, 0.03))
    assert error < 0.2 * constant


def test_it_learns_nothing_from_shuffled_types() -> None:
    data = _synthetic(300, 1)
    shuffled = TrainingSet(
        data.tier, data.flux, data.good, np.random.default_rng(3).permutation(data.types),
        data.objects,
    )  # fmt: skip
    test = _synthetic(100, 2)
    error, constant = _held_out_error(shuffled, test, Hyper(8, 1.0, 0.03))
    assert error > 0.9 * constant


def test_it_estimates_the_spread_from_cross_validated_residuals() -> None:
    model = fit_tier(_synthetic(300, 1), Hyper(8, 1.0, 0.03), inner_folds=5)
    # a synthetic type is recovered to about a subtype: its spread is small, never below the floor
    assert 0.7 <= model.spread(20.0) < 3.0


def test_it_reads_the_observed_spectrum_at_the_velocity_of_its_nearest_library_spectrum() -> None:
    tier = 4.0
    wave = grid(tier)
    flux = 1.0 - 0.5 * np.exp(-0.5 * ((wave - 4340.0) / 3.0) ** 2)
    prepared = Prepared(tier, flux, np.ones_like(flux), np.ones(flux.size, dtype=bool), 0.01)
    pixel_kms = C_KMS * math.log(float(wave[1] / wave[0]))
    match = Match(
        tier,
        np.array([2.0, 0.5]),  # the second is nearest: its shift is the one taken
        np.array([0.0, 3 * pixel_kms]),
        np.zeros(2),
        ("a", "b"),
        ("A0V", "A1V"),
        {},
        prepared=prepared,
    )
    features = observed_features(match)
    assert features is not None
    inside = np.flatnonzero(window(tier))
    np.testing.assert_array_equal(features.flux, flux[inside + 3])
    assert features.good.all()
    # a spectrum covering too little of the window is not typed
    half = prepared.good & (wave < 3800.0 + (1.0 - MIN_WINDOW_SHARE) * 0.5 * 1200.0)
    sparse = Prepared(tier, flux, np.ones_like(flux), half, 0.01)
    assert observed_features(Match(**{**match.__dict__, "prepared": sparse})) is None


# --- the development library (skipped without the real-data cache) -----------------------------


@pytest.fixture(scope="module")
def library_tier8() -> TrainingSet:
    from agent.library_match import default_matcher

    matcher = default_matcher()
    if matcher is None or 8.0 not in matcher.tiers:
        pytest.skip("the library could not be prepared from the real-data cache")
    return training_set(matcher.tiers[8.0])


def _cross_validated(data: TrainingSet) -> np.ndarray:
    folds = np.array([fold_of_object(o) for o in data.objects])
    estimates = np.full(data.types.size, np.nan)
    for k in range(5):
        test = folds == k
        model = fit_tier(subset(data, ~test), Hyper(16, 1.0, 0.03), inner_folds=1)
        estimates[test] = model.predict(model.coordinates(data.flux[test], data.good[test]))
    return estimates


def _a_balanced_accuracy(estimates: np.ndarray, types: np.ndarray) -> float:
    low, high = TASK_RANGES["A"]
    truth = (types >= low) & (types < high)
    answer = np.array([task_probability("A", t, 1.5) >= 0.5 for t in estimates])
    return 0.5 * (float(np.mean(answer[truth])) + float(np.mean(~answer[~truth])))


def test_it_recovers_types_of_held_out_library_objects_better_than_a_constant(
    library_tier8: TrainingSet,
) -> None:
    estimates = _cross_validated(library_tier8)
    error = np.abs(estimates - library_tier8.types)
    constant = np.abs(np.median(library_tier8.types) - library_tier8.types)
    assert np.median(error) < 0.25 * np.median(constant)
    assert _a_balanced_accuracy(estimates, library_tier8.types) > 0.85


def test_it_answers_a_at_chance_when_trained_on_shuffled_types(library_tier8: TrainingSet) -> None:
    data = library_tier8
    shuffled = TrainingSet(
        data.tier, data.flux, data.good, np.random.default_rng(7).permutation(data.types),
        data.objects,
    )  # fmt: skip
    estimates = _cross_validated(shuffled)
    assert abs(_a_balanced_accuracy(estimates, data.types) - 0.5) < 0.1


def test_it_combines_the_rules_with_the_type_posterior_where_the_fit_says_so() -> None:
    from agent.library_match import TaskEvidence
    from agent.policies.rule_based.library import combine, uses_type_regression

    fits = {"A": {"combiner": {"form": "type", "l2": 1.0, "weights": [1.0, 1.0, 0.0]}}}
    assert uses_type_regression(fits, "a") and not uses_type_regression(fits, "B")

    def answer(type_probability: float) -> float:
        evidence = TaskEvidence("A", 0.0, None, None, 1.0, type_probability=type_probability)
        return combine(
            "A", 0.5, (), evidence, library_present=True, fits=fits, rules_pull=1.0
        ).probability

    # logit P = logit P_rules + logit P_type: undecided rules follow the type posterior
    assert answer(0.9) == pytest.approx(0.9)
    assert answer(0.2) == pytest.approx(0.2)
    # nothing typed (the window not covered): v4's answer, the rules' probability here
    assert answer(math.nan) == pytest.approx(0.5)
