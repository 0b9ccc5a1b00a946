"""Experts deciding at once on several runs' candidates of the same spectra (PostgreSQL row
locks): no request fails, no decision is lost, every label follows the latest answers.

Run with: DATABASE_URL=postgres://postgres@127.0.0.1:5432/specvet \
    .venv/bin/pytest tests/web/inspections/test_decision_concurrency.py -q -s
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from annotation.inspections.decisions import EXPERT_SPLIT
from annotation.inspections.models import CatalogEntry, ExpertDecision
from annotation.spectra import services as spectra_services
from annotation.spectra.labels import DecisionRecord, label_from_decisions
from annotation.spectra.models import SpectrumLabel
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="needs PostgreSQL row locks (DATABASE_URL)"
    ),
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]

EXPERTS = 20
SPECTRA = 3
RUNS = 3
UNDO = "undo"


@pytest.fixture
def runs(db) -> list[Any]:
    spectra_services.tasks_seed_builtin()  # a transactional test may start from a flushed database
    owner = UserFactory(username="owner", roles=["ml_engineer"])
    rows = [make_spectrum(object_id=f"RACE-{i}", seed=i) for i in range(SPECTRA)]
    # below the threshold: every candidate is routed to the experts
    verdicts = {row.pk: ("YES", 0.55) for row in rows}
    return [
        make_inspected(spectra=rows, verdicts=verdicts, created_by=owner, model=(f"m:{n}", f"M{n}"))
        for n in range(RUNS)
    ]


def _post(client: Client, via_api: bool, candidate_id: int, decision: str) -> int:
    if decision == UNDO:
        response = client.post(reverse("vetting_undo"), {"candidate": candidate_id})
    elif via_api:
        response = client.post(
            reverse("api_expert_decision_create"),
            {"candidate": candidate_id, "decision": decision},
            content_type="application/json",
        )
    else:
        response = client.post(
            reverse("vetting_decide"), {"candidate": candidate_id, "decision": decision}
        )
    return response.status_code


def _plan(position: int, candidates: dict[int, list[int]]) -> list[tuple[int, int, str]]:
    """(spectrum id, candidate id, decision) in the order this expert sends them: on every
    spectrum a first answer through one run's candidate, then the opposite answer through
    another run's candidate (the case a second serving of the same spectrum caused); every
    fourth expert then undoes the second answer, which makes the first theirs again."""
    steps = []
    for spectrum_id, ids in sorted(candidates.items()):
        first, second = ids[position % RUNS], ids[(position + 1) % RUNS]
        answer = "YES" if (position + spectrum_id) % 3 else "NO"
        other = "NO" if answer == "YES" else "YES"
        steps += [(spectrum_id, first, answer), (spectrum_id, second, other)]
        if position % 4 == 0:
            steps.append((spectrum_id, second, UNDO))
    return steps


def _stored_records(spectrum_id: int) -> list[DecisionRecord]:
    rows = ExpertDecision.objects.filter(candidate__spectrum_id=spectrum_id)
    return [
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


def test_it_takes_twenty_experts_deciding_at_once_on_several_runs_without_a_500(runs, capsys):
    candidates: dict[int, list[int]] = {}
    for run in runs:
        for candidate in run.candidates.order_by("spectrum_id"):
            candidates.setdefault(candidate.spectrum_id, []).append(candidate.pk)
    experts = [UserFactory(username=f"racer{n:02d}", roles=["expert"]) for n in range(EXPERTS)]
    barrier = threading.Barrier(EXPERTS)
    statuses: Counter[int] = Counter()
    sent: dict[tuple[int, int], str] = {}  # (expert id, candidate id) -> last answer sent
    answers: dict[tuple[int, int], list[str]] = {}  # (expert id, spectrum id) -> answers kept
    lock = threading.Lock()
    failures: list[BaseException] = []

    def vet(position: int, expert: Any) -> None:
        try:
            client = Client(raise_request_exception=False)
            client.force_login(expert)
            barrier.wait(timeout=30)
            for step, (spectrum_id, candidate_id, decision) in enumerate(
                _plan(position, candidates)
            ):
                code = _post(client, (position + step) % 2 == 0, candidate_id, decision)
                with lock:
                    statuses[code] += 1
                    if code not in (200, 201, 302):
                        continue
                    kept = answers.setdefault((expert.pk, spectrum_id), [])
                    if decision == UNDO:
                        del sent[expert.pk, candidate_id]
                        kept.pop()
                    else:
                        sent[expert.pk, candidate_id] = decision
                        kept.append(decision)
        except BaseException as error:  # the test reports it below
            failures.append(error)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=vet, args=(position, expert))
        for position, expert in enumerate(experts)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert not failures

    requests = sum(statuses.values())
    stored = {
        (expert_id, candidate_id): decision
        for expert_id, candidate_id, decision in ExpertDecision.objects.values_list(
            "expert_id", "candidate_id", "decision"
        )
    }
    consistent = 0
    for spectrum_id in candidates:
        outcome = label_from_decisions(_stored_records(spectrum_id))
        label = SpectrumLabel.objects.get(spectrum_id=spectrum_id)
        given = {record.value for record in outcome.decisions}
        consensus = given.pop() if len(given) == 1 else EXPERT_SPLIT
        entries = set(
            CatalogEntry.objects.filter(spectrum_id=spectrum_id).values_list(
                "vetted_label", "label_state", "expert_decision"
            )
        )
        current = {(record.expert_id, spectrum_id): record.value for record in outcome.decisions}
        if (
            (label.state, label.value) == (outcome.state, outcome.value)
            and entries == {(outcome.value, outcome.state, consensus)}
            and current == {key: v[-1] for key, v in answers.items() if key[1] == spectrum_id}
        ):
            consistent += 1
    with capsys.disabled():
        print(
            f"\n20-way vetting on PostgreSQL: {requests} requests, {statuses[500]} x 500, "
            f"statuses {dict(sorted(statuses.items()))}, {len(stored)} of {len(sent)} decisions "
            f"stored (after the undos), {consistent} of {len(candidates)} labels consistent with "
            "the latest answers"
        )
    assert requests == sum(len(_plan(position, candidates)) for position in range(EXPERTS))
    assert statuses[500] == 0
    assert set(statuses) <= {200, 201, 302}
    assert stored == sent
    assert consistent == len(candidates)


PAIR_TRIES = 30


def test_it_takes_two_experts_deciding_at_once_on_two_runs_candidates_of_a_spectrum(capsys):
    spectra_services.tasks_seed_builtin()
    owner = UserFactory(username="owner", roles=["ml_engineer"])
    rows = [make_spectrum(object_id=f"PAIR-{i}", seed=i) for i in range(PAIR_TRIES)]
    verdicts = {row.pk: ("YES", 0.55) for row in rows}
    runs = [
        make_inspected(spectra=rows, verdicts=verdicts, created_by=owner, model=(f"m:{n}", "M"))
        for n in range(2)
    ]
    experts = [UserFactory(username=f"pair{n}", roles=["expert"]) for n in range(2)]
    statuses: Counter[int] = Counter()
    lock = threading.Lock()
    for row in rows:
        barrier = threading.Barrier(2)

        def vet(position: int, spectrum_id: int = row.pk, barrier: Any = barrier) -> None:
            try:
                client = Client(raise_request_exception=False)
                client.force_login(experts[position])
                candidate = runs[position].candidates.get(spectrum_id=spectrum_id)
                barrier.wait(timeout=30)
                code = _post(client, position == 0, candidate.pk, "YES")
                with lock:
                    statuses[code] += 1
            finally:
                connection.close()

        threads = [threading.Thread(target=vet, args=(n,)) for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    labels = SpectrumLabel.objects.filter(spectrum__in=rows, state="agreed", value="YES").count()
    with capsys.disabled():
        print(
            f"\n2 experts at once on 2 runs' candidates of a spectrum: {PAIR_TRIES} tries, "
            f"{statuses[500]} x 500, statuses {dict(sorted(statuses.items()))}, "
            f"{ExpertDecision.objects.count()} decisions stored, {labels} labels agreed YES"
        )
    assert statuses[500] == 0
    assert ExpertDecision.objects.count() == 2 * PAIR_TRIES
    assert labels == PAIR_TRIES
