"""The project chat template: exact layout, loss mask, tool turns, TRL requirements."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agent.chat_template import CHAT_TEMPLATE_PATH, load_chat_template
from agent.policies.qwen_processor import load_processor

# 56 x 56 px is exactly min_pixels (28*28*4): 4 x 4 patches of 14 px, merged 2 x 2 -> 4 image pads.
SMALL_IMAGE_PADS = 4
TOOL_CALL = "<think>a</think><tool_call>{}</tool_call>"
ANSWER = "<answer>\\boxed{YES}</answer>"


@pytest.fixture(scope="module")
def processor(tiny_qwen_path: Path) -> Any:
    return load_processor(tiny_qwen_path)


def small_image(colour: str) -> Image.Image:
    return Image.new("RGB", (56, 56), colour)


def two_step_conversation() -> list[dict[str, Any]]:
    """T0 with image I0, a tool call, the tool result as a user turn with I1, the answer."""
    return [
        {"role": "system", "content": [{"type": "text", "text": "Inspect."}]},
        {
            "role": "user",
            "content": [
                {"type": "image", "image": small_image("red")},
                {"type": "text", "text": "CV?"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": TOOL_CALL}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<tool_response>\n"},
                {"type": "image", "image": small_image("blue")},
                {"type": "text", "text": "ok\n</tool_response>"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": ANSWER}]},
    ]


EXPECTED_TEXT = (
    "<|im_start|>system\nInspect.<|im_end|>\n"
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>CV?<|im_end|>\n"
    "<|im_start|>assistant\n" + TOOL_CALL + "<|im_end|>\n"
    "<|im_start|>user\n<tool_response>\n<|vision_start|><|image_pad|><|vision_end|>ok\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n" + ANSWER + "<|im_end|>\n"
)

# Token ids of the tiny byte-level tokenizer (agent/policies/tiny_qwen.py): 258 <|im_start|>,
# 256 <|im_end|>, 198 "\n", 259 <|vision_start|>, 261 <|image_pad|>, 260 <|vision_end|>,
# 263 <tool_call>, 264 </tool_call>; every other character is one byte-level id.
EXPECTED_IDS = [
    258, 82, 88, 82, 83, 68, 76, 198,  # <|im_start|>system\n
    40, 77, 82, 79, 68, 66, 83, 13, 256, 198,  # Inspect.<|im_end|>\n
    258, 84, 82, 68, 81, 198,  # <|im_start|>user\n
    259, 261, 261, 261, 261, 260, 34, 53, 30, 256, 198,  # I0 as 4 pads, CV?<|im_end|>\n
    258, 64, 82, 82, 72, 82, 83, 64, 77, 83, 198,  # <|im_start|>assistant\n
    27, 83, 71, 72, 77, 74, 29, 64, 27, 14, 83, 71, 72, 77, 74, 29,  # <think>a</think>
    263, 90, 92, 264, 256, 198,  # <tool_call>{}</tool_call><|im_end|>\n
    258, 84, 82, 68, 81, 198,  # <|im_start|>user\n
    27, 83, 78, 78, 75, 62, 81, 68, 82, 79, 78, 77, 82, 68, 29, 198,  # <tool_response>\n
    259, 261, 261, 261, 261, 260, 78, 74, 198,  # I1 as 4 pads, ok\n
    27, 14, 83, 78, 78, 75, 62, 81, 68, 82, 79, 78, 77, 82, 68, 29, 256, 198,  # </tool_response><|im_end|>\n
    258, 64, 82, 82, 72, 82, 83, 64, 77, 83, 198,  # <|im_start|>assistant\n
    27, 64, 77, 82, 86, 68, 81, 29, 59, 65, 78, 87, 68, 67, 90, 56, 36, 50, 92,  # <answer>\boxed{YES}
    27, 14, 64, 77, 82, 86, 68, 81, 29, 256, 198,  # </answer><|im_end|>\n
]  # fmt: skip


def render_ids(processor: Any, messages: list[dict[str, Any]], **kwargs: Any) -> list[int]:
    rendered = processor.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)
    return list(rendered["input_ids"][0])


def test_it_renders_the_two_step_conversation_in_the_qwen25vl_layout(processor: Any) -> None:
    assert processor.apply_chat_template(two_step_conversation(), tokenize=False) == EXPECTED_TEXT


def test_it_pins_the_token_ids_of_the_two_step_conversation(processor: Any) -> None:
    assert render_ids(processor, two_step_conversation()) == EXPECTED_IDS


def test_it_expands_each_small_image_to_four_pads(processor: Any) -> None:
    pad_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert render_ids(processor, two_step_conversation()).count(pad_id) == 2 * SMALL_IMAGE_PADS


def test_it_trains_only_on_assistant_turns_and_their_end_of_turn(processor: Any) -> None:
    rendered = processor.apply_chat_template(
        two_step_conversation(), tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = rendered["input_ids"][0], rendered["assistant_masks"][0]
    trained = processor.tokenizer.decode([i for i, keep in zip(ids, mask, strict=True) if keep])
    assert trained == TOOL_CALL + "<|im_end|>\n" + ANSWER + "<|im_end|>\n"


def test_it_renders_a_tool_message_exactly_like_the_user_tool_response_turn(processor: Any) -> None:
    as_user = two_step_conversation()
    as_tool = [
        *as_user[:3],
        {
            "role": "tool",
            "name": "spectral_visualization_tool",
            "content": [
                {"type": "image", "image": small_image("blue")},
                {"type": "text", "text": "ok"},
            ],
        },
        as_user[4],
    ]
    assert render_ids(processor, as_tool) == render_ids(processor, as_user)


def test_it_merges_consecutive_tool_messages_into_one_user_turn(processor: Any) -> None:
    messages = [
        {"role": "user", "content": "q"},
        {"role": "tool", "content": "r1"},
        {"role": "tool", "content": "r2"},
    ]
    rendered = processor.apply_chat_template(messages, tokenize=False)
    assert rendered.endswith(
        "<|im_start|>user\n<tool_response>\nr1\n</tool_response>"
        "\n<tool_response>\nr2\n</tool_response><|im_end|>\n"
    )


def test_it_renders_structured_tool_calls_in_the_hermes_format(processor: Any) -> None:
    arguments = {"wavelength_range": [6500, 6620], "label": "H-alpha"}
    messages = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "<think>t</think>",
            "tool_calls": [
                {"type": "function", "function": {"name": "zoom", "arguments": arguments}}
            ],
        },
    ]
    rendered = processor.apply_chat_template(messages, tokenize=False)
    assert rendered.endswith(
        "<|im_start|>assistant\n<think>t</think>\n<tool_call>\n"
        '{"name": "zoom", "arguments": {"wavelength_range": [6500, 6620], "label": "H-alpha"}}'
        "\n</tool_call><|im_end|>\n"
    )


def test_it_adds_the_default_system_turn_and_the_generation_cue(processor: Any) -> None:
    rendered = processor.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )


def test_it_does_not_render_the_tools_argument(processor: Any) -> None:
    tools = [{"type": "function", "function": {"name": "zoom", "parameters": {}}}]
    plain = processor.apply_chat_template(two_step_conversation(), tokenize=False)
    with_tools = processor.apply_chat_template(two_step_conversation(), tokenize=False, tools=tools)
    assert with_tools == plain


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ([{"role": "bot", "content": "x"}], "unsupported message role bot"),
        ([{"role": "user", "content": [{"type": "audio"}]}], "unsupported content part type audio"),
        (
            [{"role": "assistant", "content": "x", "reasoning_content": "r"}],
            "reasoning_content is not rendered",
        ),
    ],
)
def test_it_rejects_what_it_cannot_render(processor: Any, messages: list, reason: str) -> None:
    with pytest.raises(Exception, match=reason):
        processor.apply_chat_template(messages, tokenize=False)


def test_it_passes_the_tool_calling_checks_grpo_runs_at_init(processor: Any) -> None:
    from trl.chat_template_utils import is_chat_template_prefix_preserving, supports_tool_calling

    assert supports_tool_calling(processor)
    assert is_chat_template_prefix_preserving(processor)


def test_it_ships_in_the_tiny_checkpoint(tiny_qwen_path: Path) -> None:
    from transformers import AutoTokenizer

    template = CHAT_TEMPLATE_PATH.read_text(encoding="utf-8")
    assert load_chat_template() == template
    assert (tiny_qwen_path / "chat_template.jinja").read_text(encoding="utf-8") == template
    assert AutoTokenizer.from_pretrained(str(tiny_qwen_path)).chat_template == template
