"""An unreachable model endpoint (a closed port): the job waits and retries with a doubling
delay when a worker can, fails with the reason when it cannot or has no attempt left, and the
pages show that reason without ever calling the model themselves."""

from __future__ import annotations

import socket

import pytest
from django.urls import reverse

from annotation.core import jobs as core_jobs
from annotation.core import services as core_services
from annotation.core.models import Job, JobState
from annotation.curation.models import Curation
from annotation.inspections import jobs as inspections_jobs
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, CandidateState
from tests.factories import give_roles, make_endpoint, make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def closed_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def unreachable(url: str) -> str:
    # The endpoint by its registered name: the stored reason is read by every expert, and the
    # server's address is for staff only.
    return "EndpointUnavailable: endpoint closed unreachable after 2 attempts: connection refused"


def policy_at(url: str) -> dict:
    # Two quick attempts inside the policy; the job's own retries are what these tests check.
    endpoint = make_endpoint(name="closed", base_url=url)
    return {"kind": "openai", "endpoint": endpoint.name, "max_retries": 2, "backoff": 0.0}


def start_run(cv, expert, url: str):
    give_roles(expert, "ml_engineer")
    return inspections_services.inspection_run_create(
        task=cv, spectrum_ids=[make_spectrum().pk], policy_spec=policy_at(url), created_by=expert
    )


def test_it_fails_a_candidate_at_once_with_the_reason_when_run_in_process(
    cv, expert, expert_client, closed_url, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        run = start_run(cv, expert, closed_url)
    candidate = run.candidates.get()
    assert (candidate.state, candidate.attempts) == (CandidateState.FAILED, 1)
    assert candidate.error == unreachable(closed_url)
    page = expert_client.get(reverse("candidate_live", args=[candidate.pk]))
    assert f"Failed: {unreachable(closed_url)}" in page.content.decode()
    assert closed_url.removeprefix("http://").split("/")[0] not in page.content.decode()


def test_it_backs_off_doubling_the_wait_then_fails_with_the_reason(cv, expert, closed_url):
    candidate = start_run(cv, expert, closed_url).candidates.get()
    waits = []
    while inspections_services.candidate_claim(candidate_id=candidate.pk):
        delay = inspections_jobs.run_candidate(candidate.pk, can_wait=True)
        if delay is None:
            break
        waits.append(delay)
    candidate.refresh_from_db()
    assert waits == [30, 60, 120]
    assert (candidate.state, candidate.attempts) == (CandidateState.FAILED, 4)
    assert candidate.error == unreachable(closed_url)


def test_it_shows_why_a_candidate_waits_on_its_pages(cv, expert, expert_client, closed_url):
    run = start_run(cv, expert, closed_url)
    candidate = run.candidates.get()
    inspections_services.candidate_claim(candidate_id=candidate.pk)
    assert inspections_jobs.run_candidate(candidate.pk, can_wait=True) == 30
    candidate.refresh_from_db()
    reason = f"waiting 30 s to retry (attempt 1 of 4 failed): {unreachable(closed_url)}"
    assert (candidate.state, candidate.error) == (CandidateState.PENDING, reason)
    live = expert_client.get(reverse("candidate_live", args=[candidate.pk])).content.decode()
    assert reason in live
    listing = expert_client.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "waiting 30 s to retry" in listing


def test_it_does_not_retry_a_cancelled_candidate(cv, expert, closed_url):
    run = start_run(cv, expert, closed_url)
    candidate = run.candidates.get()
    inspections_services.candidate_claim(candidate_id=candidate.pk)
    inspections_services.inspection_run_cancel(run=run, actor=expert)
    assert inspections_jobs.run_candidate(candidate.pk, can_wait=True) is None
    assert Candidate.objects.get(pk=candidate.pk).state == CandidateState.CANCELLED


def draft_job(cv, expert, url: str) -> Job:
    give_roles(expert, "ml_engineer")
    spectra = [make_spectrum(object_id=f"D{i}", task=cv, label="YES", seed=i) for i in range(3)]
    return core_services.job_create(
        kind="draft",
        params={"task": "CV", "spectrum_ids": [s.pk for s in spectra], "teacher": policy_at(url)},
        created_by=expert,
    )


def test_it_fails_a_draft_job_with_the_reason_when_run_in_process(
    cv, expert, expert_client, closed_url, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        job = draft_job(cv, expert, closed_url)
    job.refresh_from_db()
    assert (job.state, job.error) == (JobState.FAILED, unreachable(closed_url))
    assert not Curation.objects.exists()
    page = expert_client.get(reverse("job_detail", args=[job.pk])).content.decode()
    assert f'<pre class="error">{unreachable(closed_url)}</pre>' in page


def test_it_stops_a_draft_job_at_the_first_unreachable_call_and_waits(
    cv, expert, expert_client, closed_url
):
    job = draft_job(cv, expert, closed_url)
    core_services.job_claim(job_id=job.pk)
    assert core_jobs.run(job.pk, can_wait=True) == 30
    job.refresh_from_db()
    assert (job.state, job.done, job.failed) == (JobState.QUEUED, 0, 0)
    assert job.error == f"waiting 30 s to retry (attempt 1 of 4 failed): {unreachable(closed_url)}"
    partial = expert_client.get(reverse("job_detail", args=[job.pk]), HTTP_HX_REQUEST="true")
    assert partial.status_code == 200  # still polling
    assert "waiting 30 s to retry" in partial.content.decode()
