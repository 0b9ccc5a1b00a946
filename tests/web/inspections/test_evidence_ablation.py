"""Evidence ablation of finished candidates (issue 35 part 2): the staff action and its job, the
stored result, the candidate page and API, the catalog column and filter, the calibration page."""

from __future__ import annotations

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from agent.synthetic import generate_sample
from annotation.core.models import Job, JobState
from annotation.inspections import ablations, jobs
from annotation.inspections import services as inspections_services
from annotation.inspections.models import (
    CatalogEntry,
    EvidenceAblation,
    EvidenceOutcome,
    InspectionRun,
)
from annotation.spectra import services as spectra_services
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db

STRONG_LINE = "ABLATE-0"


def stored_sample(object_id: str, subtype: str, *, label: bool, seed: int = 1):
    """A SpecVI-mini spectrum of the CV task (agent.synthetic), stored."""
    drawn = generate_sample("CV", label, rng=np.random.default_rng(seed), subtype=subtype, snr=40.0)
    value = drawn.spectrum
    value.object_id = object_id
    stored = spectra_services.spectra_store(
        values=[value], dataset="tests", source_name=f"{object_id}.fits"
    )
    return stored.created[0]


@pytest.fixture
def finished_run(cv, ml_engineer) -> InspectionRun:
    """Rule-based verdicts on a dwarf nova (YES), an active M dwarf and a Be star (NO)."""
    spectra = [
        stored_sample(STRONG_LINE, "cv_dwarf_nova", label=True),
        stored_sample("ABLATE-1", "dme", label=False),
        stored_sample("ABLATE-2", "be_star", label=False),
    ]
    run = inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[s.pk for s in spectra],
        policy_spec={"kind": "rule-based"},
        created_by=ml_engineer,
        enqueue=False,
    )
    ids = list(run.candidates.order_by("pk").values_list("pk", flat=True))
    jobs.run_candidates(inspections_services.candidates_claim(candidate_ids=ids))
    return run


@pytest.fixture
def ablated(finished_run, staff, django_capture_on_commit_callbacks) -> InspectionRun:
    with django_capture_on_commit_callbacks(execute=True):
        ablations.evidence_ablation_start(run=finished_run, actor=staff, size=3, seed=5)
    return finished_run


@pytest.fixture
def staff_client(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def staff_api(staff) -> APIClient:
    client = APIClient()
    client.force_authenticate(staff)
    return client


def strong(run: InspectionRun):
    return run.candidates.get(spectrum__object_id=STRONG_LINE)


# --- service and job ----------------------------------------------------------------------------


def test_it_ablates_a_sample_in_a_job_and_keeps_the_outcome_on_the_catalog_row(ablated) -> None:
    job = Job.objects.get(kind=ablations.ABLATION_JOB)
    assert job.state == JobState.SUCCEEDED, job.error
    assert job.result["ablated"] == 3 and job.result["failed"] == 0
    row = EvidenceAblation.objects.get(candidate=strong(ablated))
    assert (row.answer_before, row.answer_after) == ("YES", "NO")
    assert row.flipped and row.outcome == EvidenceOutcome.FLIPS
    assert not row.control_flipped and row.control  # random windows of the same widths
    assert any(w["name"] == "H-alpha" for w in row.windows)
    entry = CatalogEntry.objects.get(candidate=strong(ablated))
    assert entry.evidence_outcome == "flips"


def test_it_draws_the_same_sample_and_result_for_the_same_seed(finished_run) -> None:
    first = ablations.sample_candidates(finished_run, size=2, seed=3)
    assert first == ablations.sample_candidates(finished_run, size=2, seed=3)
    seeds = {tuple(ablations.sample_candidates(finished_run, size=2, seed=s)) for s in range(8)}
    assert len(seeds) > 1  # the seed decides the sample
    candidate = strong(finished_run)
    once = ablations.candidate_ablate(candidate.pk, seed=3)
    again = ablations.candidate_ablate(candidate.pk, seed=3)
    assert once.result is not None and again.result is not None
    assert once.result.as_dict() == again.result.as_dict()


def test_it_replaces_an_earlier_ablation_of_the_candidate(ablated, staff) -> None:
    candidate = strong(ablated)
    ablation = ablations.candidate_ablate(candidate.pk, seed=99)
    ablations.evidence_ablation_record(ablation=ablation)
    assert EvidenceAblation.objects.filter(candidate=candidate).count() == 1
    assert EvidenceAblation.objects.get(candidate=candidate).seed == ablation.seed


def test_it_refuses_a_sample_it_cannot_draw(finished_run, staff, cv, ml_engineer) -> None:
    from annotation.core.errors import WrongState

    with pytest.raises(WrongState):
        ablations.evidence_ablation_start(run=finished_run, actor=staff, size=0, seed=1)
    empty = inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[make_spectrum(object_id="PENDING").pk],
        policy_spec={"kind": "rule-based"},
        created_by=ml_engineer,
        enqueue=False,
    )
    with pytest.raises(WrongState, match="no finished candidate"):
        ablations.evidence_ablation_start(run=empty, actor=staff, size=5, seed=1)


# --- pages --------------------------------------------------------------------------------------


def test_it_lets_staff_start_an_ablation_from_the_run_page(
    staff_client, finished_run, django_capture_on_commit_callbacks
) -> None:
    page = staff_client.get(reverse("run_detail", args=[finished_run.pk])).content.decode()
    assert reverse("run_evidence_ablation", args=[finished_run.pk]) in page
    with django_capture_on_commit_callbacks(execute=True):
        response = staff_client.post(
            reverse("run_evidence_ablation", args=[finished_run.pk]), {"size": "2", "seed": "4"}
        )
    assert response.status_code == 302
    assert EvidenceAblation.objects.filter(candidate__run=finished_run).count() == 2
    page = staff_client.get(reverse("run_detail", args=[finished_run.pk])).content.decode()
    assert "re-run with the windows" in page


def test_it_says_on_the_candidate_page_what_the_answer_depends_on(expert_client, ablated) -> None:
    candidate = strong(ablated)
    page = expert_client.get(reverse("candidate_live", args=[candidate.pk])).content.decode()
    assert "The answer depends on" in page and "flips YES to NO" in page
    assert "H-alpha" in page


def test_it_escapes_window_names_from_the_model(expert_client, ablated) -> None:
    candidate = strong(ablated)
    row = EvidenceAblation.objects.get(candidate=candidate)
    row.decisive = ["<script>alert(1)</script>"]
    row.save(update_fields=["decisive"])
    page = expert_client.get(reverse("candidate_live", args=[candidate.pk])).content.decode()
    assert "<script>alert(1)</script>" not in page and "&lt;script&gt;" in page


def test_it_flags_an_insensitive_answer_on_the_candidate_page(expert_client, ablated) -> None:
    candidate = strong(ablated)
    EvidenceAblation.objects.filter(candidate=candidate).update(
        outcome=EvidenceOutcome.INSENSITIVE, flipped=False, insensitive=True, answer_after="YES"
    )
    page = expert_client.get(reverse("candidate_outcome", args=[candidate.pk])).content.decode()
    assert "does not rest on what it cites" in page


def test_it_filters_the_catalog_on_the_ablation_outcome(expert_client, ablated) -> None:
    flipped = expert_client.get(reverse("catalog_list"), {"evidence": "flips"}).content.decode()
    assert STRONG_LINE in flipped and "evidence flips" in flipped
    untested = CatalogEntry.objects.filter(run=ablated).exclude(evidence_outcome="flips")
    for entry in untested:
        assert f">{entry.object_id}<" not in flipped
    refused = expert_client.get(reverse("catalog_list"), {"evidence": "maybe"})
    assert "evidence must be one of" in refused.content.decode()


def test_it_shows_how_often_confident_answers_survive_on_the_calibration_page(
    staff_client, ablated
) -> None:
    page = staff_client.get(reverse("calibration"), {"task": "CV"}).content.decode()
    assert 'id="evidence-survival"' in page
    assert "surviving their own evidence masked" in page
    assert "No verdict of this task has been ablated yet" not in page


# --- API ----------------------------------------------------------------------------------------


def test_it_gives_the_ablation_in_the_candidate_api(api_client, ablated) -> None:
    data = api_client.get(reverse("api_candidate_detail", args=[strong(ablated).pk])).json()
    ablation = data["evidence_ablation"]
    assert ablation["outcome"] == "flips" and ablation["flipped"] is True
    assert ablation["answer_before"] == "YES" and ablation["answer_after"] == "NO"
    assert {w["source"] for w in ablation["windows"]} <= {"zoom", "cited"}


def test_it_gives_null_in_the_candidate_api_before_any_ablation(api_client, finished_run) -> None:
    data = api_client.get(reverse("api_candidate_detail", args=[strong(finished_run).pk])).json()
    assert data["evidence_ablation"] is None


def test_it_starts_and_counts_ablations_through_the_api_for_staff_only(
    staff_api, api_client, finished_run, django_capture_on_commit_callbacks
) -> None:
    url = reverse("api_run_evidence_ablation", args=[finished_run.pk])
    assert api_client.post(url, {"size": 2}, format="json").status_code == 403
    assert staff_api.get(url).status_code == 404  # none yet
    with django_capture_on_commit_callbacks(execute=True):
        started = staff_api.post(url, {"size": 3, "seed": 7}, format="json")
    assert started.status_code == 202 and len(started.json()["candidate_ids"]) == 3
    counts = staff_api.get(url).json()
    assert counts["ablated"] == 3 and counts["flipped"] >= 1
    assert counts["control_flipped"] < counts["flipped"]
    assert staff_api.post(url, {"size": 0}, format="json").status_code == 400


def test_it_filters_the_catalog_api_on_the_ablation_outcome(api_client, ablated) -> None:
    rows = api_client.get(reverse("api_catalog_list"), {"evidence": "flips"}).json()["results"]
    assert rows and all(row["evidence_outcome"] == "flips" for row in rows)
