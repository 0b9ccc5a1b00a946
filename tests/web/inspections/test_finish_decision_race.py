"""A run finishing a candidate while an expert decides on another run's candidate of the same
spectrum (PostgreSQL, real threads): the finished candidate's catalog entry ends with the label
the label rule computes from the latest decisions, never a label read before a decision
committed.

The finishing write used to read the spectrum's label without a lock and insert the new entry
with it; a decision committing in between refreshed every entry of the spectrum except the new
one (not yet committed), so the new entry kept the label from before the decision.

Run with: DATABASE_URL=postgres://postgres@127.0.0.1:5432/specvet \
    .venv/bin/pytest tests/web/inspections/test_finish_decision_race.py -q -s
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any
from unittest import mock

import pytest
from django.db import connection

from annotation.inspections import decisions, recording, services
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    CatalogEntry,
    ExpertDecision,
    InspectionRun,
    Rollout,
)
from annotation.spectra import services as spectra_services
from annotation.spectra.labels import DecisionRecord, label_from_decisions
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="needs PostgreSQL row locks (DATABASE_URL)"
    ),
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

SPECTRA = 12


def _expected_label(spectrum_id: int) -> tuple[str, str]:
    """(value, state) the label rule gives from the decisions stored now."""
    rows = ExpertDecision.objects.filter(candidate__spectrum_id=spectrum_id)
    records = [
        DecisionRecord(
            decision_id=row.pk,
            expert_id=row.expert_id,
            expert="",
            value=row.decision,
            decided_at=row.created_at,
            changed_at=row.updated_at,
            candidate_id=row.candidate_id,
            run_id=0,
        )
        for row in rows
    ]
    outcome = label_from_decisions(records)
    return outcome.value, outcome.state


def _waiting_on_a_lock(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE pid = %s AND NOT granted", [pid])
        (waiting,) = cursor.fetchone()
    return bool(waiting)


@pytest.fixture
def world(db) -> dict[str, Any]:
    """Run 1 finished on every spectrum, with expert "ada"'s YES on each; run 2's candidates of
    the same spectra claimed (running), their rollouts ready to be recorded."""
    spectra_services.tasks_seed_builtin()  # a transactional test may start from a flushed database
    owner: Any = UserFactory(username="owner", roles=["ml_engineer"])
    experts: list[Any] = [UserFactory(username=name, roles=["expert"]) for name in ("ada", "bea")]
    rows = [make_spectrum(object_id=f"FIN-{i}", seed=i) for i in range(SPECTRA)]
    verdicts = {row.pk: ("YES", 0.55) for row in rows}  # below the threshold: experts see them
    first = make_inspected(spectra=rows, verdicts=verdicts, created_by=owner, model=("m:1", "M1"))
    for candidate in first.candidates.all():
        decisions.expert_decision_record(candidate=candidate, expert=experts[0], decision="YES")
    second = services.inspection_run_create(
        task=Task.objects.get(code="CV"),
        spectrum_ids=[row.pk for row in rows],
        policy_spec={"kind": "rule-based"},
        created_by=owner,
        enqueue=False,
    )
    InspectionRun.objects.filter(pk=second.pk).update(model_key="m:2", model_label="M2")
    pending = list(second.candidates.values_list("pk", flat=True))
    assert sorted(services.candidates_claim(candidate_ids=pending)) == sorted(pending)
    return {"first": first, "second": second, "experts": experts, "spectra": rows}


def _finish(candidate_id: int) -> None:
    candidate = Candidate.objects.select_related("run__task", "spectrum").get(pk=candidate_id)
    rollout = Rollout(candidate=candidate, index=0, data={}, prediction="YES", confidence=0.55)
    services.candidate_finish(candidate=candidate, rollouts=[rollout])


def _in_thread(target: Callable[[], None], failures: list[BaseException]) -> threading.Thread:
    def body() -> None:
        try:
            target()
        except BaseException as error:  # the test reports it
            failures.append(error)
        finally:
            connection.close()

    thread = threading.Thread(target=body)
    thread.start()
    return thread


def test_it_gives_the_finished_entry_the_label_of_a_decision_committed_while_it_finished(world):
    """The interleaving, forced: the finishing write reads the spectrum's label, then the
    second expert's decision runs to its commit (or, as it must with the fix, waits for the
    finishing write's lock), then the finishing write inserts its entry."""
    spectrum = world["spectra"][0]
    finishing = world["second"].candidates.get(spectrum=spectrum)
    deciding = world["first"].candidates.get(spectrum=spectrum)
    decider_pid: list[int] = []
    decider_started = threading.Event()
    decided = threading.Event()
    failures: list[BaseException] = []
    read_labels = recording.vetted_labels_of

    def read_then_let_the_decision_through(**kwargs: Any) -> Any:
        labels = read_labels(**kwargs)
        decider_started.set()
        # until the decision committed, or waits for a lock this transaction holds
        while not decided.wait(0.01):
            if decider_pid and _waiting_on_a_lock(decider_pid[0]):
                break
        return labels

    def decide() -> None:
        assert decider_started.wait(60)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            decider_pid.append(cursor.fetchone()[0])
        decisions.expert_decision_record(
            candidate=deciding, expert=world["experts"][1], decision="NO"
        )
        decided.set()

    with mock.patch.object(recording, "vetted_labels_of", read_then_let_the_decision_through):
        threads = [
            _in_thread(lambda: _finish(finishing.pk), failures),
            _in_thread(decide, failures),
        ]
        for thread in threads:
            thread.join(timeout=120)
    assert not failures
    assert Candidate.objects.get(pk=finishing.pk).state == CandidateState.DONE
    expected = _expected_label(spectrum.pk)
    assert expected[1] == "conflict"  # YES and NO: the decision did change the label
    entries = dict(
        CatalogEntry.objects.filter(spectrum=spectrum).values_list("candidate_id", "label_state")
    )
    labels = set(
        CatalogEntry.objects.filter(spectrum=spectrum).values_list("vetted_label", "label_state")
    )
    assert len(entries) == 2
    assert labels == {expected}
