"""Policy registry, sampling parameters, message validation, the vLLM install hint."""

from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from agent.policies import POLICY_KINDS, build_policy
from agent.policies.base import (
    PNG_SIGNATURE,
    PolicyError,
    SamplingParams,
    code_version,
    to_openai_messages,
    validate_messages,
)
from agent.policies.openai_compatible import OpenAICompatiblePolicy

REPO_ROOT = Path(__file__).resolve().parents[2]
FAKE_PNG = PNG_SIGNATURE + b"rest of the file"


def user_turn(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "content": list(parts)}


def test_it_builds_an_openai_policy_with_sampling_from_a_json_spec() -> None:
    policy = build_policy(
        {
            "kind": "openai",
            "base_url": "http://127.0.0.1:8000/v1",
            "model": "m",
            "sampling": {"temperature": 0.5, "max_new_tokens": 32},
        }
    )
    assert isinstance(policy, OpenAICompatiblePolicy)
    assert policy.sampling == SamplingParams(temperature=0.5, max_new_tokens=32)


def test_it_imports_the_rule_based_inspector_lazily_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class RuleBasedInspector:
        name = "rule-based"

        def __init__(self, threshold: float = 1.0) -> None:
            self.threshold = threshold

    module = types.ModuleType("agent.policies.rule_based")
    module.RuleBasedInspector = RuleBasedInspector  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "agent.policies.rule_based", module)
    policy = build_policy({"kind": "rule-based", "threshold": 3.0})
    assert isinstance(policy, RuleBasedInspector)
    assert policy.threshold == 3.0


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"base_url": "http://x/v1"}, r"kind None is not one of \['openai', 'rule-based'"),
        ({"kind": "gpt"}, r"kind 'gpt' is not one of"),
        (
            {"kind": "openai", "base_url": "http://x/v1", "model": "m", "temp": 1},
            r"spec for kind 'openai' has bad arguments: .*'temp'",
        ),
        ({"kind": "openai", "model": "m"}, r"spec for kind 'openai' has bad arguments: .*base_url"),
        (["openai"], "policy spec must be a dict"),
    ],
)
def test_it_rejects_a_bad_spec(spec: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        build_policy(spec)


def test_it_knows_the_four_policy_kinds() -> None:
    assert sorted(POLICY_KINDS) == ["openai", "rule-based", "transformers", "vllm"]


def test_it_tells_how_to_install_vllm_when_it_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(
        PolicyError, match=r"vLLM is not installed .*pip install -r requirements-gpu.txt"
    ):
        build_policy({"kind": "vllm", "model_path": "/models/ckpt"})


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"temperature": -0.1}, "temperature must be >= 0"),
        ({"temperature": float("nan")}, "temperature must be >= 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"max_new_tokens": 0}, "max_new_tokens must be >= 1"),
        ({"max_new_tokens": 8.5}, "max_new_tokens must be an int"),
        ({"seed": "7"}, "seed must be an int or None"),
    ],
)
def test_it_rejects_impossible_sampling_parameters(fields: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        SamplingParams(**fields)


def test_it_rejects_unknown_sampling_keys_from_a_spec() -> None:
    with pytest.raises(ValueError, match=r"unknown sampling parameters \['max_tokens'\]"):
        SamplingParams.coerce({"max_tokens": 5})


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ([], "messages must be a non-empty list"),
        ([{"role": "tool", "content": []}], r"message 0 has role 'tool'"),
        ([{"role": "user", "content": "text"}], r"message 0 \(user\) content must be a list"),
        ([user_turn({"type": "image"})], r"part 0 is an image part without 'png' bytes"),
        ([user_turn({"type": "image", "png": b"JFIF"})], r"part 0 image bytes are not a PNG"),
        ([user_turn({"type": "text", "text": 3})], r"part 0 is a text part without a str 'text'"),
        ([user_turn({"type": "image_url", "url": "x"})], r"part 0 has type 'image_url'"),
        (
            [user_turn({"type": "text", "text": "q"}), {"role": "assistant", "content": []}],
            "the last message is an assistant turn",
        ),
    ],
)
def test_it_rejects_messages_that_break_the_agreed_format(messages: Any, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        validate_messages(messages)


def test_it_converts_parts_to_openai_text_and_png_data_urls() -> None:
    messages = [user_turn({"type": "text", "text": "q"}, {"type": "image", "png": FAKE_PNG})]
    assert to_openai_messages(messages) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "q"},
                # base64 of b"\x89PNG\r\n\x1a\n" + b"rest of the file"
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,iVBORw0KGgpyZXN0IG9mIHRoZSBmaWxl"},
                },
            ],
        }
    ]


def test_it_reports_a_code_version() -> None:
    assert isinstance(code_version(), str) and code_version().strip() != ""


def test_it_imports_the_policies_package_without_torch() -> None:
    script = (
        "import sys, agent.policies, agent.policies.openai_compatible, agent.policies.vllm_offline, "
        "agent.policies.transformers_policy, agent.policies.qwen_processor; "
        "print(sorted(m for m in ('torch', 'transformers', 'vllm') if m in sys.modules))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert completed.stdout.strip() == "[]"
