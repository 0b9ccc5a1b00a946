"""A checkpoint served in-process by vLLM, for fast batch evaluation on a GPU host.

vLLM is not part of the CPU install and its multimodal models need torchvision, so this policy
runs only on GPU hosts (ml_path.md sections 0 and 8). On such a host::

    python -m venv .venv && .venv/bin/pip install -r requirements-gpu.txt
    .venv/bin/python - <<'EOF'
    from agent.policies import build_policy
    policy = build_policy({"kind": "vllm", "model_path": "/ckpt/spec-o3-7b",
                           "sampling": {"temperature": 0.0, "max_new_tokens": 1024},
                           "mm_processor_kwargs": {"max_pixels": 28 * 28 * 400}})
    print(policy.generate_batch([messages_a, messages_b]))
    EOF

Keep ``mm_processor_kwargs["max_pixels"]`` equal to the value used in training (or cap it in
the checkpoint's ``preprocessor_config.json``): it fixes how many tokens each image costs, and
without it vLLM profiles memory for very large images (vLLM issue #20123). Prompts are
rendered by vLLM with the project chat template in the ``openai`` content format; the tool
parser is not used, the agent parses ``<tool_call>`` itself.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from agent.chat_template import load_chat_template
from agent.parsing import strip_special_tokens
from agent.policies.base import (
    PerThreadUsage,
    PolicyError,
    SamplingParams,
    code_version,
    to_openai_messages,
)

INSTALL_HINT = "pip install -r requirements-gpu.txt"


class VLLMOfflinePolicy(PerThreadUsage):
    """``vllm.LLM.chat`` with the project chat template; one engine per policy instance."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        sampling: SamplingParams | dict[str, Any] | None = None,
        limit_images: int = 9,
        max_model_len: int = 16384,
        mm_processor_kwargs: dict[str, Any] | None = None,
        gpu_memory_utilization: float = 0.85,
    ) -> None:
        if limit_images < 1:
            raise ValueError(f"limit_images must be >= 1, got {limit_images}")
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}"
            )
        vllm = _import_vllm()
        self.model_path = Path(model_path)
        self.sampling = SamplingParams.coerce(sampling)
        self.limit_images = limit_images
        self.max_model_len = max_model_len
        self.mm_processor_kwargs = dict(mm_processor_kwargs or {})
        self.gpu_memory_utilization = gpu_memory_utilization
        self.name = f"vllm:{self.model_path.name}"
        engine_kwargs: dict[str, Any] = {
            "limit_mm_per_prompt": {"image": limit_images},
            "max_model_len": max_model_len,
            "gpu_memory_utilization": gpu_memory_utilization,
        }
        if self.mm_processor_kwargs:
            engine_kwargs["mm_processor_kwargs"] = self.mm_processor_kwargs
        if self.sampling.seed is not None:
            engine_kwargs["seed"] = self.sampling.seed
        self._llm = vllm.LLM(model=str(self.model_path), **engine_kwargs)
        self._sampling_params = vllm.SamplingParams(
            temperature=self.sampling.temperature,
            top_p=self.sampling.top_p,
            max_tokens=self.sampling.max_new_tokens,
            seed=self.sampling.seed,
            # Keep the text as generated, like TransformersPolicy does.
            skip_special_tokens=False,
        )
        self._chat_template = load_chat_template()
        # One engine call at a time: threads sharing the policy take turns.
        self._generating = threading.Lock()

    def info(self) -> dict[str, Any]:
        return {
            "policy": "vllm",
            "name": self.name,
            "model": str(self.model_path),
            "limit_images": self.limit_images,
            "max_model_len": self.max_model_len,
            "mm_processor_kwargs": self.mm_processor_kwargs,
            "sampling": self.sampling.as_dict(),
            "code_version": code_version(),
        }

    def generate(self, messages: list[dict[str, Any]]) -> str:
        return self.generate_batch([messages])[0]

    def generate_batch(self, conversations: list[list[dict[str, Any]]]) -> list[str]:
        """One answer per conversation, generated together (vLLM batches them)."""
        if not conversations:
            return []
        with self._generating:
            outputs = self._llm.chat(
                [to_openai_messages(messages) for messages in conversations],
                sampling_params=self._sampling_params,
                use_tqdm=False,
                chat_template=self._chat_template,
                chat_template_content_format="openai",
            )
        if len(outputs) != len(conversations):
            raise PolicyError(
                f"vLLM returned {len(outputs)} outputs for {len(conversations)} conversations"
            )
        texts = []
        usages: list[dict[str, Any]] = []
        for output in outputs:
            if not output.outputs:
                raise PolicyError(f"vLLM returned no completion for request {output.request_id}")
            completion = output.outputs[0]
            texts.append(strip_special_tokens(completion.text))
            usages.append(
                {
                    "prompt_tokens": len(output.prompt_token_ids or []),
                    "completion_tokens": len(completion.token_ids),
                }
            )
        self.last_batch_usage = usages
        self.last_usage = usages[-1]
        return texts


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as error:
        raise PolicyError(
            f"vLLM is not installed ({error}); on a GPU host run: {INSTALL_HINT}"
        ) from error
    return vllm
