"""The project's one Qwen2.5-VL chat template, shared by SFT, GRPO and serving.

The template lives next to this module in ``chat_template.jinja`` so vLLM can read the same file
(``vllm serve <ckpt> --chat-template agent/chat_template.jinja``). See ml_path.md section 2 for
why the stock Qwen2.5-VL template cannot be used (no tool calling, no generation markers).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

CHAT_TEMPLATE_PATH = Path(__file__).with_name("chat_template.jinja")


@cache
def load_chat_template() -> str:
    """The Jinja source of the project chat template."""
    return CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")
