"""Experts' vetting decisions on candidates and the spectrum labels they make
(``annotation.spectra.labels`` states the rule)."""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib.auth.models import User
from django.db import transaction

from annotation.core.errors import WorkflowError, WrongState
from annotation.core.services import audit_log_record
from annotation.inspections.decision_history import (
    EXPERT_SPLIT,
    consensus_of,
    decision_records,
    expert_answer,
    latest_answers,
)
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    ExpertDecision,
    ExpertDecisionValue,
    InspectionRun,
)
from annotation.inspections.quality import checked_comment, checked_issues, checked_quality
from annotation.inspections.selectors import decision_refusal
from annotation.spectra.models import Spectrum
from annotation.spectra.services import spectrum_label_apply

__all__ = [
    "EXPERT_SPLIT",
    "expert_decision_record",
    "expert_decision_withdraw",
    "labels_lock",
    "spectrum_label_refresh",
]


def labels_lock(spectrum_ids: Sequence[int]) -> None:
    """Every write of a spectrum's expert decisions, label and catalog entries takes the
    spectrum's row lock first, so experts deciding at once on candidates of the same spectrum
    (of one run or several) queue in one order; each used to lock its own candidate's catalog
    entry and then wait for the other's, a deadlock (issue 32). A run finishing candidates
    takes it before it reads their spectra's labels: read without it, a decision committing
    meanwhile left the new catalog entry with the label from before it. Several spectra are
    locked in id order, one order for every writer. FOR NO KEY UPDATE: rows that merely refer
    to the spectrum (new candidates, entries) are not held up. Taking it again in the same
    transaction is free."""
    ids = sorted(set(spectrum_ids))
    if not ids:
        return
    rows = Spectrum.objects.select_for_update(no_key=True).filter(pk__in=ids).order_by("pk")
    list(rows.values_list("pk", flat=True))


def _label_lock(spectrum_id: int) -> None:
    labels_lock([spectrum_id])


@transaction.atomic
def expert_decision_record(
    *,
    candidate: Candidate,
    expert: User,
    decision: str,
    comment: str = "",
    quality: int | str | None = None,
    issues: Sequence[str] = (),
    audit_sampled: bool = False,
) -> ExpertDecision:
    """An expert's YES / NO / unsure beside the agent's verdict, with the verdict and model the
    expert was shown, and optionally a 0-4 quality, issue flags and a comment
    (``inspections.quality``); the spectrum's label for the task follows (``spectra.labels``).
    An expert has one answer per spectrum and task: this one replaces their earlier answer on
    any run's candidate of the spectrum (kept, shown as replaced; ``decision_history``).
    A candidate staff closed or assigned to another expert is refused (WrongState), unless it
    is in an open audit sample (``audit_sampled``: every expert vets those)."""
    if decision not in ExpertDecisionValue.values:
        raise WorkflowError(f"decision must be YES, NO or unsure, got {decision!r}")
    comment = checked_comment(comment)
    quality = checked_quality(quality)
    flags = checked_issues(issues)
    if candidate.state != CandidateState.DONE:
        raise WrongState(f"the candidate is {candidate.state}; vet it once the agent has finished")
    _label_lock(candidate.spectrum_id)
    # read afresh under a lock: staff may have closed or reassigned it since the page was shown
    queue_state = (
        Candidate.objects.select_for_update()
        .only("queue_closed_reason", "assigned_to_id")
        .get(pk=candidate.pk)
    )
    refusal = "" if audit_sampled else decision_refusal(candidate=queue_state, expert=expert)
    if refusal:
        raise WrongState(refusal)
    run = InspectionRun.objects.only("model_key", "model_label", "task_id").get(pk=candidate.run_id)
    earlier = expert_answer(
        spectrum_id=candidate.spectrum_id, task_id=run.task_id, expert_id=expert.pk
    )
    record, created = ExpertDecision.objects.update_or_create(
        candidate=candidate,
        expert=expert,
        defaults={
            "decision": decision,
            "comment": comment,
            "quality": quality,
            "issues": flags,
            "verdict_seen": candidate.verdict,
            "confidence_seen": candidate.confidence,
            "model_key_seen": run.model_key,
            "model_label_seen": run.model_label,
        },
    )
    replaced = earlier.pk if earlier is not None and earlier.pk != record.pk else None
    audit_log_record(
        actor=expert,
        action="expert_decision",
        obj=candidate,
        from_state=earlier.decision if earlier is not None else "",
        to_state=decision,
        comment=comment,
        data={"changed": not created, "quality": quality, "issues": flags, "replaces": replaced},
    )
    spectrum_label_refresh(spectrum_id=candidate.spectrum_id, task_id=run.task_id, actor=expert)
    return record


@transaction.atomic
def expert_decision_withdraw(*, candidate: Candidate, expert: User) -> str:
    """Undo: the expert's own decision on the candidate is removed (audit-logged), the catalog's
    consensus and the spectrum's label are recomputed without it (an earlier answer of theirs
    on another run's candidate of the spectrum, if any, is their answer again), and the
    candidate can be decided anew. Returns the decision withdrawn."""
    _label_lock(candidate.spectrum_id)
    record = ExpertDecision.objects.filter(candidate=candidate, expert=expert).first()
    if record is None:
        raise WrongState("you have no decision on this candidate to undo")
    decision = record.decision
    record.delete()
    audit_log_record(
        actor=expert, action="expert_decision_withdrawn", obj=candidate, from_state=decision
    )
    task_id = InspectionRun.objects.values_list("task_id", flat=True).get(pk=candidate.run_id)
    spectrum_label_refresh(spectrum_id=candidate.spectrum_id, task_id=task_id, actor=expert)
    return decision


@transaction.atomic
def spectrum_label_refresh(*, spectrum_id: int, task_id: int, actor: User | None) -> None:
    """Apply the label rule to every expert decision on the spectrum for the task (any run) and
    copy the outcome onto the spectrum's catalog entries for that task, with the consensus of
    each expert's latest answer: every run's entry of the spectrum tells the same story."""
    _label_lock(spectrum_id)
    records = decision_records(spectrum_id=spectrum_id, task_id=task_id)
    label = spectrum_label_apply(
        spectrum_id=spectrum_id, task_id=task_id, records=records, actor=actor
    )
    agreed = consensus_of(latest_answers(records))
    CatalogEntry.objects.filter(
        candidate__spectrum_id=spectrum_id, candidate__run__task_id=task_id
    ).update(
        vetted_label=label.value,
        label_state=label.state,
        expert_decision=agreed.decision,
        expert_quality=agreed.quality,
        expert_issues=agreed.issues,
    )
