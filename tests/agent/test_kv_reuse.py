"""Key-value cache reuse across turns (issue 24, item 7): greedy output is token-for-token the
same with and without reuse over a multi-turn episode whose later turns bring new images, and
the later turns prefill only what the cache does not hold. Issue 33 item 4: the logits are the
same too, on a tiny model whose logits follow the picture, and a ``rope_deltas`` shift fails it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agent.policies.transformers_policy as transformers_policy
from agent.bench.kv_reuse import (
    LOGIT_TOLERANCE,
    check_logits,
    episode_plots,
    sensitive_tiny_model,
)
from agent.policies.kv_reuse import prefill_suffix
from agent.policies.tiny_qwen import build_tiny_qwen25vl
from agent.policies.transformers_policy import TransformersPolicy
from tests.agent.test_transformers_policy import spectrum_png

pytestmark = pytest.mark.slow
GREEDY = {"temperature": 0.0, "max_new_tokens": 10}


@pytest.fixture(scope="module")
def wide_tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_qwen25vl(
        tmp_path_factory.mktemp("kv_reuse"), hidden_size=64, num_attention_heads=2
    )


def tool_response(colour: str, slope: int) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [
            {"type": "text", "text": "<tool_response>\n"},
            {"type": "image", "png": spectrum_png(colour, slope)},
            {"type": "text", "text": "window shown\n</tool_response>"},
        ],
    }


def opening(colour: str, slope: int) -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": [{"type": "text", "text": "You inspect spectra."}]},
        {
            "role": "user",
            "content": [
                {"type": "image", "png": spectrum_png(colour, slope)},
                {"type": "text", "text": "Is this a CV?"},
            ],
        },
    ]


def run_episode(policy: TransformersPolicy, plots: list[tuple[str, int]]) -> list[Any]:
    """I0, then one new plot per turn; each answer goes back into the history."""
    messages = opening("red", 80)
    turns = []
    for colour, slope in [*plots, ("", 0)]:
        text = policy.generate(messages)
        turns.append((text, dict(policy.last_usage)))
        messages.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
        if colour:
            messages.append(tool_response(colour, slope))
    return turns


def test_it_generates_the_same_tokens_with_the_cache_reused(wide_tiny_model):
    plots = [("blue", -40), ("green", 120)]
    plain = run_episode(TransformersPolicy(wide_tiny_model, sampling=GREEDY), plots)
    reusing = run_episode(
        TransformersPolicy(wide_tiny_model, sampling=GREEDY, reuse_cache=True), plots
    )
    assert [text for text, _ in reusing] == [text for text, _ in plain]
    prefilled = [usage["prefill_tokens"] for _, usage in reusing]
    prompts = [usage["prompt_tokens"] for _, usage in reusing]
    assert prefilled[0] == prompts[0]
    assert all(p < whole for p, whole in zip(prefilled[1:], prompts[1:], strict=True))
    assert [usage["prefill_tokens"] for _, usage in plain] == [u["prompt_tokens"] for _, u in plain]


def test_it_prefills_again_from_a_picture_that_changed(wide_tiny_model):
    """The same token ids with another I0 (pads are one id whatever the picture): the cache is
    reused only up to that picture."""
    reusing = TransformersPolicy(wide_tiny_model, sampling=GREEDY, reuse_cache=True)
    plain = TransformersPolicy(wide_tiny_model, sampling=GREEDY)
    reusing.generate(opening("red", 80))
    changed = opening("red", -80)
    assert reusing.generate(changed) == plain.generate(changed)
    ids = plain.prepare_inputs(changed)["input_ids"][0].tolist()
    first_pad = ids.index(plain.processor.image_token_id)
    assert reusing.last_usage["prompt_tokens"] == len(ids)
    assert reusing.last_usage["prefill_tokens"] == len(ids) - first_pad


@pytest.fixture(scope="module")
def sensitive_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return sensitive_tiny_model(tmp_path_factory.mktemp("kv_reuse_sensitive"))


@pytest.fixture(scope="module")
def episodes() -> list[tuple[list[dict[str, Any]], list[bytes]]]:
    """Two SpecVI-mini spectra, I0 then two tool plots each (plots differ turn to turn)."""
    return episode_plots(2, 2)


def test_it_gives_the_same_logits_with_the_cache_reused(sensitive_model, episodes):
    check = check_logits(sensitive_model, episodes)
    # The comparison means something: another spectrum's picture moves the first logits far
    # more than the tolerance (the default tiny model moved them by ~5e-4 only).
    assert check.image_sensitivity >= 10 * LOGIT_TOLERANCE
    assert len(check.differences) == 6  # 2 episodes x (I0 turn + 2 plot turns)
    assert check.text_mismatches == []
    assert check.max_difference <= LOGIT_TOLERANCE, check.verdict()
    assert check.ok


def test_it_fails_when_the_reused_positions_are_shifted(sensitive_model, episodes, monkeypatch):
    """The sabotage the greedy-string check missed: rope_deltas off by +7 after the prefill."""

    def shifted(model: Any, inputs: Any, cached: Any, reuse: int) -> Any:
        cache = prefill_suffix(model, inputs, cached, reuse)
        model.model.rope_deltas = model.model.rope_deltas + 7
        return cache

    monkeypatch.setattr(transformers_policy, "prefill_suffix", shifted)
    check = check_logits(sensitive_model, episodes)
    assert check.sensitive
    assert not check.ok
    assert check.max_difference > 100 * LOGIT_TOLERANCE
    assert "cache reuse changes the output" in check.verdict()


def test_it_refuses_to_vouch_for_a_model_blind_to_the_picture():
    from agent.bench.kv_reuse import LogitsCheck

    blind = LogitsCheck(differences=[0.0, 0.0], text_mismatches=[], image_sensitivity=5e-4)
    assert not blind.sensitive and not blind.ok
    assert blind.verdict().startswith("not checked")
