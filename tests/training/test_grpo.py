"""One GRPO step on the tiny model with scripted generations: tool, images, mask, rewards."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
import torch

from agent.formats import to_trl_example
from agent.policies import build_policy
from tests.training.conftest import (
    ANSWER_NO,
    ANSWER_YES,
    H_ALPHA,
    PADS_PER_PLOT,
    scripted_trajectory,
    tool_call_turn,
)
from training.callbacks import JsonlMetricsSink, read_metrics
from training.checkpoint import load_lineage
from training.data import LabelledSpectrum
from training.grpo import build_grpo_run, main, parse_args, save_grpo_run

REPO = Path(__file__).resolve().parents[2]
CPU_CONFIG = REPO / "training" / "configs" / "grpo_cpu_tiny.yaml"
VISION = "<|vision_start|>" + "<|image_pad|>" * PADS_PER_PLOT + "<|vision_end|>"
NO_THINK_YES = "<answer>\\boxed{YES} broad H-alpha.</answer>"
NO_THINK_NO = "<answer>\\boxed{NO} nothing there.</answer>"
SECOND_TURNS = [ANSWER_YES, ANSWER_NO, NO_THINK_YES, NO_THINK_NO]
# Label YES, paper eq. 3 with alpha 0.2: right+format, wrong+format, right-format, wrong-format.
EXPECTED_REWARDS = [1.0, 0.0, 0.8, -0.2]


def cpu_args(model_path: Path, output_dir: Path, *extra: str) -> list[str]:
    return [
        "--config",
        str(CPU_CONFIG),
        "--model_name_or_path",
        str(model_path),
        "--output_dir",
        str(output_dir),
        *extra,
    ]


@pytest.fixture(scope="module")
def grpo_run(tiny_model_path, tmp_path_factory, cv_spectrum) -> dict[str, Any]:
    """One step: every rollout zooms into H-alpha, then gives one of SECOND_TURNS."""
    output_dir = tmp_path_factory.mktemp("grpo_run")
    args = parse_args(
        cpu_args(
            tiny_model_path,
            output_dir,
            "--per_device_train_batch_size",
            "4",
            "--num_generations",
            "4",
            "--max_completion_length",
            "512",
        )
    )
    item = LabelledSpectrum(cv_spectrum, "CV", "YES", cv_spectrum.object_id)
    sink = JsonlMetricsSink(output_dir / "metrics.jsonl")
    run = build_grpo_run(*args, items=[item], sink=sink)
    trainer, tokenizer = run.trainer, run.processor.tokenizer
    generations: list[dict[str, Any]] = []
    rewards: list[torch.Tensor] = []
    loss_inputs: list[dict[str, Any]] = []

    def fake_generate(input_ids, attention_mask=None, **kwargs):
        texts = [tool_call_turn()] * len(input_ids) if not generations else SECOND_TURNS
        generations.append({"input_ids": input_ids, "attention_mask": attention_mask, **kwargs})
        rows = [tokenizer(t + "<|im_end|>", add_special_tokens=False)["input_ids"] for t in texts]
        width = max(len(row) for row in rows)
        padded = [row + [tokenizer.pad_token_id] * (width - len(row)) for row in rows]
        return torch.cat([input_ids, torch.tensor(padded)], dim=1)

    calculate_rewards = trainer._calculate_rewards

    def record_rewards(*args: Any, **kwargs: Any) -> torch.Tensor:
        rewards.append(calculate_rewards(*args, **kwargs))
        return rewards[-1]

    compute_loss = trainer.compute_loss

    def record_loss_inputs(model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        loss_inputs.append(inputs)
        return compute_loss(model, inputs, *args, **kwargs)

    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    started = time.perf_counter()
    with (
        patch.object(trainer.model, "generate", side_effect=fake_generate),
        patch.object(trainer, "_calculate_rewards", side_effect=record_rewards),
        patch.object(trainer, "compute_loss", side_effect=record_loss_inputs),
    ):
        trainer.train()
    seconds = time.perf_counter() - started
    after = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    checkpoint = save_grpo_run(run, *args)
    return {
        "run": run,
        "tokenizer": tokenizer,
        "generations": generations,
        "rewards": rewards,
        "loss_inputs": loss_inputs,
        "before": before,
        "after": after,
        "seconds": seconds,
        "checkpoint": checkpoint,
        "metrics": read_metrics(output_dir / "metrics.jsonl"),
    }


def unpadded(generation: dict[str, Any], row: int) -> list[int]:
    ids, mask = generation["input_ids"][row], generation["attention_mask"][row]
    return ids[mask.bool()].tolist()


@pytest.mark.slow
def test_it_runs_the_environment_tool_once_per_rollout(grpo_run):
    environments = grpo_run["run"].trainer.environments
    calls = [[(c.wavelength_range, c.label, c.ok) for c in env.calls] for env in environments]
    assert calls == [[(H_ALPHA, "H-alpha", True)]] * 4


@pytest.mark.slow
def test_it_shows_the_second_generation_i0_and_the_tool_plot(grpo_run):
    tokenizer = grpo_run["tokenizer"]
    first, second = grpo_run["generations"]
    vision_start = tokenizer.convert_tokens_to_ids("<|vision_start|>")
    images_per_row = [unpadded(second, row).count(vision_start) for row in range(4)]
    assert len(first["image_grid_thw"]) == 4
    assert (len(second["image_grid_thw"]), images_per_row) == (8, [2, 2, 2, 2])


@pytest.mark.slow
def test_it_masks_exactly_the_tool_response_tokens(grpo_run):
    tokenizer = grpo_run["tokenizer"]
    (inputs,) = grpo_run["loss_inputs"]
    tool_text = grpo_run["run"].trainer.environments[0].calls[0].text
    suffix = (
        "\n<|im_start|>user\n<tool_response>\n"
        + VISION
        + tool_text
        + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    suffix_tokens = len(tokenizer(suffix, add_special_tokens=False)["input_ids"])
    zeros = (inputs["tool_mask"] == 0).sum(dim=1).tolist()
    assert zeros == [suffix_tokens] * 4


@pytest.mark.slow
def test_it_rewards_the_rollouts_by_paper_eq3(grpo_run):
    (rewards,) = grpo_run["rewards"]
    assert rewards[:, 0].tolist() == pytest.approx(EXPECTED_REWARDS)


@pytest.mark.slow
def test_it_updates_the_language_model(grpo_run):
    before, after = grpo_run["before"], grpo_run["after"]
    name = "model.language_model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(before[name], after[name])


@pytest.mark.slow
def test_it_keeps_the_vision_tower_frozen(grpo_run):
    before, after = grpo_run["before"], grpo_run["after"]
    vision = [n for n in before if "visual" in n]
    assert vision and all(torch.equal(before[n], after[n]) for n in vision)


@pytest.mark.slow
def test_it_prompts_grpo_with_the_sft_rendering_of_the_same_trajectory(grpo_run, cv_spectrum):
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    processor = grpo_run["run"].processor
    trajectory = scripted_trajectory(cv_spectrum, [tool_call_turn(), ANSWER_YES])
    collator = DataCollatorForVisionLanguageModeling(processor, assistant_only_loss=True)
    sft_ids = collator([to_trl_example(trajectory, images_as="pil")])["input_ids"][0].tolist()
    first, second = grpo_run["generations"]
    final_turn = grpo_run["tokenizer"](ANSWER_YES + "<|im_end|>\n", add_special_tokens=False)
    assert unpadded(first, 0) == sft_ids[: len(unpadded(first, 0))]
    assert unpadded(second, 0) == sft_ids[: len(sft_ids) - len(final_turn["input_ids"])]


@pytest.mark.slow
def test_it_sends_reward_tool_and_length_metrics_to_the_sink(grpo_run):
    tokenizer = grpo_run["tokenizer"]
    (record,) = [r for r in grpo_run["metrics"] if "reward_mean" in r.metrics]
    model_tokens = [
        len(tokenizer(tool_call_turn() + "<|im_end|>" + turn + "<|im_end|>")["input_ids"])
        for turn in SECOND_TURNS
    ]
    assert (record.stage, record.step) == ("grpo", 1)
    assert record.metrics["reward_mean"] == pytest.approx(sum(EXPECTED_REWARDS) / 4)
    assert record.metrics["tool_calls_mean"] == pytest.approx(1.0)
    assert record.metrics["response_length_mean"] == pytest.approx(sum(model_tokens) / 4)
    # predictions YES, NO, YES, NO against YES: tp 2, fn 2 -> F1 4/6
    assert record.metrics["batch_f1"] == pytest.approx(2 / 3)


@pytest.mark.slow
def test_it_registers_the_grpo_checkpoint_with_its_lineage(grpo_run, tiny_model_path):
    lineage = load_lineage(grpo_run["checkpoint"])
    assert (lineage.stage, lineage.base_model) == ("grpo", str(tiny_model_path))
    assert lineage.dataset["rows"] == 1
    assert lineage.config["SpecvetGRPOConfig"]["num_generations"] == 4
    policy = build_policy(
        {
            "kind": "transformers",
            "model_path": str(grpo_run["checkpoint"]),
            "sampling": {"max_new_tokens": 2},
        }
    )
    assert isinstance(
        policy.generate([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]), str
    )


@pytest.mark.slow
@pytest.mark.slow
def test_it_records_the_loss_aggregation_and_precision_in_the_lineage(grpo_run):
    recipe = load_lineage(grpo_run["checkpoint"]).config["recipe"]
    assert recipe["loss"]["loss_type"] == "dapo"
    assert "token-mean" in recipe["loss"]["why_default"]
    assert recipe["precision"]["load_dtype"] == "float32"


def test_it_adapts_only_language_model_lora_weights(tiny_model_path, tmp_path, cv_item):
    args = parse_args(cpu_args(tiny_model_path, tmp_path, "--preset", "spectra"))
    run = build_grpo_run(*args, items=[cv_item])
    trainable = [n for n, p in run.trainer.model.named_parameters() if p.requires_grad]
    assert args[0].lora_r == 64 and args[3].reward == "spectra"
    assert trainable and all("lora_" in n and "visual" not in n for n in trainable)


@pytest.mark.slow
def test_it_runs_the_cli_on_the_cpu_config(tiny_model_path, tmp_path):
    checkpoint = main(*parse_args(cpu_args(tiny_model_path, tmp_path)))
    records = read_metrics(checkpoint / "metrics.jsonl")
    assert [r.step for r in records if "reward_mean" in r.metrics] == [1]
    assert load_lineage(checkpoint).stage == "grpo"


def test_it_records_the_prompt_and_renderer_grpo_trains_with() -> None:
    from agent.render import RENDERER_NAME
    from training.config import DataArguments
    from training.grpo import collect_items

    items, sources = collect_items(
        DataArguments(specvi_mini_tasks=["CV"], specvi_mini_positives=1, specvi_mini_negatives=1)
    )
    assert len(items) == 2
    assert sources["prompt"].startswith("specvet")
    assert sources["initial_image"] == "re-rendered by specvet's tool for every row"
    assert sources["renderer"]["name"] == RENDERER_NAME
    assert sources["verl_rows"] == 0
