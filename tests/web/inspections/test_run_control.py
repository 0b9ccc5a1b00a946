"""Cancel and retry belong to whoever started the run or job, and to staff (issue 11, item 4).

Before, any signed-in account could cancel anyone's inspection run, and a retry re-opened the
owner's cancelled run. Each refusal is checked on the page, the API and the service, and must
leave the run exactly as it was.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.core import services as core_services
from annotation.core.models import Job, JobState
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, CandidateState, InspectionRun
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_spectrum

pytestmark = pytest.mark.django_db

REFUSED = "Only the person who started this"


@pytest.fixture
def colleague(db):
    """Another ML engineer: the role lets them cancel runs, but not this one."""
    return UserFactory(username="colleague", roles=["ml_engineer"])


@pytest.fixture
def run(owner) -> InspectionRun:
    """Two pending candidates (no worker ran) and one that failed."""
    spectra = [make_spectrum(object_id=f"R{i}", seed=i) for i in range(3)]
    run = inspections_services.inspection_run_create(
        task=Task.objects.get(code="CV"),
        spectrum_ids=[s.pk for s in spectra],
        policy_spec={"kind": "rule-based"},
        created_by=owner,
    )
    failed = run.candidates.order_by("id").last()
    Candidate.objects.filter(pk=failed.pk).update(state=CandidateState.FAILED, error="down")
    return run


def page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def states(run: InspectionRun) -> list[str]:
    return list(run.candidates.order_by("id").values_list("state", flat=True))


@pytest.mark.parametrize("via", ["page", "api"])
def test_it_refuses_to_cancel_someone_elses_run(run, colleague, via):
    before = states(run)
    if via == "page":
        response = page(colleague).post(reverse("run_cancel", args=[run.pk]))
        assert REFUSED in response.content.decode()
    else:
        response = api(colleague).post(reverse("api_run_cancel", args=[run.pk]))
        assert REFUSED in response.json()["detail"]
    assert response.status_code == 403
    run.refresh_from_db()
    assert (run.cancelled, states(run)) == (False, before)


@pytest.mark.parametrize(("who", "via"), [("owner", "page"), ("staff", "api")])
def test_it_lets_the_owner_and_staff_cancel(run, owner, staff, who, via):
    user = {"owner": owner, "staff": staff}[who]
    if via == "page":
        response = page(user).post(reverse("run_cancel", args=[run.pk]))
        assert response.status_code == 302
    else:
        response = api(user).post(reverse("api_run_cancel", args=[run.pk]))
        assert response.json() == {"cancelled": 2}
    run.refresh_from_db()
    assert run.cancelled
    assert states(run) == [CandidateState.CANCELLED, CandidateState.CANCELLED, "failed"]


@pytest.mark.parametrize("via", ["page", "api"])
def test_it_refuses_someone_elses_retry_and_keeps_the_owners_cancel(run, owner, colleague, via):
    inspections_services.inspection_run_cancel(run=run, actor=owner)
    candidate = run.candidates.order_by("id").last()
    before = states(run)
    if via == "page":
        response = page(colleague).post(reverse("candidate_retry", args=[candidate.pk]))
    else:
        response = api(colleague).post(reverse("api_candidate_retry", args=[candidate.pk]))
    assert response.status_code == 403
    run.refresh_from_db()
    assert run.cancelled, "a refused retry re-opened the owner's cancelled run"
    assert states(run) == before


def test_it_refuses_the_retry_in_the_service_too(run, owner, colleague):
    inspections_services.inspection_run_cancel(run=run, actor=owner)
    candidate = run.candidates.order_by("id").last()
    with pytest.raises(PermissionDenied, match=REFUSED):
        inspections_services.candidate_retry(candidate=candidate, actor=colleague)
    with pytest.raises(PermissionDenied, match=REFUSED):
        inspections_services.inspection_run_cancel(run=run, actor=colleague)
    run.refresh_from_db()
    candidate.refresh_from_db()
    assert (run.cancelled, candidate.state) == (True, CandidateState.FAILED)


@pytest.mark.parametrize(("who", "via"), [("owner", "page"), ("staff", "api")])
def test_it_lets_the_owner_and_staff_retry(run, owner, staff, who, via):
    user = {"owner": owner, "staff": staff}[who]
    candidate = run.candidates.order_by("id").last()
    if via == "page":
        response = page(user).post(reverse("candidate_retry", args=[candidate.pk]))
        assert response.status_code == 302
    else:
        response = api(user).post(reverse("api_candidate_retry", args=[candidate.pk]))
        assert response.status_code == 200
    candidate.refresh_from_db()
    assert candidate.state == CandidateState.PENDING


def test_it_leaves_a_run_nobody_owns_to_staff(owner, staff):
    run = inspections_services.inspection_run_create(
        task=Task.objects.get(code="CV"),
        spectrum_ids=[make_spectrum().pk],
        policy_spec={"kind": "rule-based"},
        created_by=None,  # started from the command line
    )
    assert api(owner).post(reverse("api_run_cancel", args=[run.pk])).status_code == 403
    assert api(staff).post(reverse("api_run_cancel", args=[run.pk])).status_code == 200


def test_it_hides_cancel_and_retry_from_who_may_not_use_them(run, owner, colleague):
    mine = page(owner).get(reverse("run_detail", args=[run.pk])).content.decode()
    theirs = page(colleague).get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "Cancel run" in mine and "Retry" in mine
    assert "Cancel run" not in theirs and "Retry" not in theirs


@pytest.mark.parametrize("via", ["page", "api"])
def test_it_refuses_to_cancel_someone_elses_job(owner, colleague, staff, via):
    job = core_services.job_create(kind="draft", params={}, created_by=owner)
    if via == "page":
        response = page(colleague).post(reverse("job_cancel", args=[job.pk]))
    else:
        response = api(colleague).post(reverse("api_job_cancel", args=[job.pk]))
    assert response.status_code == 403
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED
    with pytest.raises(PermissionDenied, match=REFUSED):
        core_services.job_cancel(job=job, actor=colleague)
    assert api(staff).post(reverse("api_job_cancel", args=[job.pk])).status_code == 200
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED
