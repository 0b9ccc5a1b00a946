"""A candidate a killed worker left "running" shows as interrupted, and staff resend it at once.

A worker killed mid-run leaves its candidates running until the broker's visibility timeout
(an hour on Redis) hands them out again. Here a worker "dies" after claiming a candidate and
writing a live step: on PostgreSQL its lease is gone with it; on SQLite (no leases) nothing
was heard from it for longer than CANDIDATE_INTERRUPTED_AFTER. The end-to-end version with a
real worker SIGKILLed is tests/integration/test_worker_kill.py.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from annotation.core.leases import lease, leases_held
from annotation.core.models import AuditLog
from annotation.inspections import jobs, selectors
from annotation.inspections import services as inspections_services
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    InspectionRun,
    LiveStep,
    Rollout,
)
from annotation.spectra.models import Task
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db

needs_postgres = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="leases are PostgreSQL advisory locks (DATABASE_URL)"
)


def rule_based_run(spectra, *, name: str) -> InspectionRun:
    return inspections_services.inspection_run_create(
        task=Task.objects.get(code="CV"),
        spectrum_ids=[row.pk for row in spectra],
        policy_spec={"kind": "rule-based"},
        created_by=None,
        name=name,
        max_tool_calls=2,
        enqueue=False,
    )


def run_now(candidate_ids: list[int]) -> None:
    jobs.run_candidates(inspections_services.candidates_claim(candidate_ids=candidate_ids))


@pytest.fixture
def spectra(db):
    """Three spectra the rule-based inspector answers differently (a strong line, or none)."""
    return [
        make_spectrum(object_id=f"INT-{i}", seed=i, line_amplitude=amplitude)
        for i, amplitude in enumerate([3.0, 0.0, 3.0])
    ]


@pytest.fixture
def reference(spectra) -> dict[int, tuple[str, float]]:
    """spectrum id -> the answer (verdict, confidence) an uninterrupted run gives it."""
    run = rule_based_run(spectra, name="reference")
    run_now(list(run.candidates.values_list("pk", flat=True)))
    answers = {
        spectrum_id: (verdict, confidence)
        for spectrum_id, verdict, confidence in run.candidates.values_list(
            "spectrum_id", "verdict", "confidence"
        )
    }
    assert len(set(answers.values())) == 2, answers  # a mix-up between spectra would show
    return answers


def die_mid_run(candidate: Candidate) -> None:
    """What a worker SIGKILLed mid-candidate leaves: claimed (running, attempt 1), one live
    step of its first rollout written, no rollout stored, its lease gone with its connection;
    and (for SQLite, where only silence tells) nothing heard since long ago."""
    assert inspections_services.candidate_claim(candidate_id=candidate.pk)
    LiveStep.objects.create(
        candidate=candidate, rollout_index=0, step_index=0, data={"think": "the dead worker"}
    )
    long_ago = timezone.now() - timedelta(hours=1)
    Candidate.objects.filter(pk=candidate.pk).update(started_at=long_ago)
    LiveStep.objects.filter(candidate=candidate).update(created_at=long_ago)


@pytest.fixture
def killed(spectra):
    """A run whose first two candidates finished and whose third a killed worker left."""
    run = rule_based_run(spectra, name="killed")
    first, second, third = run.candidates.order_by("pk")
    run_now([first.pk, second.pk])
    die_mid_run(third)
    return run, third


@pytest.fixture
def staff_api(staff) -> APIClient:
    client = APIClient()
    client.force_authenticate(staff)
    return client


def test_it_shows_a_candidate_left_by_a_dead_worker_as_interrupted(killed, staff, staff_api):
    run, candidate = killed
    assert selectors.interrupted_candidate_ids(rows=run.candidates.all()) == {candidate.pk}

    client = Client()
    client.force_login(staff)
    body = client.get(reverse("run_detail", args=[run.pk])).content.decode()
    assert "1 interrupted" in body and 'id="resend-interrupted"' in body
    assert body.count('class="badge error interrupted"') == 1
    only = client.get(reverse("run_detail", args=[run.pk]), {"state": "interrupted"})
    assert "INT-2" in only.content.decode() and "INT-0" not in only.content.decode()

    data = staff_api.get(reverse("api_run_detail", args=[run.pk])).json()
    assert (data["progress"]["interrupted"], data["progress"]["running"]) == (1, 0)
    states = {row["id"]: row["state"] for row in data["candidates"]}
    assert states[candidate.pk] == "interrupted"
    assert sorted(states.values()) == ["done", "done", "interrupted"]
    detail = staff_api.get(reverse("api_candidate_detail", args=[candidate.pk])).json()
    assert detail["state"] == "interrupted"


@pytest.mark.parametrize("through", ["page", "api"])
def test_it_resends_an_interrupted_candidate_to_one_verdict_of_its_own_spectrum(
    killed, reference, staff, staff_api, through, django_capture_on_commit_callbacks
):
    run, candidate = killed
    with django_capture_on_commit_callbacks(execute=True):  # the resent message runs here
        if through == "api":
            response = staff_api.post(reverse("api_run_resend", args=[run.pk]), {}, format="json")
            assert (response.status_code, response.json()) == (200, {"resent": [candidate.pk]})
        else:
            client = Client()
            client.force_login(staff)
            response = client.post(
                reverse("run_resend", args=[run.pk]), {"candidate": candidate.pk}
            )
            assert response.status_code == 302
            page = client.get(response["Location"]).content.decode()
            assert "Sent again: 1 interrupted candidate." in page

    candidate.refresh_from_db()
    assert (candidate.state, candidate.attempts) == (CandidateState.DONE, 2)
    assert (candidate.verdict, candidate.confidence) == reference[candidate.spectrum_id]
    assert candidate.verdict in ("YES", "NO")
    assert CatalogEntry.objects.filter(candidate=candidate).count() == 1
    assert CatalogEntry.objects.get(candidate=candidate).verdict == candidate.verdict
    assert list(Rollout.objects.filter(candidate=candidate).values_list("index", flat=True)) == [0]
    assert not LiveStep.objects.filter(candidate=candidate, data__think="the dead worker").exists()
    for other in run.candidates.exclude(pk=candidate.pk):
        assert (other.verdict, other.confidence) == reference[other.spectrum_id]
        assert other.attempts == 1
    entry = AuditLog.objects.get(action="candidate_resent")
    assert (entry.actor, entry.object_pk, entry.to_state) == (staff, str(candidate.pk), "pending")
    # nothing is interrupted any more, and a second resend sends nothing
    assert selectors.interrupted_candidate_ids(rows=run.candidates.all()) == set()
    again = staff_api.post(reverse("api_run_resend", args=[run.pk]), {}, format="json")
    assert again.status_code == 409


@pytest.mark.parametrize("role", ["ml_engineer", "expert", "owner"])
def test_it_lets_only_staff_resend(killed, role, request):
    run, candidate = killed
    user = request.getfixturevalue(role)
    api = APIClient()
    api.force_authenticate(user)
    response = api.post(reverse("api_run_resend", args=[run.pk]), {}, format="json")
    page = Client()
    page.force_login(user)
    posted = page.post(reverse("run_resend", args=[run.pk]), {"candidate": candidate.pk})
    assert (response.status_code, posted.status_code) == (403, 403)
    candidate.refresh_from_db()
    assert (candidate.state, candidate.attempts) == (CandidateState.RUNNING, 1)
    assert not AuditLog.objects.filter(action="candidate_resent").exists()


def test_it_does_not_resend_a_candidate_a_live_worker_runs(spectra, staff_api):
    run = rule_based_run(spectra, name="live")
    candidate = run.candidates.order_by("pk").first()
    assert inspections_services.candidate_claim(candidate_id=candidate.pk)  # running, just now
    with lease("candidate", candidate.pk):  # this session is the live worker on PostgreSQL
        assert selectors.interrupted_candidate_ids(rows=run.candidates.all()) == set()
        response = staff_api.post(
            reverse("api_run_resend", args=[run.pk]), {"candidates": [candidate.pk]}, format="json"
        )
    assert response.status_code == 409
    assert "running on a live worker" in response.json()["detail"]
    candidate.refresh_from_db()
    assert (candidate.state, candidate.attempts) == (CandidateState.RUNNING, 1)
    assert not AuditLog.objects.filter(action="candidate_resent").exists()


def test_it_refuses_to_resend_a_finished_or_unknown_candidate(killed, staff_api):
    run, interrupted = killed
    finished = run.candidates.exclude(pk=interrupted.pk).first()
    url = reverse("api_run_resend", args=[run.pk])
    response = staff_api.post(url, {"candidates": [interrupted.pk, finished.pk]}, format="json")
    assert response.status_code == 409
    assert f"{finished.pk} is done" in response.json()["detail"]
    assert staff_api.post(url, {"candidates": [999999]}, format="json").status_code == 404
    interrupted.refresh_from_db()
    assert interrupted.state == CandidateState.RUNNING  # refused together: nothing was resent


@needs_postgres
def test_it_tells_a_held_lease_from_a_dropped_one_on_postgresql(spectra, staff_api):
    """Another session (a live worker) holds the lease: not interrupted, however long it has
    been silent; once that session ends, interrupted at once."""
    run = rule_based_run(spectra, name="held")
    candidate = run.candidates.order_by("pk").first()
    die_mid_run(candidate)  # silent for an hour: on SQLite that alone would do
    holding, finish = threading.Event(), threading.Event()

    def live_worker() -> None:
        try:
            with lease("candidate", candidate.pk) as held:
                assert held
                holding.set()
                finish.wait(timeout=10)
        finally:
            connection.close()

    thread = threading.Thread(target=live_worker)
    thread.start()
    try:
        assert holding.wait(timeout=10)
        assert leases_held("candidate", [candidate.pk, candidate.pk + 1]) == {candidate.pk}
        assert selectors.interrupted_candidate_ids(rows=run.candidates.all()) == set()
        url = reverse("api_run_resend", args=[run.pk])
        assert staff_api.post(url, {}, format="json").status_code == 409
    finally:
        finish.set()
        thread.join(timeout=10)
    assert selectors.interrupted_candidate_ids(rows=run.candidates.all()) == {candidate.pk}
