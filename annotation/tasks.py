"""Celery tasks: thin, take ids, call services. Enqueued with transaction.on_commit."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from django.conf import settings

from annotation import jobs, services
from annotation.leases import lease

logger = logging.getLogger(__name__)


# Retries are bounded by the attempts counted on the job or candidate (JOB_MAX_ATTEMPTS), not
# by Celery: waiting for a lease is not an attempt. The tasks return nothing and their outcome
# lives in the database, so nothing is written to the result backend (ignore_result).
@shared_task(
    bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None, ignore_result=True
)
def run_job(self: Task, job_id: int) -> None:
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


@shared_task(
    bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None, ignore_result=True
)
def run_candidate(self: Task, candidate_id: int) -> None:
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


@shared_task(
    bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None, ignore_result=True
)
def run_training(self: Task, run_id: int) -> None:
    """One SFT or GRPO run (routed to the ``gpu`` queue by CELERY_TASK_ROUTES)."""
    with lease("training", run_id) as held:
        if not held:
            logger.info("training run %s is running on another worker; later", run_id)
            raise self.retry(countdown=settings.JOB_LEASE_RETRY_DELAY)
        if not services.training_run_claim(run_id=run_id):
            logger.info("training run %s is not runnable (cancelled or finished); skipped", run_id)
            return
        from annotation import training_jobs  # imports transformers: the worker's business only

        training_jobs.run_training(run_id)
