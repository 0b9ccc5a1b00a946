"""A real worker retries a candidate whose model endpoint is down, then fails it with the reason.

Run with: DATABASE_URL=postgres://postgres@127.0.0.1:5432/specvet \
    .venv/bin/pytest tests/integration/test_worker_retry.py -q
"""

from __future__ import annotations

import socket

from annotation.inspections.models import Candidate, CandidateState, InspectionRun
from annotation.spectra import services
from annotation.spectra.models import Task
from tests.factories import make_endpoint, make_spectrum
from tests.integration.conftest import WORKER_TEST_MARKS, wait_until

pytestmark = WORKER_TEST_MARKS


def test_it_retries_an_unreachable_endpoint_then_fails_with_the_reason(broker, start_worker):
    services.tasks_seed_builtin()  # a transactional test may start from a flushed database
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_url = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    run = InspectionRun.objects.create(
        task=Task.objects.get(code="CV"),
        policy_spec={"kind": "openai", "endpoint": "closed", "model": "m", "max_retries": 1},
        endpoint=make_endpoint(name="closed", base_url=closed_url),
        max_tool_calls=1,
    )
    candidate = Candidate.objects.create(run=run, spectrum=make_spectrum())
    broker.enqueue("annotation.inspections.tasks.run_candidate", candidate.pk)
    worker = start_worker("retrying", JOB_MAX_ATTEMPTS="3", JOB_RETRY_BACKOFF="1")
    wait_until(
        lambda: Candidate.objects.get(pk=candidate.pk).state == CandidateState.FAILED,
        workers=[worker],
        what="the candidate to fail",
    )
    candidate.refresh_from_db()
    assert candidate.attempts == 3
    log = worker.log_path.read_text()
    assert log.index("retry: Retry in 1s") < log.index("retry: Retry in 2s")
    assert candidate.error == (
        "EndpointUnavailable: endpoint closed unreachable after 1 attempts: connection refused"
    )
