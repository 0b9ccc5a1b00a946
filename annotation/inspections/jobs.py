"""Running one candidate: build its policy, inspect, record rollouts."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from agent.policies.base import EndpointUnavailable
from annotation.core import services as core_services
from annotation.core.jobs import OutageWatch, retry_delay, runner, waiting_reason
from annotation.core.models import Job
from annotation.inspections import ablations, in_flight, recording, services, shifts
from annotation.inspections.run_policies import policy_for
from annotation.inspections.verdicts import rollout_meta

logger = logging.getLogger(__name__)


# --- inspection candidates --------------------------------------------------------------------------


@dataclass
class Waiting:
    """Candidates of a batch to try again after ``delay`` seconds (a model endpoint outage)."""

    candidate_ids: list[int]
    delay: int


# The rest of a batch stops when its run is cancelled. The run is read with the batch; after
# that it is looked up again before a candidate or rollout once this long has passed, so a
# batch of fast candidates costs one query, not one per candidate.
CANCEL_CHECK_SECONDS = 0.5

# A batch of fast candidates is written when it ends, or earlier once its oldest unwritten
# result is this old: a killed worker loses at most this much work.
BATCH_WRITE_SECONDS = 2.0


class _Batch:
    """The claimed candidates of one message, their run read once, and the results of a fast
    policy on their way to the database in one transaction."""

    def __init__(self, candidate_ids: list[int]) -> None:
        from annotation.inspections.models import Candidate

        runs: dict[int, Any] = {}
        self.candidates = list(
            Candidate.objects.select_related("run__task", "spectrum")
            .filter(pk__in=candidate_ids)
            .order_by("pk")
        )
        for candidate in self.candidates:  # one run object per run: its policy info is set once
            candidate.run = runs.setdefault(candidate.run_id, candidate.run)
        self.tasks: dict[int, Any] = {}
        self.checked = time.monotonic()
        self.results: list[recording.RolloutResult] = []
        self.oldest = 0.0

    def cancelled(self, run: Any) -> bool:
        from annotation.inspections.models import InspectionRun

        if not run.cancelled and time.monotonic() - self.checked >= CANCEL_CHECK_SECONDS:
            run.cancelled = InspectionRun.objects.filter(pk=run.pk, cancelled=True).exists()
            self.checked = time.monotonic()
        return bool(run.cancelled)

    def add(self, result: recording.RolloutResult) -> None:
        if not self.results:
            self.oldest = time.monotonic()
        self.results.append(result)
        if time.monotonic() - self.oldest >= BATCH_WRITE_SECONDS:
            self.write()

    def write_due(self) -> None:
        """Write the held results once the oldest has waited BATCH_WRITE_SECONDS."""
        if self.results and time.monotonic() - self.oldest >= BATCH_WRITE_SECONDS:
            self.write()

    def recheck(self) -> None:
        """Send this batch's candidates that fall in their run's re-check sample to be
        reproduced in the background."""
        by_run: dict[int, list[Any]] = {}
        for candidate in self.candidates:
            by_run.setdefault(candidate.run_id, []).append(candidate)
        for candidates in by_run.values():
            services.inspection_recheck_enqueue(run=candidates[0].run, candidates=candidates)

    def write(self) -> None:
        """Write the held results in one transaction; if that fails, each candidate's in its
        own, so one bad candidate fails alone."""
        results, self.results = self.results, []
        if not results:
            return
        try:
            recording.rollouts_record(results=results)
        except Exception:
            by_candidate: dict[int, list[recording.RolloutResult]] = {}
            for result in results:
                by_candidate.setdefault(result.rollout.candidate_id, []).append(result)
            for candidate_id, own in by_candidate.items():
                try:
                    recording.rollouts_record(results=own)
                except Exception as error:
                    logger.warning("candidate %s failed: %s", candidate_id, error)
                    recording.candidate_fail(
                        candidate_id=candidate_id, error=f"{type(error).__name__}: {error}"
                    )


def run_candidates(candidate_ids: list[int], *, can_wait: bool = False) -> Waiting | None:
    """Run the claimed candidates of a batch, one after the other, then record their verdicts.

    A candidate that raises fails alone; a cancelled run stops the rest of the batch (they
    become cancelled). Each candidate is resumable: finished rollouts are kept; an unfinished
    one is started over with its live steps cleared, so a worker killed mid-episode leaves no
    duplicate or half-written step behind. The results of a policy that never waits (the
    rule-based inspector) are written together; a model's as each rollout ends. Returns the
    candidates to try again, and when, after a model endpoint outage.
    """
    batch = _Batch(candidate_ids)
    if batch.candidates and in_flight.applies(batch.candidates[0].run):
        later = in_flight.run_batch(batch, can_wait=can_wait)
        return Waiting(candidate_ids=later[0], delay=later[1]) if later else None
    for position, candidate in enumerate(batch.candidates):
        if batch.cancelled(candidate.run):
            batch.write()
            recording.candidates_cancel(candidate_ids=[c.pk for c in batch.candidates[position:]])
            return None
        try:
            _run_one(candidate, batch)
        except EndpointUnavailable as error:
            batch.write()
            delay = retry_delay(candidate.attempts) if can_wait else None
            if delay is not None and recording.candidate_wait(
                candidate_id=candidate.pk,
                error=waiting_reason(error, delay=delay, attempt=candidate.attempts),
                delay=delay,
            ):
                # The endpoint is down for the rest of the batch too: they wait unstarted.
                rest = [c.pk for c in batch.candidates[position + 1 :]]
                recording.candidates_release(
                    candidate_ids=rest,
                    error=waiting_reason(error, delay=delay, attempt=candidate.attempts),
                    delay=delay,
                )
                return Waiting(candidate_ids=[candidate.pk, *rest], delay=delay)
            recording.candidate_fail(
                candidate_id=candidate.pk, error=f"{type(error).__name__}: {error}"
            )
        except Exception as error:  # the reason is shown on the run page; retry is one click
            logger.warning("candidate %s failed: %s", candidate.pk, error)
            recording.candidate_fail(
                candidate_id=candidate.pk, error=f"{type(error).__name__}: {error}"
            )
    batch.write()
    batch.recheck()
    return None


def _policy_info(run: Any, policy: Any) -> dict[str, Any]:
    """What the policy reports, with the hash of a checkpoint's weights (the run's model key)."""
    from annotation.inspections.lineage import weights_sha256

    info = dict(policy.info())
    if run.policy_spec.get("kind") == "transformers":
        info["weights_sha256"] = weights_sha256(run.policy_spec.get("model_path") or "")
    return info


def _run_one(candidate: Any, batch: _Batch) -> None:
    """Run one candidate's remaining rollouts; a fast policy's results go to the batch."""
    from agent.rollout import inspect, trajectory_confidence
    from annotation.spectra.selectors import spectrum_value, task_value

    run = candidate.run
    policy = OutageWatch(policy_for(run.policy_spec, run.sampling))
    if not run.policy_info:
        recording.inspection_run_set_policy_info(run=run, info=_policy_info(run, policy))
    fast = run.policy_spec.get("kind") == "rule-based"
    task = batch.tasks.get(run.pk) or batch.tasks.setdefault(run.pk, task_value(run.task))
    spectrum = spectrum_value(candidate.spectrum)
    # A first attempt has nothing to resume: no rollout or live step of it exists yet.
    done = [] if candidate.attempts <= 1 else list(candidate.rollouts.order_by("index"))
    to_run = [index for index in range(run.rollouts) if index not in {r.index for r in done}]
    for index in to_run:
        if index != to_run[0] and batch.cancelled(run):
            batch.write()
            recording.candidates_cancel(candidate_ids=[candidate.pk])
            return
        if candidate.attempts > 1:
            recording.live_steps_reset(candidate=candidate, rollout_index=index)
        live = recording.LiveStepBuffer(candidate=candidate, rollout_index=index, batch=fast)
        started = time.perf_counter()
        trajectory = inspect(
            spectrum,
            task,
            policy,
            max_tool_calls=run.max_tool_calls,
            on_step=live.add,
            meta=rollout_meta(candidate=candidate, index=index),
        )
        if trajectory.stop_reason == "policy_error":
            live.flush()
            raise policy.outage or RuntimeError("; ".join(trajectory.errors))
        result = recording.rollout_result(
            candidate=candidate,
            index=index,
            trajectory=trajectory,
            confidence=trajectory_confidence(trajectory),
            seconds=time.perf_counter() - started,
            steps=live.pending,
            finish_with=list(done) if index == to_run[-1] else None,
        )
        live.pending = []
        if fast:
            batch.add(result)
        else:
            recording.rollouts_record(results=[result])
        done.append(result.rollout)
    if not to_run:
        recording.candidate_finish(candidate=candidate, rollouts=done)


def run_candidate(candidate_id: int, *, can_wait: bool = False) -> int | None:
    """``run_candidates`` for one claimed candidate; returns the seconds to wait before
    retrying after a model endpoint outage."""
    waiting = run_candidates([candidate_id], can_wait=can_wait)
    return waiting.delay if waiting is not None else None


@runner(services.RECHECK_JOB)
def run_recheck(job: Job) -> dict[str, Any]:
    """Reproduce the sampled candidates of a run in-process and record what was found."""
    from annotation.inspections.models import InspectionRun
    from annotation.inspections.reproduction import run_reproduce

    run = InspectionRun.objects.get(pk=job.params["run_id"])
    reproductions = run_reproduce(run, candidate_ids=list(job.params["candidate_ids"]))
    services.inspection_run_recheck_record(run_id=run.pk, reproductions=reproductions)
    return {
        "run_id": run.pk,
        "checked": sum(r.checked for r in reproductions),
        "mismatched": sum(r.checked and not r.matches for r in reproductions),
    }


@runner(ablations.ABLATION_JOB)
def run_evidence_ablation(job: Job) -> dict[str, Any]:
    """Ablate the sampled candidates of a run (annotation.inspections.ablations), one policy for
    all of them; a candidate that fails is counted and the rest go on."""
    from annotation.inspections.models import InspectionRun
    from annotation.inspections.reproduction import reference_policy

    run = InspectionRun.objects.get(pk=job.params["run_id"])
    policy = reference_policy(run)
    counts = {"ablated": 0, "flipped": 0, "insensitive": 0, "no_evidence": 0, "failed": 0}
    for candidate_id in job.params["candidate_ids"]:
        if core_services.job_is_cancelled(job_id=job.pk):
            break
        try:
            ablation = ablations.candidate_ablate(
                candidate_id, seed=int(job.params["seed"]), policy=policy
            )
            row = ablations.evidence_ablation_record(ablation=ablation, job_id=job.pk)
        except EndpointUnavailable:
            raise
        except Exception as error:  # one candidate's failure is counted, not the job's
            logger.warning("ablating candidate %s failed: %s", candidate_id, error)
            counts["failed"] += 1
            core_services.job_progress(job_id=job.pk, failed=1)
            continue
        counts["ablated"] += row is not None
        counts["no_evidence"] += bool(row is not None and not row.detail.get("before"))
        counts["flipped"] += bool(row is not None and row.flipped)
        counts["insensitive"] += bool(row is not None and row.insensitive)
        core_services.job_progress(job_id=job.pk, done=1)
    return {"run_id": run.pk, **counts}


@runner(shifts.SHIFT_JOB)
def run_shift_check(job: Job) -> dict[str, Any]:
    """Compare a run with its model's calibration set (annotation.inspections.shifts); when the
    comparison fails, the answers it holds keep waiting for experts and the error is shown."""
    check_id = job.params["check_id"]
    try:
        check = shifts.shift_check_run(check_id=check_id)
    except Exception as error:
        shifts.shift_check_fail(check_id=check_id, error=f"{type(error).__name__}: {error}")
        raise
    return {"run_id": check.run_id, "state": check.state, **check.routed}


# --- sending a large run's candidates -----------------------------------------------------------

ENQUEUE_BATCH = 1000  # candidates between two progress reports and cancel checks


@runner(services.ENQUEUE_JOB)
def run_enqueue_candidates(job: Job) -> dict[str, Any]:
    """Send the pending candidates of a large run in Celery messages of
    ``services.candidate_batches``, over one broker producer, in rounds that report progress and
    stop when the job or the run is cancelled. A redelivered job sends the pending ones again:
    the candidates' leases and claims make a duplicate a no-op."""
    from annotation.inspections import tasks
    from annotation.inspections.models import Candidate, CandidateState, InspectionRun
    from webapp.celery import app

    run_id = job.params["run_id"]
    spec = InspectionRun.objects.values_list("policy_spec", flat=True).get(pk=run_id)
    pending = Candidate.objects.filter(run_id=run_id, state=CandidateState.PENDING).order_by("pk")
    ids = list(pending.values_list("pk", flat=True))
    core_services.job_set_total(job_id=job.pk, total=len(ids))
    batches = services.candidate_batches(policy_spec=spec, candidate_ids=ids)
    per_round = max(1, ENQUEUE_BATCH // max(1, services.candidate_batch_size(spec)))
    sent = 0
    with app.producer_or_acquire() as producer:
        for start in range(0, len(batches), per_round):
            if core_services.job_is_cancelled(job_id=job.pk) or (
                InspectionRun.objects.filter(pk=run_id, cancelled=True).exists()
            ):
                break
            round_ = batches[start : start + per_round]
            for batch in round_:
                tasks.run_candidates.apply_async((batch,), producer=producer)
            count = sum(len(batch) for batch in round_)
            sent += count
            core_services.job_progress(job_id=job.pk, done=count)
    return {"run_id": run_id, "sent": sent, "pending": len(ids)}
