"""The GRPO environment: same spectrum, same tool, same pictures as the agent loop."""

from __future__ import annotations

import inspect
import io
from typing import Any

import numpy as np
import pytest
from PIL import Image

from agent.tool import SpectralVisualizationTool
from tests.training.conftest import H_ALPHA
from training.data import rl_row
from training.environment import SpectrumInspectionEnv


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
    image_part, text_part = env.spectral_visualization_tool(H_ALPHA, label="H-alpha")
    expected = SpectralVisualizationTool(cv_spectrum).render(H_ALPHA, label="H-alpha")
    assert text_part == {"type": "text", "text": expected.text}
    assert image_part["type"] == "image"
    expected_pixels = np.asarray(Image.open(io.BytesIO(expected.png)).convert("RGB"))
    assert np.array_equal(np.asarray(image_part["image"]), expected_pixels)


def test_it_returns_only_the_text_for_a_refused_window(env, cv_spectrum):
    parts = env.spectral_visualization_tool([20000.0, 21000.0])
    refusal = SpectralVisualizationTool(cv_spectrum).render([20000.0, 21000.0])
    assert parts == [{"type": "text", "text": refusal.text}]


def test_it_records_each_call_and_its_outcome(env):
    env.spectral_visualization_tool(H_ALPHA, label="H-alpha")
    env.spectral_visualization_tool([20000.0, 21000.0])
    assert [(call.wavelength_range, call.label, call.ok) for call in env.calls] == [
        (H_ALPHA, "H-alpha", True),
        ([20000.0, 21000.0], "", False),
    ]
    assert env.n_failed_calls == 1


def test_it_forgets_the_calls_of_the_previous_rollout(env, row):
    env.spectral_visualization_tool(H_ALPHA)
    env.reset(**row)
    assert env.calls == []


def test_it_refuses_a_tool_call_before_reset():
    with pytest.raises(RuntimeError, match="reset"):
        SpectrumInspectionEnv().spectral_visualization_tool(H_ALPHA)


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
    assert schema["parameters"]["required"] == ["wavelength_range"]
    assert schema["parameters"]["properties"]["wavelength_range"]["items"] == {"type": "number"}
