from __future__ import annotations

import pytest

from agent.drafting import LabelHintedTeacher, teacher_for


class Recorder:
    name = "recorder"

    def __init__(self):
        self.seen = None

    def info(self):
        return {"name": self.name}

    def generate(self, messages):
        self.seen = messages
        return "<think>x</think><answer>\\boxed{YES} y</answer>"


def test_it_adds_the_verified_label_to_the_system_prompt():
    inner = Recorder()
    teacher = LabelHintedTeacher(inner, "NO")
    original = [
        {"role": "system", "content": [{"type": "text", "text": "sys"}]},
        {"role": "user", "content": [{"type": "text", "text": "q"}]},
    ]
    teacher.generate(original)
    system_text = " ".join(part["text"] for part in inner.seen[0]["content"])
    assert "\\boxed{NO}" in system_text
    assert original[0]["content"] == [{"type": "text", "text": "sys"}]  # caller's list untouched


def test_it_never_hints_the_rule_based_inspector():
    class RuleBased(Recorder):
        name = "rule-based"

    policy = RuleBased()
    assert teacher_for(policy, "YES") is policy


def test_it_refuses_a_label_that_is_not_yes_or_no():
    with pytest.raises(ValueError, match="maybe"):
        LabelHintedTeacher(Recorder(), "maybe")
