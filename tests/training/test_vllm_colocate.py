"""The colocated vLLM engine TRL builds gets Spec-o3's image limits (tested without vLLM)."""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from training.vllm_colocate import TRL_ENGINE_MODULE, colocate_engine, colocate_engine_kwargs


class FakeLLM:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def test_it_sizes_the_engine_for_i0_plus_eight_plots():
    kwargs = colocate_engine_kwargs(max_tool_calls=8, max_model_length=16384, max_pixels=12845056)
    assert kwargs["limit_mm_per_prompt"] == {"image": 9}
    assert kwargs["mm_processor_kwargs"] == {"max_pixels": 644 * 392}  # one plot, 322 tokens
    assert kwargs["max_num_batched_tokens"] == 16384


def test_it_keeps_a_smaller_training_pixel_budget_so_hf_and_vllm_resize_alike():
    kwargs = colocate_engine_kwargs(
        max_tool_calls=2, max_model_length=None, max_pixels=28 * 28 * 16
    )
    assert kwargs["limit_mm_per_prompt"] == {"image": 3}
    assert kwargs["mm_processor_kwargs"] == {"max_pixels": 28 * 28 * 16}


def test_it_passes_the_limits_to_the_engine_trl_builds(monkeypatch):
    module = importlib.import_module(TRL_ENGINE_MODULE)
    monkeypatch.setattr(module, "LLM", FakeLLM, raising=False)
    extra = colocate_engine_kwargs(max_tool_calls=8, max_model_length=16384, max_pixels=None)
    with colocate_engine(extra):
        # the call TRL 1.16 makes in VLLMGeneration._init_vllm (colocate)
        engine = module.LLM(model="runs/sft-7b", max_num_batched_tokens=4096, max_model_len=16384)
    assert engine.kwargs["limit_mm_per_prompt"] == {"image": 9}
    assert engine.kwargs["max_num_batched_tokens"] == 16384
    assert engine.kwargs["model"] == "runs/sft-7b"
    assert module.LLM is FakeLLM  # restored


def test_it_refuses_without_vllm(monkeypatch):
    module = importlib.import_module(TRL_ENGINE_MODULE)
    monkeypatch.delattr(module, "LLM", raising=False)
    with pytest.raises(ValueError, match="vLLM is not installed"), colocate_engine({}):
        pass


def test_trl_still_builds_its_engine_with_a_fixed_token_budget_and_no_image_limit():
    """The patch targets TRL 1.16's call; if TRL starts passing image limits, revisit it."""
    import inspect

    source = inspect.getsource(importlib.import_module(TRL_ENGINE_MODULE))
    assert "max_num_batched_tokens=4096" in source and "limit_mm_per_prompt" not in source
