"""What each kind of job does. A runner takes the job and returns its result dict.

Runners must be idempotent per item (a redelivered job resumes, it never duplicates work),
check for cancellation between items, and report progress through services.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from agent.policies.base import EndpointUnavailable
from annotation import services
from annotation.models import Job

logger = logging.getLogger(__name__)

Runner = Callable[[Job], dict[str, Any]]
RUNNERS: dict[str, Runner] = {}


def runner(kind: str) -> Callable[[Runner], Runner]:
    def register(function: Runner) -> Runner:
        RUNNERS[kind] = function
        return function

    return register


def run(job_id: int, *, can_wait: bool = False) -> int | None:
    """Run a claimed job. Returns the seconds to wait before retrying it, or None when done.

    Only a caller that can retry later (``can_wait``: a Celery worker) is asked to wait, after
    a model endpoint outage with attempts left; otherwise the outage fails the job.
    """
    job = Job.objects.get(pk=job_id)
    function = RUNNERS.get(job.kind)
    if function is None:
        services.job_fail(job_id=job_id, error=f"no runner for job kind {job.kind!r}")
        return None
    try:
        result = function(job)
    except EndpointUnavailable as error:
        delay = retry_delay(job.attempts) if can_wait else None
        if delay is not None and services.job_wait(
            job_id=job_id, error=waiting_reason(error, delay=delay, attempt=job.attempts)
        ):
            return delay
        services.job_fail(job_id=job_id, error=f"{type(error).__name__}: {error}")
        return None
    except Exception as error:  # a job's failure is data for the user, not a crash
        logger.exception("job %s (%s) failed", job_id, job.kind)
        services.job_fail(
            job_id=job_id,
            error=f"{type(error).__name__}: {error}\n\n{traceback.format_exc(limit=5)}",
        )
        return None
    services.job_succeed(job_id=job_id, result=result)
    return None


def retry_delay(attempt: int) -> int | None:
    """Seconds before the next attempt after a model endpoint outage; None when none is left."""
    from django.conf import settings

    if attempt >= settings.JOB_MAX_ATTEMPTS:
        return None
    return int(settings.JOB_RETRY_BACKOFF * 2 ** (attempt - 1))


def waiting_reason(error: Exception, *, delay: int, attempt: int) -> str:
    from django.conf import settings

    return (
        f"waiting {delay} s to retry (attempt {attempt} of {settings.JOB_MAX_ATTEMPTS} failed): "
        f"{type(error).__name__}: {error}"
    )


class OutageWatch:
    """A policy passed through, remembering an endpoint outage.

    The rollout loop records a policy's exception in the trajectory instead of raising it; the
    job needs the exception itself to tell an outage worth retrying from a bad reply.
    """

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.outage: EndpointUnavailable | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.policy, name)

    def generate(self, messages: list[dict[str, Any]]) -> str:
        try:
            return str(self.policy.generate(messages))
        except EndpointUnavailable as error:
            self.outage = error
            raise


# --- drafts ------------------------------------------------------------------------------------


def teacher_policy(spec: dict[str, Any]) -> Any:
    """Build the teacher: a registered model endpoint (``{"kind": "openai", "endpoint": NAME}``,
    the "default" one when none is named) or the rule-based inspector.

    Only the endpoint's own URL and key are used; a URL or key in the spec is never read.
    """
    from agent.policies import build_policy
    from annotation import endpoints

    kind = spec.get("kind") or ("openai" if spec.get("endpoint") else "rule-based")
    if kind == "openai":
        endpoint = endpoints.find_usable(spec.get("endpoint") or endpoints.DEFAULT_ENDPOINT)
        return endpoints.endpoint_policy(endpoint, options=spec, sampling=spec.get("sampling"))
    return build_policy({**spec, "kind": kind})


@runner("draft")
def run_draft(job: Job) -> dict[str, Any]:
    """Draft one trajectory per selected spectrum with the teacher, giving it the true label.

    Idempotent: a spectrum already drafted by this job (a redelivered task) is skipped.
    """
    from agent.drafting import teacher_for
    from agent.rollout import inspect
    from annotation.models import Curation, Spectrum, Task
    from annotation.selectors import spectrum_value, task_value

    params = job.params
    task_row = Task.objects.get(code=params["task"])
    task = task_value(task_row)
    policy = OutageWatch(teacher_policy(params.get("teacher", {})))
    spectrum_ids = list(params["spectrum_ids"])
    services.job_set_total(job_id=job.pk, total=len(spectrum_ids))
    failures: list[dict[str, Any]] = []
    created = 0
    for spectrum_id in spectrum_ids:
        if services.job_is_cancelled(job_id=job.pk):
            break
        if Curation.objects.filter(draft_job=job, spectrum_id=spectrum_id).exists():
            created += 1  # by an earlier attempt of this job
            services.job_progress(job_id=job.pk, done=1)
            continue
        row = Spectrum.objects.filter(pk=spectrum_id).first()
        reason = None
        if row is None:
            reason = "spectrum no longer exists"
        elif row.label not in ("YES", "NO"):
            reason = "spectrum has no YES/NO label for this task; the teacher needs the true label"
        if reason:
            failures.append({"spectrum_id": spectrum_id, "error": reason})
            services.job_progress(job_id=job.pk, failed=1)
            continue
        try:
            trajectory = inspect(
                spectrum_value(row),
                task,
                teacher_for(policy, row.label),
                max_tool_calls=int(params.get("max_tool_calls", 8)),
            )
            if trajectory.stop_reason == "policy_error":
                raise policy.outage or RuntimeError("; ".join(trajectory.errors))
            services.curation_create(
                spectrum=row,
                task=task_row,
                trajectory=trajectory,
                ground_truth=row.label,
                source="draft",
                draft_job=job,
                created_by=job.created_by,
            )
        except EndpointUnavailable:
            raise  # down for every spectrum alike: the job waits and resumes here
        except Exception as error:  # one bad spectrum must not sink the batch
            logger.warning("draft for spectrum %s failed: %s", spectrum_id, error)
            failures.append(
                {"spectrum_id": spectrum_id, "error": f"{type(error).__name__}: {error}"}
            )
            services.job_progress(job_id=job.pk, failed=1)
            continue
        created += 1
        services.job_progress(job_id=job.pk, done=1)
    if failures and not created:
        raise RuntimeError(
            f"no draft could be made; first failure: spectrum {failures[0]['spectrum_id']}: "
            f"{failures[0]['error']}"
        )
    return {"created": created, "failures": failures, "teacher": policy.info()}


# --- standardization ------------------------------------------------------------------------------

STANDARDIZE_INSTRUCTIONS = (
    "Rewrite this expert-approved spectral inspection trajectory into clean iMCoT form. For each "
    "turn keep the same meaning and the same tool call (same wavelength_range and label, "
    "unchanged); rewrite only the reasoning inside <think>...</think> and the justification "
    "after \\boxed{} into concise, physically precise prose. Reply with the turns separated by "
    "lines containing only '=== TURN ===', each turn in the exact format <think>...</think> "
    "<tool_call>{...}</tool_call>, and the last one <think>...</think> <answer>\\boxed{YES|NO} "
    "justification</answer>."
)


def standardize_with_llm(trajectory: Any, policy: Any) -> Any:
    """Ask an LLM to rewrite the reasoning; the caller checks tool actions are unchanged."""
    from dataclasses import replace

    from agent.editing import standardize
    from agent.trajectory import Step

    turns = "\n=== TURN ===\n".join(step.assistant_text for step in trajectory.steps)
    reply = policy.generate(
        [
            {"role": "system", "content": [{"type": "text", "text": STANDARDIZE_INSTRUCTIONS}]},
            {"role": "user", "content": [{"type": "text", "text": turns}]},
        ]
    )
    texts = [text.strip() for text in reply.split("=== TURN ===")]
    if len(texts) != len(trajectory.steps):
        raise ValueError(
            f"the standardizer returned {len(texts)} turns for {len(trajectory.steps)}"
        )
    steps = [
        Step.from_output(
            step.index,
            text,
            tool_result=step.tool_result,
            generate_s=step.generate_s,
            tool_s=step.tool_s,
        )
        for step, text in zip(trajectory.steps, texts, strict=True)
    ]
    rewritten = replace(trajectory, steps=steps)
    rewritten.finalize(trajectory.stop_reason)
    return standardize(rewritten)


def standardizer_policy(params: dict[str, Any]) -> Any:
    from annotation import endpoints
    from annotation.models import ModelEndpoint

    if not params.get("use_llm", True):
        return None
    if params.get("endpoint"):
        return endpoints.endpoint_policy(endpoints.find_usable(params["endpoint"]))
    default = ModelEndpoint.objects.filter(name=endpoints.DEFAULT_ENDPOINT, enabled=True).first()
    return endpoints.endpoint_policy(default) if default is not None else None


@runner("standardize")
def run_standardize(job: Job) -> dict[str, Any]:
    """Standardize approved trajectories: with the LLM of a model endpoint (``endpoint`` in the
    params, else "default" when it is registered and enabled), else with the normalizer."""
    from agent.editing import standardize
    from annotation.models import Curation, CurationState

    ids = list(job.params["curation_ids"])
    services.job_set_total(job_id=job.pk, total=len(ids))
    policy = standardizer_policy(job.params)
    failures = []
    for curation_id in ids:
        curation = Curation.objects.get(pk=curation_id)
        if curation.state != CurationState.APPROVED:
            services.job_progress(job_id=job.pk, done=1)
            continue  # already standardized (a redelivered job) or moved on
        approved = services.trajectory_from_stored(
            curation.versions.get(number=curation.head_number).data
        )
        name = "normalizer"
        try:
            if policy is not None:
                try:
                    result = standardize_with_llm(approved, policy)
                    name = f"llm:{policy.info().get('model', '')}"
                    if not result.format_ok:
                        raise ValueError("; ".join(result.format_reasons))
                except Exception as error:  # fall back, and say so in the version comment
                    logger.warning("LLM standardization of %s failed: %s", curation_id, error)
                    result, name = standardize(approved), f"normalizer (LLM failed: {error})"
            else:
                result = standardize(approved)
            services.curation_standardize(
                curation=curation, trajectory=result, standardizer={"name": name}
            )
        except services.WorkflowError as error:
            failures.append({"curation_id": curation_id, "error": str(error)})
            services.job_progress(job_id=job.pk, failed=1)
            continue
        services.job_progress(job_id=job.pk, done=1)
    return {"failures": failures}


# --- inspection candidates --------------------------------------------------------------------------

_policies: dict[str, Any] = {}


def policy_for(spec: dict[str, Any], sampling: dict[str, Any] | None = None) -> Any:
    """A policy per worker process and spec (loading a checkpoint once, not per candidate).

    An ``openai`` spec names its endpoint; the endpoint is looked up (and must be enabled) on
    every call, and its current URL and key decide which cached policy is used.
    """
    import json

    from agent.policies import build_policy
    from annotation import endpoints

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
    from annotation.models import Candidate, CandidateState, InspectionRun
    from annotation.selectors import spectrum_value, task_value

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


# --- LLM judges ---------------------------------------------------------------------------------


def judge_policy(judge: Any) -> Any:
    """The judge's endpoint, with that endpoint's own key; ``judge.base_url`` is provenance."""
    from annotation import endpoints

    if judge.endpoint is None:
        raise endpoints.EndpointError(
            f"judge {judge.name} has no registered model endpoint; add a judge with one"
        )
    return endpoints.endpoint_policy(
        judge.endpoint, sampling={"temperature": 0.0, "max_new_tokens": 1024}
    )


@runner("judge")
def run_judge(job: Job) -> dict[str, Any]:
    """Score every item of a campaign with one LLM judge; raw replies are kept.

    A reply without a valid 0-5 score is stored with score None and the reason, never guessed.
    Idempotent: items the judge already scored are skipped.
    """
    from agent.inspection_tasks import get_task
    from agent.judges import build_judge_messages, parse_judge_score
    from annotation.models import CampaignItem, Judge, JudgeScore
    from annotation.selectors import task_value

    judge = Judge.objects.select_related("endpoint").get(pk=job.params["judge_id"])
    items = list(
        CampaignItem.objects.filter(campaign_id=job.params["campaign_id"]).select_related("task")
    )
    services.job_set_total(job_id=job.pk, total=len(items))
    policy = judge_policy(judge)
    scored = unscored = failed = 0
    for item in items:
        if services.job_is_cancelled(job_id=job.pk):
            break
        if JudgeScore.objects.filter(judge=judge, item=item, error="").exists():
            services.job_progress(job_id=job.pk, done=1)
            continue
        trajectory = services.trajectory_from_stored(item.data)
        task = task_value(item.task) if item.task else get_task(trajectory.task)
        try:
            messages = build_judge_messages(trajectory, task, include_images=judge.include_images)
            messages[0] = {"role": "system", "content": [{"type": "text", "text": judge.prompt}]}
            raw = policy.generate(messages)
        except EndpointUnavailable:
            raise  # down for every item alike: the job waits and resumes here
        except Exception as error:  # the endpoint's failure is recorded per item
            failed += 1
            services.judge_score_record(
                judge=judge, item=item, score=None, reason="", raw="", error=str(error)
            )
            services.job_progress(job_id=job.pk, failed=1)
            continue
        parsed = parse_judge_score(raw)
        services.judge_score_record(
            judge=judge, item=item, score=parsed.score, reason=parsed.reason, raw=raw
        )
        if parsed.score is None:
            unscored += 1
        else:
            scored += 1
        services.job_progress(job_id=job.pk, done=1)
    if failed and not scored and not unscored:
        raise RuntimeError(f"judge {judge.name} failed on every item; see the items' errors")
    return {"scored": scored, "no_valid_score": unscored, "failed": failed}
