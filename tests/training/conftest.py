"""Fixtures shared by the training tests: the tiny model, a CV spectrum, scripted trajectories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.inspection_tasks import get_task
from agent.policies.tiny_qwen import build_tiny_qwen25vl
from agent.rollout import inspect
from agent.spectra import Spectrum
from agent.synthetic import generate_split
from agent.trajectory import Trajectory
from training.data import LabelledSpectrum

TOOL_NAME = "spectral_visualization_tool"
H_ALPHA = [6500.0, 6630.0]
# A 644 x 392 plot under the tiny model's 28*28*16 pixel budget is resized to 84 x 140 pixels:
# 6 x 10 patches of 14 px, merged 2 x 2, so 15 image-pad tokens per picture.
PADS_PER_PLOT = 15


def tool_call_turn(wavelength_range: list[float] = H_ALPHA, label: str = "H-alpha") -> str:
    arguments = {"wavelength_range": wavelength_range, "label": label}
    payload = json.dumps({"name": TOOL_NAME, "arguments": arguments})
    return f"<think>Zoom into {label}.</think><tool_call>{payload}</tool_call>"


ANSWER_YES = "<think>Broad Balmer emission.</think><answer>\\boxed{YES} broad H-alpha.</answer>"
ANSWER_NO = "<think>Only absorption.</think><answer>\\boxed{NO} no emission lines.</answer>"


class ScriptedPolicy:
    """Returns canned assistant turns in order."""

    def __init__(self, turns: list[str]) -> None:
        self.turns = list(turns)

    def info(self) -> dict[str, Any]:
        return {"name": "scripted"}

    def generate(self, messages: list[dict[str, Any]]) -> str:
        return self.turns.pop(0)


@pytest.fixture(scope="session")
def tiny_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Qwen2.5-VL checkpoint, built once per test session."""
    return build_tiny_qwen25vl(tmp_path_factory.mktemp("tiny_qwen25vl_training"))


@pytest.fixture(scope="session")
def cv_spectrum() -> Spectrum:
    """A SpecVI-mini cataclysmic variable (a positive of task CV)."""
    return generate_split("CV", "train", n_pos=1, n_neg=0, seed=0)[0].spectrum


def scripted_trajectory(spectrum: Spectrum, turns: list[str], task: str = "CV") -> Trajectory:
    return inspect(spectrum, get_task(task), ScriptedPolicy(turns))


@pytest.fixture
def two_step_trajectory(cv_spectrum: Spectrum) -> Trajectory:
    """I0 + T0, a zoom into H-alpha, its plot, then a YES answer."""
    return scripted_trajectory(cv_spectrum, [tool_call_turn(), ANSWER_YES])


@pytest.fixture
def cv_item(cv_spectrum: Spectrum) -> LabelledSpectrum:
    return LabelledSpectrum(cv_spectrum, "CV", "YES", cv_spectrum.object_id)
