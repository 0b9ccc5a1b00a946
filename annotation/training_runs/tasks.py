"""Celery task for one SFT or GRPO run: thin, takes an id."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from django.conf import settings

from annotation.core.leases import lease

logger = logging.getLogger(__name__)


@shared_task(
    bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None, ignore_result=True
)
def run_training(self: Task, run_id: int) -> None:
    """One SFT or GRPO run (routed to the ``gpu`` queue by CELERY_TASK_ROUTES)."""
    from annotation.training_runs import services  # inside the body: tasks are imported by services

    with lease("training", run_id) as held:
        if not held:
            logger.info("training run %s is running on another worker; later", run_id)
            raise self.retry(countdown=settings.JOB_LEASE_RETRY_DELAY)
        if not services.training_run_claim(run_id=run_id):
            logger.info("training run %s is not runnable (cancelled or finished); skipped", run_id)
            return
        from annotation.training_runs import (
            jobs as training_jobs,  # imports transformers: the worker's business only
        )

        training_jobs.run_training(run_id)
