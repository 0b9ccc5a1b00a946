from __future__ import annotations

import json

import numpy as np
import pytest

from agent import parsing
from agent.editing import (
    EditedAnswer,
    EditedStep,
    EditError,
    apply_edit,
    check_same_tool_actions,
    edit_from_trajectory,
    standardize,
    tool_actions,
)
from agent.inspection_tasks import get_task
from agent.rollout import inspect
from agent.spectra import Spectrum
from agent.tool import SpectralVisualizationTool


class Scripted:
    def __init__(self, turns):
        self.turns = list(turns)

    def info(self):
        return {"name": "scripted"}

    def generate(self, messages):
        return self.turns.pop(0)


def call(lo, hi, label, think="look"):
    payload = {
        "name": "spectral_visualization_tool",
        "arguments": {"wavelength_range": [lo, hi], "label": label},
    }
    return f"<think>  {think}\n\n\n  here </think>  <tool_call>{json.dumps(payload, indent=2)}</tool_call>"


@pytest.fixture
def spectrum():
    wave = np.logspace(np.log10(3700), np.log10(9100), 3900)
    flux = 1 + 2 * np.exp(-0.5 * ((wave - 6564.6) / 20) ** 2)
    return Spectrum(wavelength=wave, flux=flux, object_id="E1")


@pytest.fixture
def draft(spectrum):
    turns = [
        call(6500, 6630, "H-alpha"),
        "<think>done</think><answer>\\boxed{YES}   broad   H-alpha. </answer>",
    ]
    return inspect(spectrum, get_task("CV"), Scripted(turns))


def test_it_round_trips_a_trajectory_through_the_structured_form(spectrum, draft):
    steps, answer = edit_from_trajectory(draft)
    assert [(s.wavelength_range, s.label) for s in steps] == [((6500.0, 6630.0), "H-alpha")]
    assert "look" in steps[0].think
    assert answer.prediction == "YES"


def test_it_re_renders_the_image_when_the_range_changes(spectrum, draft):
    steps, answer = edit_from_trajectory(draft)
    edited = apply_edit(
        draft,
        tool=SpectralVisualizationTool(spectrum),
        steps=[EditedStep("zoom on the core", (6540.0, 6590.0), "H-alpha core")],
        answer=answer,
    )
    assert edited.steps[0].tool_result.image.wavelength_range == (6540.0, 6590.0)
    assert edited.steps[0].tool_result.image.png != draft.steps[0].tool_result.image.png
    assert edited.format_ok is True
    assert edited.answer.prediction == "YES"


def test_it_can_add_and_remove_steps(spectrum, draft):
    _, answer = edit_from_trajectory(draft)
    tool = SpectralVisualizationTool(spectrum)
    two = apply_edit(
        draft,
        tool=tool,
        steps=[EditedStep("a", (6500, 6630), "H-alpha"), EditedStep("b", (4820, 4900), "H-beta")],
        answer=answer,
    )
    none = apply_edit(draft, tool=tool, steps=[], answer=answer)
    assert two.n_tool_calls == 2
    assert none.n_tool_calls == 0 and none.format_ok is True


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (EditedStep("x", (6630, 6500), "H"), "0 < min < max"),
        (EditedStep("x", (20000, 21000), "H"), "cannot show"),
        (EditedStep("<answer>sneaky</answer>", (6500, 6630), "H"), "must not contain"),
    ],
)
def test_it_refuses_edits_that_would_break_the_trajectory(spectrum, draft, step, message):
    with pytest.raises(EditError, match=message):
        apply_edit(
            draft,
            tool=SpectralVisualizationTool(spectrum),
            steps=[step],
            answer=EditedAnswer("t", "YES", "j"),
        )


def test_it_standardizes_spacing_and_call_json_without_changing_actions(draft):
    clean = standardize(draft)
    assert check_same_tool_actions(draft, clean) == []
    assert clean.steps[0].assistant_text.startswith("<think>look\n\nhere</think>\n<tool_call>{")
    assert "\\boxed{YES} broad H-alpha." in clean.steps[-1].assistant_text
    assert parsing.format_ok([s.assistant_text for s in clean.steps]).ok


def test_it_reports_changed_tool_actions(spectrum, draft):
    _, answer = edit_from_trajectory(draft)
    moved = apply_edit(
        draft,
        tool=SpectralVisualizationTool(spectrum),
        steps=[EditedStep("x", (6400, 6700), "H-alpha")],
        answer=answer,
    )
    problems = check_same_tool_actions(draft, moved)
    assert problems and "tool call 1 changed" in problems[0]
    assert tool_actions(moved)[0].wavelength_range == (6400.0, 6700.0)


def _narrowed(spectrum, draft, think: str):
    """The reviser narrows the H-alpha window to 6540-6590 but leaves `think` as written."""
    _, answer = edit_from_trajectory(draft)
    return apply_edit(
        draft,
        tool=SpectralVisualizationTool(spectrum),
        steps=[EditedStep(think, (6540, 6590), "H-alpha")],
        answer=answer,
    )


def test_it_rewrites_a_stale_window_in_the_prose_to_the_tool_calls_range(spectrum, draft):
    revised = _narrowed(spectrum, draft, "Zoom on H-alpha over 6500–6630 Å for the wings.")
    clean = standardize(revised)
    assert clean.steps[0].think == "Zoom on H-alpha over 6540–6590 Å for the wings."
    assert check_same_tool_actions(revised, clean) == []
    assert "range_mismatches" not in clean.meta


def test_it_leaves_features_inside_the_window_and_other_windows_alone(spectrum, draft):
    think = "H-beta at 4820-4905 was in emission; the core 6555-6570 here is filled."
    clean = standardize(_narrowed(spectrum, draft, think))
    assert clean.steps[0].think == think
    assert "range_mismatches" not in clean.meta


def test_it_flags_stale_windows_it_cannot_resolve_for_the_experts(spectrum, draft):
    think = "First 6500-6630, then the wider 6450-6700 around H-alpha."
    clean = standardize(_narrowed(spectrum, draft, think))
    assert clean.steps[0].think == think
    assert clean.meta["range_mismatches"] == [
        "step 1: the reasoning cites 6500–6630 Å, 6450–6700 Å but the tool call shows 6540–6590 Å"
    ]
