"""Reading evidence ablations (``annotation.inspections.ablations``): a candidate's, in words
for its page; a run's counts; and, per model, how often confident answers survive the masking
of their own evidence (the calibration page)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Q, QuerySet

from annotation.inspections.models import (
    Candidate,
    EvidenceAblation,
    EvidenceOutcome,
    InspectionRun,
)


def candidate_ablation(candidate: Candidate) -> EvidenceAblation | None:
    return EvidenceAblation.objects.filter(candidate=candidate).first()


def _names(groups: list[Any]) -> str:
    return ", ".join(str(group) for group in groups if group)


def ablation_view(row: EvidenceAblation) -> dict[str, Any]:
    """What the candidate page says, as plain values (the template escapes every one: window
    names come from the model's own tool-call labels)."""
    detail = row.detail or {}
    masked_names = _names([" + ".join(names) for names in detail.get("masked_names") or []])
    decisive = _names(row.decisive) or masked_names
    return {
        "row": row,
        "outcome": row.outcome,
        "decisive": decisive,
        "masked": masked_names,
        "before": _answer(row.answer_before, row.confidence_before),
        "after": _answer(row.answer_after, row.confidence_after),
        "control": _answer(row.answer_control, row.confidence_control),
        "control_ran": bool(row.control),
        "masked_percent": f"{100 * float(detail.get('masked_fraction') or 0):.0f}",
        "reason": detail.get("reason", ""),
        "notes": detail.get("notes") or [],
    }


def _answer(prediction: str, confidence: float | None) -> str:
    if not prediction:
        return "no answer"
    return prediction if confidence is None else f"{prediction} ({confidence:.2f})"


@dataclass(frozen=True)
class AblationCounts:
    """Counts of a set of ablations; ``survival`` is the share of confident answers that kept
    their answer with their own evidence masked, ``control_flip`` that of answers flipped by
    random windows of the same widths (the control: it should stay far below ``flip``)."""

    label: str
    ablated: int
    no_evidence: int
    flipped: int
    control_ran: int
    control_flipped: int
    confident: int
    confident_survived: int
    insensitive: int

    @property
    def flip(self) -> float | None:
        return self.flipped / self.ablated if self.ablated else None

    @property
    def control_flip(self) -> float | None:
        return self.control_flipped / self.control_ran if self.control_ran else None

    @property
    def survival(self) -> float | None:
        return self.confident_survived / self.confident if self.confident else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "ablated": self.ablated,
            "no_evidence": self.no_evidence,
            "flipped": self.flipped,
            "control_ran": self.control_ran,
            "control_flipped": self.control_flipped,
            "confident": self.confident,
            "confident_survived": self.confident_survived,
            "insensitive": self.insensitive,
            "flip_rate": self.flip,
            "control_flip_rate": self.control_flip,
            "confident_survival_rate": self.survival,
        }


_RAN = ~Q(outcome=EvidenceOutcome.NO_EVIDENCE)
_AGGREGATES = {
    "ablated": Count("pk", filter=_RAN),
    "no_evidence": Count("pk", filter=Q(outcome=EvidenceOutcome.NO_EVIDENCE)),
    "flipped": Count("pk", filter=_RAN & Q(flipped=True)),
    "control_ran": Count("pk", filter=_RAN & ~Q(control=[])),
    "control_flipped": Count("pk", filter=_RAN & Q(control_flipped=True)),
    "confident": Count("pk", filter=_RAN & Q(confident=True)),
    "confident_survived": Count("pk", filter=_RAN & Q(confident=True, flipped=False)),
    "insensitive": Count("pk", filter=Q(insensitive=True)),
}


def _counts(rows: QuerySet[EvidenceAblation], label: str) -> AblationCounts:
    # Prefixed: an aggregate may not be named like a field of the model (flipped, confident).
    found = rows.aggregate(**{f"n_{name}": count for name, count in _AGGREGATES.items()})
    return AblationCounts(label=label, **{name: found[f"n_{name}"] for name in _AGGREGATES})


def run_ablation_counts(run: InspectionRun) -> AblationCounts | None:
    """The run's ablations counted; None when none was run."""
    rows = EvidenceAblation.objects.filter(candidate__run=run)
    counts = _counts(rows, run.name or f"run {run.pk}")
    return counts if counts.ablated or counts.no_evidence else None


def ablation_by_model(*, task_id: int, runs: QuerySet[InspectionRun]) -> list[AblationCounts]:
    """Per model of the task (among ``runs``, those this user may read): its ablations counted."""
    rows = EvidenceAblation.objects.filter(
        candidate__run__in=runs.filter(task_id=task_id)
    ).order_by()
    keys = rows.values_list("candidate__run__model_key", "candidate__run__model_label").distinct()
    found = []
    for key, label in sorted(set(keys)):
        found.append(_counts(rows.filter(candidate__run__model_key=key), label or key or "?"))
    return found


def insensitive_candidates(*, task_id: int, runs: QuerySet[InspectionRun], limit: int = 20) -> Any:
    """The flagged answers: confident, unchanged with their own evidence masked."""
    return (
        EvidenceAblation.objects.filter(
            insensitive=True, candidate__run__in=runs.filter(task_id=task_id)
        )
        .select_related("candidate__spectrum")
        .order_by("-id")[:limit]
    )
