from __future__ import annotations

import math

import pytest

from agent import metrics


def test_it_counts_the_confusion_matrix():
    labels = ["YES", "YES", "NO", "NO", "NO"]
    predictions = ["YES", "NO", "YES", "NO", "NO"]
    counts = metrics.confusion(labels, predictions)
    assert (counts.tp, counts.fn, counts.fp, counts.tn) == (1, 1, 1, 2)


def test_it_counts_a_missing_answer_on_a_positive_as_a_false_negative():
    counts = metrics.confusion(["YES"], [None])
    assert (counts.fn, counts.no_answer_pos) == (1, 1)


def test_it_counts_a_missing_answer_on_a_negative_as_wrong_but_not_a_false_positive():
    report = metrics.classification_report(["NO", "NO"], [None, "NO"])
    assert report.confusion.fp == 0
    assert report.confusion.no_answer_neg == 1
    assert report.accuracy == 0.5
    assert report.confusion.n == 2


def test_it_computes_accuracy_and_f1_by_hand():
    # tp=2, fn=1, fp=1, tn=6: acc 8/10, precision 2/3, recall 2/3, F1 = 4/6.
    labels = ["YES"] * 3 + ["NO"] * 7
    predictions = ["YES", "YES", "NO", "YES"] + ["NO"] * 6
    report = metrics.classification_report(labels, predictions)
    assert report.accuracy == pytest.approx(0.8)
    assert report.precision == pytest.approx(2 / 3)
    assert report.recall == pytest.approx(2 / 3)
    assert report.f1 == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))


def test_it_gives_zero_f1_when_no_positive_is_predicted():
    report = metrics.classification_report(["YES", "NO", "NO"], ["NO", "NO", "NO"])
    assert report.f1 == 0.0
    assert report.precision == 0.0
    assert report.accuracy == pytest.approx(2 / 3)


def test_it_macro_averages_over_tasks():
    a = metrics.classification_report(["YES", "NO"], ["YES", "NO"])  # acc 1, f1 1
    b = metrics.classification_report(["YES", "NO"], ["NO", "NO"])  # acc .5, f1 0
    assert metrics.macro_average({"CV": a, "WD": b}) == {"accuracy": 0.75, "f1": 0.5}


def test_it_refuses_labels_that_are_not_yes_or_no():
    with pytest.raises(ValueError, match="MAYBE"):
        metrics.confusion(["MAYBE"], ["YES"])


def test_it_refuses_vectors_of_different_length():
    with pytest.raises(ValueError, match="length"):
        metrics.confusion(["YES", "NO"], ["YES"])


def test_it_computes_ter_as_the_success_share():
    assert metrics.tool_execution_reliability([True, True, False, True]) == 0.75
    assert metrics.tool_execution_reliability([]) is None


def test_it_matches_a_hand_computed_point_biserial():
    # x = [1,1,0,0], y = [1,0,0,0]: means .5/.25, sxy = .5, sxx = 1, syy = .75 -> r = .5/sqrt(.75)
    r = metrics.point_biserial([True, True, False, False], [1, 0, 0, 0])
    assert r == pytest.approx(0.5 / math.sqrt(0.75))


def test_it_returns_zero_correlation_for_a_constant_vector():
    assert metrics.point_biserial([True, True, True], [1, 0, 1]) == 0.0


def test_it_averages_ttac_over_kinds():
    usage = [{"Ha"}, {"Ha", "He"}, set(), {"He"}]
    success = [True, True, False, False]
    expected = (
        metrics.point_biserial([True, True, False, False], [1, 1, 0, 0])
        + metrics.point_biserial([False, True, False, True], [1, 1, 0, 0])
    ) / 2
    assert metrics.task_tool_alignment(usage, success, ["Ha", "He"]) == pytest.approx(expected)
    assert expected == pytest.approx(0.5)


def test_it_gives_zero_selectivity_for_a_single_tool():
    assert metrics.tool_selectivity(["tool"] * 5, ["tool"]) == 0.0


def test_it_computes_selectivity_as_kl_from_uniform():
    # P = (3/4, 1/4, 0) against U = 1/3 each.
    tss = metrics.tool_selectivity(["a", "a", "a", "b"], ["a", "b", "c"])
    expected = 0.75 * math.log(0.75 * 3) + 0.25 * math.log(0.25 * 3)
    assert tss == pytest.approx(expected)


def test_it_combines_tiu_as_in_eq_12():
    assert metrics.tool_instrumental_utility(0.9, 0.2, 1.0) == pytest.approx(
        0.9 * 0.6 * math.tanh(1.0)
    )
    assert metrics.tool_instrumental_utility(None, 0.5, 2.0) == 0.0


def test_it_agrees_with_scipy_pearson_on_binary_vectors():
    from scipy.stats import pearsonr

    x = [True, False, True, True, False, False, True]
    y = [1, 0, 0, 1, 1, 0, 1]
    assert metrics.point_biserial(x, y) == pytest.approx(pearsonr([int(v) for v in x], y)[0])


def _random_part(seed: int, n: int = 120) -> tuple[list[str], list[str | None], list[str]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    labels = ["YES" if value < 0.3 else "NO" for value in rng.random(n)]
    predictions: list[str | None] = [
        None if roll < 0.03 else (label if roll < 0.85 else ("NO" if label == "YES" else "YES"))
        for label, roll in zip(labels, rng.random(n), strict=True)
    ]
    groups = [f"star {value}" for value in rng.integers(0, 40, n)]
    return labels, predictions, groups


def test_it_scores_balanced_accuracy_as_the_real_benchmark_does():
    from agent.real_evaluation import part_report

    for seed in range(5):
        labels, predictions, _ = _random_part(seed)
        reference = part_report(labels, predictions, [None] * len(labels)).balanced_accuracy
        assert metrics.balanced_accuracy(labels, predictions) == pytest.approx(reference)
    assert metrics.balanced_accuracy(["NO", "NO"], ["NO", "YES"]) == 0.5  # no positives


def test_it_resamples_whole_groups_for_the_balanced_accuracy_interval():
    import numpy as np

    labels, predictions, groups = _random_part(7)
    draws = 300
    point, low, high = metrics.balanced_accuracy_interval(
        labels, predictions, groups, draws=draws, seed=3
    )
    names = sorted(set(groups))
    picks = np.random.default_rng(3).integers(0, len(names), size=(draws, len(names)))
    members = {name: [i for i, group in enumerate(groups) if group == name] for name in names}
    reference = []
    for row in picks:
        chosen = [i for pick in row for i in members[names[pick]]]
        reference.append(
            metrics.balanced_accuracy([labels[i] for i in chosen], [predictions[i] for i in chosen])
        )
    assert point == metrics.balanced_accuracy(labels, predictions)
    assert (low, high) == pytest.approx(tuple(np.quantile(reference, [0.025, 0.975])))
    assert low < point < high


def test_it_gives_a_perfect_inspector_a_closed_interval_and_refuses_ragged_input():
    labels = ["YES", "NO", "NO", "YES"]
    assert metrics.balanced_accuracy_interval(labels, labels, ["a", "a", "b", "c"]) == (1, 1, 1)
    with pytest.raises(ValueError, match="differ in length"):
        metrics.balanced_accuracy_interval(labels, labels, ["a"])
