"""A local Hugging Face Qwen2.5-VL checkpoint as a policy, run in-process with transformers.

Slow but dependency-light: it runs on CPU (tests use a tiny random model) and on a single GPU.
Prompts are built exactly as in training: the processor of the checkpoint (the no-video
subclass on hosts without torchvision) with the project chat template.
"""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from agent.parsing import strip_special_tokens
from agent.policies.base import (
    PerThreadUsage,
    SamplingParams,
    code_version,
    validate_messages,
)
from agent.policies.kv_reuse import CachedPrefix, image_spans, prefill_suffix, reusable_length

END_OF_TURN_TOKENS = ("<|im_end|>", "<|endoftext|>")


class TransformersPolicy(PerThreadUsage):
    """Generate with ``Qwen2_5_VLForConditionalGeneration`` from a local checkpoint directory.

    One generation at a time per policy: the seeded sampling stream is one sequence, so threads
    sharing the policy (a worker's threads pool) take turns instead of interleaving it.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        device: str = "cpu",
        dtype: str | None = None,
        sampling: SamplingParams | dict[str, Any] | None = None,
        max_pixels: int | None = None,
        reuse_cache: bool = False,
        record_logits: bool = False,
    ) -> None:
        from transformers import Qwen2_5_VLForConditionalGeneration

        from agent.policies.qwen_processor import load_processor

        self.model_path = Path(model_path)
        self.device = device
        self.sampling = SamplingParams.coerce(sampling)
        self.max_pixels = max_pixels
        self.name = f"transformers:{self.model_path.name}"
        self.processor = load_processor(self.model_path, max_pixels=max_pixels)
        self.model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
            str(self.model_path), dtype=_torch_dtype(dtype)
        )
        self.model.to(device)  # type: ignore[arg-type]  # transformers' decorated to()
        self.model.eval()
        self._init_generation(reuse_cache=reuse_cache, record_logits=record_logits)

    def _init_generation(self, *, reuse_cache: bool, record_logits: bool) -> None:
        """The per-policy state ``generate`` reads, once ``processor``, ``model``, ``sampling``
        and ``device`` are set (a subclass around a model already in memory calls it too)."""
        import torch

        tokenizer = self.processor.tokenizer
        self._end_of_turn_ids = [
            tokenizer.convert_tokens_to_ids(token)
            for token in END_OF_TURN_TOKENS
            if token in tokenizer.get_vocab()
        ]
        self._image_token_id = self.processor.image_token_id
        self._rng_states: dict[str, torch.Tensor] | None = None
        if self.sampling.seed is not None:
            self._rng_states = _seeded_rng_states(self.sampling.seed, self.device)
        self._generating = threading.Lock()
        # Off by default: exact on the tiny CPU model (tests), not yet measured on a GPU.
        self.reuse_cache = reuse_cache
        self._prefix: CachedPrefix | None = None
        # On: each generate keeps the logits of every new token (float32, new tokens x vocab)
        # in ``last_logits``, so two ways of running the same prompt can be compared exactly.
        self.record_logits = record_logits
        self.last_logits: Any = None

    def info(self) -> dict[str, Any]:
        return {
            "policy": "transformers",
            "name": self.name,
            "model": str(self.model_path),
            "device": self.device,
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "max_pixels": self.max_pixels,
            "sampling": self.sampling.as_dict(),
            "code_version": code_version(),
        }

    def prepare_inputs(self, messages: list[dict[str, Any]]) -> Any:
        """The model inputs (ids, pixel values, grids) for ``messages`` plus the generation cue."""
        validate_messages(messages)
        return self.processor.apply_chat_template(
            to_processor_messages(messages),
            add_generation_prompt=True,
            tokenize=True,
            return_dict=True,
            return_tensors="pt",
        )

    def generate(self, messages: list[dict[str, Any]]) -> str:
        import torch

        inputs = self.prepare_inputs(messages).to(self.device)
        prompt_ids = inputs["input_ids"]
        reused = 0
        with self._generating, torch.inference_mode(), self._sampling_rng():
            if self.reuse_cache:
                result, reused = self._generate_reusing_cache(inputs)
            else:
                result = self.model.generate(  # type: ignore[misc]
                    **inputs, return_dict_in_generate=True, **self._generation_kwargs()
                )
        output = result.sequences
        if self.record_logits:
            self.last_logits = torch.stack(result.logits, dim=1)[0].float().cpu()
        new_ids = output[0, prompt_ids.shape[1] :].tolist()
        kept_ids = _cut_at_end_of_turn(new_ids, self._end_of_turn_ids)
        self.last_usage = {
            "prompt_tokens": int(prompt_ids.shape[1]),
            "completion_tokens": len(new_ids),
            "image_tokens": int((prompt_ids == self._image_token_id).sum()),
            "prefill_tokens": int(prompt_ids.shape[1]) - reused,
        }
        return strip_special_tokens(
            self.processor.tokenizer.decode(kept_ids, skip_special_tokens=False)
        )

    def _generate_reusing_cache(self, inputs: Any) -> tuple[Any, int]:
        """``generate`` continuing from the cache of the previous turn (agent.policies.kv_reuse);
        returns its output (sequences, logits when recorded) and how many prompt tokens came
        from the cache."""
        ids = inputs["input_ids"][0].tolist()
        images = image_spans(inputs, self._image_token_id)
        output: Any
        reused = reusable_length(self._prefix, ids, images) if self._prefix is not None else 0
        if reused > 0 and self._prefix is not None:
            cache = prefill_suffix(self.model, inputs, self._prefix, reused)
            output = self.model.generate(  # type: ignore[misc]
                input_ids=inputs["input_ids"],
                attention_mask=inputs["attention_mask"],
                past_key_values=cache,
                return_dict_in_generate=True,
                **self._generation_kwargs(),
            )
        else:
            output = self.model.generate(  # type: ignore[misc]
                **inputs, return_dict_in_generate=True, **self._generation_kwargs()
            )
        cache = output.past_key_values
        cached_ids = output.sequences[0, : cache.get_seq_length()].tolist()
        self._prefix = CachedPrefix(cache, cached_ids, images)
        return output, reused

    def _generation_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "max_new_tokens": self.sampling.max_new_tokens,
            "eos_token_id": self._end_of_turn_ids,
            "pad_token_id": self.processor.tokenizer.pad_token_id,
            "output_logits": self.record_logits,
        }
        if self.sampling.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kwargs.update(
                do_sample=True, temperature=self.sampling.temperature, top_p=self.sampling.top_p
            )
            kwargs["top_k"] = None
        return kwargs

    def restart_sampling(self) -> None:
        """Start the seeded sampling stream again, so the next episode samples as the first one
        after loading did (``agent.ablation`` re-runs one episode on several spectra)."""
        if self.sampling.seed is not None:
            with self._generating:
                self._rng_states = _seeded_rng_states(self.sampling.seed, self.device)

    @contextmanager
    def _sampling_rng(self) -> Iterator[None]:
        """Sample from this policy's own RNG stream so a seed reproduces a whole run."""
        if self._rng_states is None:
            yield
            return
        import torch

        cuda_devices = [torch.device(self.device).index or 0] if "cuda" in self.device else []
        with torch.random.fork_rng(devices=cuda_devices):
            torch.random.set_rng_state(self._rng_states["cpu"])
            if cuda_devices:
                torch.cuda.set_rng_state(self._rng_states["cuda"], cuda_devices[0])
            yield
            self._rng_states["cpu"] = torch.random.get_rng_state()
            if cuda_devices:
                self._rng_states["cuda"] = torch.cuda.get_rng_state(cuda_devices[0])


def to_processor_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Policy messages (PNG bytes) as processor messages (PIL images in ``image`` parts)."""
    from PIL import Image

    converted = []
    for message in messages:
        parts = []
        for part in message["content"]:
            if part["type"] == "text":
                parts.append({"type": "text", "text": part["text"]})
            else:
                image = Image.open(io.BytesIO(part["png"])).convert("RGB")
                parts.append({"type": "image", "image": image})
        converted.append({"role": message["role"], "content": parts})
    return converted


def _cut_at_end_of_turn(token_ids: list[int], end_ids: list[int]) -> list[int]:
    for position, token_id in enumerate(token_ids):
        if token_id in end_ids:
            return token_ids[:position]
    return token_ids


def _torch_dtype(dtype: str | None) -> Any:
    """None keeps the checkpoint's dtype; otherwise a torch dtype name such as 'bfloat16'."""
    if dtype is None:
        return "auto"
    import torch

    resolved = getattr(torch, dtype, None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"dtype {dtype!r} is not a torch dtype name (try 'float32' or 'bfloat16')")
    return resolved


def _seeded_rng_states(seed: int, device: str) -> dict[str, Any]:
    import torch

    states = {"cpu": torch.Generator().manual_seed(seed).get_state()}
    if "cuda" in device:
        with torch.random.fork_rng(devices=[torch.device(device).index or 0]):
            torch.cuda.manual_seed(seed)
            states["cuda"] = torch.cuda.get_rng_state(torch.device(device).index or 0)
    return states
