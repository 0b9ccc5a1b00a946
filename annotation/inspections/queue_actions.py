"""Staff actions on the vetting queue, several candidates at once: reassign them to one expert
(or back to every expert), close them (out of the queue, with a reason) or requeue them.

Each action locks its candidates, changes them with one conditional UPDATE, and writes one audit
entry per candidate. The queue's readers apply the result (``catalog.queue.queue_for_user``).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.contrib.auth.models import User
from django.db import transaction

from annotation.core.errors import NotAllowed, WorkflowError
from annotation.core.permissions import VET, VETTING_MANAGE
from annotation.core.services import audit_log_record
from annotation.inspections.decision_history import answered_by
from annotation.inspections.models import Candidate, CandidateState

MAX_BULK = 500
CLOSE_REASON_MAX = 200


def _locked_candidates(*, candidate_ids: Iterable[int], actor: User) -> list[Candidate]:
    """The finished candidates named, locked (SELECT FOR UPDATE) for the caller's transaction;
    refuses non-staff, an empty or too large selection, and ids that are not finished ones."""
    if not VETTING_MANAGE.allows(actor):
        raise NotAllowed(VETTING_MANAGE.refusal(actor))
    ids = sorted(set(candidate_ids))
    if not ids:
        raise WorkflowError("select at least one candidate")
    if len(ids) > MAX_BULK:
        raise WorkflowError(f"at most {MAX_BULK} candidates at once; {len(ids)} were selected")
    rows = list(
        Candidate.objects.select_for_update()
        .filter(pk__in=ids, state=CandidateState.DONE)
        .only("pk", "needs_expert", "assigned_to_id", "queue_closed_reason")
        .order_by("pk")
    )
    missing = sorted(set(ids) - {row.pk for row in rows})
    if missing:
        shown = ", ".join(str(pk) for pk in missing[:10])
        raise WorkflowError(f"not finished candidates (or none such): {shown}")
    return rows


@transaction.atomic
def candidates_reassign(
    *, candidate_ids: Iterable[int], expert: User | None, actor: User
) -> list[Candidate]:
    """Only ``expert``'s queue shows the candidates from now on (``None``: every expert's).

    Refused when ``expert`` may not vet, or has answered one of their spectra for the task
    already, on any run's candidate (it would wait in no queue). The caller checks that
    ``expert`` may read them (``annotation.blinding``)."""
    rows = _locked_candidates(candidate_ids=candidate_ids, actor=actor)
    if expert is not None:
        if not VET.allows(expert):
            raise NotAllowed(f"{expert.get_username()} may not vet: {VET.refusal(expert)}")
        decided = sorted(
            Candidate.objects.filter(pk__in=[row.pk for row in rows])
            .filter(answered_by(expert))
            .values_list("pk", flat=True)
        )
        if decided:
            raise WorkflowError(
                f"{expert.get_username()} has decided candidates "
                f"{', '.join(str(pk) for pk in decided[:10])} already; leave them out"
            )
    Candidate.objects.filter(pk__in=[row.pk for row in rows]).update(assigned_to=expert)
    to = expert.get_username() if expert is not None else "every expert"
    for row in rows:
        audit_log_record(
            actor=actor,
            action="vetting_reassigned",
            obj=row,
            comment=f"assigned to {to}",
            data={"from": row.assigned_to_id, "to": expert.pk if expert else None},
        )
    return rows


@transaction.atomic
def candidates_close(*, candidate_ids: Iterable[int], reason: str, actor: User) -> list[Candidate]:
    """Take the candidates out of every expert's queue, saying why (shown to staff, logged)."""
    reason = " ".join(reason.split())
    if not reason:
        raise WorkflowError("reason: say why these candidates leave the queue")
    if len(reason) > CLOSE_REASON_MAX:
        raise WorkflowError(
            f"reason: at most {CLOSE_REASON_MAX} characters; this one has {len(reason)}"
        )
    rows = _locked_candidates(candidate_ids=candidate_ids, actor=actor)
    Candidate.objects.filter(pk__in=[row.pk for row in rows]).update(queue_closed_reason=reason)
    for row in rows:
        audit_log_record(
            actor=actor,
            action="vetting_closed",
            obj=row,
            from_state="closed" if row.queue_closed_reason else "open",
            to_state="closed",
            comment=reason,
        )
    return rows


@transaction.atomic
def candidates_requeue(*, candidate_ids: Iterable[int], actor: User) -> list[Candidate]:
    """Put the candidates (closed, or never routed to experts) back in the queue."""
    rows = _locked_candidates(candidate_ids=candidate_ids, actor=actor)
    Candidate.objects.filter(pk__in=[row.pk for row in rows]).update(
        needs_expert=True, queue_closed_reason=""
    )
    for row in rows:
        audit_log_record(
            actor=actor,
            action="vetting_requeued",
            obj=row,
            from_state="closed"
            if row.queue_closed_reason
            else ("open" if row.needs_expert else "unrouted"),
            to_state="open",
            data={"closed_reason": row.queue_closed_reason},
        )
    return rows
