"""Inspection writes: create, claim, record rollouts and live steps, finish, retry, cancel,
and experts' decisions on candidates."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from agent.trajectory import Trajectory
from annotation.core import endpoints
from annotation.core.errors import NotAllowed, WorkflowError, WrongState
from annotation.core.models import ModelEndpoint
from annotation.core.permissions import check_owner_or_staff
from annotation.core.roles import Role
from annotation.core.services import _GAVE_UP, audit_log_record, job_create
from annotation.curation.services import _hash_images, _row_value, image_blobs_store
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    ExpertDecision,
    ExpertDecisionValue,
    InspectionRun,
    LiveStep,
    Rollout,
)
from annotation.spectra.models import Spectrum, Task
from annotation.training_runs.services import _checked_model_path

# --- inspection runs ------------------------------------------------------------------------------

POLICY_KINDS = ("rule-based", "transformers", "openai")


# What a user's OpenAI-compatible spec may hold: which endpoint, and how patiently to call it.
OPENAI_SPEC_KEYS = ("kind", "endpoint", "model", *endpoints.CALL_OPTIONS)


def endpoint_spec_check(
    spec: dict[str, Any], *, user: User | None
) -> tuple[dict[str, Any], ModelEndpoint]:
    """The stored form of a user's ``{"kind": "openai", "endpoint": NAME | ID, ...}`` spec and
    its endpoint. No URL or key is accepted: the endpoint's own are used when the call is made.
    """
    from annotation.core.roles import has_role

    for refused in ("base_url", "api_key"):
        if refused in spec:
            raise WorkflowError(
                f"{refused} is not accepted; choose a registered endpoint: "
                f"{endpoints.choices_text()}"
            )
    unknown = sorted(set(spec) - set(OPENAI_SPEC_KEYS))
    if unknown:
        raise WorkflowError(
            f"policy spec keys {unknown} are not accepted for an endpoint; "
            f"allowed: {', '.join(OPENAI_SPEC_KEYS)}"
        )
    if user is not None and not has_role(user, Role.ML_ENGINEER, Role.EXPERT, Role.STAFF):
        raise NotAllowed("calling a model endpoint needs the ml_engineer, expert or staff role")
    try:
        endpoint = endpoints.find_usable(spec.get("endpoint") or endpoints.DEFAULT_ENDPOINT)
        options = endpoints.call_options(spec)
    except endpoints.EndpointError as error:
        raise WorkflowError(str(error)) from None
    model = spec.get("model")
    if model not in (None, "", endpoint.model):
        raise WorkflowError(
            f"model {model!r} is not served by endpoint {endpoint.name!r}, which serves "
            f"{endpoint.model!r}; choose the endpoint registered for that model"
        )
    stored = {"kind": "openai", "endpoint": endpoint.name, "model": endpoint.model, **options}
    return stored, endpoint


def _check_policy_spec(
    spec: dict[str, Any], *, user: User | None
) -> tuple[dict[str, Any], ModelEndpoint | None]:
    kind = spec.get("kind")
    if kind not in POLICY_KINDS:
        raise WorkflowError(f"policy kind must be one of {', '.join(POLICY_KINDS)}; got {kind!r}")
    if kind == "openai":
        return endpoint_spec_check(spec, user=user)
    if kind == "transformers":
        spec = {**spec, "model_path": _checked_model_path(spec.get("model_path"))}
    if "base_url" in spec or "api_key" in spec:
        raise WorkflowError(f"a {kind} policy takes no base_url or api_key")
    return dict(spec), None


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
    checked_spec, endpoint = _check_policy_spec(policy_spec, user=created_by)
    run = InspectionRun.objects.create(
        name=name[:120],
        task=task,
        policy_spec=checked_spec,
        endpoint=endpoint,
        sampling=sampling or {},
        rollouts=rollouts,
        max_tool_calls=max_tool_calls,
        confidence_threshold=confidence_threshold,
        code_version=code_version()[:80],
        created_by=created_by if created_by is not None and created_by.is_authenticated else None,
    )
    Candidate.objects.bulk_create([Candidate(run=run, spectrum_id=pk) for pk in unique_ids])
    audit_log_record(
        actor=created_by,
        action="inspection_run_created",
        obj=run,
        comment=f"{len(unique_ids)} candidates, {run.policy_spec.get('kind')}"
        + (f" on endpoint {endpoint.name}" if endpoint else ""),
    )
    if enqueue and len(unique_ids) > settings.INSPECTION_ENQUEUE_INLINE_MAX:
        job_create(
            kind=ENQUEUE_JOB,
            params={"run_id": run.pk},
            created_by=created_by,
            total=len(unique_ids),
        )
    elif enqueue:
        candidate_ids = list(run.candidates.values_list("pk", flat=True))
        transaction.on_commit(lambda: [tasks.run_candidate.delay(pk) for pk in candidate_ids])
    return run


ENQUEUE_JOB = "enqueue_candidates"


def _commit_without_waiting() -> None:
    """Let this transaction's commit return before PostgreSQL has flushed it to disk.

    For a write whose loss in a database crash is harmless because a later, durable commit on
    the same connection flushes it anyway (WAL is flushed in order), or a redelivery redoes it.
    It saves a disk flush (about 4 ms here) per call.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")


@transaction.atomic
def candidate_claim(*, candidate_id: int) -> bool:
    """pending -> running (or running again after a worker died: acks_late redelivery).

    Call it holding the candidate's lease (annotation/core/leases.py). A candidate whose
    JOB_MAX_ATTEMPTS are used up fails instead of running again. A claim lost in a database
    crash leaves the candidate as it was before, no worse than a crash a moment earlier.
    """
    _commit_without_waiting()
    now = timezone.now()
    runnable = Candidate.objects.filter(
        pk=candidate_id,
        state__in=[CandidateState.PENDING, CandidateState.RUNNING],
        run__cancelled=False,
    )
    claimed = runnable.filter(attempts__lt=settings.JOB_MAX_ATTEMPTS).update(
        state=CandidateState.RUNNING,
        attempts=F("attempts") + 1,
        started_at=now,
        error="",
    )
    if claimed == 1:
        return True
    runnable.update(
        state=CandidateState.FAILED,
        error=_GAVE_UP.format(attempts=settings.JOB_MAX_ATTEMPTS),
        finished_at=now,
    )
    return False


def candidate_wait(*, candidate_id: int, error: str) -> bool:
    """running -> pending with the reason it waits (a model endpoint outage), for a later retry.

    Returns False when the candidate is no longer running (cancelled meanwhile).
    """
    waiting = Candidate.objects.filter(pk=candidate_id, state=CandidateState.RUNNING).update(
        state=CandidateState.PENDING, error=error[:10000]
    )
    return waiting == 1


# The rule-based inspector's steps (milliseconds apart, no model to wait for) are written
# together with their rollout, unless one comes this long after the last write.
LIVE_STEP_FLUSH_SECONDS = 0.1


@transaction.atomic
def live_steps_reset(*, candidate: Candidate, rollout_index: int) -> None:
    """Forget the live steps of an unfinished rollout before it is run again (no duplicates)."""
    if not Rollout.objects.filter(candidate=candidate, index=rollout_index).exists():
        LiveStep.objects.filter(candidate=candidate, rollout_index=rollout_index).delete()


def _live_steps_insert(
    *, candidate: Candidate, rollout_index: int, steps: list[Any], pngs: dict[str, bytes]
) -> None:
    """One INSERT for the steps (their PNGs are only collected in ``pngs``, stored by the
    caller); a step written before under the same index is replaced, as a redelivery would."""
    from agent.trajectory import step_to_dict

    if not steps:
        return
    LiveStep.objects.bulk_create(
        [
            LiveStep(
                candidate=candidate,
                rollout_index=_row_value(rollout_index),
                step_index=step.index,
                data=_hash_images(step_to_dict(step), pngs),
            )
            for step in steps
        ],
        update_conflicts=True,
        unique_fields=["candidate", "rollout_index", "step_index"],
        update_fields=["data"],
    )


@transaction.atomic
def live_steps_write(*, candidate: Candidate, rollout_index: int, steps: list[Any]) -> None:
    """Write live steps and their images: three statements at most, however many steps."""
    pngs: dict[str, bytes] = {}
    _live_steps_insert(candidate=candidate, rollout_index=rollout_index, steps=steps, pngs=pngs)
    image_blobs_store(pngs)


class LiveStepBuffer:
    """The live steps of one rollout on their way to the database.

    A model's steps (``batch=False``) are written as each one arrives, so the live view shows
    every turn while the model works on the next, however long that takes. With ``batch=True``
    (a policy that never waits, such as the rule-based inspector) they are held and written by
    ``rollout_record`` in its transaction, or earlier when one comes LIVE_STEP_FLUSH_SECONDS
    after the last write. Pass ``add`` as the rollout's ``on_step``.
    """

    def __init__(
        self,
        *,
        candidate: Candidate,
        rollout_index: int,
        batch: bool = False,
        flush_after: float | None = None,
    ) -> None:
        self.candidate = candidate
        self.rollout_index = rollout_index
        self.batch = batch
        self.flush_after = LIVE_STEP_FLUSH_SECONDS if flush_after is None else flush_after
        self.pending: list[Any] = []
        self._last_write = time.monotonic()

    def add(self, step: Any, *_: Any) -> None:
        self.pending.append(step)
        if not self.batch or time.monotonic() - self._last_write >= self.flush_after:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            live_steps_write(
                candidate=self.candidate, rollout_index=self.rollout_index, steps=self.pending
            )
            self.pending = []
        self._last_write = time.monotonic()


@transaction.atomic
def rollout_record(
    *,
    candidate: Candidate,
    index: int,
    trajectory: Trajectory,
    confidence: float | None,
    seconds: float,
    live: LiveStepBuffer | None = None,
    finish_with: list[Rollout] | None = None,
) -> Rollout:
    """Store a finished rollout with its unwritten live steps, in one transaction.

    With ``finish_with`` (the candidate's earlier rollouts) this is the candidate's last rollout:
    its verdict and catalog entry are written in the same transaction. For a one-rollout
    candidate that is seven statements: two for the images, one each for the live steps, the
    rollout, the candidate and the catalog entry (see ``candidate_finish``).
    """
    pngs: dict[str, bytes] = {}
    if live is not None:
        _live_steps_insert(candidate=candidate, rollout_index=index, steps=live.pending, pngs=pngs)
        live.pending = []
    rollout = Rollout(
        candidate=candidate,
        index=index,
        data=_hash_images(trajectory.to_dict(), pngs),
        prediction=(trajectory.answer.prediction or "") if trajectory.answer else "",
        confidence=confidence,
        n_tool_calls=trajectory.n_tool_calls,
        format_ok=bool(trajectory.format_ok),
        stop_reason=trajectory.stop_reason or "",
        seconds=seconds,
    )
    image_blobs_store(pngs)
    # The lease keeps a second worker out; a rollout already stored under this index is kept.
    Rollout.objects.bulk_create([rollout], ignore_conflicts=True)
    if finish_with is not None:
        _candidate_finish(candidate=candidate, rollouts=[*finish_with, rollout])
    return rollout


def candidate_verdict(rollouts: list[Rollout]) -> tuple[str, float | None, float]:
    """(verdict, confidence, vote share) of a candidate from its rollouts.

    The verdict is the majority answer. The confidence is the policy's own probability of that
    answer averaged over rollouts when the policy reports one, else the vote share.
    """
    from agent.calibration import majority_verdict

    verdict, share = majority_verdict([r.prediction or None for r in rollouts])
    if verdict is None:
        return "", 0.5 if share else 0.0, share
    reported = [r for r in rollouts if r.confidence is not None and r.prediction]
    if reported and len(reported) == len(rollouts):
        probabilities = [
            r.confidence if r.prediction == verdict else 1.0 - r.confidence
            for r in reported
            if r.confidence is not None  # always (see reported); narrows the type
        ]
        return verdict, sum(probabilities) / len(probabilities), share
    return verdict, share, share


_CATALOG_FIELDS = [
    "run",
    "object_id",
    "survey",
    "ra",
    "dec",
    "task_code",
    "verdict",
    "confidence",
    "snr",
    "policy_name",
    "synthetic",
]


def _candidate_finish(*, candidate: Candidate, rollouts: list[Rollout]) -> None:
    """Two statements: the candidate's final state, then its catalog entry (an upsert that keeps
    an expert decision already recorded). Reads nothing: the run, task and spectrum come loaded
    with the candidate."""
    run = candidate.run
    verdict, confidence, share = candidate_verdict(rollouts)
    needs_expert = not verdict or (confidence or 0.0) < run.confidence_threshold
    final = {
        "state": CandidateState.DONE,
        "verdict": verdict,
        "confidence": confidence,
        "vote_share": share,
        "needs_expert": needs_expert,
        "finished_at": timezone.now(),
    }
    Candidate.objects.filter(pk=candidate.pk).update(**final)
    for name, value in final.items():
        setattr(candidate, name, value)
    spectrum = candidate.spectrum
    CatalogEntry.objects.bulk_create(
        [
            CatalogEntry(
                candidate=candidate,
                run=run,
                object_id=spectrum.object_id,
                survey=spectrum.survey,
                ra=spectrum.ra,
                dec=spectrum.dec,
                task_code=run.task.code,
                verdict=verdict,
                confidence=confidence,
                snr=spectrum.snr,
                policy_name=str(run.policy_info.get("name") or run.policy_spec.get("kind"))[:120],
                synthetic=spectrum.synthetic,
            )
        ],
        update_conflicts=True,
        unique_fields=["candidate"],
        update_fields=_CATALOG_FIELDS,
    )


@transaction.atomic
def candidate_finish(*, candidate: Candidate, rollouts: list[Rollout] | None = None) -> Candidate:
    """Aggregate the rollouts, route uncertain verdicts to experts, and update the catalog."""
    if rollouts is None:
        rollouts = list(candidate.rollouts.order_by("index"))
    _candidate_finish(candidate=candidate, rollouts=rollouts)
    return candidate


def candidate_fail(*, candidate_id: int, error: str) -> None:
    Candidate.objects.filter(pk=candidate_id).exclude(state=CandidateState.CANCELLED).update(
        state=CandidateState.FAILED, error=error[:10000], finished_at=timezone.now()
    )


@transaction.atomic
def candidate_retry(*, candidate: Candidate, actor: User) -> Candidate:
    from annotation.inspections import tasks

    # Checked before any write: a refused retry must not re-open the owner's cancelled run.
    run = InspectionRun.objects.only("created_by").get(pk=candidate.run_id)
    check_owner_or_staff(actor, run.created_by_id, what="inspection run", action="retry")
    updated = Candidate.objects.filter(
        pk=candidate.pk, state__in=[CandidateState.FAILED, CandidateState.CANCELLED]
    ).update(state=CandidateState.PENDING, error="", finished_at=None)
    if updated != 1:
        raise WrongState("only failed or cancelled candidates can be retried")
    InspectionRun.objects.filter(pk=candidate.run_id).update(cancelled=False)
    audit_log_record(actor=actor, action="candidate_retried", obj=candidate)
    transaction.on_commit(lambda: tasks.run_candidate.delay(candidate.pk))
    candidate.refresh_from_db()
    return candidate


@transaction.atomic
def inspection_run_cancel(*, run: InspectionRun, actor: User) -> int:
    """Stop a run: pending candidates are cancelled; running ones stop after their episode."""
    check_owner_or_staff(actor, run.created_by_id, what="inspection run", action="cancel")
    InspectionRun.objects.filter(pk=run.pk).update(cancelled=True)
    cancelled = Candidate.objects.filter(run=run, state=CandidateState.PENDING).update(
        state=CandidateState.CANCELLED, finished_at=timezone.now()
    )
    audit_log_record(
        actor=actor, action="inspection_run_cancelled", obj=run, comment=f"{cancelled} cancelled"
    )
    run.cancelled = True
    return cancelled


def inspection_run_set_policy_info(*, run: InspectionRun, info: dict[str, Any]) -> None:
    if not run.policy_info:
        InspectionRun.objects.filter(pk=run.pk).update(policy_info=info)
        run.policy_info = info


EXPERT_SPLIT = "split"  # the catalog's expert decision when the experts disagree


@transaction.atomic
def expert_decision_record(
    *, candidate: Candidate, expert: User, decision: str, comment: str = ""
) -> ExpertDecision:
    """An expert's YES / NO / unsure beside the agent's verdict; shown in the catalog."""
    if decision not in ExpertDecisionValue.values:
        raise WorkflowError(f"decision must be YES, NO or unsure, got {decision!r}")
    if candidate.state != CandidateState.DONE:
        raise WrongState(f"the candidate is {candidate.state}; vet it once the agent has finished")
    record, created = ExpertDecision.objects.update_or_create(
        candidate=candidate, expert=expert, defaults={"decision": decision, "comment": comment}
    )
    # The catalog's column holds the experts' common answer, or "split" when they disagree:
    # the latest decision alone would hide a YES behind a later NO.
    given = set(
        ExpertDecision.objects.filter(candidate=candidate).values_list("decision", flat=True)
    )
    consensus = given.pop() if len(given) == 1 else EXPERT_SPLIT
    CatalogEntry.objects.filter(candidate=candidate).update(expert_decision=consensus)
    audit_log_record(
        actor=expert,
        action="expert_decision",
        obj=candidate,
        to_state=decision,
        comment=comment,
        data={"changed": not created},
    )
    return record
