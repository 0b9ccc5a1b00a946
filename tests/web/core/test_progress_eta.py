"""The ETA of a job and of an inspection run: elapsed time over items done, "ETA —" until 2."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotation.core import selectors
from annotation.core.models import Job, JobState
from annotation.inspections import selectors as inspections_selectors
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, CandidateState
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_spectrum

NOW = timezone.now()


def test_it_has_no_eta_until_two_items_are_done():
    started = NOW - timedelta(seconds=30)
    assert selectors.eta_seconds(started_at=started, processed=0, remaining=10, now=NOW) is None
    assert selectors.eta_seconds(started_at=started, processed=1, remaining=9, now=NOW) is None
    assert selectors.eta_seconds(started_at=started, processed=2, remaining=8, now=NOW) == 120.0


def test_it_has_no_eta_without_a_start_or_with_nothing_left():
    assert selectors.eta_seconds(started_at=None, processed=5, remaining=5, now=NOW) is None
    started = NOW - timedelta(seconds=10)
    assert selectors.eta_seconds(started_at=started, processed=5, remaining=0, now=NOW) is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "ETA —"),
        (0.4, "ETA 0 s"),
        (42.6, "ETA 43 s"),
        (65, "ETA 1 min 05 s"),
        (2 * 3600 + 7 * 60 + 30, "ETA 2 h 07 min"),
    ],
)
def test_it_writes_the_eta(seconds, text):
    assert selectors.eta_text(seconds) == text


@pytest.mark.django_db
def test_it_estimates_a_running_job_only():
    job = Job.objects.create(
        kind="draft", state=JobState.RUNNING, total=10, done=3, failed=1, started_at=NOW
    )
    progress = selectors.job_progress(job=job, now=NOW + timedelta(seconds=20))
    assert (progress["remaining"], progress["eta_seconds"], progress["eta"]) == (
        6,
        30.0,
        "ETA 30 s",
    )
    job.done = 1
    job.failed = 0
    assert selectors.job_progress(job=job, now=NOW)["eta"] == "ETA —"
    for state in (JobState.QUEUED, JobState.CANCELLED, JobState.SUCCEEDED):
        job.state = state
        assert selectors.job_progress(job=job, now=NOW)["eta_seconds"] is None


@pytest.fixture
def run(db):
    spectra = [make_spectrum(object_id=f"ETA-{i}", seed=i) for i in range(6)]
    return inspections_services.inspection_run_create(
        task=Task.objects.get(code="CV"),
        spectrum_ids=[s.pk for s in spectra],
        policy_spec={"kind": "rule-based"},
        created_by=None,
        enqueue=False,
    )


def set_candidates(run, states: list[str], started_at) -> None:
    for candidate, state in zip(run.candidates.order_by("id"), states, strict=False):
        Candidate.objects.filter(pk=candidate.pk).update(
            state=state,
            started_at=None if state == CandidateState.PENDING else started_at,
            finished_at=started_at if state in ("done", "failed") else None,
        )


def test_it_estimates_a_run_from_its_first_candidate_start(run):
    start = NOW - timedelta(seconds=40)
    set_candidates(run, ["done"], start)
    progress = inspections_selectors.run_progress(run=run, now=NOW)
    assert (progress["eta_seconds"], progress["eta"]) == (None, "ETA —")

    set_candidates(run, ["done", "failed", "running"], start)
    progress = inspections_selectors.run_progress(run=run, now=NOW)
    # 40 s for 2 candidates, 4 left (one running, three pending).
    assert (progress["remaining"], progress["eta_seconds"], progress["eta"]) == (
        4,
        80.0,
        "ETA 1 min 20 s",
    )


def test_it_has_no_eta_for_a_cancelled_or_finished_run(run):
    set_candidates(run, ["done"] * 6, NOW - timedelta(seconds=10))
    assert inspections_selectors.run_progress(run=run, now=NOW)["eta_seconds"] is None
    set_candidates(run, ["done", "done", "pending"], NOW - timedelta(seconds=10))
    run.cancelled = True
    assert inspections_selectors.run_progress(run=run, now=NOW)["eta_seconds"] is None


def test_it_shows_the_eta_on_the_job_and_run_progress_partials(run):
    staff = UserFactory(username="eta-staff", roles=["staff", "ml_engineer"])
    client = Client()
    client.force_login(staff)
    job = Job.objects.create(
        kind="draft", state=JobState.RUNNING, total=10, done=0, started_at=NOW, created_by=staff
    )
    partial = client.get(reverse("job_detail", args=[job.pk]), HTTP_HX_REQUEST="true")
    assert "ETA —" in partial.content.decode()

    set_candidates(run, ["done", "done", "running"], timezone.now() - timedelta(seconds=30))
    partial = client.get(
        reverse("run_detail", args=[run.pk]) + "?part=progress", HTTP_HX_REQUEST="true"
    )
    assert 'class="eta"' in partial.content.decode()
    assert "ETA —" not in partial.content.decode()
