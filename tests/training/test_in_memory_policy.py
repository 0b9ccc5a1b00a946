"""The validation callback's in-memory policy runs real inspection episodes with the weights
being trained (it once lacked TransformersPolicy's generation lock and cache settings, so every
validation episode ended in a policy error)."""

from __future__ import annotations

from agent.inspection_tasks import get_task
from agent.policies.base import SamplingParams
from agent.rollout import inspect
from agent.synthetic import generate_split
from training.callbacks import InMemoryPolicy


def test_it_generates_the_turns_of_an_inspection_with_the_model_in_memory(tiny_model_path):
    from transformers import Qwen2_5_VLForConditionalGeneration

    from agent.policies.qwen_processor import load_processor

    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(tiny_model_path))
    policy = InMemoryPolicy(
        model,
        load_processor(tiny_model_path),
        sampling=SamplingParams(temperature=0.0, max_new_tokens=4),
    )
    sample = generate_split("CV", "test", n_pos=1, n_neg=0, seed=3)[0]
    trajectory = inspect(sample.spectrum, get_task("CV"), policy, max_tool_calls=1)
    assert trajectory.stop_reason != "policy_error"
    assert not [error for error in trajectory.errors if error.startswith("policy failed")]
    assert len(trajectory.steps) >= 1
    assert policy.last_usage["prompt_tokens"] > policy.last_usage["image_tokens"] > 0
