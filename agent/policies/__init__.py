"""Policies: what answers the agent's conversation. Built from a JSON-able spec.

Nothing here imports torch, transformers or vLLM; each backend is imported when it is built.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from agent.policies.base import Policy, PolicyError, SamplingParams

__all__ = ["POLICY_KINDS", "Policy", "PolicyError", "SamplingParams", "build_policy"]

# kind -> (module, class name)
POLICY_KINDS: dict[str, tuple[str, str]] = {
    "rule-based": ("agent.policies.rule_based", "RuleBasedInspector"),
    "transformers": ("agent.policies.transformers_policy", "TransformersPolicy"),
    "openai": ("agent.policies.openai_compatible", "OpenAICompatiblePolicy"),
    "vllm": ("agent.policies.vllm_offline", "VLLMOfflinePolicy"),
}


def build_policy(spec: dict[str, Any]) -> Policy:
    """A policy from ``{"kind": "rule-based" | "transformers" | "openai" | "vllm", **kwargs}``.

    The other keys are the policy's constructor arguments; ``sampling`` may be a dict of
    SamplingParams fields. Unknown kinds and arguments raise ValueError naming them.
    """
    if not isinstance(spec, dict):
        raise ValueError(f"policy spec must be a dict, got {type(spec).__name__}")
    kwargs = dict(spec)
    kind = kwargs.pop("kind", None)
    if kind not in POLICY_KINDS:
        raise ValueError(f"policy spec kind {kind!r} is not one of {sorted(POLICY_KINDS)}")
    module_name, class_name = POLICY_KINDS[kind]
    policy_class = getattr(importlib.import_module(module_name), class_name)
    try:
        inspect.signature(policy_class).bind(**kwargs)
    except TypeError as error:
        raise ValueError(f"policy spec for kind {kind!r} has bad arguments: {error}") from None
    return policy_class(**kwargs)
