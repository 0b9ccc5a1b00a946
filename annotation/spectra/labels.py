"""The rule that turns experts' vetting decisions into a spectrum's label for a task.

Plain data in, plain data out (no database), so the rule is read and tested on its own:

- Each expert counts once, with their latest decision on the spectrum for the task (over every
  run that inspected it). "unsure" never counts toward a label.
- The first two experts to answer YES or NO make the label when they agree ("agreed").
- When they disagree, the label waits ("conflict") for a third expert who is neither of them;
  that expert's answer breaks the tie ("resolved"), as DESI's visual-inspection merge does.
- Fewer than two decisive experts: no label yet ("pending").
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

DECISIVE = ("YES", "NO")


class LabelState:
    PENDING = "pending"
    CONFLICT = "conflict"
    AGREED = "agreed"
    RESOLVED = "resolved"

    ALL = (PENDING, CONFLICT, AGREED, RESOLVED)
    LABELLED = (AGREED, RESOLVED)


@dataclass(frozen=True)
class DecisionRecord:
    """One expert decision with what the expert saw when making it."""

    decision_id: int
    expert_id: int
    expert: str
    value: str  # "YES" | "NO" | "unsure"
    decided_at: datetime  # first answered (an expert's place in line)
    candidate_id: int
    run_id: int
    model_key: str = ""  # the model whose verdict the expert saw (InspectionRun.model_key)
    model_label: str = ""
    verdict_seen: str = ""
    confidence_seen: float | None = None
    changed_at: datetime | None = None  # last changed (which of an expert's answers is latest)
    quality: int | None = None  # 0-4, how securely the spectrum supports the decision
    issues: tuple[str, ...] = ()  # issue flag codes (annotation.inspections.quality)
    counted: bool = False  # set by the rule: one of the decisions the label rests on

    def as_dict(self) -> dict[str, Any]:
        return {
            "decision_id": self.decision_id,
            "expert_id": self.expert_id,
            "expert": self.expert,
            "value": self.value,
            "decided_at": self.decided_at.isoformat(),
            "changed_at": (self.changed_at or self.decided_at).isoformat(),
            "candidate_id": self.candidate_id,
            "run_id": self.run_id,
            "model_key": self.model_key,
            "model_label": self.model_label,
            "verdict_seen": self.verdict_seen,
            "confidence_seen": self.confidence_seen,
            "quality": self.quality,
            "issues": list(self.issues),
            "counted": self.counted,
        }


@dataclass(frozen=True)
class LabelOutcome:
    state: str
    value: str  # "YES" | "NO" when labelled, else ""
    decisions: list[DecisionRecord]  # every expert's latest decision, oldest first


def _latest_per_expert(records: Iterable[DecisionRecord]) -> list[DecisionRecord]:
    """Each expert's latest answer, in the order the experts first answered: an expert who
    changes their mind keeps their place in line."""
    records = list(records)
    first: dict[int, tuple[datetime, int]] = {}
    latest: dict[int, DecisionRecord] = {}
    for record in sorted(records, key=lambda r: (r.changed_at or r.decided_at, r.decision_id)):
        latest[record.expert_id] = record
    for record in records:
        place = (record.decided_at, record.decision_id)
        first[record.expert_id] = min(first.get(record.expert_id, place), place)
    return sorted(latest.values(), key=lambda r: first[r.expert_id])


def label_from_decisions(records: Iterable[DecisionRecord]) -> LabelOutcome:
    """The label the rule gives (see the module docstring), with the decisions behind it."""
    decisions = _latest_per_expert(records)
    decisive = [r for r in decisions if r.value in DECISIVE]
    counted_ids: set[int] = set()
    if len(decisive) < 2:
        state, value = LabelState.PENDING, ""
    else:
        first, second = decisive[0], decisive[1]
        if first.value == second.value:
            state, value = LabelState.AGREED, first.value
            counted_ids = {first.decision_id, second.decision_id}
        else:
            # Experts are distinct by construction, so the third decisive one is neither.
            third = decisive[2] if len(decisive) > 2 else None
            if third is None:
                state, value = LabelState.CONFLICT, ""
            else:
                state, value = LabelState.RESOLVED, third.value
                counted_ids = {first.decision_id, second.decision_id, third.decision_id}
    marked = [replace(r, counted=r.decision_id in counted_ids) for r in decisions]
    return LabelOutcome(state=state, value=value, decisions=marked)


def label_export_jsonl(*, manifest: dict[str, Any], rows: Iterable[dict[str, Any]]) -> str:
    """A vetted-label export as its download holds it: JSON lines, the manifest first, then a
    row per label (the page and the API answer the same bytes)."""
    lines = [json.dumps({"manifest": manifest}, sort_keys=True)]
    lines += [json.dumps(row, sort_keys=True) for row in rows]
    return "\n".join(lines) + "\n"
