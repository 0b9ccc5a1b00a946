"""TRL vision DPO rows from two trajectories: cut where they part, images in the prompt only."""

from __future__ import annotations

import pytest

from agent.formats.dpo import NoPreferenceRow, preference_row
from agent.trajectory import Step, Trajectory
from tests.agent.test_trajectory import ANSWER, HALPHA_PNG, I0_PNG, make_trajectory

OTHER_ANSWER = "<think>No emission at all.</think>\n<answer>\\boxed{NO} Flat continuum.</answer>"


def with_last_turn(trajectory: Trajectory, text: str) -> Trajectory:
    """The same trajectory with its final answer replaced by ``text``."""
    data = trajectory.to_dict()
    changed = Trajectory.from_dict({**data, "steps": data["steps"][:-1]})
    changed.steps.append(Step.from_output(len(changed.steps), text))
    changed.finalize("answer")
    return changed


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
    with pytest.raises(NoPreferenceRow, match="user turn"):
        preference_row(trajectory, Trajectory.from_dict(data))
