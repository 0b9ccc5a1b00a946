"""Staff resend interrupted candidates at once: those a killed worker left "running", which the
broker would hand out again only after its visibility timeout (``selectors`` finds them:
``interrupted_candidate_ids``).

A resent candidate goes back to pending and gets a new message; its lease and its claim make
sure it runs once, whatever else delivers it (the broker's own redelivery later, a second
resend): whichever delivery claims it first runs it, the others find it running under a live
lease (and wait) or finished (and skip it). Its rollouts already stored are kept, the
interrupted one is started over (``jobs.run_candidates``), so it ends with one verdict.
"""

from __future__ import annotations

from django.contrib.auth.models import User
from django.db import transaction

from annotation.core.errors import NotAllowed, WorkflowError, WrongState
from annotation.core.leases import leases
from annotation.core.permissions import INSPECTION_RESEND
from annotation.core.services import audit_log_record
from annotation.inspections import selectors
from annotation.inspections.models import Candidate, CandidateState, InspectionRun
from annotation.inspections.services import candidate_batches

MAX_RESEND = 1000


@transaction.atomic
def candidates_resend_interrupted(
    *, run: InspectionRun, candidate_ids: list[int], actor: User
) -> list[int]:
    """Send these interrupted candidates of ``run`` again now (staff); returns their ids.

    Refuses (and sends nothing) when one of them is not interrupted: still run by a live
    worker, finished, pending, or not of this run. Each resent candidate goes from running to
    pending (the interrupted attempt stays counted) with one audit entry.
    """
    if not INSPECTION_RESEND.allows(actor):
        raise NotAllowed(INSPECTION_RESEND.refusal(actor))
    ids = sorted(set(candidate_ids))
    if not ids:
        raise WrongState("no candidate of this run is interrupted")
    if len(ids) > MAX_RESEND:
        raise WorkflowError(f"at most {MAX_RESEND} candidates at once; {len(ids)} were given")
    if InspectionRun.objects.filter(pk=run.pk, cancelled=True).exists():
        raise WrongState("the run was cancelled: its candidates are not sent again")
    interrupted = selectors.interrupted_candidate_ids(
        rows=Candidate.objects.filter(run=run, pk__in=ids)
    )
    _refuse_unless_all(run, ids, interrupted)
    # Holding their leases while they go back to pending: a worker that takes one now (a
    # redelivery) finds it leased, waits, and then finds it pending or finished.
    with leases("candidate", ids) as free:
        rows = Candidate.objects.filter(pk__in=free, run=run, state=CandidateState.RUNNING)
        resent = rows.update(state=CandidateState.PENDING, error="")
    if resent != len(ids):
        # a worker took one between the check and the leases: it runs; resend none (atomic)
        raise WrongState("a worker took one of these candidates meanwhile; nothing was resent")
    from annotation.inspections import tasks  # inside: tasks import services

    for candidate in Candidate.objects.filter(pk__in=ids).only("pk").order_by("pk"):
        audit_log_record(
            actor=actor,
            action="candidate_resent",
            obj=candidate,
            from_state="interrupted",
            to_state=CandidateState.PENDING,
            comment="no live worker ran it; sent again",
        )
    batches = candidate_batches(policy_spec=run.policy_spec, candidate_ids=ids)
    transaction.on_commit(lambda: [tasks.run_candidates.delay(batch) for batch in batches])
    return ids


def _refuse_unless_all(run: InspectionRun, ids: list[int], interrupted: set[int]) -> None:
    refused = [pk for pk in ids if pk not in interrupted]
    if not refused:
        return
    states = dict(Candidate.objects.filter(run=run, pk__in=refused).values_list("pk", "state"))
    reasons = []
    for pk in refused[:10]:
        state = states.get(pk)
        if state is None:
            reasons.append(f"{pk} is not a candidate of this run")
        elif state == CandidateState.RUNNING:
            reasons.append(f"{pk} is running on a live worker")
        else:
            reasons.append(f"{pk} is {state}")
    more = f" and {len(refused) - 10} more" if len(refused) > 10 else ""
    raise WrongState(f"not interrupted, so not resent: {'; '.join(reasons)}{more}")
