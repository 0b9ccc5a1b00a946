"""What one candidate costs the database, and when its live steps become visible."""

from __future__ import annotations

import hashlib
import io
import re

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from annotation.core import tasks as core_tasks
from annotation.core.models import ImageBlob
from annotation.curation import services as curation_services
from annotation.inspections import in_flight, jobs, recording
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
from annotation.spectra.models import Spectrum
from annotation.training_runs import tasks as training_runs_tasks
from tests.factories import (
    ScriptedPolicy,
    answer_turn,
    make_endpoint,
    make_spectrum,
    tool_call_turn,
)

pytestmark = pytest.mark.django_db


def start_run(cv, ml_engineer, n, **kwargs):
    spectra = [make_spectrum(object_id=f"S{i}", seed=i) for i in range(n)]
    return inspections_services.inspection_run_create(
        task=cv,
        spectrum_ids=[s.pk for s in spectra],
        policy_spec={"kind": "rule-based"},
        created_by=ml_engineer,
        **kwargs,
    )


def stored_hashes(node):
    if isinstance(node, dict):
        return {v for k, v in node.items() if k == "png_sha256"} | {
            h for v in node.values() for h in stored_hashes(v)
        }
    if isinstance(node, list):
        return {h for item in node for h in stored_hashes(item)}
    return set()


def test_it_runs_a_rule_based_candidate_in_at_most_ten_statements(monkeypatch, cv, ml_engineer):
    # However loaded the machine, the episode counts as fast: its steps go in with the rollout.
    monkeypatch.setattr(recording, "LIVE_STEP_FLUSH_SECONDS", 3600.0)
    run = start_run(cv, ml_engineer, 2)
    first, second = run.candidates.order_by("pk")
    inspections_tasks.run_candidate.apply(
        args=[first.pk]
    )  # loads the policy and records its info once
    with CaptureQueriesContext(connection) as queries:
        inspections_tasks.run_candidate.apply(args=[second.pk])
    sql = [q["sql"] for q in queries.captured_queries]
    # Inside the test's transaction each atomic block shows as a savepoint pair.
    bookkeeping = [s for s in sql if s.startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]
    statements = [s for s in sql if s not in bookkeeping]
    # Ten, one more since verdicts carry the spectrum's vetted label, and one more since triage
    # reads the model's recalibration (annotation.inspections.triage) and the run's shift check
    # (annotation.inspections.shifts): each one read per batch; and one more for the spectra's
    # label locks taken before the label read (a decision committing between the read and the
    # catalog write left a stale label).
    assert len(statements) <= 14, "\n".join(statements)
    # Two commits: the claim, then everything the candidate produced.
    assert len(bookkeeping) <= 4, "\n".join(sql)
    second.refresh_from_db()
    assert second.state == CandidateState.DONE
    rollout = Rollout.objects.get(candidate=second)
    steps = list(LiveStep.objects.filter(candidate=second))
    assert len(steps) == len(rollout.data["steps"])
    hashes = stored_hashes(rollout.data) | stored_hashes([s.data for s in steps])
    assert hashes
    assert ImageBlob.objects.filter(sha256__in=hashes).count() == len(hashes)
    assert CatalogEntry.objects.get(candidate=second).verdict == second.verdict


class WatchingPolicy(ScriptedPolicy):
    """Scripted turns that note, on each call, how many live steps a viewer could see."""

    def __init__(self, turns, candidate_id):
        super().__init__(turns)
        self.candidate_id = candidate_id
        self.seen: list[int] = []

    def generate(self, messages):
        self.seen.append(LiveStep.objects.filter(candidate_id=self.candidate_id).count())
        return super().generate(messages)


class CountingPolicy(ScriptedPolicy):
    """Scripted turns that note, on each call, how many live steps were written: a model's
    turns are asked for in request threads, which do not share the test's transaction."""

    def __init__(self, turns, written):
        super().__init__(turns)
        self.written = written
        self.seen: list[int] = []

    def generate(self, messages):
        self.seen.append(len(self.written))
        return super().generate(messages)


def run_watched(monkeypatch, cv, ml_engineer, turns, spec, policy=None):
    spectrum = make_spectrum()
    run = inspections_services.inspection_run_create(
        task=cv, spectrum_ids=[spectrum.pk], policy_spec=spec, created_by=ml_engineer, enqueue=False
    )
    candidate = run.candidates.get()
    policy = policy or WatchingPolicy(turns, candidate.pk)
    monkeypatch.setattr(jobs, "policy_for", lambda spec, sampling=None: policy)
    monkeypatch.setattr(in_flight, "policy_for", lambda spec, sampling=None: policy)
    assert inspections_services.candidate_claim(candidate_id=candidate.pk)
    jobs.run_candidate(candidate.pk)
    return policy, candidate


def test_it_shows_each_step_while_the_model_works_on_the_next(monkeypatch, cv, ml_engineer):
    # Episodes in flight write live steps at most LIVE_WRITE_SECONDS apart, a step due before
    # its episode's next turn is sent: at 0 s, however fast the model, none is held back.
    monkeypatch.setattr(in_flight, "LIVE_WRITE_SECONDS", 0.0)
    written: list[int] = []
    write = inspections_services.live_steps_write_many

    def counted(*, steps):
        write(steps=steps)
        written.extend(step.index for _, _, own in steps for step in own)

    monkeypatch.setattr(recording, "live_steps_write_many", counted)
    make_endpoint(name="gpu-1")
    turns = [tool_call_turn(6500, 6630, "H-alpha"), tool_call_turn(4800, 4920, "H-beta")]
    spec = {"kind": "openai", "endpoint": "gpu-1"}
    policy = CountingPolicy([*turns, answer_turn("YES")], written)
    policy, candidate = run_watched(monkeypatch, cv, ml_engineer, [], spec, policy=policy)
    assert policy.seen == [0, 1, 2]
    assert written == [0, 1]  # the answer's step goes in with the rollout
    assert LiveStep.objects.filter(candidate=candidate).count() == 3


def test_it_writes_a_fast_episode_with_its_rollout(monkeypatch, cv, ml_engineer):
    monkeypatch.setattr(recording, "LIVE_STEP_FLUSH_SECONDS", 3600.0)
    turns = [tool_call_turn(6500, 6630, "H-alpha"), answer_turn("YES")]
    policy, candidate = run_watched(monkeypatch, cv, ml_engineer, turns, {"kind": "rule-based"})
    assert policy.seen == [0, 0]
    assert LiveStep.objects.filter(candidate=candidate).count() == 2
    assert Candidate.objects.get(pk=candidate.pk).state == CandidateState.DONE


def test_it_writes_a_slow_rule_based_step_at_once(monkeypatch, cv, ml_engineer):
    monkeypatch.setattr(recording, "LIVE_STEP_FLUSH_SECONDS", 0.0)
    turns = [tool_call_turn(6500, 6630, "H-alpha"), answer_turn("YES")]
    policy, _ = run_watched(monkeypatch, cv, ml_engineer, turns, {"kind": "rule-based"})
    assert policy.seen == [0, 1]


def test_it_keeps_the_steps_before_a_model_failure(monkeypatch, cv, ml_engineer):
    monkeypatch.setattr(recording, "LIVE_STEP_FLUSH_SECONDS", 3600.0)

    class FailsSecond(ScriptedPolicy):
        def generate(self, messages):
            if not self.turns:
                raise RuntimeError("model server went away")
            return super().generate(messages)

    run = start_run(cv, ml_engineer, 1)
    candidate = run.candidates.get()
    policy = FailsSecond([tool_call_turn(6500, 6630, "H-alpha")])
    monkeypatch.setattr(jobs, "policy_for", lambda spec, sampling=None: policy)
    assert inspections_services.candidate_claim(candidate_id=candidate.pk)
    jobs.run_candidate(candidate.pk)
    assert Candidate.objects.get(pk=candidate.pk).state == CandidateState.FAILED
    assert LiveStep.objects.filter(candidate=candidate).count() == 1


def test_it_stores_new_images_and_keeps_known_ones_in_one_statement(db):
    known, new = b"\x89PNG\r\n\x1a\nknown", b"\x89PNG\r\n\x1a\nnew"
    known_hash = curation_services.image_blob_store(known)
    created = ImageBlob.objects.get(sha256=known_hash).created_at
    pngs = {hashlib.sha256(png).hexdigest(): png for png in (known, new)}
    with CaptureQueriesContext(connection) as queries:
        curation_services.image_blobs_store(pngs)
    assert len(queries.captured_queries) == 1
    assert ImageBlob.objects.filter(sha256__in=pngs).count() == 2
    assert ImageBlob.objects.get(sha256=known_hash).created_at == created


def test_it_stores_no_result_for_tasks_that_return_nothing():
    for task in (
        core_tasks.run_job,
        inspections_tasks.run_candidate,
        training_runs_tasks.run_training,
    ):
        assert task.ignore_result, task.name


def test_it_benchmarks_only_on_postgresql():
    if connection.vendor == "postgresql":
        pytest.skip("checks the refusal on SQLite")
    with pytest.raises(CommandError, match="PostgreSQL"):
        call_command("bench_candidates", "--candidates", "10")


def test_it_benchmarks_a_candidate_both_ways_and_cleans_up():
    if connection.vendor != "postgresql":
        pytest.skip("the stack part needs PostgreSQL (DATABASE_URL)")
    runs, spectra = InspectionRun.objects.count(), Spectrum.objects.count()
    out = io.StringIO()
    call_command("bench_candidates", "--candidates", "10", stdout=out)
    report = out.getvalue()
    assert "in-process" in report and "through the job" in report
    assert re.search(r"SQL statements per candidate: \d+\.\d\n", report)
    assert re.search(r"cost ratio job / in-process: \d+\.\d\dx", report)
    assert (InspectionRun.objects.count(), Spectrum.objects.count()) == (runs, spectra)
