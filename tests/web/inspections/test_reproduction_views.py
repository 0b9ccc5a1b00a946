"""Reproduce as a feature: the candidate page and API re-run a candidate and show the diff; the
run page and API show the background re-check, and a mismatch is an alarm (issue 28)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from annotation.core.models import AuditLog
from annotation.inspections import jobs
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, InspectionRun, Rollout
from annotation.inspections.reproduction import run_reproduce
from tests.factories import make_endpoint, make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished_run(cv, ml_engineer, settings, django_capture_on_commit_callbacks) -> InspectionRun:
    # Only the first candidate is re-checked as the run finishes: which of the rest fall in the
    # 1 % sample depends on their ids, i.e. on the tests run before in the same database.
    settings.INSPECTION_RECHECK_RATE = 0.0
    spectra = [
        make_spectrum(object_id=f"REPRO-{i}", seed=i, line_amplitude=amplitude)
        for i, amplitude in enumerate([3.0, 0.0, 0.8])
    ]
    run = inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[s.pk for s in spectra],
        policy_spec={"kind": "rule-based"},
        created_by=ml_engineer,
        enqueue=False,
    )
    ids = list(run.candidates.order_by("pk").values_list("pk", flat=True))
    with django_capture_on_commit_callbacks(execute=True):  # the background re-check job
        jobs.run_candidates(inspections_services.candidates_claim(candidate_ids=ids))
    return run


def tamper(candidate: Candidate, text: str) -> None:
    """What a crossed write leaves: another answer in the stored rollout."""
    rollout = Rollout.objects.get(candidate=candidate, index=0)
    rollout.data["steps"][-1]["assistant_text"] = text
    rollout.save(update_fields=["data"])


def test_it_reproduces_a_candidate_from_its_page(expert_client, finished_run) -> None:
    candidate = finished_run.candidates.order_by("pk").first()
    page = expert_client.get(reverse("candidate_live", args=[candidate.pk])).content.decode()
    assert reverse("candidate_reproduce", args=[candidate.pk]) in page
    response = expert_client.post(
        reverse("candidate_reproduce", args=[candidate.pk]), HTTP_HX_REQUEST="true"
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "Reproduced" in body and 'data-matches="true"' in body
    assert "<html" not in body  # the fragment for htmx, the whole page without it


def test_it_shows_what_differs_escaped(expert_client, finished_run) -> None:
    candidate = finished_run.candidates.order_by("pk").first()
    tamper(candidate, "<script>alert(1)</script>")
    response = expert_client.post(reverse("candidate_reproduce", args=[candidate.pk]))
    body = response.content.decode()
    assert "Does not reproduce" in body
    assert "assistant_text" in body
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;" in body


def test_it_reproduces_through_the_api(api_client, finished_run) -> None:
    first, second = finished_run.candidates.order_by("pk")[:2]
    tamper(second, "\\boxed{YES}")
    url = "api_candidate_reproduce"
    ok = api_client.post(reverse(url, args=[first.pk])).json()
    assert ok["checked"] and ok["matches"] and ok["differences"] == []
    wrong = api_client.post(reverse(url, args=[second.pk])).json()
    assert not wrong["matches"]
    assert any("assistant_text" in d["where"] for d in wrong["differences"])


def test_it_lets_only_the_owner_or_staff_reproduce_a_model_s_candidate(
    api_client, ml_api_client, cv, ml_engineer
) -> None:
    make_endpoint(name="gpu-1")
    run = InspectionRun.objects.create(
        task=cv, policy_spec={"kind": "openai", "endpoint": "gpu-1"}, created_by=ml_engineer
    )
    candidate = Candidate.objects.create(run=run, spectrum=make_spectrum(object_id="MODEL"))
    url = reverse("api_candidate_reproduce", args=[candidate.pk])
    assert api_client.post(url).status_code == 403  # an expert: the model would be asked again
    answered = ml_api_client.post(url)  # the owner: nothing finished, so nothing to compare
    assert answered.status_code == 200 and answered.json()["checked"] is False


def test_it_raises_an_alarm_on_the_run_when_a_recheck_finds_a_mismatch(
    expert_client, api_client, finished_run
) -> None:
    run = finished_run
    run.refresh_from_db()
    assert run.reproducibility["checked"] == 1  # the first candidate, re-checked as it finished
    assert run.reproducibility["mismatched"] == 0
    page = expert_client.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "all reproduce exactly" in page

    candidate = run.candidates.order_by("pk").last()
    tamper(candidate, "a crossed answer")
    inspections_services.inspection_run_recheck_record(
        run_id=run.pk, reproductions=run_reproduce(run, candidate_ids=[candidate.pk])
    )
    page = expert_client.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "do not reproduce" in page and 'role="alert"' in page
    assert reverse("candidate_live", args=[candidate.pk]) in page
    assert AuditLog.objects.filter(action="inspection_candidate_mismatch").count() == 1
    data = api_client.get(reverse("api_run_detail", args=[run.pk])).json()
    assert data["reproducibility"]["mismatched"] == 1
    assert data["reproducibility"]["mismatches"][0]["candidate"] == candidate.pk


def test_it_does_not_recheck_a_sampling_model_run_and_says_why(expert_client, cv, ml_engineer):
    make_endpoint(name="gpu-1")
    run = InspectionRun.objects.create(
        task=cv,
        policy_spec={"kind": "openai", "endpoint": "gpu-1"},
        sampling={"temperature": 0.7},
        created_by=ml_engineer,
    )
    page = expert_client.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "Not re-checked" in page and "temperature 0.7" in page
