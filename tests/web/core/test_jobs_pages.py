"""Job pages: progress that polls until the job is finished, results, errors, cancelling."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotation.core import services
from annotation.core.models import Job, JobState
from annotation.curation.models import Curation
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviser(db):
    return UserFactory(username="reviser", roles=["ml_engineer"])  # starts the drafts


@pytest.fixture
def colleague(db):
    """Another ML engineer, who did not start the job."""
    return UserFactory(username="outsider", roles=["ml_engineer"])


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def progress(client: Client, job: Job):
    return client.get(reverse("job_detail", args=[job.pk]), HTTP_HX_REQUEST="true")


def test_it_drafts_with_the_rule_based_teacher_and_stops_polling_when_done(
    reviser, django_capture_on_commit_callbacks
):
    pytest.importorskip("agent.policies.rule_based")
    task = Task.objects.get(code="CV")
    rows = [make_spectrum(object_id=f"CV-{i}", task=task, label="YES", seed=i) for i in range(2)]
    client = client_for(reviser)
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post(
            reverse("curation_draft_new"),
            {"task": "CV", "limit": "2", "teacher": "rule-based", "max_tool_calls": "3"},
        )
    job = Job.objects.get()
    assert response["Location"] == reverse("job_detail", args=[job.pk])
    assert job.state == JobState.SUCCEEDED, job.error
    assert sorted(Curation.objects.values_list("spectrum_id", flat=True)) == [r.pk for r in rows]
    partial = progress(client, job)
    assert partial.status_code == 286
    assert b"Created 2 drafts." in partial.content
    assert b"every 1s" not in partial.content


def test_it_keeps_polling_while_the_job_runs(reviser):
    job = services.job_create(kind="draft", params={}, created_by=reviser, total=4)
    services.job_claim(job_id=job.pk)
    services.job_progress(job_id=job.pk, done=1)
    partial = progress(client_for(reviser), job)
    assert partial.status_code == 200
    body = partial.content.decode()
    assert 'hx-trigger="every 1s"' in body
    assert "1 done, 0 failed of 4 (25%)" in body
    assert "<html" not in body


def test_it_shows_the_error_escaped_in_a_pre(reviser):
    job = services.job_create(kind="draft", params={}, created_by=reviser)
    services.job_fail(job_id=job.pk, error="ValueError: <b>no spectrum</b>")
    body = client_for(reviser).get(reverse("job_detail", args=[job.pk])).content.decode()
    assert '<pre class="error">ValueError: &lt;b&gt;no spectrum&lt;/b&gt;</pre>' in body


def test_it_lists_each_failure_with_its_reason(reviser):
    job = services.job_create(kind="draft", params={}, created_by=reviser, total=2)
    services.job_claim(job_id=job.pk)
    services.job_succeed(
        job_id=job.pk,
        result={
            "created": 1,
            "failures": [{"spectrum_id": 41, "error": "spectrum has no YES/NO label"}],
        },
    )
    body = client_for(reviser).get(reverse("job_detail", args=[job.pk])).content.decode()
    assert "Created 1 draft." in body
    assert "spectrum has no YES/NO label" in body
    assert reverse("spectrum_detail", args=[41]) in body


def test_it_lets_the_creator_cancel_a_job(reviser):
    job = services.job_create(kind="draft", params={}, created_by=reviser)
    response = client_for(reviser).post(reverse("job_cancel", args=[job.pk]))
    assert response.status_code == 302
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


def test_it_lets_staff_cancel_any_job(reviser, staff):
    job = services.job_create(kind="draft", params={}, created_by=reviser)
    client_for(staff).post(reverse("job_cancel", args=[job.pk]))
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED


def test_it_refuses_to_cancel_another_experts_job(reviser, colleague):
    job = services.job_create(kind="draft", params={}, created_by=reviser)
    response = client_for(colleague).post(reverse("job_cancel", args=[job.pk]))
    assert response.status_code == 403
    job.refresh_from_db()
    assert job.state == JobState.QUEUED


def test_it_paginates_the_job_list(reviser):
    for _ in range(51):
        services.job_create(kind="draft", params={}, created_by=reviser)
    response = client_for(reviser).get(reverse("job_list"))
    assert response.context["page"].paginator.num_pages == 2
    assert len(response.context["page"].object_list) == 50
