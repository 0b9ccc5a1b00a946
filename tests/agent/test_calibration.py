from __future__ import annotations

import math

import numpy as np
import pytest

from agent.calibration import (
    BetaCalibration,
    calibrated_ece_quantile,
    expected_calibration_error,
    f1_coverage_curve,
    fit_beta,
    majority_verdict,
    reliability_bins,
)


@pytest.mark.parametrize(
    ("predictions", "expected"),
    [
        (["YES", "YES", "NO"], ("YES", 2 / 3)),
        (["NO", None, "NO", "YES"], ("NO", 0.5)),
        (["YES", "NO"], (None, 0.5)),
        ([None, None], (None, 0.0)),
        ([], (None, 0.0)),
        (["YES"], ("YES", 1.0)),
    ],
)
def test_it_takes_the_majority_over_rollouts(predictions, expected):
    assert majority_verdict(predictions) == expected


def test_it_bins_confidences_by_hand():
    bins = reliability_bins([0.55, 0.65, 0.95, 1.0], [True, False, True, False], n_bins=5, low=0.5)
    counts = [b.count for b in bins]
    assert counts == [1, 1, 0, 0, 2]
    assert bins[4].accuracy == 0.5
    assert bins[4].mean_confidence == pytest.approx(0.975)
    assert bins[2].accuracy is None


def test_it_computes_the_expected_calibration_error():
    bins = reliability_bins([0.55, 0.65, 0.95, 1.0], [True, False, True, False], n_bins=5, low=0.5)
    # |1-.55|*1/4 + |0-.65|*1/4 + |.5-.975|*2/4
    assert expected_calibration_error(bins) == pytest.approx(0.45 / 4 + 0.65 / 4 + 0.475 / 2)


def test_it_refuses_a_confidence_outside_the_range():
    with pytest.raises(ValueError, match="outside"):
        reliability_bins([1.2], [True])


def test_it_draws_the_calibrated_ece_as_reliability_bins_computes_it():
    confidences = np.random.default_rng(3).uniform(0.5, 1.0, 80)
    confidences[:5] = [0.3, 0.6, 0.7, 0.9, 1.0]  # values on bin edges
    draws = 300
    found = calibrated_ece_quantile(confidences, draws=draws, quantile=0.9, seed=11)
    correct = np.random.default_rng(11).random((draws, confidences.size)) < confidences
    reference = [
        expected_calibration_error(reliability_bins(list(confidences), list(row), n_bins=10))
        for row in correct
    ]
    assert found == pytest.approx(float(np.quantile(reference, 0.9)), abs=1e-12)


def test_it_shows_the_calibrated_ece_shrinks_with_the_number_of_answers():
    rng = np.random.default_rng(5)
    few = calibrated_ece_quantile(rng.uniform(0.5, 1.0, 80))
    many = calibrated_ece_quantile(rng.uniform(0.5, 1.0, 8000), draws=200)
    assert few > 0.05 > 0.02 > many
    assert calibrated_ece_quantile([1.0] * 40) == 0.0  # certain answers cannot miss
    assert math.isnan(calibrated_ece_quantile([]))


def test_it_tells_real_miscalibration_from_sampling_noise():
    rng = np.random.default_rng(8)
    confidences = rng.uniform(0.5, 1.0, 200)
    overconfident = rng.random(200) < confidences - 0.25  # right a quarter less often than said
    observed = expected_calibration_error(
        reliability_bins(list(confidences), list(overconfident), n_bins=10)
    )
    assert observed > calibrated_ece_quantile(confidences)


def test_it_refuses_a_confidence_outside_0_1_for_the_calibrated_ece():
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        calibrated_ece_quantile([0.5, 1.5])


def test_it_traces_f1_against_coverage():
    labels = ["YES", "NO", "YES", "NO"]
    predictions = ["YES", "NO", "NO", "YES"]
    confidences = [0.9, 0.8, 0.6, 0.55]
    curve = f1_coverage_curve(labels, predictions, confidences)
    assert [p.n_automatic for p in curve] == [1, 2, 3, 4]
    assert curve[1].f1 == 1.0  # the two most confident are right
    assert curve[2].f1 == pytest.approx(2 / 3)  # tp 1, fn 1
    assert curve[3].f1 == pytest.approx(0.5)  # tp 1, fn 1, fp 1
    assert curve[3].coverage == 1.0 and curve[3].threshold == 0.55


def test_it_keeps_tied_confidences_together():
    curve = f1_coverage_curve(["YES", "NO", "YES"], ["YES", "NO", "YES"], [0.9, 0.7, 0.7])
    assert [p.n_automatic for p in curve] == [1, 3]


def test_it_reduces_beta_calibration_to_the_raw_logistic_at_a_equal_b_equal_one():
    identity = BetaCalibration(1.0, 1.0, 0.0)
    for score in (-5.0, -0.3, 0.0, 2.0, 7.5):
        assert identity(score) == pytest.approx(1.0 / (1.0 + math.exp(-score)), abs=1e-12)


def test_it_fits_beta_calibration_to_a_rare_class_with_skewed_tails():
    """Positives are rare (1 in 10) and their scores spread wider than the negatives': the fit
    is monotone, puts the mean probability near the base rate and beats the raw logistic on
    log-loss (the raw scores are far too sure on the NO side)."""
    rng = np.random.default_rng(7)
    negatives = rng.normal(-6.0, 1.0, 900)
    positives = rng.normal(1.0, 3.0, 100)
    scores = np.concatenate([negatives, positives])
    labels = np.concatenate([np.zeros(900, bool), np.ones(100, bool)])
    beta = fit_beta(list(scores), list(labels))
    assert beta.a >= 0.0 and beta.b >= 0.0
    probabilities = np.array([beta(s) for s in scores])
    assert np.all(np.diff(probabilities[np.argsort(scores)]) >= -1e-12)
    assert probabilities.mean() == pytest.approx(0.1, abs=0.02)
    raw = 1.0 / (1.0 + np.exp(-scores))

    def log_loss(p):
        p = np.clip(p, 1e-12, 1 - 1e-12)
        return -np.mean(np.where(labels, np.log(p), np.log(1 - p)))

    assert log_loss(probabilities) < log_loss(raw)


def test_it_refuses_a_beta_fit_without_scores_or_with_mismatched_labels():
    with pytest.raises(ValueError, match="at least one"):
        fit_beta([], [])
    with pytest.raises(ValueError, match="differ in length"):
        fit_beta([1.0], [True, False])
