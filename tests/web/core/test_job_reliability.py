"""Claims, attempts and leases: what makes a redelivered job resume, and never run twice at once.

The end-to-end version, with real workers killed on Redis, is tests/integration/test_worker_kill.py.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from annotation.core import jobs as core_jobs
from annotation.core import services as core_services
from annotation.core.leases import lease, lease_key
from annotation.core.models import Job, JobState
from annotation.curation import services as curation_services
from annotation.curation.models import Curation
from annotation.inspections import jobs as inspections_jobs
from annotation.inspections import services as inspections_services
from annotation.inspections.models import CandidateState
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db

needs_postgres = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="leases are PostgreSQL advisory locks (DATABASE_URL)"
)


def draft_job(cv, expert) -> Job:
    spectra = [make_spectrum(object_id=f"R{i}", task=cv, label="YES", seed=i) for i in range(3)]
    return core_services.job_create(
        kind="draft",
        params={
            "task": "CV",
            "spectrum_ids": [s.pk for s in spectra],
            "teacher": {"kind": "rule-based"},
            "max_tool_calls": 2,
        },
        created_by=expert,
    )


class WorkerKilled(BaseException):
    """Ends the attempt the way SIGKILL does: no except clause in the job runs."""


def test_it_counts_the_drafts_of_an_interrupted_attempt_once(cv, expert, monkeypatch):
    job = draft_job(cv, expert)
    create = curation_services.curation_create

    def dies_on_the_third(**kwargs):
        if Curation.objects.count() == 2:
            raise WorkerKilled
        return create(**kwargs)

    monkeypatch.setattr(curation_services, "curation_create", dies_on_the_third)
    assert core_services.job_claim(job_id=job.pk)
    with pytest.raises(WorkerKilled):
        core_jobs.run(job.pk)
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING

    monkeypatch.setattr(curation_services, "curation_create", create)
    assert core_services.job_claim(job_id=job.pk)
    core_jobs.run(job.pk)
    job.refresh_from_db()
    assert (job.state, job.attempts, job.done, job.failed) == (JobState.SUCCEEDED, 2, 3, 0)
    assert job.result["created"] == 3
    assert Curation.objects.filter(draft_job=job).count() == 3


def test_it_fails_a_job_whose_workers_kept_dying(cv, expert, settings):
    settings.JOB_MAX_ATTEMPTS = 2
    job = draft_job(cv, expert)
    assert core_services.job_claim(job_id=job.pk)
    assert core_services.job_claim(job_id=job.pk)  # redelivered after the first worker died
    assert not core_services.job_claim(job_id=job.pk)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.error.startswith("gave up after 2 attempts: the last one never finished")


def test_it_fails_a_candidate_whose_workers_kept_dying(cv, expert, settings):
    settings.JOB_MAX_ATTEMPTS = 1
    run = inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[make_spectrum().pk],
        policy_spec={"kind": "rule-based"},
        created_by=expert,
    )
    candidate = run.candidates.get()
    assert inspections_services.candidate_claim(candidate_id=candidate.pk)
    assert not inspections_services.candidate_claim(candidate_id=candidate.pk)
    candidate.refresh_from_db()
    assert candidate.state == CandidateState.FAILED
    assert candidate.error.startswith("gave up after 1 attempts")


def test_it_does_not_claim_a_finished_candidate_again(cv, expert):
    run = inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[make_spectrum().pk],
        policy_spec={"kind": "rule-based"},
        created_by=expert,
    )
    candidate = run.candidates.get()
    assert inspections_services.candidate_claim(candidate_id=candidate.pk)
    inspections_jobs.run_candidate(candidate.pk)
    assert not inspections_services.candidate_claim(candidate_id=candidate.pk)
    candidate.refresh_from_db()
    assert (candidate.state, candidate.attempts) == (CandidateState.DONE, 1)


@needs_postgres
def test_it_keeps_a_second_worker_off_a_leased_job():
    holding, finish = threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first_worker() -> None:
        try:
            with lease("job", 7) as held:
                seen["first"] = held
                holding.set()
                finish.wait(timeout=10)
        finally:
            connection.close()

    thread = threading.Thread(target=first_worker)
    thread.start()
    assert holding.wait(timeout=10)
    with lease("job", 7) as held:
        seen["second, while the first runs"] = held
    finish.set()
    thread.join(timeout=10)
    with lease("job", 7) as held:
        seen["second, after"] = held
    assert seen == {"first": True, "second, while the first runs": False, "second, after": True}


@needs_postgres
def test_it_frees_the_lease_of_a_worker_whose_connection_is_gone():
    backend: list[int] = []

    def dying_worker() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_try_advisory_lock(%s)", [lease_key("candidate", 3)])
            cursor.execute("SELECT pg_backend_pid()")
            backend.append(cursor.fetchone()[0])
        connection.close()  # what the server sees when a killed worker's socket closes

    thread = threading.Thread(target=dying_worker)
    thread.start()
    thread.join(timeout=10)
    # The server ends the session a moment after the socket closes (on a busy machine, after
    # this thread's next query): wait for that, as a redelivered task arrives later anyway.
    for _ in range(100):
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", backend)
            if cursor.fetchone()[0] == 0:
                break
        time.sleep(0.05)
    with lease("candidate", 3) as held:
        assert held
