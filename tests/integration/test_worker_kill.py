"""A worker SIGKILLed in the middle of a job: the next worker finishes it exactly once.

Late acknowledgement hands the killed worker's message to the second worker (after the
visibility timeout, 3 s here); the lease and the claim let it run again; the runners resume
after the items already done and start the interrupted one over. The model is a scripted
OpenAI-compatible server that holds one request open, so the kill lands at a known step.

Run with: DATABASE_URL=postgres://postgres@127.0.0.1:5432/specvet \
    .venv/bin/pytest tests/integration/test_worker_kill.py -q
"""

from __future__ import annotations

import pytest

from annotation.core.models import Job, JobState
from annotation.curation.models import Curation, TrajectoryVersion
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    InspectionRun,
    LiveStep,
    Rollout,
)
from annotation.spectra import services
from annotation.spectra.models import Task
from tests.factories import make_endpoint, make_spectrum
from tests.integration.conftest import WORKER_TEST_MARKS, wait_until

pytestmark = WORKER_TEST_MARKS


@pytest.fixture
def cv(db) -> Task:
    services.tasks_seed_builtin()  # a transactional test may start from a flushed database
    return Task.objects.get(code="CV")


def test_it_finishes_a_killed_inspection_candidate_once(cv, broker, start_worker, chat_script):
    # Two rollouts of two turns: request 4 is the answer of rollout 1, after rollout 0 is stored.
    chat_script.hold = 4
    run = InspectionRun.objects.create(
        task=cv,
        policy_spec={"kind": "openai", "endpoint": "script", "model": "scripted"},
        endpoint=make_endpoint(name="script", base_url=chat_script.base_url, model="scripted"),
        rollouts=2,
        max_tool_calls=1,
    )
    candidate = Candidate.objects.create(run=run, spectrum=make_spectrum())
    broker.enqueue("annotation.inspections.tasks.run_candidate", candidate.pk)
    # One episode in flight, so the rollouts take turns and the request numbers are known.
    first = start_worker("first", INSPECTION_IN_FLIGHT="1")
    wait_until(chat_script.held.is_set, workers=[first], what="the held model request")
    # Episodes in flight write a finished rollout within 2 s, live steps within 1 s.
    wait_until(
        lambda: (
            Rollout.objects.filter(candidate=candidate).count() == 1
            and LiveStep.objects.filter(candidate=candidate, rollout_index=1).count() == 1
        ),
        workers=[first],
        what="rollout 0 and the first live step of rollout 1 to be written",
    )

    first.kill()
    chat_script.release.set()
    second = start_worker("second")
    wait_until(
        lambda: Candidate.objects.get(pk=candidate.pk).state == CandidateState.DONE,
        workers=[first, second],
        what="the candidate to finish",
    )

    candidate.refresh_from_db()
    assert (candidate.verdict, candidate.attempts) == ("YES", 2)
    assert chat_script.requests == 6  # rollout 0 was not run again
    rollouts = list(Rollout.objects.filter(candidate=candidate).order_by("index"))
    assert [r.index for r in rollouts] == [0, 1]
    steps = LiveStep.objects.filter(candidate=candidate).order_by("rollout_index", "step_index")
    assert [(s.rollout_index, s.step_index, s.data["think"]) for s in steps] == [
        (0, 0, "request 1"),
        (0, 1, "request 2"),
        (1, 0, "request 5"),
        (1, 1, "request 6"),
    ]
    assert [step["think"] for step in rollouts[1].data["steps"]] == ["request 5", "request 6"]
    assert CatalogEntry.objects.filter(candidate=candidate).count() == 1


def test_it_finishes_a_killed_draft_job_once(cv, broker, start_worker, chat_script):
    # Three spectra of two turns each: request 4 is the answer for the second spectrum.
    chat_script.hold = 4
    spectra = [make_spectrum(object_id=f"KILL-{i}", task=cv, label="YES", seed=i) for i in range(3)]
    make_endpoint(name="script", base_url=chat_script.base_url, model="scripted")
    job = Job.objects.create(
        kind="draft",
        params={
            "task": "CV",
            "spectrum_ids": [s.pk for s in spectra],
            "teacher": {"kind": "openai", "endpoint": "script"},
            "max_tool_calls": 1,
        },
    )
    broker.enqueue("annotation.core.tasks.run_job", job.pk)
    first = start_worker("first")
    wait_until(chat_script.held.is_set, workers=[first], what="the held model request")
    assert list(Curation.objects.values_list("spectrum_id", flat=True)) == [spectra[0].pk]

    first.kill()
    chat_script.release.set()
    second = start_worker("second")
    wait_until(
        lambda: Job.objects.get(pk=job.pk).finished,
        workers=[first, second],
        what="the draft job to finish",
    )

    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error
    assert (job.attempts, job.done, job.failed, job.result["created"]) == (2, 3, 0, 3)
    assert chat_script.requests == 8  # the first spectrum was not drafted again
    drafted = Curation.objects.filter(draft_job=job).order_by("spectrum_id")
    assert [c.spectrum_id for c in drafted] == [s.pk for s in spectra]
    assert TrajectoryVersion.objects.filter(curation__draft_job=job).count() == 3
    redrafted = TrajectoryVersion.objects.get(curation__spectrum=spectra[1])
    assert [step["think"] for step in redrafted.data["steps"]] == ["request 5", "request 6"]


def test_it_shows_a_killed_workers_candidate_as_interrupted_and_staff_resend_it_once(
    cv, broker, start_worker, chat_script, staff
):
    """Killed mid-candidate, its lease gone with its connection: the candidate shows as
    interrupted at once, not after the visibility timeout; staff resend it, it finishes, and
    the broker's own redelivery later finds it done and runs nothing."""
    from django.urls import reverse
    from rest_framework.test import APIClient

    from annotation.core.models import AuditLog
    from annotation.inspections import selectors

    chat_script.hold = 4
    run = InspectionRun.objects.create(
        task=cv,
        policy_spec={"kind": "openai", "endpoint": "script", "model": "scripted"},
        endpoint=make_endpoint(name="script", base_url=chat_script.base_url, model="scripted"),
        rollouts=2,
        max_tool_calls=1,
    )
    candidate = Candidate.objects.create(run=run, spectrum=make_spectrum())
    broker.enqueue("annotation.inspections.tasks.run_candidate", candidate.pk)
    # One episode in flight, so the rollouts take turns and the request numbers are known.
    first = start_worker("first", INSPECTION_IN_FLIGHT="1")
    wait_until(chat_script.held.is_set, workers=[first], what="the held model request")
    # Episodes in flight write a finished rollout within 2 s.
    wait_until(
        lambda: Rollout.objects.filter(candidate=candidate).count() == 1,
        workers=[first],
        what="rollout 0 to be written",
    )
    api = APIClient()
    api.force_authenticate(staff)
    url = reverse("api_candidate_detail", args=[candidate.pk])
    assert api.get(url).json()["state"] == "running"  # a live worker holds it

    first.kill()
    chat_script.release.set()
    wait_until(
        lambda: api.get(url).json()["state"] == "interrupted",
        workers=[first],
        what="the candidate to show as interrupted",
    )
    # resent now (the test process runs the resent message in-process, as the eager default)
    response = api.post(reverse("api_run_resend", args=[run.pk]), {}, format="json")
    assert (response.status_code, response.json()) == (200, {"resent": [candidate.pk]})
    candidate.refresh_from_db()
    assert (candidate.state, candidate.verdict, candidate.attempts) == ("done", "YES", 2)
    assert chat_script.requests == 6  # rollout 0 was not run again

    # the killed worker's message comes back (visibility timeout 3 s): nothing runs twice
    second = start_worker("second")
    wait_until(
        lambda: "not runnable" in second.log_tail(),
        workers=[first, second],
        what="the redelivered message to be skipped",
    )
    candidate.refresh_from_db()
    assert (candidate.state, candidate.verdict, candidate.attempts) == ("done", "YES", 2)
    assert chat_script.requests == 6
    assert [r.index for r in Rollout.objects.filter(candidate=candidate).order_by("index")] == [
        0,
        1,
    ]
    assert CatalogEntry.objects.filter(candidate=candidate).count() == 1
    assert selectors.interrupted_candidate_ids(rows=run.candidates.all()) == set()
    assert (
        AuditLog.objects.filter(action="candidate_resent", object_pk=str(candidate.pk)).count() == 1
    )
