"""A tiny random Qwen2.5-VL checkpoint written fully offline (ml_path.md section 4).

Production code (``training.tiny_model``, ``agent.bench.kv_reuse``) and the tests build it from
here, so the CPU configs, the benchmarks and the tests run the same model.

Byte-level tokenizer (256 symbols, no merges, so any text encodes) plus the Qwen special tokens,
the PIL image processor with a small pixel budget, the project chat template, and a 2-layer
model with random weights. The configs name the stock ``Qwen2_5_VLProcessor``, like a real
checkpoint, so loading exercises the same no-torchvision fallback as a downloaded model.
"""

from __future__ import annotations

import json
from pathlib import Path

from agent.chat_template import load_chat_template

MIN_PIXELS = 28 * 28 * 4
MAX_PIXELS = 28 * 28 * 16
SEED = 0
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
PLAIN_ADDED_TOKENS = ("<tool_call>", "</tool_call>")


def build_tiny_qwen25vl(
    path: str | Path,
    *,
    hidden_size: int = 32,
    num_attention_heads: int = 4,
    initializer_range: float | None = None,
) -> Path:
    """Write the tiny checkpoint into ``path`` (created if needed) and return it.

    ``hidden_size`` and ``num_attention_heads`` widen the language model (the learning
    benchmark uses hidden 64 with 2 heads: head_dim 32 can key attention on one token);
    the defaults are the 115k-parameter model of the smoke runs. ``initializer_range`` (the
    standard deviation of the random weights; None keeps transformers' 0.02) set larger gives
    a model whose logits and greedy text change with the picture (``input_sensitive_config``).
    """
    import torch
    from transformers import (
        Qwen2_5_VLConfig,
        Qwen2_5_VLForConditionalGeneration,
        Qwen2VLImageProcessorPil,
    )

    from agent.policies.qwen_processor import STOCK_PROCESSOR_CLASS, build_image_only_processor

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = _byte_level_tokenizer()
    tokenizer.chat_template = load_chat_template()
    image_processor = Qwen2VLImageProcessorPil(min_pixels=MIN_PIXELS, max_pixels=MAX_PIXELS)
    processor = build_image_only_processor(image_processor, tokenizer, load_chat_template())
    scale = {} if initializer_range is None else {"initializer_range": initializer_range}
    config = Qwen2_5_VLConfig(
        text_config=_text_config(tokenizer, hidden_size, num_attention_heads) | scale,
        vision_config={
            "depth": 2,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_heads": 4,
            "out_hidden_size": hidden_size,
            "fullatt_block_indexes": [1],
            **scale,
        },
        **{
            f"{name}_token_id": tokenizer.convert_tokens_to_ids(token)
            for name, token in (
                ("image", "<|image_pad|>"),
                ("video", "<|video_pad|>"),
                ("vision_start", "<|vision_start|>"),
                ("vision_end", "<|vision_end|>"),
            )
        },
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(SEED)
        model = Qwen2_5_VLForConditionalGeneration(config)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    for config_name in ("processor_config.json", "tokenizer_config.json"):
        _set_processor_class(out / config_name, STOCK_PROCESSOR_CLASS)
    return out


def _byte_level_tokenizer():
    from tokenizers import AddedToken
    from transformers import Qwen2Tokenizer
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {symbol: i for i, symbol in enumerate(sorted(bytes_to_unicode().values()))}
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=[],
        unk_token=None,
        bos_token=None,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    tokenizer.add_tokens(
        [AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS]
    )
    tokenizer.add_tokens(
        [AddedToken(token, special=False, normalized=False) for token in PLAIN_ADDED_TOKENS]
    )
    return tokenizer


def _text_config(tokenizer, hidden_size: int, num_attention_heads: int) -> dict:
    return {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": 2 * hidden_size,
        "num_hidden_layers": 2,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": max(1, num_attention_heads // 2),
        "rope_scaling": {
            "type": "default",
            "mrope_section": _mrope_section(hidden_size // num_attention_heads),
            "rope_type": "default",
        },
        "eos_token_id": tokenizer.convert_tokens_to_ids("<|im_end|>"),
        "pad_token_id": tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        "bos_token_id": None,
    }


def _mrope_section(head_dim: int) -> list[int]:
    """Temporal, height and width rotary sections; they must sum to head_dim / 2 ([2, 1, 1] for
    head_dim 8, the Qwen2.5-VL proportions [16, 24, 24] of 64 scaled down otherwise)."""
    half = head_dim // 2
    if half < 4:
        raise ValueError(f"head_dim {head_dim} is too small for three rotary sections")
    spatial = half // 4 if half == 4 else (3 * half) // 8
    return [half - 2 * spatial, spatial, spatial]


def _set_processor_class(config_path: Path, processor_class: str) -> None:
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["processor_class"] = processor_class
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
