"""What a worker writes about the candidates it runs: claims, waits and releases, live steps,
finished rollouts, verdicts and catalog entries, failures.

Kept apart from ``services`` (which creates runs and sends their tasks) so that the job's helpers
(``in_flight``) write through here without joining the services <-> tasks <-> jobs loop: nothing
here sends a task. ``services`` re-exports these names for its callers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from agent.spectra.value import iau_designation
from agent.trajectory import Trajectory
from annotation.core.errors import WorkflowError
from annotation.core.services import _GAVE_UP
from annotation.core.sql import rows_insert
from annotation.curation.services import PngsByHash, image_blobs_store
from annotation.inspections.decision_history import stored_consensus
from annotation.inspections.decisions import labels_lock
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    InspectionRun,
    LiveStep,
    Rollout,
)
from annotation.inspections.selectors import NO_HOLD, shift_holds
from annotation.inspections.triage import confidence_rules, triage_reason
from annotation.inspections.verdicts import candidate_verdict
from annotation.spectra.selectors import vetted_labels_of


def _commit_without_waiting() -> None:
    """Let this transaction's commit return before PostgreSQL has flushed it to disk.

    For a write whose loss in a database crash is harmless because a later, durable commit on
    the same connection flushes it anyway (WAL is flushed in order), or a redelivery redoes it.
    It saves a disk flush (about 4 ms here) per call.
    """
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL synchronous_commit TO OFF")


def _in_marks(values: list[Any]) -> str:
    return ", ".join(["%s"] * len(values))


@transaction.atomic
def candidates_claim(*, candidate_ids: list[int]) -> list[int]:
    """pending -> running (or running again after a worker died: acks_late redelivery) for
    each runnable candidate of a batch, in one statement; returns the ids claimed.

    Call it holding their leases (annotation/core/leases.py). A finished or cancelled candidate,
    or one of a cancelled run, is skipped; one whose JOB_MAX_ATTEMPTS are used up fails instead
    of running again. A claim lost in a database crash leaves the candidates as they were
    before, no worse than a crash a moment earlier.
    """
    if not candidate_ids:
        return []
    _commit_without_waiting()
    ops = connection.ops
    now = ops.adapt_datetimefield_value(timezone.now())
    ids = list(dict.fromkeys(candidate_ids))
    table, runs = Candidate._meta.db_table, InspectionRun._meta.db_table
    # RETURNING tells which were claimed, so a redelivered batch skips the ones it finished.
    runnable = (
        f"id IN ({_in_marks(ids)}) AND state IN (%s, %s) "
        f"AND run_id IN (SELECT id FROM {runs} WHERE NOT cancelled)"
    )
    states = [CandidateState.PENDING.value, CandidateState.RUNNING.value]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET state = %s, attempts = attempts + 1, started_at = %s, "
            f"error = '', retry_at = NULL WHERE {runnable} AND attempts < %s RETURNING id",
            [CandidateState.RUNNING.value, now, *ids, *states, settings.JOB_MAX_ATTEMPTS],
        )
        claimed = sorted(row[0] for row in cursor.fetchall())
        if len(claimed) < len(ids):
            cursor.execute(
                f"UPDATE {table} SET state = %s, error = %s, finished_at = %s, retry_at = NULL "
                f"WHERE {runnable} AND attempts >= %s",
                [
                    CandidateState.FAILED.value,
                    _GAVE_UP.format(attempts=settings.JOB_MAX_ATTEMPTS),
                    now,
                    *ids,
                    *states,
                    settings.JOB_MAX_ATTEMPTS,
                ],
            )
    return claimed


def candidate_claim(*, candidate_id: int) -> bool:
    """``candidates_claim`` for one candidate."""
    return bool(candidates_claim(candidate_ids=[candidate_id]))


def candidates_release(*, candidate_ids: list[int], error: str, delay: int) -> None:
    """running -> pending, undoing the claim of a batch's candidates that were never started
    (the batch waits for a model endpoint): their attempt did not happen. They are sent again
    with the batch in ``delay`` seconds, and ``error`` says why they wait."""
    if candidate_ids:
        Candidate.objects.filter(pk__in=candidate_ids, state=CandidateState.RUNNING).update(
            state=CandidateState.PENDING,
            attempts=F("attempts") - 1,
            error=f"not started: its batch is {error}"[:10000],
            retry_at=timezone.now() + timedelta(seconds=delay),
        )


def candidates_cancel(*, candidate_ids: list[int]) -> None:
    """running -> cancelled: the rest of a batch whose run was cancelled while it ran."""
    if candidate_ids:
        Candidate.objects.filter(pk__in=candidate_ids, state=CandidateState.RUNNING).update(
            state=CandidateState.CANCELLED, finished_at=timezone.now()
        )


def candidate_wait(*, candidate_id: int, error: str, delay: int) -> bool:
    """running -> pending with the reason it waits (a model endpoint outage), for a retry in
    ``delay`` seconds.

    Returns False when the candidate is no longer running (cancelled meanwhile).
    """
    waiting = Candidate.objects.filter(pk=candidate_id, state=CandidateState.RUNNING).update(
        state=CandidateState.PENDING,
        error=error[:10000],
        retry_at=timezone.now() + timedelta(seconds=delay),
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


def _live_step_rows(
    *, candidate: Candidate, rollout_index: int, steps: list[Any], pngs: PngsByHash
) -> list[LiveStep]:
    """The rows of live steps; their PNGs are only collected in ``pngs``."""
    from agent.trajectory import step_to_dict

    return [
        LiveStep(
            candidate=candidate,
            rollout_index=rollout_index,
            step_index=step.index,
            data=step_to_dict(step, png=pngs),
        )
        for step in steps
    ]


def _live_steps_insert(rows: list[LiveStep]) -> None:
    """One INSERT for the steps; a step written before under the same index is replaced, as a
    redelivery would."""
    rows_insert(
        rows,
        on_conflict="ON CONFLICT (candidate_id, rollout_index, step_index) "
        "DO UPDATE SET data = EXCLUDED.data",
    )


@transaction.atomic
def live_steps_write(*, candidate: Candidate, rollout_index: int, steps: list[Any]) -> None:
    """Write live steps and their images: three statements, however many steps.

    Their commit does not wait for the disk: the live view is all they serve. A rollout, whose
    durable commit flushes them too, carries the same steps and images; a rollout a database
    crash cuts short is run again from the start, its live steps cleared.
    """
    _commit_without_waiting()
    pngs = PngsByHash()
    _live_steps_insert(
        _live_step_rows(candidate=candidate, rollout_index=rollout_index, steps=steps, pngs=pngs)
    )
    image_blobs_store(pngs.pngs)


@transaction.atomic
def live_steps_write_many(*, steps: list[tuple[Candidate, int, list[Any]]]) -> None:
    """``live_steps_write`` for the steps of several rollouts ``(candidate, index, steps)`` at
    once: still three statements (episodes in flight, ``in_flight``)."""
    _commit_without_waiting()
    pngs = PngsByHash()
    rows = [
        row
        for candidate, index, own in steps
        for row in _live_step_rows(candidate=candidate, rollout_index=index, steps=own, pngs=pngs)
    ]
    _live_steps_insert(rows)
    image_blobs_store(pngs.pngs)


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


@dataclass
class RolloutResult:
    """A finished episode's rows on their way to the database: the rollout, its live steps not
    written yet and their PNGs. With ``finish_with`` (the candidate's earlier rollouts) it is
    the candidate's last rollout: its verdict and catalog entry go with it."""

    rollout: Rollout
    steps: list[LiveStep]
    pngs: dict[str, bytes]
    finish_with: list[Rollout] | None = None


def rollout_result(
    *,
    candidate: Candidate,
    index: int,
    trajectory: Trajectory,
    confidence: float | None,
    seconds: float,
    steps: list[Any],
    finish_with: list[Rollout] | None = None,
) -> RolloutResult:
    """The rows of a finished rollout and its unwritten live ``steps`` (writes nothing).

    A trajectory that names another spectrum or task than its candidate's is refused: a result
    is stored only with its own input."""
    recorded = trajectory.meta.get("spectrum_id")
    if recorded is not None and recorded != candidate.spectrum_id:
        raise WorkflowError(
            f"rollout {index} of candidate {candidate.pk} was computed for spectrum {recorded}, "
            f"not for the candidate's spectrum {candidate.spectrum_id}: not stored"
        )
    if trajectory.task != candidate.run.task.code:
        raise WorkflowError(
            f"rollout {index} of candidate {candidate.pk} answers task {trajectory.task}, "
            f"not the run's task {candidate.run.task.code}: not stored"
        )
    pngs = PngsByHash()
    rows = _live_step_rows(candidate=candidate, rollout_index=index, steps=steps, pngs=pngs)
    rollout = Rollout(
        candidate=candidate,
        index=index,
        data=trajectory.to_dict(png=pngs),
        prediction=(trajectory.answer.prediction or "") if trajectory.answer else "",
        confidence=confidence,
        n_tool_calls=trajectory.n_tool_calls,
        format_ok=bool(trajectory.format_ok),
        stop_reason=trajectory.stop_reason or "",
        seconds=seconds,
    )
    return RolloutResult(rollout=rollout, steps=rows, pngs=pngs.pngs, finish_with=finish_with)


@transaction.atomic
def rollouts_record(*, results: list[RolloutResult]) -> None:
    """Store finished rollouts with their live steps and images, and finish the candidates whose
    last rollout is among them, in one transaction of at most seven statements however many:
    one each for the live steps, the images, the rollouts, then the finished candidates'
    spectra's locks, labels, states and catalog entries (see ``_candidates_finish``)."""
    pngs: dict[str, bytes] = {}
    for result in results:
        pngs.update(result.pngs)
    _live_steps_insert([row for result in results for row in result.steps])
    image_blobs_store(pngs)
    # The lease keeps a second worker out; a rollout already stored under an index is kept.
    rows_insert([result.rollout for result in results], on_conflict="ON CONFLICT DO NOTHING")
    _candidates_finish(
        finished=[
            (result.rollout.candidate, [*result.finish_with, result.rollout])
            for result in results
            if result.finish_with is not None
        ]
    )


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
    """Store one finished rollout with the live steps ``live`` still holds (``rollouts_record``)."""
    result = rollout_result(
        candidate=candidate,
        index=index,
        trajectory=trajectory,
        confidence=confidence,
        seconds=seconds,
        steps=live.pending if live is not None else [],
        finish_with=finish_with,
    )
    rollouts_record(results=[result])
    if live is not None:
        live.pending = []
    return result.rollout


_CATALOG_COLUMNS = [
    "run_id",
    "object_id",
    "survey",
    "ra",
    "dec",
    "task_code",
    "verdict",
    "confidence",
    "snr",
    "policy_name",
    "model_key",
    "model_label",
    "vetted_label",
    "label_state",
    "synthetic",
    "shifted",
    "spectrum_id",
    "dataset",
    "designation",
    "content_hash",
]


def _candidates_finish(*, finished: list[tuple[Candidate, list[Rollout]]]) -> None:
    """Four statements for any number of candidates: their spectra's label locks
    (``decisions.labels_lock``), the vetted labels of their spectra, their final states, then
    their catalog entries (an upsert that keeps an expert decision already recorded; a new entry starts with the label and the experts' consensus on its spectrum for
    the task, as every other run's entry shows them). The run, task and spectrum come loaded
    with each candidate."""
    if not finished:
        return
    now = timezone.now()
    entries = []
    # Under the spectra's locks, so no decision commits between this read and the entries'
    # write: one that waits for them refreshes the new entries once this commits.
    labels_lock([candidate.spectrum_id for candidate, _ in finished])
    labels = vetted_labels_of(
        pairs=[(candidate.spectrum_id, candidate.run.task_id) for candidate, _ in finished]
    )
    rules = confidence_rules({(c.run.task_id, c.run.model_key) for c, _ in finished})
    holds = shift_holds({candidate.run_id for candidate, _ in finished})
    for candidate, rollouts in finished:
        run = candidate.run
        verdict, confidence, share = candidate_verdict(rollouts)
        candidate.state = CandidateState.DONE
        candidate.verdict = verdict
        candidate.confidence = confidence
        candidate.vote_share = share
        candidate.triage_reason = triage_reason(
            verdict=verdict,
            confidence=confidence,
            threshold=run.confidence_threshold,
            rollouts=rollouts,
            rule=rules.get((run.task_id, run.model_key)),
            held=(hold := holds.get(run.pk, NO_HOLD)).reason(candidate.spectrum.survey),
        )
        candidate.needs_expert = bool(candidate.triage_reason)
        candidate.finished_at = now
        spectrum = candidate.spectrum
        label_value, label_state, behind = labels.get((spectrum.pk, run.task_id), ("", "", []))
        agreed = stored_consensus(behind)
        entries.append(
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
                model_key=run.model_key,
                model_label=run.model_label,
                vetted_label=label_value,
                label_state=label_state,
                expert_decision=agreed.decision,
                expert_quality=agreed.quality,
                expert_issues=agreed.issues,
                synthetic=spectrum.synthetic,
                shifted=hold.shifted(spectrum.survey),
                spectrum=spectrum,
                dataset=spectrum.dataset,
                designation=iau_designation(spectrum.ra, spectrum.dec),
                content_hash=spectrum.content_hash,
            )
        )
    _candidates_update(candidates=[candidate for candidate, _ in finished], fields=_FINAL_FIELDS)
    # An expert decision already recorded on the entry is kept.
    rows_insert(
        entries,
        on_conflict="ON CONFLICT (candidate_id) DO UPDATE SET "
        + ", ".join(
            f"{name} = EXCLUDED.{name}" for name in map(connection.ops.quote_name, _CATALOG_COLUMNS)
        ),
    )


_FINAL_FIELDS = [
    "state",
    "verdict",
    "confidence",
    "vote_share",
    "needs_expert",
    "triage_reason",
    "finished_at",
]


def _candidates_update(*, candidates: list[Candidate], fields: list[str]) -> None:
    """One UPDATE setting each candidate's own values of ``fields``. On PostgreSQL from a VALUES
    list: Django's bulk_update builds a CASE per field and row, which costs more CPU here than
    the whole write costs the server."""
    if len(candidates) == 1:
        (candidate,) = candidates
        Candidate.objects.filter(pk=candidate.pk).update(
            **{name: getattr(candidate, name) for name in fields}
        )
        return
    if connection.vendor != "postgresql":
        Candidate.objects.bulk_update(candidates, fields)
        return
    concrete = {column.name: column for column in Candidate._meta.concrete_fields}
    columns = [concrete[name] for name in fields]
    casts = [column.db_type(connection) for column in columns]
    row = "(%s::bigint, " + ", ".join(f"%s::{cast}" for cast in casts) + ")"
    params: list[Any] = []
    for candidate in candidates:
        params.append(candidate.pk)
        params.extend(
            column.get_db_prep_save(getattr(candidate, column.attname), connection)
            for column in columns
        )
    names = [connection.ops.quote_name(column.column) for column in columns]
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {Candidate._meta.db_table} AS c SET "
            + ", ".join(f"{name} = v.{name}" for name in names)
            + f" FROM (VALUES {', '.join([row] * len(candidates))}) AS v(id, {', '.join(names)})"
            " WHERE c.id = v.id",
            params,
        )


def _candidate_finish(*, candidate: Candidate, rollouts: list[Rollout]) -> None:
    _candidates_finish(finished=[(candidate, rollouts)])


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


def inspection_run_set_policy_info(*, run: InspectionRun, info: dict[str, Any]) -> None:
    """Record what the policy reported and the model it names (the run's model key)."""
    from annotation.inspections.lineage import model_identity

    if not run.policy_info:
        key, label = model_identity(run.policy_spec, info, code_version=run.code_version)
        InspectionRun.objects.filter(pk=run.pk).update(
            policy_info=info, model_key=key, model_label=label
        )
        run.policy_info, run.model_key, run.model_label = info, key, label
