from __future__ import annotations

import numpy as np
import pytest

from agent.calibration import fit_platt
from agent.vetting_statistics import (
    GOLD_FLOOR,
    Stratum,
    _threshold,
    apply_fit,
    gold_rate,
    purity_threshold,
    raw_p_yes,
    recalibrate,
    stratified_ratio,
    wilson_interval,
)


def test_it_turns_a_no_confidence_into_p_yes():
    assert raw_p_yes("YES", 0.9) == 0.9
    assert raw_p_yes("NO", 0.9) == pytest.approx(0.1)
    assert raw_p_yes("", None) == 0.5


def test_it_keeps_the_raw_curve_with_few_labels_and_follows_many():
    """An overconfident model (says 0.9, right 60 % of the time): five labels move the curve
    part of the way (less far than without the prior), a hundred pull 0.9 down to about 0.6."""
    rng = np.random.default_rng(3)
    few_truth = [True, True, True, False, False]
    few = recalibrate([0.9] * 5, few_truth)
    unshrunk = recalibrate([0.9] * 5, few_truth, prior_strength=0.0)
    assert apply_fit(unshrunk, 0.9) < apply_fit(few, 0.9) < 0.9
    many_truth = list(rng.random(100) < 0.6)
    many = recalibrate([0.9] * 100, many_truth)
    assert apply_fit(many, 0.9) == pytest.approx(np.mean(many_truth), abs=0.05)


def test_it_fits_plain_platt_without_a_prior():
    free = fit_platt([2.0, 2.0, -2.0, -2.0], [True, False, False, False])
    pulled = fit_platt([2.0, 2.0, -2.0, -2.0], [True, False, False, False], prior_strength=50.0)
    assert abs(pulled.slope - 1.0) < abs(free.slope - 1.0)
    with pytest.raises(ValueError, match="prior_strength"):
        fit_platt([1.0], [True], prior_strength=-1.0)


def test_it_needs_two_labels():
    with pytest.raises(ValueError, match="at least 2"):
        recalibrate([0.9], [True])


def test_it_places_the_threshold_where_the_running_mean_meets_the_target():
    # Top-k means: 0.99, 0.98, 0.9633, 0.9, ...
    population = np.asarray([0.99, 0.97, 0.93, 0.71, 0.6])
    assert _threshold(population, 0.96) == pytest.approx(0.93)
    assert _threshold(population, 0.98) == pytest.approx(0.97)
    assert _threshold(population, 0.995) is None
    assert _threshold(np.asarray([]), 0.9) is None


def test_it_gives_the_threshold_an_interval_and_a_labelled_check():
    rng = np.random.default_rng(1)
    raw = list(rng.uniform(0.5, 1.0, 60))
    truth = [bool(rng.random() < p) for p in raw]
    estimate = purity_threshold(
        population_raw=raw, labelled_raw=raw, labelled_truth=truth, target=0.9, resamples=50
    )
    assert estimate.threshold is not None
    assert estimate.low is not None and estimate.low <= estimate.threshold
    assert estimate.high is None or estimate.high >= estimate.threshold
    assert 0 < estimate.labelled_above <= 60
    assert estimate.labelled_purity_low is not None and estimate.labelled_purity_low <= 1.0
    with pytest.raises(ValueError, match="target purity"):
        purity_threshold(population_raw=raw, labelled_raw=raw, labelled_truth=truth, target=1.0)


def _purity_threshold_one_by_one(
    population: list[float], labelled: list[float], truth: list[bool], target: float, seed: int
) -> tuple[float | None, float | None, float | None, int, int]:
    """The threshold as it was computed before issue 34: each P(YES) recalibrated and sorted
    again for every fit (minutes at 10^6 YES verdicts), the reference for the vectorized one."""
    fit = recalibrate(labelled, truth)
    threshold = _threshold(np.asarray([apply_fit(fit, p) for p in population]), target)
    rng = np.random.default_rng(seed)
    found, missing = [], 0
    for _ in range(40):
        pick = rng.integers(0, len(truth), len(truth))
        refit = recalibrate([labelled[i] for i in pick], [truth[i] for i in pick])
        value = _threshold(np.asarray([apply_fit(refit, p) for p in population]), target)
        if value is None:
            missing += 1
        else:
            found.append(value)
    low = float(np.quantile(found, 0.025)) if found else None
    high = None if missing > 0.025 * 40 or not found else float(np.quantile(found, 0.975))
    above = [
        i
        for i, p in enumerate(labelled)
        if threshold is not None and apply_fit(fit, p) >= threshold
    ]
    return threshold, low, high, len(above), sum(1 for i in above if truth[i])


@pytest.mark.parametrize("overconfident", [False, True])
def test_the_vectorized_threshold_equals_the_one_computed_one_by_one(overconfident):
    """Same threshold, interval and labelled check as recalibrating each P(YES) in Python, for a
    curve rising with the raw confidence and for labels that turn it round (a negative slope)."""
    rng = np.random.default_rng(7)
    # rounded as stored confidences are: many verdicts share the threshold's value
    population = list(np.round(rng.uniform(0.5, 1.0, 3000), 3))
    labelled = list(rng.uniform(0.5, 1.0, 300))
    truth = [bool(rng.random() < (1.5 - p if overconfident else p)) for p in labelled]
    target = 0.6 if overconfident else 0.85
    want = _purity_threshold_one_by_one(population, labelled, truth, target, seed=5)
    got = purity_threshold(
        population_raw=np.asarray(population),
        labelled_raw=labelled,
        labelled_truth=truth,
        target=target,
        resamples=40,
        seed=5,
    )
    assert (recalibrate(labelled, truth).slope < 0) is overconfident
    assert want[0] is not None and want[1] is not None
    # equal to the bit: triage compares each verdict's recalibrated P(YES) with the threshold
    assert (got.threshold, got.low, got.high) == want[:3]
    assert (got.labelled_above, got.labelled_yes_above) == want[3:]


def test_it_computes_a_wilson_interval():
    assert wilson_interval(0, 0) == (0.0, 1.0)
    low, high = wilson_interval(10, 10)
    assert low == pytest.approx(0.7225, abs=1e-3) and high == pytest.approx(1.0)


def test_it_estimates_purity_and_completeness_from_strata_by_hand():
    strata = [
        Stratum("yes-auto-high", population=100, labelled=10, yes=10),
        Stratum("yes-auto-mid", population=10, labelled=5, yes=4),
        Stratum("no-auto", population=1000, labelled=10, yes=1),
    ]
    accepted = {"yes-auto-high", "yes-auto-mid"}
    purity = stratified_ratio(
        strata,
        numerator=lambda s: s.key in accepted,
        denominator=lambda s: s.key in accepted,
        weight_by_yes=False,
    )
    completeness = stratified_ratio(
        strata,
        numerator=lambda s: s.key in accepted,
        denominator=lambda s: True,
        weight_by_yes=True,
    )
    assert purity.value == pytest.approx((100 + 8) / 110)
    assert completeness.value == pytest.approx(108 / (100 + 8 + 100))
    for estimate in (purity, completeness):
        assert estimate.low is not None and estimate.high is not None
        assert estimate.low < estimate.value < estimate.high


def test_it_gives_no_point_estimate_while_a_stratum_has_no_label():
    strata = [Stratum("a", 50, 0, 0), Stratum("b", 50, 5, 5)]
    estimate = stratified_ratio(
        strata, numerator=lambda s: True, denominator=lambda s: True, weight_by_yes=False
    )
    assert estimate.value is None and estimate.unlabelled_strata == ("a",)
    assert estimate.high - estimate.low > 0.3  # the unlabelled half spreads over [0, 1]


def test_it_lowers_the_gold_rate_as_the_record_grows():
    assert gold_rate(0) == pytest.approx(0.20)
    assert gold_rate(25) == pytest.approx(0.10)
    assert gold_rate(10_000) == GOLD_FLOOR
    rates = [gold_rate(n) for n in range(200)]
    assert rates == sorted(rates, reverse=True)
