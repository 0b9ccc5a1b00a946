"""The scale benchmark checks every stored verdict against the stand-in before any speed, and
refuses options outside their limits by name."""

from __future__ import annotations

import pytest

from annotation.bench import scale
from annotation.bench.standin import LatencyModel, StandIn
from annotation.inspections import in_flight, jobs, run_policies
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate
from tests.factories import make_endpoint, make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished_run(monkeypatch, cv, staff):
    monkeypatch.setattr(run_policies, "_policies", {})
    monkeypatch.setattr(in_flight, "_gates", {})
    server = StandIn(slots=8, latency=LatencyModel(0.01))
    make_endpoint(name="standin", base_url=server.start(), model="stand-in")
    try:
        # The stand-in's verdict is a hash of the picture: eight spectra give both answers.
        spectra = [
            make_spectrum(object_id=f"S{i}", seed=50 + i, line_amplitude=a)
            for i, a in enumerate((3.0, 0.0, 1.0, 0.4) * 2)
        ]
        run = inspections_services.inspection_run_create(
            task=cv,
            spectrum_ids=[s.pk for s in spectra],
            policy_spec={"kind": "openai", "endpoint": "standin"},
            created_by=staff,
            enqueue=False,
        )
        ids = list(run.candidates.values_list("pk", flat=True))
        jobs.run_candidates(inspections_services.candidates_claim(candidate_ids=ids))
    finally:
        server.stop()
    return run, scale.expected_answers([s.pk for s in spectra])


def test_it_verifies_every_stored_verdict_against_the_stand_in_s_answer(finished_run) -> None:
    run, expected = finished_run
    assert set(expected.values()) == {"YES", "NO"}
    assert scale.verify([run.pk], expected, turns=2).startswith("verified: 8 of 8")


def test_it_refuses_to_report_a_speed_when_a_verdict_is_wrong(finished_run) -> None:
    run, expected = finished_run
    candidate = Candidate.objects.filter(run=run).first()
    flipped = {"YES": "NO", "NO": "YES"}[candidate.verdict]
    Candidate.objects.filter(pk=candidate.pk).update(verdict=flipped)
    with pytest.raises(SystemExit, match="verification failed: 1 of 8"):
        scale.verify([run.pk], expected, turns=2)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--slots", "0"], "--slots must be 1-4096"),
        (["--turns", "12"], "--turns must be 1-9"),
        (["--latency", "0"], "--latency must be"),
        (["--worker-code", "/nonexistent"], "is not a specvet checkout"),
    ],
)
def test_it_names_an_option_outside_its_limits(argv, message) -> None:
    options = scale.parser().parse_args(argv)
    options.in_flight = options.in_flight or options.slots
    options.batch = options.batch or options.in_flight
    with pytest.raises(SystemExit, match=message):
        scale.check(options)
