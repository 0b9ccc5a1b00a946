"""Several candidates per Celery message: one lease statement, one claim, one read and one
write for the batch, while each candidate still fails, stops and resumes on its own."""

from __future__ import annotations

import socket
import threading

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotation.core.leases import lease, leases
from annotation.inspections import jobs, recording
from annotation.inspections import services as inspections_services
from annotation.inspections import tasks as inspections_tasks
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    InspectionRun,
    LiveStep,
    Rollout,
)
from annotation.spectra import selectors as spectra_selectors
from tests.factories import make_endpoint, make_spectrum

pytestmark = pytest.mark.django_db

needs_postgres = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="leases are PostgreSQL advisory locks (DATABASE_URL)"
)


@pytest.fixture(autouse=True)
def fast_steps(monkeypatch):
    # However loaded the machine, a rule-based episode's steps go in with its rollout.
    monkeypatch.setattr(recording, "LIVE_STEP_FLUSH_SECONDS", 3600.0)


def start_run(cv, ml_engineer, n, spec=None, rollouts=1):
    spectra = [make_spectrum(object_id=f"B{i}", seed=i) for i in range(n)]
    run = inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[s.pk for s in spectra],
        policy_spec=spec or {"kind": "rule-based"},
        created_by=ml_engineer,
        rollouts=rollouts,
        enqueue=False,
    )
    return run, list(run.candidates.order_by("pk").values_list("pk", flat=True))


def states(ids):
    found = dict(Candidate.objects.filter(pk__in=ids).values_list("pk", "state"))
    return [found[pk] for pk in ids]


def on_spectrum(monkeypatch, object_id, action):
    """Call ``action`` when the job reads the spectrum of ``object_id``."""
    read = spectra_selectors.spectrum_value

    def spectrum_value(row):
        if row.object_id == object_id:
            action()
        return read(row)

    monkeypatch.setattr(spectra_selectors, "spectrum_value", spectrum_value)


def test_it_sends_a_rule_based_run_and_an_endpoint_s_run_in_batches_of_their_sizes(settings):
    settings.INSPECTION_BATCH_SIZE = 2
    settings.INSPECTION_MODEL_BATCH_SIZE = 3
    ids = [11, 12, 13, 14, 15]
    rule_based = {"kind": "rule-based"}
    assert inspections_services.candidate_batches(policy_spec=rule_based, candidate_ids=ids) == [
        [11, 12],
        [13, 14],
        [15],
    ]
    model = {"kind": "openai", "endpoint": "gpu-1"}
    assert inspections_services.candidate_batches(policy_spec=model, candidate_ids=ids) == [
        [11, 12, 13],
        [14, 15],
    ]
    checkpoint = {"kind": "transformers", "model_path": "/models/x"}
    assert inspections_services.candidate_batches(policy_spec=checkpoint, candidate_ids=ids) == [
        [pk] for pk in ids
    ]


def test_it_enqueues_a_new_run_in_batches(
    monkeypatch, settings, cv, ml_engineer, django_capture_on_commit_callbacks
):
    settings.INSPECTION_BATCH_SIZE = 2
    sent = []
    monkeypatch.setattr(inspections_tasks.run_candidates, "delay", sent.append)
    spectra = [make_spectrum(object_id=f"E{i}", seed=i) for i in range(3)]
    with django_capture_on_commit_callbacks(execute=True):
        run = inspections_services.inspection_run_create(
            task=cv,
            spectrum_ids=[s.pk for s in spectra],
            policy_spec={"kind": "rule-based"},
            created_by=ml_engineer,
        )
    ids = list(run.candidates.order_by("pk").values_list("pk", flat=True))
    assert sent == [ids[:2], ids[2:]]


def test_it_claims_a_batch_in_one_statement_and_skips_what_is_not_runnable(cv, ml_engineer):
    _, ids = start_run(cv, ml_engineer, 4)
    Candidate.objects.filter(pk=ids[1]).update(state=CandidateState.DONE)
    Candidate.objects.filter(pk=ids[2]).update(state=CandidateState.CANCELLED)
    with CaptureQueriesContext(connection) as queries:
        claimed = inspections_services.candidates_claim(candidate_ids=ids[:3])
    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert claimed == [ids[0]]
    assert len(updates) == 2  # the claim, then the give-up check for the ones not claimed
    assert states(ids) == [
        CandidateState.RUNNING,
        CandidateState.DONE,
        CandidateState.CANCELLED,
        CandidateState.PENDING,
    ]
    assert Candidate.objects.get(pk=ids[0]).attempts == 1
    with CaptureQueriesContext(connection) as queries:
        assert inspections_services.candidates_claim(candidate_ids=[ids[3]]) == [ids[3]]
    updates = [q["sql"] for q in queries.captured_queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1  # all claimed: nothing to give up


def test_it_claims_nothing_of_a_cancelled_run(cv, ml_engineer):
    run, ids = start_run(cv, ml_engineer, 2)
    InspectionRun.objects.filter(pk=run.pk).update(cancelled=True)
    assert inspections_services.candidates_claim(candidate_ids=ids) == []
    assert states(ids) == [CandidateState.PENDING] * 2


def test_it_runs_a_batch_in_about_one_statement_per_candidate(cv, ml_engineer, monkeypatch):
    # The cancellation check reads the run every CANCEL_CHECK_SECONDS: on a loaded machine a
    # batch can span several, which is not what this counts.
    monkeypatch.setattr(jobs, "CANCEL_CHECK_SECONDS", 3600.0)
    _, ids = start_run(cv, ml_engineer, 9)
    inspections_tasks.run_candidates.apply(args=[ids[:1]])  # loads the policy, records its info
    with CaptureQueriesContext(connection) as queries:
        inspections_tasks.run_candidates.apply(args=[ids[1:]])
    sql = [q["sql"] for q in queries.captured_queries]
    statements = [s for s in sql if not s.startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]
    # Leases, claim (with its commit setting), read, live steps, images, rollouts, the spectra's
    # label locks (so no decision commits between the label read and the entries' write),
    # vetted labels, the model's recalibration for triage (annotation.inspections.triage), the
    # run's shift check (annotation.inspections.shifts), candidates, catalog, release: fourteen
    # for eight.
    assert len(statements) <= 14, "\n".join(s[:120] for s in statements)
    assert len(sql) - len(statements) <= 4, "two transactions: the claim, then the results"
    assert states(ids) == [CandidateState.DONE] * 9
    assert Rollout.objects.filter(candidate_id__in=ids).count() == 9
    assert CatalogEntry.objects.filter(candidate_id__in=ids).count() == 9
    steps = LiveStep.objects.filter(candidate_id__in=ids).count()
    assert steps == sum(len(r.data["steps"]) for r in Rollout.objects.filter(candidate_id__in=ids))
    entry = CatalogEntry.objects.get(candidate_id=ids[4])
    candidate = Candidate.objects.get(pk=ids[4])
    assert (entry.verdict, entry.confidence) == (candidate.verdict, candidate.confidence)
    assert candidate.vote_share == 1.0 and candidate.finished_at is not None


def test_it_fails_only_the_candidate_that_raises(monkeypatch, cv, ml_engineer):
    _, ids = start_run(cv, ml_engineer, 3)

    def corrupt():
        raise ValueError("corrupt arrays")

    on_spectrum(monkeypatch, "B1", corrupt)
    inspections_tasks.run_candidates.apply(args=[ids])
    assert states(ids) == [CandidateState.DONE, CandidateState.FAILED, CandidateState.DONE]
    failed = Candidate.objects.get(pk=ids[1])
    assert failed.error == "ValueError: corrupt arrays"
    assert not Rollout.objects.filter(candidate_id=ids[1]).exists()
    assert CatalogEntry.objects.filter(candidate_id__in=ids).count() == 2


def test_it_fails_only_the_candidate_whose_results_cannot_be_written(monkeypatch, cv, ml_engineer):
    _, ids = start_run(cv, ml_engineer, 3)
    record = recording.rollouts_record

    def rollouts_record(*, results):
        if any(r.rollout.candidate_id == ids[2] for r in results):
            raise ValueError("a value the database refuses")
        record(results=results)

    monkeypatch.setattr(recording, "rollouts_record", rollouts_record)
    inspections_tasks.run_candidates.apply(args=[ids])
    assert states(ids) == [CandidateState.DONE, CandidateState.DONE, CandidateState.FAILED]
    assert Candidate.objects.get(pk=ids[2]).error == "ValueError: a value the database refuses"
    assert Rollout.objects.filter(candidate_id__in=ids).count() == 2


def test_it_stops_the_rest_of_a_batch_when_the_run_is_cancelled(monkeypatch, cv, ml_engineer):
    monkeypatch.setattr(jobs, "CANCEL_CHECK_SECONDS", 0.0)
    run, ids = start_run(cv, ml_engineer, 4)

    def cancel():
        inspections_services.inspection_run_cancel(run=run, actor=ml_engineer)

    on_spectrum(monkeypatch, "B1", cancel)
    inspections_tasks.run_candidates.apply(args=[ids])
    # The candidate running when the cancel came finishes its episode; the rest stop.
    assert states(ids) == [
        CandidateState.DONE,
        CandidateState.DONE,
        CandidateState.CANCELLED,
        CandidateState.CANCELLED,
    ]
    assert Rollout.objects.filter(candidate_id__in=ids).count() == 2
    assert Candidate.objects.get(pk=ids[2]).finished_at is not None


class WorkerKilled(BaseException):
    """What the job sees of a SIGKILL: nothing after this point runs."""


def test_it_finishes_a_redelivered_batch_without_running_finished_candidates_again(
    monkeypatch, cv, ml_engineer
):
    # Each result is written as soon as it is made, so the kill lands after two are stored.
    monkeypatch.setattr(jobs, "BATCH_WRITE_SECONDS", 0.0)
    _, ids = start_run(cv, ml_engineer, 4)
    read = spectra_selectors.spectrum_value
    kill = {"B2"}

    def spectrum_value(row):
        if row.object_id in kill:
            kill.clear()
            raise WorkerKilled
        return read(row)

    monkeypatch.setattr(spectra_selectors, "spectrum_value", spectrum_value)
    with pytest.raises(WorkerKilled):
        inspections_tasks.run_candidates.apply(args=[ids])
    assert states(ids) == [CandidateState.DONE] * 2 + [CandidateState.RUNNING] * 2
    finished = dict(Candidate.objects.filter(pk__in=ids[:2]).values_list("pk", "finished_at"))

    inspections_tasks.run_candidates.apply(args=[ids])  # the broker delivers it again

    assert states(ids) == [CandidateState.DONE] * 4
    attempts = dict(Candidate.objects.filter(pk__in=ids).values_list("pk", "attempts"))
    assert [attempts[pk] for pk in ids] == [1, 1, 2, 2]
    assert dict(Candidate.objects.filter(pk__in=ids[:2]).values_list("pk", "finished_at")) == (
        finished
    )
    assert Rollout.objects.filter(candidate_id__in=ids).count() == 4
    assert CatalogEntry.objects.filter(candidate_id__in=ids).count() == 4


def test_it_runs_every_rollout_of_each_candidate_in_a_batch(cv, ml_engineer):
    _, ids = start_run(cv, ml_engineer, 2, rollouts=2)
    inspections_tasks.run_candidates.apply(args=[ids])
    assert states(ids) == [CandidateState.DONE] * 2
    assert Rollout.objects.filter(candidate_id__in=ids).count() == 4
    assert Candidate.objects.get(pk=ids[0]).vote_share == 1.0


def test_it_puts_the_rest_of_a_batch_back_when_the_endpoint_is_down(cv, ml_engineer, settings):
    # The batch's episodes are in flight at once: the first to meet the outage waits (an
    # attempt spent), the others are put back unspent.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    endpoint = make_endpoint(name="closed", base_url=closed_url)
    spec = {"kind": "openai", "endpoint": endpoint.name, "max_retries": 1, "backoff": 0.0}
    _, ids = start_run(cv, ml_engineer, 3, spec=spec)
    assert inspections_services.candidates_claim(candidate_ids=ids) == ids
    waiting = jobs.run_candidates(ids, can_wait=True)
    assert waiting is not None
    assert sorted(waiting.candidate_ids) == ids and waiting.delay == settings.JOB_RETRY_BACKOFF
    assert states(ids) == [CandidateState.PENDING] * 3
    found = Candidate.objects.filter(pk__in=ids)
    spent = [c for c in found if c.attempts == 1]
    assert len(spent) == 1 and spent[0].error.startswith("waiting")
    put_back = [c for c in found if c not in spent]
    assert [c.attempts for c in put_back] == [0, 0]  # unspent, and they say why they wait
    assert all(c.error.startswith("not started: its batch is waiting") for c in put_back)
    assert all(c.retry_at is not None for c in found)


@needs_postgres
def test_it_takes_and_frees_a_batch_of_leases_in_one_statement_each():
    with CaptureQueriesContext(connection) as queries, leases("candidate", [1, 2, 2, 3]) as held:
        assert held == {1, 2, 3}
    assert len(queries.captured_queries) == 2
    done = threading.Event()
    seen = {}

    def other_worker():
        try:
            with lease("candidate", 2) as got:
                seen["held"] = got
        finally:
            connection.close()
            done.set()

    thread = threading.Thread(target=other_worker)
    thread.start()
    thread.join(timeout=10)
    assert done.is_set() and seen["held"], "the batch's leases were freed"


@needs_postgres
def test_it_leaves_a_candidate_another_worker_holds_for_later(cv, ml_engineer, settings):
    _, ids = start_run(cv, ml_engineer, 3)
    holding, finish = threading.Event(), threading.Event()

    def other_worker():
        try:
            with lease("candidate", ids[1]):
                holding.set()
                finish.wait(timeout=30)
        finally:
            connection.close()

    thread = threading.Thread(target=other_worker)
    thread.start()
    try:
        assert holding.wait(timeout=10)
        later = inspections_tasks._run(ids, can_wait=False)
    finally:
        finish.set()
        thread.join(timeout=10)
    assert later == ([ids[1]], settings.JOB_LEASE_RETRY_DELAY)
    assert states(ids) == [CandidateState.DONE, CandidateState.PENDING, CandidateState.DONE]
