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
# GRPO's learning is measured by the benchmark (minutes); the test checks its gradients reach
# every trainable group in a few steps, and that a constant reward moves nothing.
GRPO_SETTINGS = LearningSettings(grpo_steps=3)


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
    ("sabotage", "caught_by"),
    [
        ("frozen", "group layer0.self_attn: 0.00%"),
        ("masked_answer", "accuracy rose"),
        ("bf16", "norms"),
    ],
)
def test_it_catches_sft_whose_gradients_go_nowhere(learning_model, tmp_path, sabotage, caught_by):
    result = run_sft_stage(learning_model, tmp_path, SETTINGS, sabotage)
    problems = shortfalls(result, SETTINGS)
    assert any(caught_by in problem for problem in problems), problems


def test_it_moves_every_trainable_group_by_grpo_and_not_the_frozen_one(format_checkpoint, tmp_path):
    result = run_grpo_stage(format_checkpoint, tmp_path, GRPO_SETTINGS)
    assert result["rewards"] and len(set(result["rewards"])) > 1
    trainable = {group: share for group, share in result["moved"].items() if group != "vision"}
    assert min(trainable.values()) >= GRPO_SETTINGS.moved_share, trainable
    assert result["moved"]["vision"] == 0.0


def test_it_catches_grpo_with_a_constant_reward(format_checkpoint, tmp_path):
    result = run_grpo_stage(format_checkpoint, tmp_path, GRPO_SETTINGS, "constant_reward")
    assert set(result["moved"].values()) == {0.0}
    problems = shortfalls(result, GRPO_SETTINGS)
    assert any("reward rose" in problem for problem in problems), problems
    assert any("layer1.mlp: 0.00%" in problem for problem in problems), problems
