"""GRPO rewards on hand-made completions, with hand-computed values."""

from __future__ import annotations

import copy
import doctest
from pathlib import Path
from typing import Any

import pytest

import training.rewards
from tests.training.conftest import ANSWER_NO, ANSWER_YES, H_ALPHA, tool_call_turn
from training.rewards import (
    Rollout,
    SpectraRewardWeights,
    build_reward,
    rollout_from_ids,
    rollout_from_text,
    spec_o3_reward,
    spectra_components,
    spectra_reward,
)

H_BETA = [4820.0, 4905.0]
NO_THINK_YES = "<answer>\\boxed{YES} broad H-alpha.</answer>"
NO_THINK_NO = "<answer>\\boxed{NO} nothing there.</answer>"
TOOL_TEXT = "Showing 6500.0-6630.0 A (rest frame), 120 pixels."


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def tool_message(with_image: bool = True) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "text", "text": TOOL_TEXT}]
    if with_image:
        parts.insert(0, {"type": "image", "image": object()})
    return {"role": "tool", "name": "spectral_visualization_tool", "content": parts}


def completion(*turns: str, images: list[bool] | None = None) -> list[dict[str, Any]]:
    """Assistant turns with a tool message after every turn but the last."""
    images = images if images is not None else [True] * (len(turns) - 1)
    messages: list[dict[str, Any]] = []
    for position, turn in enumerate(turns):
        messages.append(assistant(turn))
        if position < len(images):
            messages.append(tool_message(images[position]))
    return messages


# --- paper eq. 3 -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("turns", "label", "expected"),
    [
        ((ANSWER_YES,), "YES", 1.0),  # correct, good format
        ((ANSWER_YES,), "NO", 0.0),  # wrong, good format
        ((NO_THINK_YES,), "YES", 0.8),  # correct, no <think>: 1 - alpha
        ((NO_THINK_NO,), "YES", -0.2),  # wrong, no <think>: -alpha
        ((tool_call_turn(), ANSWER_YES), "YES", 1.0),  # a zoom, then the right answer
        ((tool_call_turn(),), "YES", -0.2),  # stopped after a call: no answer, bad format
        ((ANSWER_YES + ANSWER_YES,), "YES", 0.8),  # two answers in one turn
    ],
)
def test_it_scores_eq3_on_hand_made_completions(turns, label, expected):
    assert spec_o3_reward([completion(*turns)], ground_truth=[label]) == [pytest.approx(expected)]


def test_it_uses_the_given_alpha():
    rewards = spec_o3_reward(
        [completion(NO_THINK_YES), completion(NO_THINK_NO)], ground_truth=["YES", "YES"], alpha=0.5
    )
    assert rewards == [pytest.approx(0.5), pytest.approx(-0.5)]


def test_it_fails_the_format_past_the_tool_call_budget():
    turns = [tool_call_turn()] * 3 + [ANSWER_YES]
    within = spec_o3_reward([completion(*turns)], ground_truth=["YES"], max_tool_calls=3)
    beyond = spec_o3_reward([completion(*turns)], ground_truth=["YES"], max_tool_calls=2)
    assert (within, beyond) == ([1.0], [pytest.approx(0.8)])


def test_it_reads_plain_string_completions_as_one_turn():
    assert spec_o3_reward([ANSWER_NO], ground_truth=["NO"]) == [1.0]


def test_it_logs_batch_f1_accuracy_and_format_rate():
    logged: dict[str, float] = {}
    spec_o3_reward(
        [
            completion(ANSWER_YES),
            completion(ANSWER_NO),
            completion(NO_THINK_YES),
            completion(ANSWER_NO),
        ],
        ground_truth=["YES", "YES", "NO", "NO"],
        log_metric=logged.__setitem__,
    )
    # predictions YES, NO, YES, NO: tp 1, fn 1, fp 1, tn 1 -> F1 2/(2+1+1), accuracy 2/4
    assert logged["batch_f1"] == pytest.approx(0.5)
    assert logged["batch_accuracy"] == pytest.approx(0.5)
    assert logged["format_ok_rate"] == pytest.approx(0.75)


@pytest.mark.parametrize(
    ("labels", "message"),
    [(["MAYBE"], "YES or NO"), (["YES", "NO"], "2 ground truths for 1 completions")],
)
def test_it_rejects_bad_ground_truth(labels, message):
    with pytest.raises(ValueError, match=message):
        spec_o3_reward([completion(ANSWER_YES)], ground_truth=labels)


# --- reading completions -------------------------------------------------------------------------


def tool_suffix(text: str, pads: int) -> str:
    image = "<|vision_start|>" + "<|image_pad|>" * pads + "<|vision_end|>" if pads else ""
    return (
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n"
        + image
        + text
        + "\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_it_splits_decoded_completions_into_turns_and_tool_responses():
    text = (
        tool_call_turn()
        + tool_suffix(TOOL_TEXT, pads=3)
        + tool_call_turn(H_BETA, "H-beta")
        + tool_suffix("The window is outside the coverage.", pads=0)
        + ANSWER_YES
        + "<|im_end|>"
    )
    rollout = rollout_from_text(text)
    assert rollout == Rollout(
        [tool_call_turn(), tool_call_turn(H_BETA, "H-beta"), ANSWER_YES], [True, False]
    )


def test_it_keeps_a_truncated_last_turn():
    rollout = rollout_from_text(tool_call_turn() + tool_suffix(TOOL_TEXT, pads=2) + "<think>cut")
    assert rollout.turns == [tool_call_turn(), "<think>cut"]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path: Path) -> Any:
    from trl.chat_template_utils import qwen3_template

    from agent.policies.qwen_processor import load_processor

    processor = load_processor(tiny_model_path)
    processor.tokenizer.response_template = copy.deepcopy(qwen3_template)
    return processor.tokenizer


def test_it_reads_the_exact_generated_turns_from_completion_ids(tokenizer):
    text = tool_call_turn() + tool_suffix(TOOL_TEXT, pads=4) + ANSWER_YES + "<|im_end|>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert rollout_from_ids(ids, tokenizer) == Rollout([tool_call_turn(), ANSWER_YES], [True])


def test_it_scores_the_generated_text_not_the_parsed_messages(tokenizer):
    from trl.chat_template_utils import parse_response

    raw = "stray words <think>Broad lines.</think><answer>\\boxed{YES} broad.</answer>"
    prompt = tokenizer("<|im_start|>user\nCV?<|im_end|>\n<|im_start|>assistant\n")["input_ids"]
    ids = tokenizer(raw + "<|im_end|>", add_special_tokens=False)["input_ids"]
    parsed = [parse_response(tokenizer, ids, prefix=prompt)]  # TRL drops the stray words
    exact = spec_o3_reward(
        [parsed], ground_truth=["YES"], tokenizer=tokenizer, completion_ids=[ids]
    )
    rebuilt = spec_o3_reward([parsed], ground_truth=["YES"])
    assert (exact, rebuilt) == ([pytest.approx(0.8)], [1.0])


def test_it_rebuilds_turns_from_parsed_tool_calls():
    message = {
        "role": "assistant",
        "reasoning_content": "Zoom into H-alpha.",
        "content": "",
        "tool_calls": [
            {
                "type": "function",
                "function": {
                    "name": "spectral_visualization_tool",
                    "arguments": {"wavelength_range": H_ALPHA, "label": "H-alpha"},
                },
            }
        ],
    }
    rollout = training.rewards.rollout_from_messages(
        [message, tool_message(), assistant(ANSWER_YES)]
    )
    assert rollout == Rollout([tool_call_turn(), ANSWER_YES], [True])


# --- SPECTRA eqs. 5-11 ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "label", "expected"),
    [
        # right after one H-alpha plot: C1 8, struct 2, tool 1+1+0.1, term 2
        (completion(tool_call_turn(), ANSWER_YES), "YES", 2.5 * (8 + 2 + 2 * 2.1 + 3 * 2) / 21.6),
        # wrong direct answer: struct 2*0.75^2, no tool reward, term 2
        (completion(ANSWER_NO), "YES", 2.5 * (2 * 0.75**2 + 3 * 2) / 21.6),
        # a plot but no answer: format fails (struct 0), tool 2.1, no terminal reward
        (completion(tool_call_turn(), images=[True]), "YES", 2.5 * (2 * 2.1) / 21.6),
        # the tool refused the window, then right: struct 2*0.75, tool 1+0+0.1
        (
            completion(tool_call_turn(), ANSWER_YES, images=[False]),
            "YES",
            2.5 * (8 + 2 * 0.75 + 2 * 1.1 + 3 * 2) / 21.6,
        ),
        # no <think>, right: struct 0, term 2
        (completion(NO_THINK_YES), "YES", 2.5 * (8 + 3 * 2) / 21.6),
    ],
)
def test_it_scores_spectra_on_hand_made_completions(messages, label, expected):
    assert spectra_reward([messages], ground_truth=[label], task=["CV"]) == [
        pytest.approx(expected)
    ]


def test_it_caps_repeated_windows_at_kappa():
    turns = [tool_call_turn()] * 3 + [tool_call_turn(H_BETA, "H-beta")] * 2 + [ANSWER_YES]
    parts = spectra_components(Rollout(turns, [True] * 5), "YES", "CV")
    assert parts.tool == pytest.approx(1 + 1 + (0.1 * 2 + 0.1 * 2))


def test_it_caps_the_diversity_bonus_at_eta():
    windows = [(6500, 6630), (4820, 4905), (4600, 4720), (5830, 5930), (6640, 6720)]
    windows += [(3850, 4400), (4890, 5200), (6900, 9000), (8000, 8100)]  # 8 CV windows + other
    turns = [tool_call_turn(list(w), "w") for w in windows] + [ANSWER_YES]
    parts = spectra_components(Rollout(turns, [True] * len(windows)), "YES", "CV")
    assert parts.tool == pytest.approx(1 + 1 + 0.8)  # 9 kinds * 0.1 capped at eta


def test_it_gives_no_syntax_reward_when_a_call_has_trailing_commas():
    bad = tool_call_turn().replace('"H-alpha"}', '"H-alpha",}')  # repaired, but an error
    parts = spectra_components(Rollout([bad, ANSWER_YES], [True]), "YES", "CV")
    assert parts.tool == pytest.approx(0 + 1 + 0.1)


def test_it_normalises_by_the_largest_raw_reward():
    weights = SpectraRewardWeights()
    largest = 1.0 * 8 + 1.0 * 2 + 2.0 * (1 + 1 + 0.8) + 3.0 * 2
    assert weights.n_norm == pytest.approx(largest)


def test_it_binds_the_tokenizer_and_settings_in_build_reward(tokenizer):
    reward = build_reward("spec_o3", tokenizer=tokenizer, alpha=0.5)
    ids = tokenizer(NO_THINK_YES + "<|im_end|>", add_special_tokens=False)["input_ids"]
    assert reward([[]], ground_truth=["YES"], completion_ids=[ids]) == [pytest.approx(0.5)]


def test_it_rejects_an_unknown_reward_name():
    with pytest.raises(ValueError, match="unknown reward 'dapo'"):
        build_reward("dapo", tokenizer=None)


def test_it_passes_its_doctests():
    assert doctest.testmod(training.rewards).failed == 0
