"""TRL vision DPO rows from two trajectories: the preference on the turn where their decisions
part (not the first turn whose wording differs), images in the prompt only."""

from __future__ import annotations

import pytest

from agent.formats.dpo import NoPreferenceRow, preference_row
from agent.trajectory import Step, Trajectory
from tests.agent.test_trajectory import (
    ANSWER,
    FIRST_CALL,
    HALPHA_PNG,
    I0_PNG,
    make_trajectory,
)

OTHER_ANSWER = "<think>No emission at all.</think>\n<answer>\\boxed{NO} Flat continuum.</answer>"


def with_last_turn(trajectory: Trajectory, text: str) -> Trajectory:
    """The same trajectory with its final answer replaced by ``text``."""
    data = trajectory.to_dict()
    changed = Trajectory.from_dict({**data, "steps": data["steps"][:-1]})
    changed.steps.append(Step.from_output(len(changed.steps), text))
    changed.finalize("answer")
    return changed


def with_turn(trajectory: Trajectory, index: int, text: str) -> Trajectory:
    """The same trajectory with step ``index``'s text replaced (its tool result kept)."""
    data = trajectory.to_dict()
    data["steps"][index]["assistant_text"] = text
    return Trajectory.from_dict(data)


def test_it_cuts_a_pair_where_the_trajectories_part():
    better = make_trajectory()
    worse = with_last_turn(better, OTHER_ANSWER)
    row = preference_row(better, worse)
    # Shared: system, user (I0 + T0), two assistant calls and their two tool turns.
    assert row.shared_turns == 6
    assert [m["role"] for m in row.prompt] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert row.images == [I0_PNG, HALPHA_PNG]
    placeholders = [p for m in row.prompt for p in m["content"] if p["type"] == "image"]
    assert len(placeholders) == len(row.images) and placeholders[0] == {"type": "image"}
    assert row.chosen == [{"role": "assistant", "content": [{"type": "text", "text": ANSWER}]}]
    assert row.rejected[0]["content"][0]["text"] == OTHER_ANSWER
    assert (row.step, row.differs_in) == (2, "answer")
    trl = row.as_trl(["images/a.png", "images/b.png"])
    assert set(trl) == {"prompt", "chosen", "rejected", "images"}


def test_it_makes_no_row_from_identical_or_continuing_trajectories():
    trajectory = make_trajectory()
    with pytest.raises(NoPreferenceRow, match="identical"):
        preference_row(trajectory, make_trajectory())
    shorter = Trajectory.from_dict(
        {**trajectory.to_dict(), "steps": trajectory.to_dict()["steps"][:1]}
    )
    with pytest.raises(NoPreferenceRow, match="continues"):
        preference_row(trajectory, shorter)


def test_it_makes_no_row_across_tasks_or_when_a_tool_turn_differs_first():
    trajectory = make_trajectory()
    other_task = Trajectory.from_dict({**trajectory.to_dict(), "task": "WD"})
    with pytest.raises(NoPreferenceRow, match="different tasks"):
        preference_row(trajectory, other_task)
    data = trajectory.to_dict()
    data["steps"][0]["tool_result"]["text"] = "Showing something else."
    with pytest.raises(NoPreferenceRow, match="different prompts or tool results"):
        preference_row(trajectory, Trajectory.from_dict(data))


def test_it_puts_the_preference_on_the_answer_not_on_earlier_wording():
    """The first call of the rejected one says the same in other words (same tool, same window,
    same plot back); the decisions part at the verdict, so the row is YES over NO there, not
    one phrasing of the zoom over the other."""
    better = make_trajectory()
    reworded = FIRST_CALL.replace("Balmer emission looks broad", "Let me look at H-alpha first")
    worse = with_last_turn(with_turn(better, 0, reworded), OTHER_ANSWER)
    row = preference_row(better, worse)
    assert (row.step, row.differs_in) == (2, "answer")
    assert row.shared_turns == 6
    assert row.prompt[2]["content"][0]["text"] == FIRST_CALL  # the chosen one's own wording
    assert row.chosen[0]["content"][0]["text"] == ANSWER
    assert row.rejected[0]["content"][0]["text"] == OTHER_ANSWER
    assert row.images == [I0_PNG, HALPHA_PNG]


def test_it_puts_the_preference_on_the_call_whose_window_differs():
    better = make_trajectory()
    elsewhere = FIRST_CALL.replace("[6500, 6650]", "[4800, 4950]").replace("H-alpha", "H-beta")
    worse = with_turn(better, 0, elsewhere)
    row = preference_row(better, worse)
    assert (row.step, row.differs_in, row.shared_turns) == (0, "tool call", 2)
    assert row.chosen[0]["content"][0]["text"] == FIRST_CALL
    assert row.rejected[0]["content"][0]["text"] == elsewhere
    assert row.images == [I0_PNG]


def test_it_keeps_a_preference_between_two_justifications_of_one_verdict():
    better = make_trajectory()
    terse = ANSWER.replace("Broad double-peaked H-alpha emission.", "Yes.")
    row = preference_row(better, with_last_turn(better, terse))
    assert (row.step, row.differs_in) == (2, "answer wording")


def test_it_makes_no_row_when_only_the_wording_of_an_earlier_turn_differs():
    better = make_trajectory()
    reworded = FIRST_CALL.replace("Balmer emission looks broad", "Let me look at H-alpha first")
    with pytest.raises(NoPreferenceRow, match="only the wording of an earlier turn"):
        preference_row(better, with_turn(better, 0, reworded))
