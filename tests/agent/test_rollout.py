from __future__ import annotations

import json

import numpy as np
import pytest

from agent.inspection_tasks import build_prompt, get_task, system_prompt
from agent.policies.base import PolicyError
from agent.rollout import Opening, inspect, inspect_batch
from agent.rollout_rules import TOOL_DISABLED_TEXT
from agent.spectra import Spectrum
from agent.trajectory import ImageRef
from tests.agent.test_trajectory import I0_PNG


class ScriptedPolicy:
    """Returns canned turns in order and records what it was sent."""

    name = "scripted"

    def __init__(self, turns: list[str]) -> None:
        self.turns = list(turns)
        self.seen: list[list[dict]] = []

    def info(self) -> dict:
        return {"name": self.name}

    def generate(self, messages: list[dict]) -> str:
        self.seen.append(messages)
        if not self.turns:
            return "<think>still thinking</think>"
        return self.turns.pop(0)


def call(lo: float, hi: float, label: str = "H-alpha") -> str:
    arguments = {"wavelength_range": [lo, hi], "label": label}
    payload = json.dumps({"name": "spectral_visualization_tool", "arguments": arguments})
    return f"<think>look at {label}</think><tool_call>{payload}</tool_call>"


ANSWER_YES = "<think>broad emission</think><answer>\\boxed{YES} broad Balmer emission.</answer>"


@pytest.fixture
def spectrum() -> Spectrum:
    wave = np.logspace(np.log10(3700), np.log10(9100), 3900)
    flux = 1 + 3 * np.exp(-0.5 * ((wave - 6564.6) / 15) ** 2)
    return Spectrum(wavelength=wave, flux=flux, ivar=np.full(wave.size, 100.0), object_id="T1")


@pytest.fixture
def cv():
    return get_task("CV")


def images_in(messages: list[dict]) -> int:
    return sum(1 for m in messages for part in m["content"] if part["type"] == "image")


def test_it_stops_on_an_answer(spectrum, cv):
    trajectory = inspect(spectrum, cv, ScriptedPolicy([ANSWER_YES]))
    assert trajectory.stop_reason == "answer"
    assert trajectory.answer.prediction == "YES"
    assert trajectory.format_ok is True
    assert trajectory.n_tool_calls == 0


def test_it_sends_i0_then_each_tool_image(spectrum, cv):
    policy = ScriptedPolicy([call(6500, 6630), call(4800, 4920, "H-beta"), ANSWER_YES])
    trajectory = inspect(spectrum, cv, policy)
    assert [images_in(m) for m in policy.seen] == [1, 2, 3]
    assert trajectory.n_tool_calls == 2
    assert len(trajectory.images()) == 3
    last_user = policy.seen[-1][-1]
    assert last_user["role"] == "user"
    assert last_user["content"][0]["text"].startswith("<tool_response>")


def test_it_turns_malformed_json_into_an_observation_and_continues(spectrum, cv):
    broken = '<think>x</think><tool_call>{"name": "spectral_visualization_tool", "arguments": </tool_call>'
    trajectory = inspect(spectrum, cv, ScriptedPolicy([broken, ANSWER_YES]))
    first = trajectory.steps[0]
    assert first.tool_result.ok is False
    assert "could not be used" in first.tool_result.text
    assert trajectory.stop_reason == "answer"
    assert trajectory.format_ok is False


def test_it_lets_the_model_recover_from_a_window_outside_coverage(spectrum, cv):
    trajectory = inspect(spectrum, cv, ScriptedPolicy([call(20000, 21000), ANSWER_YES]))
    assert trajectory.steps[0].tool_result.ok is False
    assert "cover" in trajectory.steps[0].tool_result.text
    assert trajectory.answer.prediction == "YES"
    assert trajectory.n_tool_errors == 1


def test_it_stops_at_the_tool_call_limit_without_an_answer(spectrum, cv):
    policy = ScriptedPolicy([call(6500 + i, 6630 + i) for i in range(5)])
    trajectory = inspect(spectrum, cv, policy, max_tool_calls=3)
    assert trajectory.stop_reason == "tool_limit"
    assert trajectory.answer is None
    assert trajectory.n_tool_calls == 3
    assert "tool-call limit (3)" in trajectory.errors[-1]


def test_it_records_a_policy_failure_instead_of_raising(spectrum, cv):
    class Broken(ScriptedPolicy):
        def generate(self, messages):
            raise PolicyError("endpoint http://127.0.0.1:9/v1 unreachable")

    trajectory = inspect(spectrum, cv, Broken([]))
    assert trajectory.stop_reason == "policy_error"
    assert "unreachable" in trajectory.errors[0]


def test_it_reports_each_step_as_it_happens(spectrum, cv):
    seen: list[tuple[int, int]] = []
    inspect(
        spectrum,
        cv,
        ScriptedPolicy([call(6500, 6630), ANSWER_YES]),
        on_step=lambda step, traj: seen.append((step.index, len(traj.steps))),
    )
    assert seen == [(0, 1), (1, 2)]


def test_it_refuses_tool_calls_in_the_no_tool_ablation(spectrum, cv):
    policy = ScriptedPolicy([call(6500, 6630), ANSWER_YES])
    trajectory = inspect(spectrum, cv, policy, use_tool=False)
    assert trajectory.steps[0].tool_result.text == TOOL_DISABLED_TEXT
    assert trajectory.steps[0].tool_result.image is None
    assert trajectory.n_tool_errors == 1
    assert images_in(policy.seen[-1]) == 1


def test_it_counts_turns_without_progress_against_the_tool_budget(spectrum, cv):
    trajectory = inspect(spectrum, cv, ScriptedPolicy([]), max_tool_calls=2)
    assert trajectory.stop_reason == "tool_limit"
    assert [step.tool_result is not None for step in trajectory.steps] == [True, True, False]
    assert trajectory.answer is None


def test_it_runs_only_the_first_of_two_calls_in_one_turn(spectrum, cv):
    two_calls = call(6500, 6630) + call(4800, 4920, "H-beta").split("</think>")[1]
    trajectory = inspect(spectrum, cv, ScriptedPolicy([two_calls, ANSWER_YES]))
    first = trajectory.steps[0]
    assert first.tool_result.image.wavelength_range[0] == pytest.approx(6500)
    assert len(trajectory.images()) == 2
    assert trajectory.format_ok is False


def test_it_records_policy_info_and_timings(spectrum, cv):
    trajectory = inspect(spectrum, cv, ScriptedPolicy([call(6500, 6630), ANSWER_YES]))
    assert trajectory.policy == {"name": "scripted"}
    assert trajectory.steps[0].generate_s is not None
    assert trajectory.steps[0].tool_s is not None


DATASET_SYSTEM = "Spec-o3 system prompt, as the benchmark row has it."
DATASET_PROMPT = "<image>\nIs this spectrum a cataclysmic variable? (the row's own words)"


def dataset_opening() -> Opening:
    return Opening(
        user_prompt=DATASET_PROMPT,
        system_prompt=DATASET_SYSTEM,
        image=ImageRef(I0_PNG, (3700.0, 9000.0), None),
    )


def first_turn(messages: list[dict]) -> tuple[str, list, list[bytes]]:
    system, user = messages[0], messages[1]
    texts = [part["text"] for part in user["content"] if part["type"] == "text"]
    images = [part["png"] for part in user["content"] if part["type"] == "image"]
    return system["content"][0]["text"], texts, images


def test_it_shows_a_datasets_own_prompt_and_first_image_unchanged(spectrum, cv):
    policy = ScriptedPolicy([call(6500, 6630), ANSWER_YES])
    trajectory = inspect(spectrum, cv, policy, opening=dataset_opening())
    system, texts, images = first_turn(policy.seen[0])
    assert system == DATASET_SYSTEM
    assert texts == ["\nIs this spectrum a cataclysmic variable? (the row's own words)"]
    assert images == [I0_PNG]
    assert trajectory.initial_image.png == I0_PNG
    assert (trajectory.meta["prompt_source"], trajectory.meta["initial_image_source"]) == (
        "dataset",
        "dataset",
    )
    # Tool observations are still drawn by specvet's renderer.
    assert len(trajectory.images()) == 2 and trajectory.images()[1] != I0_PNG


def test_it_shows_specvets_prompt_and_rendering_without_an_opening(spectrum, cv):
    policy = ScriptedPolicy([ANSWER_YES])
    trajectory = inspect(spectrum, cv, policy)
    system, texts, images = first_turn(policy.seen[0])
    assert system == system_prompt()
    assert trajectory.user_prompt == build_prompt(cv)
    assert images[0] != I0_PNG and images[0].startswith(b"\x89PNG")
    assert (trajectory.meta["prompt_source"], trajectory.meta["initial_image_source"]) == (
        "specvet",
        "specvet",
    )


def test_it_refuses_a_dataset_prompt_without_exactly_one_image_placeholder(spectrum, cv):
    opening = Opening(user_prompt="Is this a CV?", system_prompt=DATASET_SYSTEM)
    with pytest.raises(ValueError, match="exactly one <image>"):
        inspect(spectrum, cv, ScriptedPolicy([ANSWER_YES]), opening=opening)


def test_it_gives_each_batched_episode_its_own_opening(spectrum, cv):
    class Batch(ScriptedPolicy):
        def generate_batch(self, conversations: list[list[dict]]) -> list[str]:
            self.seen.extend(conversations)
            return [ANSWER_YES for _ in conversations]

    policy = Batch([])
    trajectories = inspect_batch(
        [(spectrum, cv), (spectrum, cv)], policy, openings=[dataset_opening(), None]
    )
    assert first_turn(policy.seen[0])[2] == [I0_PNG]
    assert first_turn(policy.seen[1])[0] == system_prompt()
    assert [t.meta["prompt_source"] for t in trajectories] == ["dataset", "specvet"]
