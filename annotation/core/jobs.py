"""The job runner registry: each domain registers a runner per Job kind (in AppConfig.ready)."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable
from typing import Any

from agent.policies.base import EndpointUnavailable
from annotation.core import services
from annotation.core.models import Job

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
