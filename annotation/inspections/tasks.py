"""Celery task for one inspection candidate: thin, takes an id."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from django.conf import settings

from annotation.core.leases import lease

logger = logging.getLogger(__name__)


@shared_task(
    bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None, ignore_result=True
)
def run_candidate(self: Task, candidate_id: int) -> None:
    from annotation.inspections import (  # inside the body: tasks are imported by services
        jobs,
        services,
    )

    with lease("candidate", candidate_id) as held:
        if not held:
            logger.info("candidate %s is running on another worker; later", candidate_id)
            raise self.retry(countdown=settings.JOB_LEASE_RETRY_DELAY)
        if not services.candidate_claim(candidate_id=candidate_id):
            logger.info(
                "candidate %s is not runnable (cancelled or finished); skipped", candidate_id
            )
            return
        delay = jobs.run_candidate(candidate_id, can_wait=not self.request.is_eager)
    if delay is not None:
        raise self.retry(countdown=delay)
