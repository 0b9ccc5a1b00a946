"""The offline vLLM policy with a fake ``vllm`` module: batched chat, no leaked special tokens."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from agent.evaluation import evaluate, specvi_mini_samples
from agent.policies import build_policy

CALL = (
    '<think>zoom</think><tool_call>{"name": "spectral_visualization_tool", '
    '"arguments": {"wavelength_range": [6500, 6630], "label": "H-alpha"}}</tool_call><|im_end|>'
)
ANSWER = "<think>done</think><answer>\\boxed{YES} broad H-alpha.</answer><|im_end|><|endoftext|>"


class FakeLLM:
    instances: list[FakeLLM] = []

    def __init__(self, model: str, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.batches: list[int] = []
        FakeLLM.instances.append(self)

    def chat(self, conversations, sampling_params, **kwargs):
        self.batches.append(len(conversations))
        outputs = []
        for index, messages in enumerate(conversations):
            turn = sum(1 for message in messages if message["role"] == "assistant")
            text = CALL if turn == 0 else ANSWER
            completion = types.SimpleNamespace(text=text, token_ids=[1] * 10)
            outputs.append(
                types.SimpleNamespace(
                    outputs=[completion], prompt_token_ids=[1] * 50, request_id=index
                )
            )
        return outputs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = FakeLLM
    module.SamplingParams = lambda **kwargs: kwargs
    monkeypatch.setitem(sys.modules, "vllm", module)
    FakeLLM.instances.clear()
    return module


def test_it_strips_end_of_turn_tokens_from_what_vllm_returns(fake_vllm):
    policy = build_policy({"kind": "vllm", "model_path": "/models/ckpt"})
    conversation = [
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
        {"role": "user", "content": [{"type": "text", "text": "<tool_response>x</tool_response>"}]},
    ]
    assert policy.generate_batch([conversation]) == [ANSWER.split("<|im_end|>")[0]]


def test_it_evaluates_with_one_vllm_call_per_turn(fake_vllm):
    samples = specvi_mini_samples(split="test", tasks=["CV"], seed=3, scale=0.2)[:6]
    policy = build_policy({"kind": "vllm", "model_path": "/models/ckpt"})
    report = evaluate(samples, policy, benchmark="specvi-mini", split="test", batch_size=6)
    assert FakeLLM.instances[0].batches == [6, 6]
    assert all(result.format_ok for result in report.samples)
    assert all(result.prediction == "YES" for result in report.samples)
