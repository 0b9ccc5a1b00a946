"""The GRPO environment: same spectrum, same tool, same pictures as the agent loop."""

from __future__ import annotations

import inspect
import io
from typing import Any

import numpy as np
import pytest
from PIL import Image

from agent.parsing import parse_turn
from agent.rollout_rules import TOOL_DISABLED_TEXT, feedback_for
from agent.tool import SpectralVisualizationTool
from tests.training.conftest import ANSWER_YES, H_ALPHA, tool_call_turn
from training.data import rl_row
from training.environment import SpectrumInspectionEnv, agent_response

OUTSIDE = [20000.0, 21000.0]


@pytest.fixture(scope="module")
def row(cv_spectrum) -> dict[str, Any]:
    from training.data import LabelledSpectrum

    return rl_row(LabelledSpectrum(cv_spectrum, "CV", "YES", "cv-1"))


@pytest.fixture
def env(row) -> SpectrumInspectionEnv:
    environment = SpectrumInspectionEnv()
    environment.reset(**row)
    return environment


def test_it_appends_nothing_to_the_prompt_on_reset(row):
    assert SpectrumInspectionEnv().reset(**row) is None


def test_it_returns_the_agent_tools_plot_and_text(env, cv_spectrum):
    image_part, text_part = env.spectral_visualization_tool(tool_call_turn())
    expected = SpectralVisualizationTool(cv_spectrum).render(H_ALPHA, label="H-alpha")
    assert text_part == {"type": "text", "text": expected.text}
    assert image_part["type"] == "image"
    expected_pixels = np.asarray(Image.open(io.BytesIO(expected.png)).convert("RGB"))
    assert np.array_equal(np.asarray(image_part["image"]), expected_pixels)


def test_it_returns_only_the_text_for_a_refused_window(env, cv_spectrum):
    parts = env.spectral_visualization_tool(tool_call_turn(OUTSIDE, "far red"))
    refusal = SpectralVisualizationTool(cv_spectrum).render(OUTSIDE, label="far red")
    assert parts == [{"type": "text", "text": refusal.text}]


def test_it_answers_a_malformed_turn_with_the_inspection_loops_feedback(env):
    turn = "<think>zoom</think><tool_call>{not json}</tool_call>"
    (part,) = env.spectral_visualization_tool(turn)
    assert part["text"] == feedback_for(parse_turn(turn))


def test_it_says_the_tool_is_disabled_in_the_no_tool_ablation(row):
    environment = SpectrumInspectionEnv(use_tool=False)
    environment.reset(**row)
    assert environment.spectral_visualization_tool(tool_call_turn()) == [
        {"type": "text", "text": TOOL_DISABLED_TEXT}
    ]


def test_it_records_each_call_and_its_outcome(env):
    env.spectral_visualization_tool(tool_call_turn())
    env.spectral_visualization_tool(tool_call_turn(OUTSIDE, ""))
    env.spectral_visualization_tool("<think>no call</think>")
    assert [(call.wavelength_range, call.label, call.ok) for call in env.calls] == [
        (H_ALPHA, "H-alpha", True),
        (OUTSIDE, "", False),
        (None, "", False),
    ]
    assert (env.n_failed_calls, env.n_tool_calls) == (2, 2)


def test_it_forgets_the_calls_of_the_previous_rollout(env, row):
    env.spectral_visualization_tool(tool_call_turn())
    env.reset(**row)
    assert env.calls == []


def test_it_refuses_a_tool_call_before_reset():
    with pytest.raises(RuntimeError, match="reset"):
        SpectrumInspectionEnv().spectral_visualization_tool(tool_call_turn())


def test_it_exposes_only_the_visualization_tool_to_trl():
    public = [
        name
        for name, _ in inspect.getmembers(SpectrumInspectionEnv, predicate=inspect.isfunction)
        if not name.startswith("_") and name not in ("reset", "get_reward")
    ]
    assert public == ["spectral_visualization_tool"]


def test_it_describes_the_tool_in_a_schema_trl_can_render(env):
    from transformers.utils import get_json_schema

    schema = get_json_schema(env.spectral_visualization_tool)["function"]
    assert schema["name"] == "spectral_visualization_tool"
    assert schema["parameters"]["required"] == ["assistant_turn"]


class ByteTokenizer:
    def decode(self, ids, skip_special_tokens=False):
        return bytes(ids).decode()


def encode(text: str) -> list[int]:
    return list(text.encode())


def test_it_parses_an_answer_as_the_end_of_the_rollout():
    message = agent_response(ByteTokenizer(), encode(ANSWER_YES + "<|im_end|>"))
    assert message == {"role": "assistant", "content": ANSWER_YES}


def test_it_hands_every_other_turn_whole_to_the_environment():
    for turn in (tool_call_turn(), "<think>x</think><tool_call>{bad</tool_call>", "hello"):
        message = agent_response(ByteTokenizer(), encode(turn + "<|im_end|>"))
        (call,) = message["tool_calls"]
        assert call["function"] == {
            "name": "spectral_visualization_tool",
            "arguments": {"assistant_turn": turn},
        }
