"""Job runner of LLM judges."""

from __future__ import annotations

import logging
from typing import Any

from agent.policies.base import EndpointUnavailable
from annotation.core import services as core_services
from annotation.core.jobs import runner
from annotation.core.models import Job
from annotation.curation import services as curation_services
from annotation.rating import services

logger = logging.getLogger(__name__)


# --- LLM judges ---------------------------------------------------------------------------------


def judge_policy(judge: Any) -> Any:
    """The judge's endpoint, with that endpoint's own key; ``judge.base_url`` is provenance."""
    from annotation.core import endpoints

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
    from annotation.rating.models import CampaignItem, Judge, JudgeScore
    from annotation.spectra.selectors import task_value

    judge = Judge.objects.select_related("endpoint").get(pk=job.params["judge_id"])
    items = list(
        CampaignItem.objects.filter(campaign_id=job.params["campaign_id"]).select_related("task")
    )
    core_services.job_set_total(job_id=job.pk, total=len(items))
    policy = judge_policy(judge)
    scored = unscored = failed = 0
    for item in items:
        if core_services.job_is_cancelled(job_id=job.pk):
            break
        if JudgeScore.objects.filter(judge=judge, item=item, error="").exists():
            core_services.job_progress(job_id=job.pk, done=1)
            continue
        trajectory = curation_services.trajectory_from_stored(item.data)
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
            core_services.job_progress(job_id=job.pk, failed=1)
            continue
        parsed = parse_judge_score(raw)
        services.judge_score_record(
            judge=judge, item=item, score=parsed.score, reason=parsed.reason, raw=raw
        )
        if parsed.score is None:
            unscored += 1
        else:
            scored += 1
        core_services.job_progress(job_id=job.pk, done=1)
    if failed and not scored and not unscored:
        raise RuntimeError(f"judge {judge.name} failed on every item; see the items' errors")
    return {"scored": scored, "no_valid_score": unscored, "failed": failed}
