"""Inspection writes: create, claim, record rollouts and live steps, finish, retry, cancel,
and experts' decisions on candidates."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from annotation.core.errors import WorkflowError, WrongState
from annotation.core.permissions import check_owner_or_staff
from annotation.core.services import audit_log_record, job_create
from annotation.inspections.decisions import EXPERT_SPLIT as EXPERT_SPLIT  # re-exported
from annotation.inspections.decisions import expert_decision_record as expert_decision_record
from annotation.inspections.decisions import spectrum_label_refresh as spectrum_label_refresh
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    InspectionRun,
)
from annotation.inspections.recording import LIVE_STEP_FLUSH_SECONDS as LIVE_STEP_FLUSH_SECONDS
from annotation.inspections.recording import LiveStepBuffer as LiveStepBuffer
from annotation.inspections.recording import RolloutResult as RolloutResult
from annotation.inspections.recording import candidate_claim as candidate_claim
from annotation.inspections.recording import candidate_fail as candidate_fail
from annotation.inspections.recording import candidate_finish as candidate_finish
from annotation.inspections.recording import candidate_wait as candidate_wait
from annotation.inspections.recording import candidates_cancel as candidates_cancel
from annotation.inspections.recording import candidates_claim as candidates_claim
from annotation.inspections.recording import candidates_release as candidates_release
from annotation.inspections.recording import (
    inspection_run_set_policy_info as inspection_run_set_policy_info,
)
from annotation.inspections.recording import live_steps_reset as live_steps_reset
from annotation.inspections.recording import live_steps_write as live_steps_write
from annotation.inspections.recording import live_steps_write_many as live_steps_write_many
from annotation.inspections.recording import rollout_record as rollout_record
from annotation.inspections.recording import rollout_result as rollout_result
from annotation.inspections.recording import rollouts_record as rollouts_record
from annotation.inspections.run_policies import policy_spec_check, sampling_check
from annotation.inspections.shifts import shift_check_start
from annotation.inspections.verdicts import candidate_verdict as candidate_verdict
from annotation.inspections.verdicts import rollout_meta as rollout_meta
from annotation.spectra.models import Spectrum, Task

logger = logging.getLogger(__name__)

# --- inspection runs ------------------------------------------------------------------------------


@transaction.atomic
def inspection_run_create(
    *,
    task: Task,
    spectrum_ids: list[int],
    policy_spec: dict[str, Any],
    created_by: User | None,
    name: str = "",
    sampling: dict[str, Any] | None = None,
    rollouts: int = 1,
    max_tool_calls: int = 8,
    confidence_threshold: float = 0.0,
    enqueue: bool = True,
) -> InspectionRun:
    """Create a run with one candidate per spectrum; each candidate is enqueued on commit
    (``enqueue=False``: the caller sends them, as ``bench_candidates`` does to its workers)."""
    from agent.policies.base import code_version
    from annotation.inspections import tasks
    from annotation.inspections.lineage import model_identity

    if not spectrum_ids:
        raise WorkflowError("an inspection run needs at least one candidate spectrum")
    if not 1 <= rollouts <= 16:
        raise WorkflowError(f"rollouts per candidate must be 1-16, got {rollouts}")
    if not 0 <= max_tool_calls <= 16:
        raise WorkflowError(f"max tool calls must be 0-16, got {max_tool_calls}")
    if not 0.0 <= confidence_threshold <= 1.0:
        raise WorkflowError(f"confidence threshold must be in [0, 1], got {confidence_threshold}")
    unique_ids = sorted(set(spectrum_ids))
    found = set(Spectrum.objects.filter(pk__in=unique_ids).values_list("pk", flat=True))
    missing = [pk for pk in unique_ids if pk not in found]
    if missing:
        raise WorkflowError(f"unknown spectrum ids: {missing[:10]}")
    checked_spec, endpoint = policy_spec_check(policy_spec, user=created_by)
    sampling_check(sampling)
    version = code_version()[:80]
    # Known now for the inspector and an endpoint; a checkpoint's weights are hashed by the job.
    model_key, model_label = model_identity(checked_spec, {}, code_version=version)
    run = InspectionRun.objects.create(
        name=name[:120],
        task=task,
        policy_spec=checked_spec,
        endpoint=endpoint,
        sampling=sampling or {},
        rollouts=rollouts,
        max_tool_calls=max_tool_calls,
        confidence_threshold=confidence_threshold,
        code_version=version,
        model_key=model_key,
        model_label=model_label,
        created_by=created_by if created_by is not None and created_by.is_authenticated else None,
    )
    created = Candidate.objects.bulk_create(
        [Candidate(run=run, spectrum_id=pk) for pk in unique_ids]
    )
    first = min((c.pk for c in created if c.pk is not None), default=None)
    if first is None:  # a backend that returns no ids from a bulk insert
        first = run.candidates.order_by("pk").values_list("pk", flat=True).first()
    run.reproducibility = {"rate": settings.INSPECTION_RECHECK_RATE, "first": first}
    InspectionRun.objects.filter(pk=run.pk).update(reproducibility=run.reproducibility)
    audit_log_record(
        actor=created_by,
        action="inspection_run_created",
        obj=run,
        comment=f"{len(unique_ids)} candidates, {run.policy_spec.get('kind')}"
        + (f" on endpoint {endpoint.name}" if endpoint else ""),
    )
    shift_check_start(run=run, actor=created_by)  # before any verdict is accepted
    if enqueue and len(unique_ids) > settings.INSPECTION_ENQUEUE_INLINE_MAX:
        job_create(
            kind=ENQUEUE_JOB,
            params={"run_id": run.pk},
            created_by=created_by,
            total=len(unique_ids),
        )
    elif enqueue:
        batches = candidate_batches(
            policy_spec=run.policy_spec,
            candidate_ids=list(run.candidates.order_by("pk").values_list("pk", flat=True)),
        )
        transaction.on_commit(lambda: [tasks.run_candidates.delay(batch) for batch in batches])
    return run


ENQUEUE_JOB = "enqueue_candidates"


def candidate_batch_size(policy_spec: dict[str, Any]) -> int:
    """Candidates per Celery message for a run with this policy.

    INSPECTION_BATCH_SIZE for the rule-based inspector, which never waits on a model: a batch
    shares its message, lease and release statements, claim, read and durable commit, which cost
    a lone candidate more than its own rows do (``bench_candidates`` shows both).
    INSPECTION_MODEL_BATCH_SIZE for an endpoint: the batch's episodes are in flight at once
    (``in_flight``). One for a local checkpoint, which answers one episode at a time.
    """
    if policy_spec.get("kind") == "rule-based":
        return max(1, int(settings.INSPECTION_BATCH_SIZE))
    if policy_spec.get("kind") == "openai":
        return max(1, int(settings.INSPECTION_MODEL_BATCH_SIZE))
    return 1


def candidate_batches(*, policy_spec: dict[str, Any], candidate_ids: list[int]) -> list[list[int]]:
    size = candidate_batch_size(policy_spec)
    return [candidate_ids[start : start + size] for start in range(0, len(candidate_ids), size)]


def unfinished_candidates_resend() -> int:
    """Send every pending or running candidate of a run not cancelled again, in its run's
    batches; returns how many candidates.

    For a broker that cannot redeliver (``core.services.unfinished_jobs_resend`` says why): a
    candidate whose message is still queued gets a second one, which its lease and claim make a
    no-op; one left running is claimed again as a redelivery would.
    """
    from annotation.inspections import tasks

    by_run: dict[int, list[int]] = {}
    for run_id, candidate_id in (
        Candidate.objects.filter(
            state__in=[CandidateState.PENDING, CandidateState.RUNNING], run__cancelled=False
        )
        .order_by("run_id", "pk")
        .values_list("run_id", "pk")
    ):
        by_run.setdefault(run_id, []).append(candidate_id)
    specs = dict(InspectionRun.objects.filter(pk__in=by_run).values_list("pk", "policy_spec"))
    for run_id, ids in by_run.items():
        for batch in candidate_batches(policy_spec=specs[run_id], candidate_ids=ids):
            tasks.run_candidates.delay(batch)
    return sum(len(ids) for ids in by_run.values())


@transaction.atomic
def candidate_retry(*, candidate: Candidate, actor: User) -> Candidate:
    from annotation.inspections import tasks

    # Checked before any write: a refused retry must not re-open the owner's cancelled run.
    run = InspectionRun.objects.only("created_by").get(pk=candidate.run_id)
    check_owner_or_staff(actor, run.created_by_id, what="inspection run", action="retry")
    updated = Candidate.objects.filter(
        pk=candidate.pk, state__in=[CandidateState.FAILED, CandidateState.CANCELLED]
    ).update(state=CandidateState.PENDING, error="", finished_at=None, retry_at=None)
    if updated != 1:
        raise WrongState("only failed or cancelled candidates can be retried")
    InspectionRun.objects.filter(pk=candidate.run_id).update(cancelled=False)
    audit_log_record(actor=actor, action="candidate_retried", obj=candidate)
    transaction.on_commit(lambda: tasks.run_candidates.delay([candidate.pk]))
    candidate.refresh_from_db()
    return candidate


@transaction.atomic
def inspection_run_cancel(*, run: InspectionRun, actor: User) -> int:
    """Stop a run: pending candidates are cancelled; running ones stop after their episode."""
    check_owner_or_staff(actor, run.created_by_id, what="inspection run", action="cancel")
    InspectionRun.objects.filter(pk=run.pk).update(cancelled=True)
    cancelled = Candidate.objects.filter(run=run, state=CandidateState.PENDING).update(
        state=CandidateState.CANCELLED, finished_at=timezone.now(), retry_at=None
    )
    audit_log_record(
        actor=actor, action="inspection_run_cancelled", obj=run, comment=f"{cancelled} cancelled"
    )
    run.cancelled = True
    return cancelled


RECHECK_JOB = "inspection_recheck"
RECHECK_MISMATCHES_KEPT = 20  # per run: the first mismatches, each with its first differences
RECHECK_DIFFERENCES_KEPT = 5


def inspection_recheck_enqueue(*, run: InspectionRun, candidates: list[Candidate]) -> None:
    """Send the run's finished candidates that fall in its re-check sample to be reproduced in
    the background (nothing when none does, or when the run's policy samples)."""
    from annotation.inspections.run_policies import deterministic, sampled_for_recheck

    if not candidates or not deterministic(run)[0]:
        return
    plan = run.reproducibility or {}
    rate = float(plan.get("rate", settings.INSPECTION_RECHECK_RATE))
    first = plan.get("first")
    ids = [
        candidate.pk
        for candidate in candidates
        if candidate.state == CandidateState.DONE
        and sampled_for_recheck(candidate.pk, first_id=first, rate=rate)
    ]
    if ids:
        job_create(kind=RECHECK_JOB, params={"run_id": run.pk, "candidate_ids": ids})


@transaction.atomic
def inspection_run_recheck_record(*, run_id: int, reproductions: list[Any]) -> dict[str, Any]:
    """Add re-check outcomes (``reproduction.Reproduction``) to the run's record; a mismatch is
    logged as an error and appended to the audit log, never silent."""
    run = InspectionRun.objects.select_for_update().get(pk=run_id)
    record = dict(run.reproducibility or {})
    checked = [r for r in reproductions if r.checked]
    mismatched = [r for r in checked if not r.matches]
    record["checked"] = int(record.get("checked", 0)) + len(checked)
    record["mismatched"] = int(record.get("mismatched", 0)) + len(mismatched)
    record["last_checked_at"] = timezone.now().isoformat()
    kept = list(record.get("mismatches", []))
    for reproduction in mismatched:
        if len(kept) < RECHECK_MISMATCHES_KEPT:
            kept.append(
                {
                    "candidate": reproduction.candidate_id,
                    "differences": [
                        d.as_dict() for d in reproduction.differences[:RECHECK_DIFFERENCES_KEPT]
                    ],
                }
            )
        first = reproduction.differences[0]
        logger.error(
            "run %s candidate %s does not reproduce: %s stored %s, reproduced %s",
            run.pk,
            reproduction.candidate_id,
            first.where,
            first.stored,
            first.reproduced,
        )
        audit_log_record(
            actor=None,
            action="inspection_candidate_mismatch",
            obj=run,
            comment=(
                f"candidate {reproduction.candidate_id} does not reproduce: "
                f"{len(reproduction.differences)} differences, first {first.where}"
            )[:500],
            data={"candidate": reproduction.candidate_id},
        )
    record["mismatches"] = kept
    InspectionRun.objects.filter(pk=run.pk).update(reproducibility=record)
    return record
