"""Episodes in flight (issue 34): a batch of a model endpoint's candidates runs up to K episodes
at once against the loopback stand-in, and every candidate is stored once, with the answer the
stand-in gave for its own spectrum, however full the server is."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent.tool import SpectralVisualizationTool
from annotation.bench.standin import LatencyModel, StandIn, answer_for_png
from annotation.inspections import in_flight, jobs, run_policies
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, CandidateState, LiveStep, Rollout
from annotation.inspections.reproduction import run_reproduce
from annotation.spectra.selectors import spectrum_value
from tests.factories import make_endpoint, make_spectrum

pytestmark = pytest.mark.django_db

SHAPES = [(6564.61, 3.0), (6564.61, 0.0), (4862.7, 2.0), (6564.61, 0.6), (5900.0, 2.5)]


@pytest.fixture(autouse=True)
def fresh_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # As a fresh worker process: no cached policy, no gate yet.
    monkeypatch.setattr(run_policies, "_policies", {})
    monkeypatch.setattr(in_flight, "_gates", {})
    monkeypatch.setattr(in_flight, "BUSY_PAUSE_SECONDS", (0.01, 0.05))


@pytest.fixture
def standin() -> Iterator[Any]:
    servers: list[StandIn] = []

    def start(**kwargs: Any) -> StandIn:
        server = StandIn(**{"latency": LatencyModel(0.02), **kwargs})
        servers.append(server)
        make_endpoint(name="standin", base_url=server.start(), model="stand-in")
        return server

    yield start
    for server in servers:
        server.stop()


def start_run(task: Any, owner: Any, n: int, *, rollouts: int = 1) -> tuple[Any, list[int]]:
    spectra = [
        make_spectrum(
            object_id=f"FLY-{i}",
            seed=300 + i,
            line_center=SHAPES[i % len(SHAPES)][0],
            line_amplitude=SHAPES[i % len(SHAPES)][1],
        )
        for i in range(n)
    ]
    run = inspections_services.inspection_run_create(
        task=task,
        spectrum_ids=[s.pk for s in spectra],
        policy_spec={"kind": "openai", "endpoint": "standin", "max_retries": 1, "backoff": 0.0},
        sampling={"temperature": 0.0, "seed": 7},
        created_by=owner,
        rollouts=rollouts,
        enqueue=False,
    )
    return run, list(run.candidates.order_by("pk").values_list("pk", flat=True))


def run_until_done(ids: list[int], rounds: int = 60) -> int:
    """Claim and run as the Celery task does, sending the waiting ones again as its retry
    would; returns the rounds it took."""
    for round_ in range(1, rounds + 1):
        waiting = jobs.run_candidates(
            inspections_services.candidates_claim(candidate_ids=ids), can_wait=True
        )
        if waiting is None:
            return round_
        assert len(waiting.candidate_ids) == len(set(waiting.candidate_ids))
        ids = waiting.candidate_ids
    raise AssertionError(f"candidates {ids} still waiting after {rounds} rounds")


def assert_each_stored_once_with_its_own_answer(run: Any, *, turns: int = 2) -> None:
    candidates = list(Candidate.objects.filter(run=run).select_related("spectrum"))
    assert {c.state for c in candidates} == {CandidateState.DONE}
    for candidate in candidates:
        png = SpectralVisualizationTool(spectrum_value(candidate.spectrum)).render_full().png
        assert candidate.verdict == answer_for_png(png), candidate.pk
    rollouts = Rollout.objects.filter(candidate__run=run)
    assert rollouts.count() == len(candidates) * run.rollouts
    for rollout in rollouts.select_related("candidate"):
        assert rollout.data["meta"]["spectrum_id"] == rollout.candidate.spectrum_id
        assert len(rollout.data["steps"]) == turns
    assert LiveStep.objects.filter(candidate__run=run).count() == rollouts.count() * turns
    reproductions = run_reproduce(run)
    assert len(reproductions) == len(candidates)
    wrong = {r.candidate_id: r.differences[:2] for r in reproductions if not r.matches}
    assert not wrong, wrong


def test_it_keeps_each_verdict_on_its_own_spectrum_with_64_episodes_in_flight(
    settings, cv, staff, standin
) -> None:
    settings.INSPECTION_IN_FLIGHT = 64
    settings.INSPECTION_MODEL_BATCH_SIZE = 64
    server = standin(slots=64, latency=LatencyModel(0.2))
    run, ids = start_run(cv, staff, 15, rollouts=2)
    (batch,) = inspections_services.candidate_batches(
        policy_spec=run.policy_spec, candidate_ids=ids
    )
    assert run_until_done(batch) == 1
    assert max(busy for _, busy in server.record.changes) > 1  # episodes overlapped
    assert server.record.served == 15 * 2 * 2
    assert_each_stored_once_with_its_own_answer(run)


def test_it_sends_a_refused_turn_again_without_losing_or_doubling_a_candidate(
    settings, cv, staff, standin
) -> None:
    settings.INSPECTION_IN_FLIGHT = 64
    server = standin(slots=2, reject=True, latency=LatencyModel(0.03))
    run, ids = start_run(cv, staff, 12)
    assert run_until_done(ids) == 1  # every refusal was absorbed in the batch
    assert server.record.rejected > 0
    assert server.record.served == 12 * 2
    assert_each_stored_once_with_its_own_answer(run)


def test_it_puts_candidates_back_when_the_server_stays_full_and_finishes_each_once(
    settings, monkeypatch, cv, staff, standin
) -> None:
    settings.INSPECTION_IN_FLIGHT = 64
    settings.JOB_MAX_ATTEMPTS = 60
    monkeypatch.setattr(in_flight, "BUSY_TRIES", 0)  # a refusal ends the batch at once
    server = standin(slots=1, reject=True, latency=LatencyModel(0.03))
    run, ids = start_run(cv, staff, 8)
    rounds = run_until_done(ids)
    assert rounds > 1 and server.record.rejected > 0
    assert_each_stored_once_with_its_own_answer(run)


def test_it_holds_at_most_k_episodes_of_an_endpoint_in_flight(settings, cv, staff, standin) -> None:
    settings.INSPECTION_IN_FLIGHT = 64
    settings.INSPECTION_IN_FLIGHT_BY_ENDPOINT = {"standin": 3}
    server = standin(slots=50, latency=LatencyModel(0.05))
    run, ids = start_run(cv, staff, 9)
    run_until_done(ids)
    assert max(busy for _, busy in server.record.changes) <= 3
    assert server.record.served == 9 * 2
    assert_each_stored_once_with_its_own_answer(run)


def test_it_writes_live_steps_and_results_in_a_few_transactions_per_batch(
    settings, cv, staff, standin, django_assert_max_num_queries
) -> None:
    settings.INSPECTION_IN_FLIGHT = 64
    standin(slots=64, latency=LatencyModel(0.05))
    run, ids = start_run(cv, staff, 12)
    claimed = inspections_services.candidates_claim(candidate_ids=ids)
    # One candidate at a time wrote a transaction per live step and one per rollout: 12 x 3.
    with django_assert_max_num_queries(30):
        assert jobs.run_candidates(claimed, can_wait=True) is None
    assert Candidate.objects.filter(run=run, state=CandidateState.DONE).count() == 12
