"""Running one candidate: build its policy, inspect, record rollouts."""

from __future__ import annotations

import logging
from typing import Any

from agent.policies.base import EndpointUnavailable
from annotation.core import services as core_services
from annotation.core.jobs import OutageWatch, retry_delay, runner, waiting_reason
from annotation.core.models import Job
from annotation.inspections import services

logger = logging.getLogger(__name__)


# --- inspection candidates --------------------------------------------------------------------------

_policies: dict[str, Any] = {}


def policy_for(spec: dict[str, Any], sampling: dict[str, Any] | None = None) -> Any:
    """A policy per worker process and spec (loading a checkpoint once, not per candidate).

    An ``openai`` spec names its endpoint; the endpoint is looked up (and must be enabled) on
    every call, and its current URL and key decide which cached policy is used.
    """
    import json

    from agent.policies import build_policy
    from annotation.core import endpoints

    if spec["kind"] == "openai":
        if not spec.get("endpoint"):
            raise endpoints.EndpointError(
                "this run names no registered model endpoint; start a new run with one"
            )
        endpoint = endpoints.find_usable(spec["endpoint"])
        api_key = endpoints.api_key(endpoint)
        key = json.dumps(
            [spec, sampling or {}, endpoints.fingerprint(endpoint, api_key)], sort_keys=True
        )
        if key not in _policies:
            _policies[key] = endpoints.endpoint_policy(
                endpoint, options=spec, sampling=sampling, key=api_key
            )
        return _policies[key]
    key = json.dumps([spec, sampling or {}], sort_keys=True)
    if key not in _policies:
        full = dict(spec)
        if sampling and full["kind"] != "rule-based":
            full["sampling"] = sampling
        _policies[key] = build_policy(full)
    return _policies[key]


def _policy_confidence(policy: Any) -> float | None:
    decision = getattr(policy, "last_decision", None)
    if isinstance(decision, dict) and isinstance(decision.get("confidence"), int | float):
        return float(decision["confidence"])
    return None


def run_candidate(candidate_id: int, *, can_wait: bool = False) -> int | None:
    """Run the claimed candidate's remaining rollouts, then record its verdict.

    Resumable: finished rollouts are kept; an unfinished one is started over with its live steps
    cleared, so a worker killed mid-episode leaves no duplicate or half-written step behind.
    Returns the seconds to wait before retrying after a model endpoint outage (see ``run``).
    """
    import time

    from agent.rollout import inspect
    from annotation.inspections.models import Candidate, CandidateState, InspectionRun
    from annotation.spectra.selectors import spectrum_value, task_value

    candidate = Candidate.objects.select_related("run__task", "spectrum").get(pk=candidate_id)
    run = candidate.run
    try:
        policy = OutageWatch(policy_for(run.policy_spec, run.sampling))
        services.inspection_run_set_policy_info(run=run, info=policy.info())
        task = task_value(run.task)
        spectrum = spectrum_value(candidate.spectrum)
        # A first attempt has nothing to resume: no rollout or live step of it exists yet.
        done = [] if candidate.attempts <= 1 else list(candidate.rollouts.order_by("index"))
        to_run = [index for index in range(run.rollouts) if index not in {r.index for r in done}]
        for index in to_run:
            # The run was read with the candidate just before the first one: no query for it.
            if (
                run.cancelled
                if index == to_run[0]
                else InspectionRun.objects.filter(pk=run.pk, cancelled=True).exists()
            ):
                Candidate.objects.filter(pk=candidate.pk).update(state=CandidateState.CANCELLED)
                return None
            if candidate.attempts > 1:
                services.live_steps_reset(candidate=candidate, rollout_index=index)
            live = services.LiveStepBuffer(
                candidate=candidate,
                rollout_index=index,
                batch=run.policy_spec.get("kind") == "rule-based",
            )
            started = time.perf_counter()
            trajectory = inspect(
                spectrum,
                task,
                policy,
                max_tool_calls=run.max_tool_calls,
                on_step=live.add,
                meta={"run": run.pk, "candidate": candidate.pk, "rollout": index},
            )
            if trajectory.stop_reason == "policy_error":
                live.flush()
                raise policy.outage or RuntimeError("; ".join(trajectory.errors))
            rollout = services.rollout_record(
                candidate=candidate,
                index=index,
                trajectory=trajectory,
                confidence=_policy_confidence(policy),
                seconds=time.perf_counter() - started,
                live=live,
                finish_with=done if index == to_run[-1] else None,
            )
            done.append(rollout)
        if not to_run:
            services.candidate_finish(candidate=candidate, rollouts=done)
    except EndpointUnavailable as error:
        delay = retry_delay(candidate.attempts) if can_wait else None
        if delay is not None and services.candidate_wait(
            candidate_id=candidate_id,
            error=waiting_reason(error, delay=delay, attempt=candidate.attempts),
        ):
            return delay
        services.candidate_fail(candidate_id=candidate_id, error=f"{type(error).__name__}: {error}")
    except Exception as error:  # the reason is shown on the run page; retry is one click
        logger.warning("candidate %s failed: %s", candidate_id, error)
        services.candidate_fail(candidate_id=candidate_id, error=f"{type(error).__name__}: {error}")
    return None


# --- sending a large run's candidates -----------------------------------------------------------

ENQUEUE_BATCH = 1000


@runner(services.ENQUEUE_JOB)
def run_enqueue_candidates(job: Job) -> dict[str, Any]:
    """Send one Celery message per pending candidate of a large run, over one broker producer,
    in batches that report progress and stop when the job or the run is cancelled. A redelivered
    job sends the pending ones again: the candidate's lease and claim make a duplicate a no-op."""
    from annotation.inspections import tasks
    from annotation.inspections.models import Candidate, CandidateState, InspectionRun
    from webapp.celery import app

    run_id = job.params["run_id"]
    pending = Candidate.objects.filter(run_id=run_id, state=CandidateState.PENDING).order_by("pk")
    ids = list(pending.values_list("pk", flat=True))
    core_services.job_set_total(job_id=job.pk, total=len(ids))
    sent = 0
    with app.producer_or_acquire() as producer:
        for start in range(0, len(ids), ENQUEUE_BATCH):
            if core_services.job_is_cancelled(job_id=job.pk) or (
                InspectionRun.objects.filter(pk=run_id, cancelled=True).exists()
            ):
                break
            batch = ids[start : start + ENQUEUE_BATCH]
            for pk in batch:
                tasks.run_candidate.apply_async((pk,), producer=producer)
            sent += len(batch)
            core_services.job_progress(job_id=job.pk, done=len(batch))
    return {"run_id": run_id, "sent": sent, "pending": len(ids)}
