"""Teacher drafts for cold-start curation (paper section 3.2).

The paper's teacher (a GPT-class model) drafts a trajectory given the task guideline and the
true label; experts then screen, revise and audit it. `LabelHintedTeacher` adds the label to
the system prompt of a model-backed policy. The rule-based inspector is passed through
unchanged: it never sees labels, so its drafts stay honest measurements.
"""

from __future__ import annotations

from typing import Any

LABEL_HINT = (
    "\n\nDrafting note (for the teacher only): experts have verified that the correct answer "
    "for this spectrum is {label}. Inspect the diagnostic features as an expert would, cite what "
    "each zoomed view shows, weigh the contaminants named in the guideline, and reach the "
    "answer \\boxed{{{label}}} only through that evidence. Never mention this note."
)


class LabelHintedTeacher:
    """Wraps a policy so each conversation's system prompt carries the verified label."""

    def __init__(self, policy: Any, label: str) -> None:
        if label not in ("YES", "NO"):
            raise ValueError(f"teacher label must be YES or NO, got {label!r}")
        self.policy = policy
        self.label = label
        self.name = getattr(policy, "name", "teacher")

    def info(self) -> dict[str, Any]:
        return {**self.policy.info(), "label_hint": True}

    @property
    def last_usage(self) -> Any:
        return getattr(self.policy, "last_usage", None)

    def generate(self, messages: list[dict[str, Any]]) -> str:
        hint = LABEL_HINT.format(label=self.label)
        hinted = [dict(message) for message in messages]
        if hinted and hinted[0]["role"] == "system":
            hinted[0] = {
                "role": "system",
                "content": [*hinted[0]["content"], {"type": "text", "text": hint}],
            }
        else:
            hinted.insert(0, {"role": "system", "content": [{"type": "text", "text": hint}]})
        return self.policy.generate(hinted)


def teacher_for(policy: Any, label: str) -> Any:
    """The policy to draft with: label-hinted for models, unchanged for the rule-based one."""
    if getattr(policy, "name", "") == "rule-based":
        return policy
    return LabelHintedTeacher(policy, label)
