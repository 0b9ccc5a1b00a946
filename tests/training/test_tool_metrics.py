"""Tool metrics count the observations that reached the rollout, not those TRL rolled back."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest.mock import patch

import pytest
import torch

from tests.training.conftest import tool_call_turn
from tests.training.test_grpo import cpu_args
from training.callbacks import JsonlMetricsSink, read_metrics
from training.data import LabelledSpectrum
from training.grpo import build_grpo_run, parse_args, tool_calling_processor
from training.rewards import log_tool_metrics


def call(ok: bool) -> SimpleNamespace:
    return SimpleNamespace(ok=ok, ran_tool=True)


def tool_turns(n: int) -> list[dict[str, Any]]:
    turns: list[dict[str, Any]] = []
    for _ in range(n):
        turns += [{"role": "assistant", "content": "x"}, {"role": "tool", "content": []}]
    return turns + [{"role": "assistant", "content": "y"}]


def test_it_counts_only_the_observations_left_in_each_completion() -> None:
    logged: list[tuple[str, float]] = []
    environments = [
        SimpleNamespace(calls=[call(True), call(False)]),  # both reached the rollout
        SimpleNamespace(calls=[call(False), call(True)]),  # the second was rolled back
    ]
    log_tool_metrics(
        lambda k, v: logged.append((k, v)), environments, [tool_turns(2), tool_turns(1)]
    )
    assert ("tool_calls_mean", 1.5) in logged
    failures = [value for key, value in logged if key == "tool_failure_rate"]
    assert failures == [0.0, 1.0, 1.0]


@pytest.fixture(scope="module")
def overflow_run(tiny_model_path, tmp_path_factory, cv_spectrum) -> dict[str, Any]:
    """Every rollout calls the tool, whose plot does not fit max_completion_length."""
    output_dir = tmp_path_factory.mktemp("grpo_overflow")
    model_args = parse_args(cpu_args(tiny_model_path, output_dir))[0]
    tokenizer = tool_calling_processor(model_args).tokenizer
    row = tokenizer(tool_call_turn() + "<|im_end|>", add_special_tokens=False)["input_ids"]

    def fake_generate(input_ids, attention_mask=None, **kwargs):
        return torch.cat([input_ids, torch.tensor([row] * len(input_ids))], dim=1)

    args = parse_args(
        cpu_args(
            tiny_model_path,
            output_dir,
            "--per_device_train_batch_size",
            "2",
            "--num_generations",
            "2",
            "--max_completion_length",
            str(len(row) + 8),  # the turn fits, its tool response (15 image pads + text) not
        )
    )
    item = LabelledSpectrum(cv_spectrum, "CV", "YES", cv_spectrum.object_id)
    run = build_grpo_run(*args, items=[item], sink=JsonlMetricsSink(output_dir / "metrics.jsonl"))
    with patch.object(run.trainer.model, "generate", side_effect=fake_generate):
        run.trainer.train()
    return {"run": run, "metrics": read_metrics(output_dir / "metrics.jsonl")}


@pytest.mark.slow
def test_it_reports_no_tool_call_when_every_plot_was_rolled_back(overflow_run):
    environments = overflow_run["run"].trainer.environments
    assert all(len(env.calls) == 1 and env.calls[0].ok for env in environments)  # the tool ran
    (record,) = [r for r in overflow_run["metrics"] if "tool_calls_mean" in r.metrics]
    assert record.metrics["tool_calls_mean"] == 0.0
    assert "tool_failure_rate" not in record.metrics
