"""What TRL's ``frac_reward_zero_std`` shows for a collapsed group (every rollout answers NO).

Our eq.-3 reward gives identical answers identical rewards, exactly. TRL 1.16 computes the
group's standard deviation in float32 from the group mean (``nanstd``) and counts the group as
having none only when ``torch.isclose(std, 0)``, i.e. std <= 1e-8. For a reward that float32
cannot hold exactly (-0.2, 0.8: the picture task's answers have no ``<think>``, so every rollout
loses alpha) the float32 mean of a group of 7 to 39 (torch on the CPU) is one ulp off, the std is ~1.6e-8 (-0.2)
or ~6e-8 (0.8), and the group counts as having variance: ``frac_reward_zero_std`` is 0 for a
group of 8 identical answers, 1 for the same group of 4, and 1 for a group of 8 at 0 or 1.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
import torch

from tests.training.conftest import ANSWER_NO
from training.bench.picture_task import answer_turn
from training.callbacks import JsonlMetricsSink, read_metrics
from training.data import LabelledSpectrum
from training.grpo import build_grpo_run, parse_args
from training.rewards import spec_o3_reward

REPO = Path(__file__).resolve().parents[2]
CPU_CONFIG = REPO / "training" / "configs" / "grpo_cpu_tiny.yaml"
PICTURE_NO = answer_turn("NO")  # <answer>\boxed{NO}</answer>, the picture task's answer turn


def test_it_gives_a_group_of_identical_answers_exactly_equal_rewards():
    group = [[{"role": "assistant", "content": PICTURE_NO}]] * 8
    wrong = spec_o3_reward(group, ground_truth=["YES"] * 8)
    right = spec_o3_reward(group, ground_truth=["NO"] * 8)
    # No <think>: format fails on every rollout, so eq. 3 is accuracy - alpha.
    assert wrong == [-0.2] * 8 and right == [0.8] * 8


@pytest.mark.parametrize(
    ("value", "size", "zero"),
    [(-0.2, 8, False), (0.8, 8, False), (-0.2, 4, True), (0.0, 8, True), (1.0, 8, True)],
)
def test_it_finds_trl_counts_a_constant_group_as_varying_when_its_float32_mean_rounds(
    value, size, zero
):
    """TRL's own statistics of one constant group: a mean one ulp off gives a std above
    ``isclose``'s absolute tolerance (1e-8), a dyadic reward or a group of 4 a std of 0."""
    from trl.trainer.utils import nanstd

    group = torch.full((1, size), value, dtype=torch.float32)
    std = nanstd(group, dim=1)
    assert bool(torch.isclose(std, torch.zeros_like(std))) is zero
    assert float(std) < 1e-7  # ulps, never a real spread


def _one_step(model: Path, output_dir: Path, spectrum: Any, turn: str, generations: int) -> dict:
    """One GRPO step on one YES prompt whose ``generations`` rollouts all answer ``turn``;
    the metrics our callback sent to the sink, what TRL logged, and the rewards it computed."""
    args = parse_args(
        [
            "--config", str(CPU_CONFIG), "--model_name_or_path", str(model),
            "--output_dir", str(output_dir), "--per_device_train_batch_size", str(generations),
            "--num_generations", str(generations), "--max_completion_length", "64",
        ]
    )  # fmt: skip
    item = LabelledSpectrum(spectrum, "CV", "YES", spectrum.object_id)
    run = build_grpo_run(*args, items=[item], sink=JsonlMetricsSink(output_dir / "m.jsonl"))
    trainer, tokenizer = run.trainer, run.processor.tokenizer
    row = tokenizer(turn + "<|im_end|>", add_special_tokens=False)["input_ids"]
    rewards: list[torch.Tensor] = []

    def fake_generate(input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return torch.cat([input_ids, torch.tensor([row] * len(input_ids))], dim=1)

    calculate_rewards = trainer._calculate_rewards

    def record_rewards(*args: Any, **kwargs: Any) -> torch.Tensor:
        rewards.append(calculate_rewards(*args, **kwargs))
        return rewards[-1]

    with (
        patch.object(trainer.model, "generate", side_effect=fake_generate),
        patch.object(trainer, "_calculate_rewards", side_effect=record_rewards),
    ):
        trainer.train()
    (record,) = [r for r in read_metrics(output_dir / "m.jsonl") if "reward_mean" in r.metrics]
    (logged,) = [e for e in trainer.state.log_history if "frac_reward_zero_std" in e]
    return {"metrics": record.metrics, "trl": logged, "rewards": rewards[0][:, 0].tolist()}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("turn", "generations", "reward", "frac_zero_std", "loss"),
    [
        # The grpo_cpu preset's group: a collapsed group "varies", and its advantage is one ulp
        # over (one ulp + TRL's 1e-4), 1.5e-4 on every rollout (dapo loss -advantage at ratio 1).
        (PICTURE_NO, 8, -0.2, 0.0, -1.49e-4),
        (PICTURE_NO, 4, -0.2, 1.0, 0.0),  # the old 8 x 4 preset's group: the mean is exact
        (ANSWER_NO, 8, 0.0, 1.0, 0.0),  # with <think>, eq. 3 gives 0, exact in float32
    ],
)
def test_it_logs_trl_frac_reward_zero_std_of_a_group_that_all_answers_no(
    tiny_model_path, tmp_path, cv_spectrum, turn, generations, reward, frac_zero_std, loss
):
    step = _one_step(tiny_model_path, tmp_path, cv_spectrum, turn, generations)
    as_float32 = torch.tensor(reward, dtype=torch.float32).item()
    assert step["rewards"] == [as_float32] * generations  # identical on every rollout
    assert step["metrics"]["frac_reward_zero_std"] == frac_zero_std
    assert step["trl"]["frac_reward_zero_std"] == frac_zero_std  # forwarded unchanged
    assert step["metrics"]["loss"] == pytest.approx(loss, rel=1e-2, abs=1e-9)
    assert step["metrics"]["batch_accuracy"] == 0.0
    assert step["metrics"]["reward_std"] < 1e-7
