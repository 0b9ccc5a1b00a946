"""Groups whose rollouts all earn the same reward: TRL 1.16's float32 statistics and what
``SpecvetGRPOTrainer`` does with them.

Our eq.-3 reward gives identical answers identical rewards, exactly. TRL 1.16 computes the
group's standard deviation in float32 from the group mean (``nanstd``) and counts the group as
having none only when ``torch.isclose(std, 0)``, i.e. std <= 1e-8. For a reward that float32
cannot hold exactly (-0.2, 0.8: the picture task's answers have no ``<think>``, so every rollout
loses alpha) the float32 mean of a group of 7 to 39 (torch on the CPU) is one ulp off, the std is
~1.6e-8 (-0.2) or ~6e-8 (0.8), TRL counts the group as varying and gives every rollout one ulp
over (one ulp + 1e-4). Our trainer gives such a group advantage 0 and counts it as zero-std;
groups whose rewards differ keep TRL's advantages bit for bit.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
import torch

from agent.synthetic import generate_split
from training import grpo
from training.bench.picture_task import answer_turn
from training.callbacks import JsonlMetricsSink, read_metrics
from training.data import LabelledSpectrum
from training.grpo import build_grpo_run, equal_rows, parse_args
from training.rewards import spec_o3_reward

REPO = Path(__file__).resolve().parents[2]
CPU_CONFIG = REPO / "training" / "configs" / "grpo_cpu_tiny.yaml"
PICTURE_NO = answer_turn("NO")  # <answer>\boxed{NO}</answer>, the picture task's answer turn
PICTURE_YES = answer_turn("YES")


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
    """TRL's own statistics of one constant group (what our trainer corrects): a mean one ulp
    off gives a std above ``isclose``'s absolute tolerance (1e-8), a dyadic reward or a group of
    4 a std of 0."""
    from trl.trainer.utils import nanstd

    group = torch.full((1, size), value, dtype=torch.float32)
    std = nanstd(group, dim=1)
    assert bool(torch.isclose(std, torch.zeros_like(std))) is zero
    assert float(std) < 1e-7  # ulps, never a real spread


def test_it_finds_rows_whose_scored_rewards_are_all_equal():
    nan = float("nan")
    rewards = torch.tensor(
        [[-0.2] * 4, [-0.2, -0.2, 0.8, -0.2], [nan, 0.8, 0.8, nan], [nan] * 4, [0.0, 1e-9, 0, 0]]
    )
    assert equal_rows(rewards).tolist() == [True, False, True, False, False]


class _PlainTRL:
    """Builds the trainer without our equal-group correction: TRL 1.16's own advantages."""

    def __enter__(self) -> None:
        built = grpo._grpo_trainer_class()
        plain = type("PlainTRL", (built,), {"_zero_equal_groups": lambda self, output: None})
        self._patch = patch.object(grpo, "_grpo_trainer_class", return_value=plain)
        self._patch.start()

    def __exit__(self, *exc: object) -> None:
        self._patch.stop()


def _one_step(
    model: Path, output_dir: Path, labels: list[str], turns: list[str], plain: bool = False
) -> dict:
    """One GRPO step on one prompt per label, whose rollouts answer ``turns`` (one per rollout,
    ``len(turns) // len(labels)`` per prompt, in order); the metrics our callback sent to the
    sink, what TRL logged, the rewards and the advantages the trainer computed."""
    generations = len(turns) // len(labels)
    args = parse_args(
        [
            "--config", str(CPU_CONFIG), "--model_name_or_path", str(model),
            "--output_dir", str(output_dir), "--per_device_train_batch_size", str(len(turns)),
            "--num_generations", str(generations), "--max_completion_length", "64",
        ]
    )  # fmt: skip
    spectra = [
        row.spectrum for row in generate_split("CV", "train", n_pos=len(labels), n_neg=0, seed=0)
    ]
    items = [
        LabelledSpectrum(s, "CV", label, s.object_id)
        for s, label in zip(spectra, labels, strict=True)
    ]
    with _PlainTRL() if plain else contextlib.nullcontext():
        run = build_grpo_run(*args, items=items, sink=JsonlMetricsSink(output_dir / "m.jsonl"))
    trainer, tokenizer = run.trainer, run.processor.tokenizer
    rows = [tokenizer(t + "<|im_end|>", add_special_tokens=False)["input_ids"] for t in turns]
    width = max(len(row) for row in rows)
    padded = torch.tensor([row + [tokenizer.pad_token_id] * (width - len(row)) for row in rows])
    scored: list[dict] = []

    def fake_generate(input_ids: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return torch.cat([input_ids, padded], dim=1)

    score = trainer._generate_and_score_completions

    def record(*args: Any, **kwargs: Any) -> dict:
        scored.append(score(*args, **kwargs))
        return scored[-1]

    with (
        patch.object(trainer.model, "generate", side_effect=fake_generate),
        patch.object(trainer, "_generate_and_score_completions", side_effect=record),
    ):
        trainer.train()
    (record_,) = [r for r in read_metrics(output_dir / "m.jsonl") if "reward_mean" in r.metrics]
    (logged,) = [e for e in trainer.state.log_history if "frac_reward_zero_std" in e]
    return {
        "metrics": record_.metrics,
        "trl": logged,
        "rewards": trainer._scored_rewards[:, 0].tolist(),
        "advantages": scored[0]["advantages"].clone(),
    }


@pytest.mark.slow
@pytest.mark.parametrize(
    ("groups", "generations"),
    [
        ([("YES", PICTURE_NO, -0.2)], 8),  # the grpo_cpu preset's group, all wrong: TRL +1.5e-4
        ([("YES", PICTURE_NO, -0.2)], 4),  # the old 8 x 4 preset's group: TRL's mean is exact
    ],
)
def test_it_gives_a_group_of_identical_answers_no_advantage_and_counts_it_zero_std(
    tiny_model_path, tmp_path, groups, generations
):
    labels = [label for label, _, _ in groups]
    turns = [turn for _, turn, _ in groups for _ in range(generations)]
    step = _one_step(tiny_model_path, tmp_path, labels, turns)
    expected = [
        torch.tensor(reward, dtype=torch.float32).item()
        for _, _, reward in groups
        for _ in range(generations)
    ]
    assert step["rewards"] == expected  # identical on every rollout of a group
    assert torch.equal(step["advantages"], torch.zeros(len(turns)))
    assert step["metrics"]["loss"] == 0.0
    assert step["metrics"]["frac_reward_zero_std"] == 1.0
    assert step["trl"]["frac_reward_zero_std"] == 1.0  # TRL's log carries our figure


@pytest.mark.slow
def test_it_keeps_trl_advantages_of_a_group_whose_answers_differ(tiny_model_path, tmp_path):
    """One batch of two of the grpo_cpu preset's groups of 8 (one label: the trainer shuffles
    the prompts): all YES (right) and alternating YES/NO, through our trainer and through TRL's
    unmodified computation."""
    turns = [PICTURE_YES] * 8 + [PICTURE_YES, PICTURE_NO] * 4
    ours = _one_step(tiny_model_path, tmp_path / "ours", ["YES"] * 2, turns)
    trl = _one_step(tiny_model_path, tmp_path / "trl", ["YES"] * 2, turns, plain=True)
    assert ours["rewards"] == trl["rewards"]
    assert ours["rewards"][:8] == [torch.tensor(0.8, dtype=torch.float32).item()] * 8
    assert len(set(ours["rewards"][8:])) == 2
    assert torch.equal(ours["advantages"][8:], trl["advantages"][8:])  # bit for bit
    assert torch.equal(ours["advantages"][:8], torch.zeros(8))
    assert trl["advantages"][:8].tolist() == pytest.approx([-6e-4] * 8, rel=0.1)
    assert ours["metrics"]["frac_reward_zero_std"] == 0.5  # the all-YES group
    assert trl["metrics"]["frac_reward_zero_std"] == 0.0
