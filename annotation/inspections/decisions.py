"""Experts' vetting decisions on candidates and the spectrum labels they make
(``annotation.spectra.labels`` states the rule)."""

from __future__ import annotations

from collections.abc import Sequence

from django.contrib.auth.models import User
from django.db import transaction

from annotation.core.errors import WorkflowError, WrongState
from annotation.core.services import audit_log_record
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    ExpertDecision,
    ExpertDecisionValue,
    InspectionRun,
)
from annotation.inspections.quality import (
    checked_comment,
    checked_issues,
    checked_quality,
    joined_issues,
    mean_quality,
)
from annotation.inspections.selectors import decision_refusal
from annotation.spectra.labels import DecisionRecord
from annotation.spectra.services import spectrum_label_apply

EXPERT_SPLIT = "split"  # the catalog's expert decision when the experts disagree


def _catalog_refresh(candidate: Candidate) -> None:
    """Copy the experts' decisions onto the candidate's catalog entry: their common answer, or
    "split" when they disagree (the latest alone would hide a YES behind a later NO), the mean
    of their qualities and every issue flag any of them raised."""
    rows = list(
        ExpertDecision.objects.filter(candidate=candidate).values_list(
            "decision", "quality", "issues"
        )
    )
    given = {decision for decision, _, _ in rows}
    consensus = (given.pop() if len(given) == 1 else EXPERT_SPLIT) if given else ""
    CatalogEntry.objects.filter(candidate=candidate).update(
        expert_decision=consensus,
        expert_quality=mean_quality(quality for _, quality, _ in rows),
        expert_issues=joined_issues(issues or [] for _, _, issues in rows),
    )


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
    A candidate staff closed or assigned to another expert is refused (WrongState), unless it
    is in an open audit sample (``audit_sampled``: every expert vets those)."""
    if decision not in ExpertDecisionValue.values:
        raise WorkflowError(f"decision must be YES, NO or unsure, got {decision!r}")
    comment = checked_comment(comment)
    quality = checked_quality(quality)
    flags = checked_issues(issues)
    if candidate.state != CandidateState.DONE:
        raise WrongState(f"the candidate is {candidate.state}; vet it once the agent has finished")
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
    _catalog_refresh(candidate)
    audit_log_record(
        actor=expert,
        action="expert_decision",
        obj=candidate,
        to_state=decision,
        comment=comment,
        data={"changed": not created, "quality": quality, "issues": flags},
    )
    spectrum_label_refresh(spectrum_id=candidate.spectrum_id, task_id=run.task_id, actor=expert)
    return record


@transaction.atomic
def expert_decision_withdraw(*, candidate: Candidate, expert: User) -> str:
    """Undo: the expert's own decision on the candidate is removed (audit-logged), the catalog's
    consensus and the spectrum's label are recomputed without it, and the candidate waits in
    their queue again. Returns the decision withdrawn."""
    record = ExpertDecision.objects.filter(candidate=candidate, expert=expert).first()
    if record is None:
        raise WrongState("you have no decision on this candidate to undo")
    decision = record.decision
    record.delete()
    _catalog_refresh(candidate)
    audit_log_record(
        actor=expert, action="expert_decision_withdrawn", obj=candidate, from_state=decision
    )
    task_id = InspectionRun.objects.values_list("task_id", flat=True).get(pk=candidate.run_id)
    spectrum_label_refresh(spectrum_id=candidate.spectrum_id, task_id=task_id, actor=expert)
    return decision


def _decision_records(*, spectrum_id: int, task_id: int) -> list[DecisionRecord]:
    rows = ExpertDecision.objects.filter(
        candidate__spectrum_id=spectrum_id, candidate__run__task_id=task_id
    ).select_related("expert", "candidate")
    return [
        DecisionRecord(
            decision_id=row.pk,
            expert_id=row.expert_id,
            expert=row.expert.username,
            value=row.decision,
            decided_at=row.created_at,
            changed_at=row.updated_at,
            candidate_id=row.candidate_id,
            run_id=row.candidate.run_id,
            model_key=row.model_key_seen,
            model_label=row.model_label_seen,
            verdict_seen=row.verdict_seen,
            confidence_seen=row.confidence_seen,
            quality=row.quality,
            issues=tuple(row.issues or ()),
        )
        for row in rows
    ]


@transaction.atomic
def spectrum_label_refresh(*, spectrum_id: int, task_id: int, actor: User | None) -> None:
    """Apply the label rule to every expert decision on the spectrum for the task (any run) and
    copy the outcome onto the spectrum's catalog entries for that task."""
    label = spectrum_label_apply(
        spectrum_id=spectrum_id,
        task_id=task_id,
        records=_decision_records(spectrum_id=spectrum_id, task_id=task_id),
        actor=actor,
    )
    CatalogEntry.objects.filter(
        candidate__spectrum_id=spectrum_id, candidate__run__task_id=task_id
    ).update(vetted_label=label.value, label_state=label.state)
