"""TransformersPolicy end to end on CPU with the tiny random Qwen2.5-VL."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageDraw

from agent.policies.base import Policy, SamplingParams, code_version
from agent.policies.tiny_qwen import MAX_PIXELS
from agent.policies.transformers_policy import TransformersPolicy

WIDTH, HEIGHT = 644, 392  # agent.tool.IMAGE_SIZE
# smart_resize(392, 644, max_pixels=28*28*16): beta = sqrt(392*644 / 12544) = 4.486, so
# height floor(392/4.486/28)*28 = 84 and width floor(644/4.486/28)*28 = 140 -> 6 x 10 patches
# of 14 px -> 60 patches, merged 2 x 2 -> 15 image pads per image.
PADS_PER_IMAGE = 15
# With max_pixels = 28*28*4: beta = 8.972 -> 28 x 56 px -> 2 x 4 patches -> 2 image pads.
PADS_PER_IMAGE_AT_MIN_BUDGET = 2
MAX_NEW_TOKENS = 6


def spectrum_png(colour: str, slope: int) -> bytes:
    image = Image.new("RGB", (WIDTH, HEIGHT), "white")
    draw = ImageDraw.Draw(image)
    draw.line([(0, HEIGHT // 2), (WIDTH, HEIGHT // 2 - slope)], fill=colour, width=3)
    draw.text((10, 10), "flux", fill="black")
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def two_turn_conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": [{"type": "text", "text": "You inspect spectra."}]},
        {
            "role": "user",
            "content": [
                {"type": "image", "png": spectrum_png("red", 80)},
                {"type": "text", "text": "Is this a CV?"},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "<think>zoom</think><tool_call>{}</tool_call>"}],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<tool_response>\n"},
                {"type": "image", "png": spectrum_png("blue", -40)},
                {"type": "text", "text": "H-alpha shown\n</tool_response>"},
            ],
        },
    ]


@pytest.fixture(scope="module")
def policy(tiny_qwen_path: Path) -> TransformersPolicy:
    return TransformersPolicy(
        tiny_qwen_path, sampling=SamplingParams(max_new_tokens=MAX_NEW_TOKENS)
    )


def test_it_generates_a_string_for_a_two_turn_conversation_with_images(
    policy: TransformersPolicy,
) -> None:
    answer = policy.generate(two_turn_conversation())
    assert isinstance(answer, str)
    assert policy.last_usage["prompt_tokens"] > 2 * PADS_PER_IMAGE
    assert 1 <= policy.last_usage["completion_tokens"] <= MAX_NEW_TOKENS


def test_it_spends_the_image_pads_the_image_processor_computed(policy: TransformersPolicy) -> None:
    messages = two_turn_conversation()
    images = [
        Image.open(io.BytesIO(part["png"])).convert("RGB")
        for message in messages
        for part in message["content"]
        if part["type"] == "image"
    ]
    grids = policy.processor.image_processor(images)["image_grid_thw"]
    merge = policy.processor.image_processor.merge_size
    computed = [int(grid.prod()) // merge**2 for grid in grids]
    pad_id = policy.processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    prompt_ids = policy.prepare_inputs(messages)["input_ids"][0].tolist()
    assert computed == [PADS_PER_IMAGE, PADS_PER_IMAGE]
    assert prompt_ids.count(pad_id) == sum(computed)


def test_it_reports_the_image_pads_in_its_usage(policy: TransformersPolicy) -> None:
    policy.generate(two_turn_conversation())
    assert policy.last_usage["image_tokens"] == 2 * PADS_PER_IMAGE


def test_it_ends_the_prompt_with_the_generation_cue(policy: TransformersPolicy) -> None:
    prompt_ids = policy.prepare_inputs(two_turn_conversation())["input_ids"][0].tolist()
    text = policy.processor.tokenizer.decode(prompt_ids)
    assert text.endswith("H-alpha shown\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_it_decodes_only_new_tokens_up_to_the_end_of_turn(
    policy: TransformersPolicy, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from transformers.generation.utils import GenerateDecoderOnlyOutput

    tokenizer = policy.processor.tokenizer
    scripted = tokenizer.encode("<answer>", add_special_tokens=False)
    after_end = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])

    def fake_generate(input_ids: Any, **kwargs: Any) -> Any:
        sequences = torch.cat([input_ids, torch.tensor([scripted + after_end])], dim=1)
        # what transformers answers with return_dict_in_generate (the policy always asks it)
        return GenerateDecoderOnlyOutput(sequences=sequences)

    monkeypatch.setattr(policy.model, "generate", fake_generate)
    assert policy.generate(two_turn_conversation()) == "<answer>"
    assert policy.last_usage["completion_tokens"] == len(scripted) + 2


def test_it_is_deterministic_when_greedy(policy: TransformersPolicy) -> None:
    assert policy.generate(two_turn_conversation()) == policy.generate(two_turn_conversation())


def test_it_reproduces_a_sampled_run_from_its_seed(tiny_qwen_path: Path) -> None:
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=7)
    runs = []
    for _ in range(2):
        sampler = TransformersPolicy(tiny_qwen_path, sampling=sampling)
        runs.append([sampler.generate(two_turn_conversation()) for _ in range(2)])
    assert runs[0] == runs[1]
    assert runs[0][0] != runs[0][1]


def test_it_caps_image_tokens_with_max_pixels(tiny_qwen_path: Path) -> None:
    capped = TransformersPolicy(
        tiny_qwen_path, sampling=SamplingParams(max_new_tokens=1), max_pixels=28 * 28 * 4
    )
    capped.generate(two_turn_conversation())
    assert capped.last_usage["image_tokens"] == 2 * PADS_PER_IMAGE_AT_MIN_BUDGET


def test_it_describes_itself(policy: TransformersPolicy, tiny_qwen_path: Path) -> None:
    info = policy.info()
    assert isinstance(policy, Policy)
    assert info["policy"] == "transformers"
    assert info["model"] == str(tiny_qwen_path)
    assert info["sampling"] == {
        "temperature": 0.0,
        "top_p": 1.0,
        "max_new_tokens": MAX_NEW_TOKENS,
        "seed": None,
    }
    assert info["code_version"] == code_version() != ""


def test_it_rejects_a_message_that_breaks_the_format(policy: TransformersPolicy) -> None:
    messages = two_turn_conversation()
    messages[1]["content"][0] = {"type": "image", "png": b"GIF89a not a png"}
    with pytest.raises(ValueError, match=r"message 1 \(user\) part 0 image bytes are not a PNG"):
        policy.generate(messages)


def test_it_uses_the_checkpoint_pixel_budget_by_default(policy: TransformersPolicy) -> None:
    assert policy.processor.image_processor.size.longest_edge == MAX_PIXELS


def test_it_builds_from_a_json_spec(tiny_qwen_path: Path) -> None:
    from agent.policies import build_policy

    built = build_policy(
        {
            "kind": "transformers",
            "model_path": str(tiny_qwen_path),
            "sampling": {"max_new_tokens": 2},
        }
    )
    assert isinstance(built, TransformersPolicy)
    assert built.sampling == SamplingParams(max_new_tokens=2)


def test_it_names_a_missing_checkpoint_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing-ckpt"):
        TransformersPolicy(tmp_path / "missing-ckpt")


def test_it_falls_back_to_the_picklable_image_only_processor_without_torchvision(
    policy: TransformersPolicy,
) -> None:
    import importlib.util
    import pickle

    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed: the stock processor loads")
    processor = policy.processor
    assert type(processor).__name__ == "ImageOnlyQwen2_5_VLProcessor"
    restored = pickle.loads(pickle.dumps(processor))
    assert type(restored) is type(processor)
    assert restored.chat_template == processor.chat_template
