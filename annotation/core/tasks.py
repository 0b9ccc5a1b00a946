"""Celery task for every Job kind: thin, takes an id; the job runner does the work."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from django.conf import settings

from annotation.core.leases import lease

logger = logging.getLogger(__name__)


# Retries are bounded by the attempts counted on the job or candidate (JOB_MAX_ATTEMPTS), not
# by Celery: waiting for a lease is not an attempt. The tasks return nothing and their outcome
# lives in the database, so nothing is written to the result backend (ignore_result).
@shared_task(
    bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None, ignore_result=True
)
def run_job(self: Task, job_id: int) -> None:
    from annotation.core import jobs, services  # inside the body: tasks are imported by services

    with lease("job", job_id) as held:
        if not held:
            logger.info("job %s is running on another worker; looking again later", job_id)
            raise self.retry(countdown=settings.JOB_LEASE_RETRY_DELAY)
        if not services.job_claim(job_id=job_id):
            logger.info("job %s is not runnable (cancelled or finished); skipped", job_id)
            return
        delay = jobs.run(job_id, can_wait=not self.request.is_eager)
    if delay is not None:
        raise self.retry(countdown=delay)
