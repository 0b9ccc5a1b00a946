"""What the colocated vLLM engine needs for Spec-o3's multimodal prompts.

TRL 1.16 builds the colocated engine (``trl.generation.vllm_generation.VLLMGeneration``) with
``LLM(..., max_num_batched_tokens=4096)`` and no multimodal settings, so vLLM profiles memory for
its default of 999 images per prompt, each at the checkpoint's pixel budget (16,384 tokens per
image for Qwen2.5-VL's 12.8 M pixels), and may reserve far more than a rollout ever shows.
A Spec-o3 rollout shows I0 plus at most ``max_tool_calling_iterations`` plots (9), each rendered
by the agent's tool at ``agent.tool.IMAGE_SIZE`` (644 x 392 = 322 image tokens).

``colocate_engine_kwargs`` gives the engine exactly that: ``limit_mm_per_prompt`` of 1 + the tool
budget, ``mm_processor_kwargs.max_pixels`` of one plot (or the training processor's budget when
smaller, so HF and vLLM resize alike), and ``max_num_batched_tokens`` covering a whole prompt up
to ``vllm_max_model_length`` (at most 16,384). ``colocate_engine`` passes them to the engine TRL
builds, at the one place TRL constructs it.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from agent.tool import IMAGE_SIZE

TRL_ENGINE_MODULE = "trl.generation.vllm_generation"
TRL_BATCHED_TOKENS = 4096
MAX_BATCHED_TOKENS = 16384


def colocate_engine_kwargs(
    *, max_tool_calls: int | None, max_model_length: int | None, max_pixels: int | None
) -> dict[str, Any]:
    """The engine arguments for prompts of I0 plus up to ``max_tool_calls`` plots."""
    plot_pixels = IMAGE_SIZE[0] * IMAGE_SIZE[1]
    images = 1 + (max_tool_calls if max_tool_calls is not None else 8)
    batched = max(
        TRL_BATCHED_TOKENS, min(max_model_length or MAX_BATCHED_TOKENS, MAX_BATCHED_TOKENS)
    )
    return {
        "limit_mm_per_prompt": {"image": images},
        "mm_processor_kwargs": {"max_pixels": min(plot_pixels, max_pixels or plot_pixels)},
        "max_num_batched_tokens": batched,
    }


@contextmanager
def colocate_engine(extra: dict[str, Any]) -> Iterator[None]:
    """While open, the ``LLM`` TRL builds for colocate mode gets ``extra`` (which wins over
    TRL's own ``max_num_batched_tokens``)."""
    module = importlib.import_module(TRL_ENGINE_MODULE)
    original = getattr(module, "LLM", None)
    if original is None:
        raise ValueError("use_vllm is set but vLLM is not installed (TRL imported no LLM class)")

    @functools.wraps(original)
    def build(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **{**kwargs, **extra})

    module.LLM = build  # type: ignore[attr-defined]
    try:
        yield
    finally:
        module.LLM = original  # type: ignore[attr-defined]
