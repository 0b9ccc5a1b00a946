"""Celery tasks for inspection candidates: thin, take ids."""

from __future__ import annotations

import logging

from celery import Task, shared_task
from django.conf import settings

from annotation.core.leases import leases

logger = logging.getLogger(__name__)


def _run(candidate_ids: list[int], *, can_wait: bool) -> tuple[list[int], int] | None:
    """Lease, claim and run a batch; returns the ids to send again and after how many seconds:
    the ones waiting for a model endpoint, else the ones another worker is running."""
    from annotation.inspections import (  # inside the body: tasks are imported by services
        jobs,
        recording,
    )

    with leases("candidate", candidate_ids) as held:
        busy = [pk for pk in candidate_ids if pk not in held]
        if busy:
            logger.info("candidates %s are running on another worker; later", busy)
        claimed = recording.candidates_claim(
            candidate_ids=[pk for pk in candidate_ids if pk in held]
        )
        if len(claimed) < len(held):
            logger.info(
                "candidates %s are not runnable (cancelled or finished); skipped",
                sorted(held - set(claimed)),
            )
        waiting = jobs.run_candidates(claimed, can_wait=can_wait) if claimed else None
    if waiting is not None:
        if busy:
            run_candidates.apply_async((busy,), countdown=settings.JOB_LEASE_RETRY_DELAY)
        return waiting.candidate_ids, waiting.delay
    if busy:
        return busy, settings.JOB_LEASE_RETRY_DELAY
    return None


@shared_task(
    bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None, ignore_result=True
)
def run_candidates(self: Task, candidate_ids: list[int]) -> None:
    """A batch of candidates of one run (``services.candidate_batches``)."""
    later = _run(candidate_ids, can_wait=not self.request.is_eager)
    if later is not None:
        ids, delay = later
        raise self.retry(args=[ids], countdown=delay)


@shared_task(
    bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=None, ignore_result=True
)
def run_candidate(self: Task, candidate_id: int) -> None:
    """One candidate (messages sent before batches existed)."""
    later = _run([candidate_id], can_wait=not self.request.is_eager)
    if later is not None:
        raise self.retry(countdown=later[1])
