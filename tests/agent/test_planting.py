"""Planted errors (agent.planting): each kind changes what it says, and only that."""

from __future__ import annotations

import pytest

from agent import planting
from agent.editing import EditedAnswer, EditedStep

STEPS = [
    EditedStep("Broad H-alpha emission is clear at 6563.", (6500.0, 6630.0), "H-alpha"),
    EditedStep("He I 5876 in emission, weak but present.", (5840.0, 5910.0), "He I"),
]
ANSWER = EditedAnswer("Balmer and helium emission.", "YES", "Broad Balmer emission with He I.")
COVERAGE = (3800.0, 9000.0)


def _changed_steps(copy: planting.PlantedCopy) -> list[int]:
    return [i for i, (a, b) in enumerate(zip(STEPS, copy.steps, strict=True)) if a != b]


def test_it_flips_only_the_final_answer() -> None:
    copy = planting.plant(planting.FLIPPED_ANSWER, STEPS, ANSWER, seed=1)
    assert copy.answer.prediction == "NO"
    assert copy.answer.think == ANSWER.think
    assert copy.answer.justification == ANSWER.justification
    assert copy.steps == STEPS
    assert copy.target == len(STEPS)  # the answer's turn index


def test_it_moves_one_window_off_the_original_and_keeps_its_text() -> None:
    copy = planting.plant(planting.WRONG_WINDOW, STEPS, ANSWER, seed=3, coverage=COVERAGE)
    assert _changed_steps(copy) == [copy.target]
    before, after = STEPS[copy.target], copy.steps[copy.target]
    low, high = after.wavelength_range
    old_low, old_high = before.wavelength_range
    assert high <= old_low or low >= old_high  # no overlap at all
    assert high - low == pytest.approx(old_high - old_low)
    assert COVERAGE[0] <= low < high <= COVERAGE[1]
    assert (after.think, after.label) == (before.think, before.label)
    assert copy.answer == ANSWER


def test_it_keeps_a_wrong_window_on_a_short_spectrum() -> None:
    step = [EditedStep("Look.", (5000.0, 6000.0), "")]
    copy = planting.plant(planting.WRONG_WINDOW, step, ANSWER, seed=0, coverage=(4800.0, 6200.0))
    low, high = copy.steps[0].wavelength_range
    assert 4800.0 <= low < high <= 6200.0
    assert (low, high) != (5000.0, 6000.0)
    assert not (low < 5000.0 + 1 and high > 6000.0 - 1)  # not the same window again


def test_it_makes_a_step_name_a_line_its_window_cannot_show() -> None:
    copy = planting.plant(planting.MISREAD_LINE, STEPS, ANSWER, seed=2)
    assert _changed_steps(copy) == [copy.target]
    before, after = STEPS[copy.target], copy.steps[copy.target]
    assert after.wavelength_range == before.wavelength_range and after.label == before.label
    named = [name for name in planting.LINES if name in after.think and name not in before.think]
    assert named, after.think
    low, high = before.wavelength_range
    assert all(not low <= planting.LINES[name] <= high for name in named)


def test_it_adds_a_misread_line_to_text_that_names_none() -> None:
    step = [EditedStep("Zoom on the core.", (6500.0, 6630.0), "")]
    copy = planting.plant(planting.MISREAD_LINE, step, ANSWER, seed=0)
    assert copy.steps[0].think.startswith("Zoom on the core.")
    assert copy.steps[0].think != "Zoom on the core."
    assert "claims" in copy.description


def test_it_inverts_what_a_step_says_it_saw() -> None:
    copy = planting.plant(planting.CONTRADICTING_STEP, STEPS, ANSWER, seed=0)
    assert _changed_steps(copy) == [copy.target]
    after = copy.steps[copy.target].think
    before = STEPS[copy.target].think
    if "emission" in before:
        assert "absorption" in after and "emission" not in after
    assert copy.steps[copy.target].wavelength_range == STEPS[copy.target].wavelength_range


@pytest.mark.parametrize(("prediction", "phrase"), [("YES", "no line"), ("NO", "emission")])
def test_it_contradicts_a_step_that_names_no_feature(prediction: str, phrase: str) -> None:
    step = [EditedStep("Zoom on the core.", (6500.0, 6630.0), "")]
    answer = EditedAnswer("", prediction, "")
    copy = planting.plant(planting.CONTRADICTING_STEP, step, answer, seed=0)
    assert phrase in copy.steps[0].think


@pytest.mark.parametrize("kind", list(planting.KINDS))
def test_it_is_deterministic_given_the_seed(kind: str) -> None:
    first = planting.plant(kind, STEPS, ANSWER, seed=7, coverage=COVERAGE)
    again = planting.plant(kind, STEPS, ANSWER, seed=7, coverage=COVERAGE)
    assert first == again
    assert (first.steps, first.answer) != (STEPS, ANSWER)


def test_it_leaves_the_input_unchanged() -> None:
    steps = list(STEPS)
    planting.plant(planting.WRONG_WINDOW, steps, ANSWER, seed=0, coverage=COVERAGE)
    assert steps == STEPS


def test_it_refuses_a_step_kind_without_a_tool_step() -> None:
    assert not planting.applicable(planting.MISREAD_LINE, [])
    assert planting.applicable(planting.FLIPPED_ANSWER, [])
    with pytest.raises(planting.PlantError):
        planting.plant(planting.WRONG_WINDOW, [], ANSWER, seed=0)
    with pytest.raises(planting.PlantError):
        planting.applicable("typo", STEPS)


@pytest.mark.parametrize(
    ("successes", "total"), [(0, 1), (1, 1), (2, 4), (0, 2), (16, 24), (7, 50)]
)
def test_it_computes_the_wilson_interval_as_scipy_does(successes: int, total: int) -> None:
    from agent.vetting_statistics import wilson_interval

    assert planting.wilson_interval(successes, total) == pytest.approx(
        wilson_interval(successes, total), abs=1e-12
    )
    assert planting.wilson_interval(0, 0) == (0.0, 1.0)
