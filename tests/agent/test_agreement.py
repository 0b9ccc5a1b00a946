"""Tests of the rating statistics against hand-computed values (and scipy where it has them).

Hand computations are written out next to each expected value; the Krippendorff reference is
the 4-coder x 12-unit example of Krippendorff (2011), "Computing Krippendorff's
Alpha-Reliability", whose published alphas are nominal 0.743, ordinal 0.815, interval 0.849 and
ratio 0.797.
"""

from __future__ import annotations

import math
import random

import pytest
from scipy import stats

from agent.agreement import (
    RUBRIC,
    ItemDisagreement,
    PreferenceShares,
    RaterPairKappa,
    bradley_terry,
    bradley_terry_bootstrap,
    cohen_kappa,
    comparisons_from_outcomes,
    disagreement,
    krippendorff_alpha,
    mean_scores,
    pairwise_kappas,
    rating_matrix,
    score_cdf,
    score_histogram,
    spearman,
    spearman_matrix,
    win_tie_loss,
)

N = None
NAN = float("nan")

# Krippendorff (2011), section C: observers A-D (rows here are units), values 1-5.
KRIPPENDORFF_2011 = [
    [1, 1, N, 1],
    [2, 2, 3, 2],
    [3, 3, 3, 3],
    [3, 3, 3, 3],
    [2, 2, 2, 2],
    [1, 2, 3, 4],
    [4, 4, 4, 4],
    [1, 1, 2, 1],
    [2, 2, 2, 2],
    [N, 5, 5, 5],
    [N, N, 1, 1],
    [N, 3, N, N],
]


# --- rubric ------------------------------------------------------------------------------------


def test_it_holds_the_table_7_rubric_for_scores_0_to_5() -> None:
    assert sorted(RUBRIC) == [0, 1, 2, 3, 4, 5]
    assert RUBRIC[0].startswith("Complete hallucination.")
    assert (
        RUBRIC[3] == "Mostly correct. The main reasoning is sound but contains noticeable errors."
    )
    assert (
        RUBRIC[5] == "Fully correct. A coherent, accurate, and physically consistent description."
    )


# --- spearman ----------------------------------------------------------------------------------


def test_it_computes_spearman_without_ties_by_hand() -> None:
    # d = (0, 1, 1, 0): rho = 1 - 6 * 2 / (4 * (16 - 1)) = 0.8
    assert spearman([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(0.8)


def test_it_gives_tied_values_their_average_rank() -> None:
    # ranks x = (1, 2.5, 2.5, 4), y = (1, 2, 3, 4); deviations (-1.5, 0, 0, 1.5) and
    # (-1.5, -0.5, 0.5, 1.5): sxy = 4.5, sxx = 4.5, syy = 5 -> rho = 4.5 / sqrt(22.5) = 3 / sqrt(10)
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(3 / math.sqrt(10))


@pytest.mark.parametrize("seed", range(6))
def test_it_matches_scipy_spearman_with_ties(seed: int) -> None:
    generator = random.Random(seed)
    x = [generator.randint(0, 5) for _ in range(25)]
    y = [min(5, max(0, value + generator.randint(-2, 2))) for value in x]
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-12)


def test_it_drops_pairs_with_a_missing_value_before_ranking() -> None:
    x = [1, 4, N, 2, 5, NAN, 3]
    y = [2, 3, 1, N, 5, 4, 1]
    expected = stats.spearmanr([1, 4, 5, 3], [2, 3, 5, 1]).statistic
    assert spearman(x, y) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("x", "y"),
    [
        ([3], [4]),  # one pair
        ([1, N, 3], [N, 2, 3]),  # one complete pair
        ([2, 2, 2], [1, 2, 3]),  # constant x
        ([1, 2, 3], [4, 4, 4]),  # constant y
        ([1, 2, 5], [0, 0, N]),  # constant y over the complete pairs
    ],
)
def test_it_returns_none_when_spearman_is_undefined(x: list, y: list) -> None:
    assert spearman(x, y) is None


def test_it_refuses_spearman_series_of_different_lengths() -> None:
    with pytest.raises(ValueError, match="equal length; got 3 and 2"):
        spearman([1, 2, 3], [1, 2])


def test_it_refuses_a_value_that_is_not_a_number() -> None:
    with pytest.raises(ValueError, match=r"y\[1\] must be a number; got '4'"):
        spearman([1, 2, 3], [1, "4", 3])


def test_it_builds_a_symmetric_spearman_heatmap() -> None:
    names, matrix = spearman_matrix(
        {
            "Human": [1, 2, 3, 4],
            "GPT-5": [1, 3, 2, 4],  # 0.8 against Human (hand value above)
            "Grok-4": [4, 3, 2, 1],  # exactly reversed: -1
            "Flat": [3, 3, 3, N],
        }
    )
    assert names == ["Human", "GPT-5", "Grok-4", "Flat"]
    assert matrix[0][1] == matrix[1][0] == pytest.approx(0.8)
    assert matrix[0][2] == pytest.approx(-1.0)
    assert matrix[1][2] == pytest.approx(-0.8)
    assert [matrix[i][i] for i in range(3)] == [1.0, 1.0, 1.0]
    assert matrix[3] == [None, None, None, None]


def test_it_refuses_heatmap_series_of_different_lengths() -> None:
    with pytest.raises(ValueError, match="equal length"):
        spearman_matrix({"Human": [1, 2, 3], "Judge": [1, 2]})


# --- krippendorff's alpha ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("level", "published"),
    [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849), ("ratio", 0.797)],
)
def test_it_reproduces_krippendorffs_published_alphas(level: str, published: float) -> None:
    alpha = krippendorff_alpha(KRIPPENDORFF_2011, level, categories=range(1, 6))
    assert round(alpha, 3) == published


def test_it_reproduces_krippendorffs_nominal_alpha_exactly() -> None:
    # Marginals over the pairable units (unit 12 has one value): n_1 = 9, n_2 = 13, n_3 = 10,
    # n_4 = 5, n_5 = 3, n = 40. Off-diagonal coincidences: unit 2 (2, 2, 3, 2) has 6 ordered
    # pairs of different values, weight 1/3 -> 2; unit 6 (1, 2, 3, 4) 12/3 -> 4; unit 8
    # (1, 1, 2, 1) 6/3 -> 2; total 8. Nominal: alpha = 1 - (n - 1) * 8 / (n^2 - sum n_c^2)
    # = 1 - 39 * 8 / (1600 - 384) = 1 - 312/1216.
    assert krippendorff_alpha(KRIPPENDORFF_2011, "nominal", range(1, 6)) == pytest.approx(
        1 - 312 / 1216
    )


def test_it_computes_a_two_rater_nominal_alpha_by_hand() -> None:
    # Coincidences: (1,1) -> o_11 += 2, (1,2) -> o_12 = o_21 = 1, (2,2) -> o_22 += 2.
    # n_1 = n_2 = 3, n = 6: alpha = 1 - (6 - 1) * 2 / (3 * 3 * 2) = 1 - 10/18 = 4/9
    assert krippendorff_alpha([[1, 1], [1, 2], [2, 2]], "nominal") == pytest.approx(4 / 9)


# Units (0,0), (0,1), (1,5), (5,5): o_00 = 2, o_01 = o_10 = 1, o_15 = o_51 = 1, o_55 = 2;
# n_0 = 3, n_1 = 2, n_5 = 3, n = 8. Categories 2-4 are unused.
GAPPED = [[0, 0], [0, 1], [1, 5], [5, 5]]


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        # d = 1 off the diagonal: sum o d = 4, sum n_c n_k d = 2 (6 + 6 + 9) = 42
        # alpha = 1 - 7 * 4 / 42 = 1/3
        ("nominal", 1 / 3),
        # d_01 = (n_0 + n_1 - (n_0 + n_1)/2)^2 = 2.5^2, d_15 = (n_1 + n_5 - 2.5)^2 = 2.5^2,
        # d_05 = (8 - (3 + 3)/2)^2 = 25 (unused categories add nothing between 1 and 5):
        # sum o d = 2 * 6.25 + 2 * 6.25 = 25; sum n n d = 2 (6 * 6.25 + 6 * 6.25 + 9 * 25) = 600
        # alpha = 1 - 7 * 25 / 600 = 17/24
        ("ordinal", 17 / 24),
        # d = (c - k)^2: d_01 = 1, d_15 = 16, d_05 = 25: sum o d = 2 + 32 = 34;
        # sum n n d = 2 (6 + 96 + 225) = 654: alpha = 1 - 7 * 34 / 654 = 416/654
        ("interval", 416 / 654),
    ],
)
def test_it_computes_each_level_by_hand_when_categories_have_gaps(
    level: str, expected: float
) -> None:
    assert krippendorff_alpha(GAPPED, level) == pytest.approx(expected)


def test_it_computes_alpha_for_a_unit_with_three_raters_by_hand() -> None:
    # Unit (0, 0, 1): 6 ordered pairs with weight 1/(3-1): o_00 += 1, o_01 += 1, o_10 += 1.
    # Unit (1, 1, -): o_11 += 2. Then n_0 = 2, n_1 = 3, n = 5.
    # alpha = 1 - (5 - 1) * 2 / (2 * 2 * 3) = 1/3
    assert krippendorff_alpha([[0, 0, 1], [1, 1, N]], "nominal") == pytest.approx(1 / 3)


def test_it_ignores_units_with_a_single_rating() -> None:
    with_singles = [[0, 0, 1], [1, 1, N], [N, N, 0], [5, NAN, N]]
    assert krippendorff_alpha(with_singles, "nominal") == pytest.approx(1 / 3)


@pytest.mark.parametrize("level", ["nominal", "ordinal", "interval", "ratio"])
def test_it_gives_alpha_1_for_perfect_agreement(level: str) -> None:
    assert krippendorff_alpha([[0, 0, N], [3, 3, 3], [5, N, 5]], level) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "ratings",
    [
        [[N, N], [N, N]],  # all missing
        [[1, N], [N, 2]],  # no unit with two ratings
        [],  # no units
        [[2, 2], [2, 2]],  # one value only: no variation, alpha undefined
    ],
)
def test_it_returns_none_when_alpha_is_undefined(ratings: list) -> None:
    assert krippendorff_alpha(ratings) is None


@pytest.mark.parametrize(
    ("ratings", "kwargs", "message"),
    [
        ([[1, 6]], {}, r"ratings\[0\]\[1\] = 6 is not one of the categories"),
        ([[1, 2.5]], {}, r"ratings\[0\]\[1\] = 2.5 is not one of the categories"),
        ([[1, True]], {}, "is a bool, not a rating"),
        ([[1, 2], [1, 2, 3]], {}, r"ratings\[1\] has 3 raters but the rows before have 2"),
        ([[1, 2]], {"level": "cardinal"}, "level must be one of nominal, ordinal"),
        ([[1, 2]], {"categories": [0, 1, 1]}, "categories repeats 1"),
        ("12", {}, "units x raters matrix"),
    ],
)
def test_it_refuses_bad_alpha_input(ratings, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        krippendorff_alpha(ratings, **kwargs)


def test_it_builds_the_units_by_raters_matrix_from_ratings_by_rater() -> None:
    matrix = rating_matrix({"ana": {"t1": 4, "t2": 5}, "bo": {"t2": 3, "t3": 0}})
    assert matrix.items == ["t1", "t2", "t3"]
    assert matrix.raters == ["ana", "bo"]
    assert matrix.rows == [[4, N], [5, 3], [N, 0]]


# --- cohen's kappa -----------------------------------------------------------------------------

# a = (0, 1, 2, 2), b = (0, 2, 2, 1) over categories 0..2: both marginals are (1/4, 1/4, 1/2).
KAPPA_A = [0, 1, 2, 2]
KAPPA_B = [0, 2, 2, 1]


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        # p_o = 2/4, p_e = 1/16 + 1/16 + 1/4 = 3/8: kappa = (1/2 - 3/8) / (1 - 3/8) = 0.2
        (None, 0.2),
        # w = |i-j|/2. Observed: (1,2) and (2,1) at w 1/2 -> 1/4. Expected: (0,1),(1,0):
        # 2 * 1/16 * 1/2 = 1/16; (0,2),(2,0): 2 * 1/8 * 1 = 1/4; (1,2),(2,1): 2 * 1/8 * 1/2 = 1/8;
        # total 7/16: kappa = 1 - (1/4) / (7/16) = 3/7
        ("linear", 3 / 7),
        # w = (i-j)^2/4. Observed: 2 * 1/4 / 4 = 1/8. Expected: 2 * 1/16 * 1/4 + 2 * 1/8 * 1
        # + 2 * 1/8 * 1/4 = 1/32 + 1/4 + 1/16 = 11/32: kappa = 1 - (1/8) / (11/32) = 7/11
        ("quadratic", 7 / 11),
    ],
)
def test_it_computes_cohen_kappa_by_hand(weights: str | None, expected: float) -> None:
    assert cohen_kappa(KAPPA_A, KAPPA_B, weights=weights, categories=range(3)) == pytest.approx(
        expected
    )


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_it_is_unchanged_by_unused_categories_above_the_data(weights: str | None) -> None:
    # Weights on positions 0..5 are those on 0..2 times a constant, which cancels in the ratio.
    narrow = cohen_kappa(KAPPA_A, KAPPA_B, weights=weights, categories=range(3))
    assert cohen_kappa(KAPPA_A, KAPPA_B, weights=weights) == pytest.approx(narrow)


def test_it_uses_only_items_both_raters_scored() -> None:
    a = [*KAPPA_A, N, 2, NAN]
    b = [*KAPPA_B, 1, N, 0]
    assert cohen_kappa(a, b, weights="quadratic", categories=range(3)) == pytest.approx(7 / 11)


@pytest.mark.parametrize("weights", [None, "linear", "quadratic"])
def test_it_gives_kappa_1_for_perfect_agreement(weights: str | None) -> None:
    assert cohen_kappa([0, 3, 5, 5], [0, 3, 5, 5], weights=weights) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ([], []),  # no items
        ([1, N], [N, 2]),  # no item rated by both
        ([4, 4, 4], [4, 4, 4]),  # one category for both: chance agreement is 1
    ],
)
def test_it_returns_none_when_kappa_is_undefined(a: list, b: list) -> None:
    assert cohen_kappa(a, b, weights="quadratic") is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"a": [1, 2], "b": [1]}, "equal length; got 2 and 1"),
        ({"a": [1, 7], "b": [1, 2]}, r"a\[1\] = 7 is not one of the categories"),
        ({"a": [1, 2], "b": [1, 2], "weights": "cubic"}, "weights must be None, 'linear'"),
    ],
)
def test_it_refuses_bad_kappa_input(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cohen_kappa(**kwargs)


def test_it_computes_kappa_for_every_pair_of_raters() -> None:
    ratings = {
        "ana": {"t1": 0, "t2": 1, "t3": 2, "t4": 2},
        "bo": {"t1": 0, "t2": 2, "t3": 2, "t4": 1, "t5": 3},
        "cy": {"t5": 3, "t1": N},
    }
    assert pairwise_kappas(ratings) == [
        RaterPairKappa("ana", "bo", 4, pytest.approx(7 / 11)),  # quadratic, hand value above
        RaterPairKappa("ana", "cy", 0, None),  # nothing in common
        RaterPairKappa("bo", "cy", 1, None),  # one shared item: no chance disagreement
    ]


def test_it_computes_unweighted_pairwise_kappas_when_asked() -> None:
    ratings = {"ana": dict(enumerate(KAPPA_A)), "bo": dict(enumerate(KAPPA_B))}
    [pair] = pairwise_kappas(ratings, weights=None)
    assert pair.kappa == pytest.approx(0.2)


# --- distributions -----------------------------------------------------------------------------


def test_it_counts_scores_per_rubric_category() -> None:
    assert score_histogram([0, 5, 5, 3, 3.0, 3]) == [1, 0, 0, 3, 0, 2]


def test_it_computes_the_empirical_cdf() -> None:
    assert score_cdf([0, 5, 5, 3, 3, 3]) == pytest.approx([1 / 6, 1 / 6, 1 / 6, 4 / 6, 4 / 6, 1])


@pytest.mark.parametrize(
    ("scores", "message"),
    [
        ([3, N], r"scores\[1\] is missing"),
        ([3, NAN], r"scores\[1\] is missing"),
        ([6], r"scores\[0\] = 6 is not one of the categories"),
        ([3.5], r"scores\[0\] = 3.5 is not one of the categories"),
    ],
)
def test_it_refuses_scores_outside_the_rubric(scores: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        score_histogram(scores)


def test_it_refuses_the_cdf_of_no_scores() -> None:
    with pytest.raises(ValueError, match="at least one score"):
        score_cdf([])


def test_it_averages_the_ratings_of_each_item() -> None:
    assert mean_scores({"t1": [3, 4, N], "t2": {"ana": 5, "bo": NAN}}) == {"t1": 3.5, "t2": 5.0}


def test_it_ranks_items_by_disagreement_largest_first() -> None:
    ranked = disagreement(
        {
            "calm": [3, 3, 3],  # spread 0, std 0
            "split": [0, 5],  # spread 5, std 2.5
            "mild": [2, 4, N],  # spread 2, std 1
            "mild too": {"ana": 1, "bo": 3},  # spread 2, std 1: after "mild" (input order)
            "spread": [1, 2, 3],  # spread 2, std sqrt(2/3)
        }
    )
    assert ranked == [
        ItemDisagreement("split", 5.0, pytest.approx(2.5)),
        ItemDisagreement("mild", 2.0, pytest.approx(1.0)),
        ItemDisagreement("mild too", 2.0, pytest.approx(1.0)),
        ItemDisagreement("spread", 2.0, pytest.approx(math.sqrt(2 / 3))),
        ItemDisagreement("calm", 0.0, 0.0),
    ]


@pytest.mark.parametrize("function", [mean_scores, disagreement])
def test_it_refuses_an_item_without_ratings(function) -> None:
    with pytest.raises(ValueError, match="item 't2' has no ratings"):
        function({"t1": [3], "t2": [N, NAN]})


# --- pairwise preference -----------------------------------------------------------------------


def test_it_computes_win_tie_loss_shares_per_data_set() -> None:
    shares = win_tie_loss({"LAMOST": ["A", "A", "tie", "B"], "SDSS": ["tie", " a "]})
    assert shares["LAMOST"] == PreferenceShares(wins=2, ties=1, losses=1)
    assert (shares["LAMOST"].win, shares["LAMOST"].tie, shares["LAMOST"].loss) == (0.5, 0.25, 0.25)
    assert shares["SDSS"].as_dict() == {
        "n": 2,
        "wins": 1,
        "ties": 1,
        "losses": 0,
        "win": 0.5,
        "tie": 0.5,
        "loss": 0.0,
    }


@pytest.mark.parametrize(
    ("outcomes", "message"),
    [
        ({"LAMOST": ["A", "draw"]}, r"outcomes\['LAMOST'\]\[1\] = 'draw' is not one of"),
        ({"LAMOST": []}, "'LAMOST' needs a non-empty list"),
    ],
)
def test_it_refuses_bad_outcomes(outcomes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        win_tie_loss(outcomes)


def test_it_gives_strength_ratio_3_when_a_beats_b_3_to_1() -> None:
    # Two models: the MLE ratio is W_A / W_B = 3; geometric mean 1 -> (sqrt 3, 1 / sqrt 3).
    strengths = bradley_terry([("A", "B"), ("A", "B"), ("B", "A"), ("A", "B")])
    assert strengths == {"A": pytest.approx(math.sqrt(3)), "B": pytest.approx(1 / math.sqrt(3))}


def test_it_recovers_three_transitive_strengths() -> None:
    # Data drawn exactly from strengths (4, 2, 1): A-B 2:1, B-C 2:1, A-C 4:1. The score
    # equations hold: A wins 6 = 3 * 4/6 + 5 * 4/5; B wins 3 = 3 * 2/6 + 3 * 2/3;
    # C wins 2 = 3 * 1/3 + 5 * 1/5. Geometric mean (4 * 2 * 1)^(1/3) = 2 -> (2, 1, 0.5).
    comparisons = (
        [("A", "B")] * 2 + [("B", "A")] + [("B", "C")] * 2 + [("C", "B")]
        + [("A", "C")] * 4 + [("C", "A")]
    )  # fmt: skip
    assert bradley_terry(comparisons) == {
        "A": pytest.approx(2.0, rel=1e-9),
        "B": pytest.approx(1.0, rel=1e-9),
        "C": pytest.approx(0.5, rel=1e-9),
    }


def test_it_counts_a_tie_as_half_a_win_for_each_side() -> None:
    # A wins once and ties twice: W_A = 1 + 2 * 0.5 = 2, W_B = 1 -> ratio 2.
    comparisons = comparisons_from_outcomes("Spec-o3", "o3", ["A", "tie", "tie"])
    assert comparisons == [("Spec-o3", "o3"), ("Spec-o3", "o3", "tie"), ("Spec-o3", "o3", "tie")]
    strengths = bradley_terry(comparisons)
    assert strengths["Spec-o3"] / strengths["o3"] == pytest.approx(2.0)


def test_it_adds_prior_virtual_ties_between_every_pair() -> None:
    # A beats B 3 times; one virtual tie adds 0.5 to each: ratio 3.5 / 0.5 = 7.
    strengths = bradley_terry([("A", "B")] * 3, prior=1.0)
    assert strengths == {"A": pytest.approx(math.sqrt(7)), "B": pytest.approx(1 / math.sqrt(7))}


def test_it_refuses_strengths_that_do_not_exist_without_a_prior() -> None:
    with pytest.raises(ValueError, match=r"no model in \['B'\] beats or ties .*pass prior > 0"):
        bradley_terry([("A", "B"), ("A", "B")])


@pytest.mark.parametrize(
    ("comparisons", "message"),
    [
        ([], "non-empty list of comparisons"),
        ([("A", "A")], r"comparisons\[0\] compares 'A' with itself"),
        ([("A", "B", "draw")], "only 'tie' is allowed"),
        ([("A",)], r"comparisons\[0\] must be \(winner, loser\)"),
        ([("A", 3)], "two models as non-empty strings"),
    ],
)
def test_it_refuses_bad_comparisons(comparisons: list, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        bradley_terry(comparisons)


BOOT_COMPARISONS = (
    [("Spec-o3", "o3")] * 9 + [("o3", "Spec-o3")] * 3 + [("Spec-o3", "o3", "tie")] * 4
)


def test_it_bootstraps_an_interval_around_the_estimate() -> None:
    result = bradley_terry_bootstrap(BOOT_COMPARISONS, n_boot=300, seed=7, prior=0.5)
    estimate = bradley_terry(BOOT_COMPARISONS, prior=0.5)
    for model, (value, low, high) in result.items():
        assert value == pytest.approx(estimate[model])
        assert low < value < high


def test_it_repeats_the_bootstrap_exactly_with_the_same_seed() -> None:
    first = bradley_terry_bootstrap(BOOT_COMPARISONS, n_boot=200, seed=3, prior=0.5)
    again = bradley_terry_bootstrap(BOOT_COMPARISONS, n_boot=200, seed=3, prior=0.5)
    other = bradley_terry_bootstrap(BOOT_COMPARISONS, n_boot=200, seed=4, prior=0.5)
    assert first == again
    assert first != other


def test_it_gives_a_zero_width_interval_when_every_comparison_is_a_tie() -> None:
    # Every resample is all ties, so every refit gives strengths (1, 1).
    result = bradley_terry_bootstrap([("A", "B", "tie")] * 5, n_boot=50, seed=0)
    assert result == {
        "A": (pytest.approx(1.0), pytest.approx(1.0), pytest.approx(1.0)),
        "B": (pytest.approx(1.0), pytest.approx(1.0), pytest.approx(1.0)),
    }


def test_it_refuses_a_bootstrap_resample_without_strengths_when_there_is_no_prior() -> None:
    # With 4 comparisons, P(a resample has no B win) = (3/4)^4 ~ 0.32.
    with pytest.raises(ValueError, match=r"bootstrap resample \d+ of 100.*pass prior > 0"):
        bradley_terry_bootstrap([("A", "B")] * 3 + [("B", "A")], n_boot=100, seed=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_boot": 0}, "n_boot must be a positive int"),
        ({"ci": 1.0}, "ci must be between 0 and 1"),
        ({"prior": -1.0}, "prior must be >= 0"),
        ({"seed": "7"}, "seed must be an int"),
    ],
)
def test_it_refuses_bad_bootstrap_settings(kwargs: dict, message: str) -> None:
    settings = {"n_boot": 10, "seed": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        bradley_terry_bootstrap(BOOT_COMPARISONS, **settings)
