"""The candidate's live page states where the candidate truly is, from what is stored: queued,
waiting for a retry (why, and when the next try is), running, interrupted (a lost worker left it
"running"), failed or cancelled. It used to print the raw state, so an interrupted candidate
read "running…" and a waiting one "pending…" with no time for its next try."""

from __future__ import annotations

import re
import socket
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from annotation.core.leases import lease
from annotation.inspections import jobs
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, CandidateState
from tests.factories import give_roles, make_endpoint, make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(staff) -> Client:
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def closed_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def rule_based_candidate(cv, *, object_id: str = "LIVE-1") -> Candidate:
    run = inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[make_spectrum(object_id=object_id).pk],
        policy_spec={"kind": "rule-based"},
        created_by=None,
        enqueue=False,
    )
    return run.candidates.get()


def claimed(candidate: Candidate, *, started_ago: timedelta = timedelta(0)) -> Candidate:
    assert inspections_services.candidate_claim(candidate_id=candidate.pk)
    Candidate.objects.filter(pk=candidate.pk).update(started_at=timezone.now() - started_ago)
    return Candidate.objects.get(pk=candidate.pk)


def outcome(client: Client, candidate: Candidate) -> str:
    """The outcome panel, as the live page shows it and as its refresh fetches it."""
    page = client.get(reverse("candidate_live", args=[candidate.pk])).content.decode()
    panel = client.get(reverse("candidate_outcome", args=[candidate.pk])).content.decode()
    found = re.search(r'<div id="outcome".*?</div>\s*</div>', page, re.S)
    assert found is not None
    assert 'data-state="' in panel
    return found.group(0) + panel


def test_it_shows_a_candidate_never_started_as_queued(cv, expert_client):
    candidate = rule_based_candidate(cv)
    shown = outcome(expert_client, candidate)
    assert 'data-state="pending"' in shown
    assert "Queued: not started yet" in shown
    assert "every 5s" in shown  # the panel follows the candidate until it finishes


def test_it_shows_a_candidate_a_live_worker_runs_as_running(cv, expert_client):
    candidate = claimed(rule_based_candidate(cv))
    with lease("candidate", candidate.pk):  # what a live worker holds on PostgreSQL
        shown = outcome(expert_client, candidate)
    assert 'data-state="running"' in shown
    assert "Running (attempt 1 of 4)" in shown
    assert "Interrupted" not in shown


def test_it_shows_a_candidate_a_lost_worker_left_running_as_interrupted(
    cv, expert_client, staff_client
):
    # No lease held (PostgreSQL), and nothing heard from it for an hour (SQLite)
    candidate = claimed(rule_based_candidate(cv), started_ago=timedelta(hours=1))
    shown = outcome(expert_client, candidate)
    assert 'data-state="interrupted"' in shown
    assert "Interrupted (attempt 1 of 4): no live worker runs it" in shown
    assert "running" not in shown.replace("every 5s", "")
    assert "Send again now" not in shown  # staff resend; an expert does not
    for_staff = outcome(staff_client, candidate)
    assert "Send again now" in for_staff
    assert reverse("run_resend", args=[candidate.run_id]) in for_staff


def test_it_shows_why_a_candidate_waits_and_when_it_is_tried_next(
    cv, expert, expert_client, closed_url
):
    give_roles(expert, "ml_engineer")
    endpoint = make_endpoint(name="closed", base_url=closed_url)
    run = inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[make_spectrum().pk],
        policy_spec={"kind": "openai", "endpoint": endpoint.name, "max_retries": 2, "backoff": 0.0},
        created_by=expert,
    )
    candidate = run.candidates.get()
    assert inspections_services.candidate_claim(candidate_id=candidate.pk)
    before = timezone.now()
    assert jobs.run_candidate(candidate.pk, can_wait=True) == 30
    candidate.refresh_from_db()
    assert candidate.state == CandidateState.PENDING
    assert candidate.retry_at is not None
    assert (
        before + timedelta(seconds=30)
        <= candidate.retry_at
        <= timezone.now() + timedelta(seconds=30)
    )
    shown = outcome(expert_client, candidate)
    assert 'data-state="waiting"' in shown
    assert "Waiting to be sent again" in shown
    assert "waiting 30 s to retry (attempt 1 of 4 failed): EndpointUnavailable" in shown
    assert f'datetime="{timezone.localtime(candidate.retry_at).isoformat()}"' in shown
    assert "Next try at" in shown
    assert "pending…" not in shown


def test_it_shows_a_candidate_released_unstarted_as_waiting_with_its_batch(cv, expert_client):
    candidate = claimed(rule_based_candidate(cv))
    inspections_services.candidates_release(
        candidate_ids=[candidate.pk],
        error="waiting 60 s to retry (attempt 2 of 4 failed): EndpointUnavailable: down",
        delay=60,
    )
    candidate.refresh_from_db()
    assert (candidate.state, candidate.attempts) == (CandidateState.PENDING, 0)
    shown = outcome(expert_client, candidate)
    assert 'data-state="waiting"' in shown
    assert "not started: its batch is waiting 60 s to retry" in shown
    assert "Next try at" in shown


def test_it_says_when_a_waiting_candidates_next_try_is_overdue(cv, expert_client):
    candidate = claimed(rule_based_candidate(cv))
    inspections_services.candidate_wait(
        candidate_id=candidate.pk, error="waiting 30 s to retry: EndpointUnavailable", delay=30
    )
    Candidate.objects.filter(pk=candidate.pk).update(retry_at=timezone.now() - timedelta(minutes=5))
    shown = outcome(expert_client, Candidate.objects.get(pk=candidate.pk))
    assert "Waiting for a free worker" in shown
    assert "Next try was due at" in shown


def test_it_forgets_the_wait_once_the_candidate_is_claimed_again(cv, expert_client):
    candidate = claimed(rule_based_candidate(cv))
    inspections_services.candidate_wait(
        candidate_id=candidate.pk, error="waiting 30 s to retry: EndpointUnavailable", delay=30
    )
    again = claimed(Candidate.objects.get(pk=candidate.pk))
    assert (again.retry_at, again.error, again.attempts) == (None, "", 2)


def test_it_shows_a_failed_candidate_with_its_reason(cv, expert_client):
    candidate = claimed(rule_based_candidate(cv))
    inspections_services.candidate_fail(candidate_id=candidate.pk, error="ValueError: bad flux")
    shown = outcome(expert_client, candidate)
    assert 'data-state="failed"' in shown
    assert "Failed: ValueError: bad flux" in shown
    assert "every 5s" not in shown


def test_it_shows_a_cancelled_candidate_as_cancelled(cv, expert_client, staff):
    candidate = rule_based_candidate(cv)
    inspections_services.inspection_run_cancel(run=candidate.run, actor=staff)
    shown = outcome(expert_client, candidate)
    assert 'data-state="cancelled"' in shown
    assert "Cancelled" in shown


@pytest.mark.skipif(connection.vendor == "postgresql", reason="SQLite's silence rule")
def test_it_shows_a_recently_claimed_candidate_as_running_without_leases(cv, expert_client):
    candidate = claimed(rule_based_candidate(cv), started_ago=timedelta(minutes=1))
    assert 'data-state="running"' in outcome(expert_client, candidate)
