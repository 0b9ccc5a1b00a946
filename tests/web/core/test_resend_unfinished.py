"""Sending again the work a killed worker left on a broker that cannot redeliver."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from annotation.core.models import Job, JobState
from annotation.core.services import unfinished_jobs_resend
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, CandidateState
from tests.factories import make_spectrum


@pytest.fixture
def run(cv, owner):
    spectra = [make_spectrum(object_id=f"RS-{index}", seed=index).pk for index in range(4)]
    return inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=spectra,
        policy_spec={"kind": "rule-based"},
        created_by=owner,
        enqueue=False,
    )


def test_it_runs_the_pending_and_running_candidates_and_leaves_the_finished(run):
    pending, running, done, failed = run.candidates.order_by("pk")
    Candidate.objects.filter(pk=running.pk).update(state=CandidateState.RUNNING, attempts=1)
    Candidate.objects.filter(pk=done.pk).update(state=CandidateState.DONE, verdict="NO")
    Candidate.objects.filter(pk=failed.pk).update(state=CandidateState.FAILED)
    assert inspections_services.unfinished_candidates_resend() == 2  # tasks run eagerly here
    states = dict(run.candidates.values_list("pk", "state"))
    assert states[pending.pk] == states[running.pk] == CandidateState.DONE
    assert states[failed.pk] == CandidateState.FAILED
    assert Candidate.objects.get(pk=done.pk).rollouts.count() == 0  # not run again


def test_it_leaves_a_cancelled_runs_candidates_alone(run):
    type(run).objects.filter(pk=run.pk).update(cancelled=True)
    assert inspections_services.unfinished_candidates_resend() == 0
    assert set(run.candidates.values_list("state", flat=True)) == {CandidateState.PENDING}


def test_it_sends_queued_and_running_jobs_except_the_excluded_kinds(db, monkeypatch):
    from annotation.core import tasks

    sent: list[int] = []
    monkeypatch.setattr(tasks.run_job, "delay", sent.append)
    queued = Job.objects.create(kind="draft", state=JobState.QUEUED)
    running = Job.objects.create(kind="judge", state=JobState.RUNNING)
    Job.objects.create(kind="training", state=JobState.RUNNING)
    Job.objects.create(kind="draft", state=JobState.SUCCEEDED)
    assert unfinished_jobs_resend(exclude_kinds=["training"]) == 2
    assert sent == [queued.pk, running.pk]


def test_it_refuses_when_jobs_run_in_process(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    with pytest.raises(CommandError, match="in-process"):
        call_command("resend_unfinished")


def test_it_refuses_a_broker_that_redelivers_by_itself(settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:6379/0"
    with pytest.raises(CommandError, match="redis:// redelivers"):
        call_command("resend_unfinished")


def test_it_reports_what_it_sent_on_the_filesystem_broker(settings, monkeypatch, capsys):
    from annotation.management.commands import resend_unfinished

    settings.CELERY_TASK_ALWAYS_EAGER = False
    settings.CELERY_BROKER_URL = "filesystem://"
    monkeypatch.setattr(
        resend_unfinished,
        "resend_unfinished_work",
        lambda: {"jobs": 1, "training runs": 0, "candidates": 32},
    )
    call_command("resend_unfinished")
    assert "1 jobs, 32 candidates" in capsys.readouterr().out
