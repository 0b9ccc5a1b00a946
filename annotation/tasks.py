"""Celery tasks: thin, take ids, call services. Enqueued with transaction.on_commit."""

from __future__ import annotations

import logging

from celery import shared_task

from annotation import jobs, services

logger = logging.getLogger(__name__)


@shared_task(bind=True, acks_late=True, max_retries=3, default_retry_delay=10)
def run_job(self: object, job_id: int) -> None:
    if not services.job_claim(job_id=job_id):
        logger.info("job %s is not runnable (cancelled or finished); skipped", job_id)
        return
    jobs.run(job_id)


@shared_task(acks_late=True, reject_on_worker_lost=True)
def run_candidate(candidate_id: int) -> None:
    if not services.candidate_claim(candidate_id=candidate_id):
        logger.info("candidate %s is not runnable (cancelled or finished); skipped", candidate_id)
        return
    jobs.run_candidate(candidate_id)
