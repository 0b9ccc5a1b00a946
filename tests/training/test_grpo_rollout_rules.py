"""One GRPO step with completion logging on, and the same scripted turns through the inspection
loop: both follow agent.rollout_rules (malformed call, two calls in a turn, refused window)."""

from __future__ import annotations

from typing import Any
from unittest.mock import patch

import pandas as pd
import pytest
import torch

from agent.formats import to_trl_example
from agent.inspection_tasks import get_task
from agent.rollout import inspect
from tests.training.conftest import ANSWER_YES, ScriptedPolicy, tool_call_turn
from tests.training.test_grpo import cpu_args, unpadded
from training.callbacks import JsonlMetricsSink, read_metrics
from training.data import LabelledSpectrum
from training.grpo import build_grpo_run, parse_args

MALFORMED = '<think>Zoom in.</think><tool_call>{"name": "spectral_visualization_tool", </tool_call>'
TWO_CALLS = tool_call_turn() + tool_call_turn([4800.0, 4920.0], "H-beta").split("</think>")[1]
REFUSED = tool_call_turn([20000.0, 21000.0], "far red")
SCRIPT = [MALFORMED, TWO_CALLS, REFUSED, ANSWER_YES]


@pytest.fixture(scope="module")
def logged_run(tiny_model_path, tmp_path_factory, cv_spectrum) -> dict[str, Any]:
    output_dir = tmp_path_factory.mktemp("grpo_logged")
    args = parse_args(
        cpu_args(
            tiny_model_path,
            output_dir,
            "--per_device_train_batch_size",
            "2",
            "--num_generations",
            "2",
            "--max_completion_length",
            "4096",
            "--log_completions",
            "true",
        )
    )
    item = LabelledSpectrum(cv_spectrum, "CV", "YES", cv_spectrum.object_id)
    run = build_grpo_run(*args, items=[item], sink=JsonlMetricsSink(output_dir / "metrics.jsonl"))
    tokenizer = run.processor.tokenizer
    generations: list[dict[str, Any]] = []

    def fake_generate(input_ids, attention_mask=None, **kwargs):
        text = SCRIPT[len(generations)]
        generations.append({"input_ids": input_ids, "attention_mask": attention_mask})
        row = tokenizer(text + "<|im_end|>", add_special_tokens=False)["input_ids"]
        return torch.cat([input_ids, torch.tensor([row] * len(input_ids))], dim=1)

    with patch.object(run.trainer.model, "generate", side_effect=fake_generate):
        run.trainer.train()
    return {
        "run": run,
        "generations": generations,
        "output_dir": output_dir,
        "metrics": read_metrics(output_dir / "metrics.jsonl"),
    }


@pytest.fixture(scope="module")
def inspected(cv_spectrum):
    return inspect(cv_spectrum, get_task("CV"), ScriptedPolicy(SCRIPT))


@pytest.mark.slow
def test_it_logs_tool_calling_completions_to_parquet(logged_run):
    (path,) = sorted((logged_run["output_dir"] / "completions").glob("*.parquet"))
    table = pd.read_parquet(path)
    completion = list(table["completion"][0])
    assert [message["role"] for message in completion] == ["assistant", "tool"] * 3 + ["assistant"]
    assert completion[3]["content"].startswith("<image>")
    assert completion[-1]["content"] == ANSWER_YES


@pytest.mark.slow
def test_it_gives_training_and_inference_the_same_observations(logged_run, inspected):
    environment = logged_run["run"].trainer.environments[0]
    trained = [(call.text, call.ok) for call in environment.calls]
    served = [
        (step.tool_result.text, step.tool_result.image is not None)
        for step in inspected.steps
        if step.tool_result is not None
    ]
    assert trained == served
    assert [ok for _, ok in trained] == [False, True, False]
    assert inspected.stop_reason == "answer"


@pytest.mark.slow
def test_it_prompts_the_last_turn_with_the_inspection_loops_conversation(logged_run, inspected):
    from trl.trainer.sft_trainer import DataCollatorForVisionLanguageModeling

    processor = logged_run["run"].processor
    collator = DataCollatorForVisionLanguageModeling(processor, assistant_only_loss=True)
    served_ids = collator([to_trl_example(inspected, images_as="pil")])["input_ids"][0].tolist()
    last_prompt = unpadded(logged_run["generations"][-1], 0)
    final_turn = processor.tokenizer(ANSWER_YES + "<|im_end|>\n", add_special_tokens=False)
    assert last_prompt == served_ids[: len(served_ids) - len(final_turn["input_ids"])]


@pytest.mark.slow
def test_it_counts_refused_windows_and_malformed_turns_as_tool_failures(logged_run):
    (record,) = [r for r in logged_run["metrics"] if "reward_mean" in r.metrics]
    assert record.metrics["tool_failure_rate"] == pytest.approx(2 / 3)
    assert record.metrics["tool_calls_mean"] == pytest.approx(2.0)
    # TRL's own rate counts only exceptions, which is why it is not the one reported
    assert record.metrics["tools/failure_frequency"] == 0.0


def test_it_writes_one_schema_for_every_logged_message(tmp_path):
    from training.grpo import loggable_messages

    messages = [
        {
            "role": "assistant",
            "content": "<think>a</think>",
            "tool_calls": [{"function": {"name": "t"}}],
        },
        {
            "role": "tool",
            "content": [{"type": "image", "image": object()}, {"type": "text", "text": "x"}],
        },
    ]
    rows = loggable_messages(messages)
    assert rows == [
        {
            "role": "assistant",
            "content": "<think>a</think>",
            "tool_calls": [{"type": "function", "function": {"name": "t", "arguments": "{}"}}],
        },
        {"role": "tool", "content": "<image>x", "tool_calls": []},
    ]
    pd.DataFrame({"completion": [rows, rows[:1]]}).to_parquet(tmp_path / "log.parquet")
    assert len(pd.read_parquet(tmp_path / "log.parquet")) == 2
