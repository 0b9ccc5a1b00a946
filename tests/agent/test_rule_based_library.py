"""The rules combined with real library spectra (agent/policies/rule_based/library.py): no answer
rests on absent evidence, a disagreement or a spectrum outside the library is never confident,
and each such answer names its reason (issue 36). These run without the real-data cache; the
real spectra are in test_rule_based_library_real.py."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from agent.inspection_tasks import get_task
from agent.library_match import TaskEvidence
from agent.policies.rule_based import RuleBasedInspector
from agent.policies.rule_based.library import (
    LIBRARY,
    combine,
    fit_pull,
    fit_weights,
    library_probability,
    ool_distance,
)
from agent.policies.rule_based.scope import COVERAGE, MAX_PULL
from agent.synthetic import generate_sample

FITS: dict[str, dict[str, Any]] = {
    "B": {"platt": {"slope": 2.0, "intercept": 0.0}, "weights": [1.0, 1.0, 0.0], "ool": 3.0,
          "pull": 0.7},
    "CV": {"ool": 3.0, "pull": 0.7},
}  # fmt: skip


def evidence(task: str, positive: float, negative: float, *, kind: str = "B2V") -> TaskEvidence:
    return TaskEvidence(
        task,
        negative - positive if task == "B" else math.nan,
        {"id": "lib-pos", "type": kind, "distance": positive, "ebv": 0.0, "shift_kms": 0.0},
        {"id": "lib-neg", "type": "A0V", "distance": negative, "ebv": 0.0, "shift_kms": 0.0},
        min(positive, negative),
    )


def final(task: str, rules: float, found: TaskEvidence | None) -> tuple[float, list[str]]:
    combined = combine(task, rules, [], found, library_present=True, fits=FITS, rules_pull=0.75)
    p = 0.5 + min(combined.pull, MAX_PULL) * (combined.probability - 0.5)
    if combined.pull >= 1.0:
        p = combined.probability
    return max(p, 1.0 - p), [note.subject for note in combined.notes if note.kind == LIBRARY]


def test_it_answers_confidently_where_rules_and_library_agree_inside_the_library() -> None:
    confidence, notes = final("B", 0.97, evidence("B", 0.8, 2.5))
    assert confidence >= 0.9
    assert notes == []


def test_it_is_not_confident_where_rules_and_library_disagree() -> None:
    """The rules' 'too red, too cool' NO against a library that finds a B star nearest."""
    confidence, notes = final("B", 0.01, evidence("B", 0.7, 2.9))
    assert confidence < 0.9
    assert notes == ["the rules and the real spectra disagree"]


def test_it_is_not_confident_outside_the_library() -> None:
    confidence, notes = final("B", 0.995, evidence("B", 4.0, 6.5))
    assert confidence < 0.9
    assert notes == ["out of the library"]


def test_it_doubts_a_yes_the_library_explains_as_a_star_of_another_class() -> None:
    """A task the library cannot decide (CV): a YES on a spectrum whose nearest library
    spectrum is a labelled non-CV star (an O supergiant, a Wolf-Rayet star) is not confident."""
    found = TaskEvidence(
        "CV", math.nan, None,
        {"id": "miles-x", "type": "O9.5Ib", "distance": 1.1, "ebv": 0.4, "shift_kms": 0.0}, 1.1,
    )  # fmt: skip
    confidence, notes = final("CV", 0.99, found)
    assert confidence < 0.9
    assert notes == ["a O9.5Ib star of the library"]
    assert final("CV", 0.01, found)[1] == []  # a NO it explains is left as it is


def test_it_doubts_a_decidable_answer_it_could_not_compare() -> None:
    confidence, notes = final("B", 0.99, None)
    assert confidence < 0.9
    assert notes == ["no comparison with real spectra"]


def test_it_answers_with_the_rules_alone_without_a_library() -> None:
    combined = combine("B", 0.97, [], None, library_present=False, fits=FITS, rules_pull=0.75)
    assert combined.probability == 0.97 and combined.pull == 1.0 and combined.notes == ()


def test_it_turns_the_library_score_into_a_probability_by_its_fit() -> None:
    assert library_probability("B", evidence("B", 1.0, 2.0), FITS["B"]) == pytest.approx(
        1.0 / (1.0 + math.exp(-2.0))
    )
    assert math.isnan(library_probability("CV", evidence("CV", 1.0, 2.0), FITS["CV"]))


def test_it_fits_combination_weights_that_follow_the_informative_part() -> None:
    rng = np.random.default_rng(0)
    labels = rng.random(400) < 0.4
    informative = np.where(labels, 0.85, 0.15)
    noise = rng.random(400)
    weights = fit_weights(list(noise), list(informative), list(labels))
    assert weights[1] > 0.5 > weights[0] >= 0.0
    assert weights[0] + weights[1] == pytest.approx(1.0) and abs(weights[2]) <= 2.0


def test_it_fits_a_pull_that_keeps_noted_answers_below_confidence() -> None:
    pull = fit_pull([0.99, 0.99, 0.01, 0.01], [True, False, False, True])
    assert 0.0 <= pull <= MAX_PULL
    assert 0.5 + pull * 0.49 < 0.9
    assert ool_distance([1.0] * 98 + [5.0, 9.0]) < 5.0
    assert ool_distance([]) == math.inf


# --- the inspector ----------------------------------------------------------------------------


def test_it_never_answers_confidently_when_the_decisive_band_cannot_be_measured() -> None:
    """Issue 36's M3 III: 'MG NO (0.99): the TiO heads at 6161 and 7056 Å are not covered'.
    The decisive windows hold good pixels (so the coverage check passes) but the band heads'
    reference sides have no positive flux, so no depth can be measured: rule-based/v3 answered
    NO at 0.99 on the absence of the evidence."""
    inspector = RuleBasedInspector(library=None)
    for seed in range(3):
        spectrum = generate_sample("MG", True, rng=np.random.default_rng(seed)).spectrum
        rest = spectrum.rest_wavelength
        for low, high in ((7029.0, 7054.5), (6131.0, 6159.0)):
            inside = (rest >= low) & (rest <= high)
            spectrum.flux[inside] = -0.01 * np.abs(spectrum.flux[inside])
        decision = inspector.begin(spectrum=spectrum, task=get_task("MG"), use_tool=False).decision
        assert decision is not None
        assert decision["confidence"] < 0.9, decision["evidence"]["findings"]
        kinds = [note["kind"] for note in decision["evidence"]["scope"]]
        assert COVERAGE in kinds
        assert any("not covered" in note["subject"] for note in decision["evidence"]["scope"])


def test_it_says_why_in_the_answer_when_evidence_is_missing() -> None:
    spectrum = generate_sample("MG", True, rng=np.random.default_rng(1)).spectrum
    rest = spectrum.rest_wavelength
    for low, high in ((7029.0, 7054.5), (6131.0, 6159.0)):
        inside = (rest >= low) & (rest <= high)
        spectrum.flux[inside] = -0.01 * np.abs(spectrum.flux[inside])
    episode = RuleBasedInspector(library=None).begin(
        spectrum=spectrum, task=get_task("MG"), use_tool=False
    )
    answer = episode.generate([])
    assert "\\boxed{NO}" in answer
    assert "not decidable from these data: the TiO heads" in answer


def test_it_combines_with_the_neighbours_vote_where_a_combiner_is_fitted() -> None:
    """rule-based/v5-knn: the fitted combiner reads the vote of the nearest library spectra,
    not the nearest pair; with v4's fits (no combiner) the nearest pair decides."""
    import dataclasses

    found = dataclasses.replace(evidence("B", 0.5, 0.9), vote=0.05, type_number=19.8)
    fits = {"B": {**FITS["B"], "combiner": {"form": "pool", "weights": [1.0, 1.0, 0.0]}}}
    with_vote = combine("B", 0.7, [], found, library_present=True, fits=fits, rules_pull=0.75)
    assert with_vote.probability < 0.5
    assert [n.subject for n in with_vote.notes] == ["the rules and the real spectra disagree"]
    v4 = combine("B", 0.7, [], found, library_present=True, fits=FITS, rules_pull=0.75)
    assert v4.probability > 0.5


def test_it_shrinks_the_log_odds_near_the_class_boundary_of_the_neighbours_type() -> None:
    import dataclasses

    from agent.policies.rule_based.library import combiner_features

    inside = dataclasses.replace(evidence("A", 0.5, 0.9), vote=0.9, type_number=25.0)
    boundary = dataclasses.replace(inside, type_number=19.6)
    clear = combiner_features("A", 0.95, inside, "boundary")
    near = combiner_features("A", 0.95, boundary, "boundary")
    assert clear[0] == pytest.approx(math.log(0.95 / 0.05))
    assert near[0] < 0.4 * clear[0] and near[1] < 0.4 * clear[1]
    assert near[2:] == clear[2:]
    with pytest.raises(ValueError, match="unknown combiner form"):
        combiner_features("A", 0.95, inside, "vote")


def test_it_fits_combiner_weights_that_follow_the_informative_part() -> None:
    from agent.policies.rule_based.library import fit_combiner

    rng = np.random.default_rng(3)
    labels = rng.random(400) < 0.3
    informative = np.where(labels, 3.0, -3.0) + rng.normal(0, 1, 400)
    noise = rng.normal(0, 2, 400)
    weights = fit_combiner(
        [[a, b, 1.0] for a, b in zip(noise, informative, strict=True)], list(labels), 0.1
    )
    assert weights[1] > 0.5 > abs(weights[0])


def test_it_combines_with_the_mk_region_fit_where_the_v6_combiner_is_fitted() -> None:
    """rule-based/v6: the combiner reads the vote and the class chi2 over the MK region, not
    the whole-range vote; where the MK region was not compared it falls back on v4's pool."""
    import dataclasses

    from agent.policies.rule_based.library import combiner_features, uses_mk_region

    found = dataclasses.replace(
        evidence("A", 0.5, 0.9), vote=0.95, type_number=22.0, mk_vote=0.05, mk_chi2=-9.0
    )
    features = combiner_features("A", 0.7, found, "mk")
    assert features[1] == pytest.approx(math.log(0.05 / 0.95))
    assert features[2] == -5.0  # the chi2 is clipped
    assert features[3] == 1.0
    fits = {
        "A": {**FITS["B"], "combiner": {"form": "mk", "weights": [1.0, 1.0, 0.5, 0.0]}},
        "B": FITS["B"],
    }
    assert uses_mk_region(fits, "a") and not uses_mk_region(fits, "B")
    v6 = combine("A", 0.7, [], found, library_present=True, fits=fits, rules_pull=0.75)
    assert v6.probability < 0.5
    assert v6.library_probability == pytest.approx(0.05)
    assert [n.subject for n in v6.notes] == ["the rules and the real spectra disagree"]
    uncovered = dataclasses.replace(found, mk_vote=math.nan, mk_chi2=math.nan)
    pool = combine("A", 0.7, [], uncovered, library_present=True, fits=fits, rules_pull=0.75)
    v4 = combine(
        "A", 0.7, [], uncovered, library_present=True, fits={"A": FITS["B"]}, rules_pull=0.75
    )
    assert pool.probability == pytest.approx(v4.probability)


def test_it_fits_the_mk_region_only_for_a_task_whose_combination_reads_it() -> None:
    """The inspector asks the library for the MK-region comparison (a second comparison, ~10 ms)
    only where the task's fitted combiner is v6's; v4's tasks keep the one comparison."""

    class Recording:
        def __init__(self) -> None:
            self.calls: list[dict[str, Any]] = []

        def match(self, spectrum: Any, **options: Any) -> None:
            self.calls.append(options)

    library = Recording()
    inspector = RuleBasedInspector(calibration=None, library=library)  # type: ignore[arg-type]
    inspector.library_fits = {
        "A": {**FITS["B"], "combiner": {"form": "mk", "weights": [1.0, 1.0, 0.5, 0.0]}},
        "B": FITS["B"],
    }
    spectrum = generate_sample("A", True, rng=np.random.default_rng(2)).spectrum
    for code in ("A", "B"):
        inspector.begin(spectrum=spectrum, task=get_task(code), use_tool=False)
    assert library.calls == [{"mk_region": True}, {"mk_region": False}]
