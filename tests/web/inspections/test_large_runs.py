"""A large run sends its candidates from a background job, not from the request (issue 16)."""

from __future__ import annotations

import pytest

from annotation.core.models import Job, JobState
from annotation.inspections import services
from annotation.inspections.models import CandidateState
from annotation.spectra.models import Task
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def spectrum_ids(db) -> list[int]:
    return [make_spectrum(object_id=f"LARGE-{i}", seed=i).pk for i in range(3)]


def create(owner, spectrum_ids):
    return services.inspection_run_create(
        task=Task.objects.get(code="CV"),
        spectrum_ids=spectrum_ids,
        policy_spec={"kind": "rule-based"},
        created_by=owner,
    )


def test_it_sends_a_large_run_from_a_job(
    settings, owner, spectrum_ids, django_capture_on_commit_callbacks
) -> None:
    settings.INSPECTION_ENQUEUE_INLINE_MAX = 2
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        run = create(owner, spectrum_ids)
    job = Job.objects.get(kind=services.ENQUEUE_JOB)
    # One message for the candidates (the job's), not one per candidate; and the background
    # re-check of the run's first candidate, which reproduced.
    assert len(callbacks) == 2
    assert Job.objects.filter(kind=services.RECHECK_JOB).count() == 1
    run.refresh_from_db()
    assert run.reproducibility["checked"] == 1 and run.reproducibility["mismatched"] == 0
    assert job.params == {"run_id": run.pk} and job.state == JobState.SUCCEEDED
    assert job.result == {"run_id": run.pk, "sent": 3, "pending": 3}
    assert job.done == job.total == 3
    assert set(run.candidates.values_list("state", flat=True)) == {CandidateState.DONE}


def test_it_sends_a_small_run_at_the_end_of_the_request(
    settings, owner, spectrum_ids, django_capture_on_commit_callbacks
) -> None:
    settings.INSPECTION_ENQUEUE_INLINE_MAX = 3
    with django_capture_on_commit_callbacks(execute=True):
        run = create(owner, spectrum_ids)
    assert not Job.objects.filter(kind=services.ENQUEUE_JOB).exists()
    assert set(run.candidates.values_list("state", flat=True)) == {CandidateState.DONE}


def test_it_sends_nothing_for_a_run_cancelled_before_its_job_ran(
    settings, owner, spectrum_ids, django_capture_on_commit_callbacks
) -> None:
    settings.INSPECTION_ENQUEUE_INLINE_MAX = 2
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        run = create(owner, spectrum_ids)
        services.inspection_run_cancel(run=run, actor=owner)
    for callback in callbacks:
        callback()
    job = Job.objects.get(kind=services.ENQUEUE_JOB)
    assert job.result["sent"] == 0
    assert set(run.candidates.values_list("state", flat=True)) == {CandidateState.CANCELLED}
