"""Shown to learn (issue 24): SFT through the project's own path measurably learns on the tiny
model, GRPO's gradients reach every trainable group, and the checks fail when gradients go
nowhere (negative controls: frozen layers, a mask hiding the answer, pure bf16, a constant
reward)."""

from __future__ import annotations

from pathlib import Path

import pytest

from training.bench.learning import (
    LearningSettings,
    build_learning_model,
    format_only_checkpoint,
    run_grpo_stage,
    run_sft_stage,
    shortfalls,
)

pytestmark = pytest.mark.slow
SETTINGS = LearningSettings()
# The negative controls that weight movement catches (frozen layers, pure bf16) show in a few
# steps; the masked answer needs the positive run's 30 to show accuracy does not rise.
SHORT_SFT = LearningSettings(sft_steps=4)
# GRPO learning: 12 steps of 4 prompts x 8 rollouts (the benchmark runs 16).
GRPO_SETTINGS = LearningSettings(grpo_steps=12)
# A constant reward moves nothing whatever the step count.
CONSTANT_GRPO = LearningSettings(grpo_steps=2, prompts_per_step=1)


@pytest.fixture(scope="module")
def learning_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_learning_model(tmp_path_factory.mktemp("learning") / "tiny", SETTINGS)


@pytest.fixture(scope="module")
def format_checkpoint(learning_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SFT on answers that ignore the hint: the format, and YES or NO at random."""
    result = format_only_checkpoint(learning_model, tmp_path_factory.mktemp("format"), SETTINGS)
    assert result["accuracy_after"] <= 0.75
    return Path(result["checkpoint"])


def test_it_learns_the_hinted_answer_by_sft(learning_model, tmp_path):
    result = run_sft_stage(learning_model, tmp_path, SETTINGS)
    assert result["accuracy_before"] <= 0.6
    assert result["accuracy_after"] >= 0.9
    assert shortfalls(result, SETTINGS) == []
    assert result["moved"]["vision"] == 0.0
    assert result["precision"]["checkpoint_dtype"] == "bfloat16"
    assert result["dtype"] == "torch.float32"  # fp32 master weights over the bf16 checkpoint


@pytest.mark.parametrize(
    ("sabotage", "stage_settings", "caught_by"),
    [
        ("frozen", SHORT_SFT, "group layer0.self_attn: 0.00%"),
        ("masked_answer", SETTINGS, "accuracy rose"),
        ("bf16", SHORT_SFT, "norms"),
    ],
)
def test_it_catches_sft_whose_gradients_go_nowhere(
    learning_model, tmp_path, sabotage, stage_settings, caught_by
):
    result = run_sft_stage(learning_model, tmp_path, stage_settings, sabotage)
    problems = shortfalls(result, stage_settings)
    assert any(caught_by in problem for problem in problems), problems


def test_it_raises_the_reward_by_grpo_and_moves_every_trainable_group(format_checkpoint, tmp_path):
    result = run_grpo_stage(format_checkpoint, tmp_path, GRPO_SETTINGS)
    assert len(result["rewards"]) == GRPO_SETTINGS.grpo_steps
    assert result["reward_last"] - result["reward_first"] >= GRPO_SETTINGS.reward_margin, result
    assert shortfalls(result, GRPO_SETTINGS) == []
    assert result["moved"]["vision"] == 0.0


def test_it_catches_grpo_with_a_constant_reward(format_checkpoint, tmp_path):
    result = run_grpo_stage(format_checkpoint, tmp_path, CONSTANT_GRPO, "constant_reward")
    assert set(result["moved"].values()) == {0.0}
    problems = shortfalls(result, CONSTANT_GRPO)
    assert any("reward rose" in problem for problem in problems), problems
    assert any("layer1.mlp: 0.00%" in problem for problem in problems), problems
