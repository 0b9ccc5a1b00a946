"""Re-routing finished candidates after their confidence was recalibrated (annotation.learning
decides; this writes). Only the confidence reason moves: a candidate without a verdict, outside
what the policy knows or missing data stays with experts whatever its confidence."""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction

from annotation.inspections.models import Candidate, CandidateState, TriageReason

MOVABLE = ("", TriageReason.LOW_CONFIDENCE)


@transaction.atomic
def candidates_confidence_route(
    *, to_experts: Iterable[int], automatic: Iterable[int]
) -> dict[str, int]:
    """Send ``to_experts`` to experts for low confidence and take ``automatic`` off their
    queue; returns how many changed each way. The caller records the change in the audit log
    (one entry for the recalibration that caused it, not one per candidate)."""
    movable = Candidate.objects.filter(state=CandidateState.DONE, triage_reason__in=MOVABLE)
    sent = (
        movable.filter(pk__in=list(to_experts))
        .exclude(triage_reason=TriageReason.LOW_CONFIDENCE)
        .update(triage_reason=TriageReason.LOW_CONFIDENCE, needs_expert=True)
    )
    released = movable.filter(
        pk__in=list(automatic), triage_reason=TriageReason.LOW_CONFIDENCE
    ).update(triage_reason="", needs_expert=False)
    return {"to_experts": sent, "automatic": released}
