"""Every stored result belongs to its own input (issue 28).

For every candidate, what was stored (verdict, confidence, vote share, rollouts with their steps
and images, live steps, the catalog row) equals the in-process ``agent.rollout.inspect`` of that
candidate's own spectrum, whatever the path: one candidate or a batch of any size and order, two
worker threads sharing the process's cached policy, two runs at once on the same or on different
spectra, runs of different tasks at once, a model policy answering from the spectrum it is shown.
The comparison is ``annotation.inspections.reproduction`` (the run page's Reproduce).
"""

from __future__ import annotations

import hashlib
import json
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.db import connection
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from annotation.inspections import jobs, run_policies
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, CandidateState, InspectionRun, Rollout
from annotation.inspections.reproduction import candidate_reproduce, run_reproduce
from annotation.spectra.models import Task
from tests.factories import answer_turn, make_endpoint, make_spectrum, tool_call_turn

needs_postgres = pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="worker threads need a database they can share with the test (PostgreSQL)",
)

# Varied spectra: an emission line of several strengths (and none), at H-alpha or off it, so
# the inspector's verdicts and confidences differ from one spectrum to the next.
SHAPES = [
    (6564.61, 3.0),
    (6564.61, 0.0),
    (6564.61, 0.6),
    (4862.7, 2.0),
    (6564.61, 1.2),
    (5900.0, 2.5),
    (6564.61, 0.25),
    (4862.7, 0.0),
]


def spectra_pool(prefix: str, n: int = len(SHAPES)) -> list[Any]:
    # Seeds of their own per prefix: two pools of the same seeds were one set of stored spectra
    # (make_spectrum keeps the same pixels once), so "different spectra" were the same ones.
    first_seed = 1000 + zlib.crc32(prefix.encode()) % 100_000 * 64
    return [
        make_spectrum(
            object_id=f"{prefix}-{i}",
            seed=first_seed + i,
            line_center=SHAPES[i % len(SHAPES)][0],
            line_amplitude=SHAPES[i % len(SHAPES)][1],
        )
        for i in range(n)
    ]


def create_run(task: Task, spectra: list[Any], owner: Any, **kwargs: Any) -> InspectionRun:
    return inspections_services.inspection_run_create(
        task=task,
        spectrum_ids=[s.pk for s in spectra],
        policy_spec=kwargs.pop("policy_spec", {"kind": "rule-based"}),
        created_by=owner,
        enqueue=False,
        **kwargs,
    )


def candidate_ids(run: InspectionRun) -> list[int]:
    return list(run.candidates.order_by("pk").values_list("pk", flat=True))


def assert_all_reproduce(runs: list[InspectionRun]) -> None:
    """Every candidate is done, and each reproduces exactly from its own spectrum."""
    for run in runs:
        states = set(run.candidates.values_list("state", flat=True))
        assert states == {CandidateState.DONE}, (run.pk, states)
        reproductions = run_reproduce(run)
        assert len(reproductions) == run.candidates.count()
        failures = {r.candidate_id: r.differences[:3] for r in reproductions if not r.matches}
        assert not failures, failures
        for rollout in Rollout.objects.filter(candidate__run=run).select_related("candidate"):
            assert rollout.data["meta"]["spectrum_id"] == rollout.candidate.spectrum_id
            assert rollout.data["meta"]["candidate"] == rollout.candidate_id


# --- one process, one thread: batches of any composition ----------------------------------------


@pytest.mark.django_db
@hypothesis_settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    data=st.data(),
    batch_size=st.sampled_from([1, 3, 16]),
    rollouts=st.sampled_from([1, 2]),
)
def test_it_stores_for_every_candidate_of_a_batch_what_its_own_spectrum_gives(
    settings, cv, owner, data, batch_size, rollouts
) -> None:
    pool = spectra_pool("BATCH")
    chosen = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=len(pool), unique=True))
    order = data.draw(st.permutations(chosen))
    settings.INSPECTION_BATCH_SIZE = batch_size
    run = create_run(cv, order, owner, rollouts=rollouts)
    ids = candidate_ids(run)
    # The batch as the queue delivers it: in any order, not only by id.
    shuffled = data.draw(st.permutations(ids))
    for batch in inspections_services.candidate_batches(
        policy_spec=run.policy_spec, candidate_ids=list(shuffled)
    ):
        claimed = inspections_services.candidates_claim(candidate_ids=batch)
        jobs.run_candidates(claimed)
    assert_all_reproduce([run])


@pytest.mark.django_db
def test_it_notices_a_verdict_stored_on_the_wrong_candidate(cv, owner) -> None:
    """The reproduction itself: two candidates' results swapped are both reported."""
    run = create_run(cv, spectra_pool("SWAP", 2), owner)
    jobs.run_candidates(inspections_services.candidates_claim(candidate_ids=candidate_ids(run)))
    first, second = Candidate.objects.filter(run=run).order_by("pk")
    assert first.verdict != second.verdict or first.confidence != second.confidence
    Candidate.objects.filter(pk=first.pk).update(
        verdict=second.verdict, confidence=second.confidence
    )
    outcome = candidate_reproduce(first.pk)
    assert not outcome.matches
    assert {d.where for d in outcome.differences} >= {"candidate confidence"}
    assert candidate_reproduce(second.pk).matches


def _stored_step_images(candidate: Candidate) -> list[tuple[int, str]]:
    """(step index, png_sha256) of rollout 0's steps that show an image."""
    rollout = Rollout.objects.get(candidate=candidate, index=0)
    return [
        (position, step["tool_result"]["image"]["png_sha256"])
        for position, step in enumerate(rollout.data["steps"])
        if (step.get("tool_result") or {}).get("image")
    ]


def _restore_step_image(candidate: Candidate, position: int, png: bytes) -> str:
    """Store ``png`` and point rollout 0's step ``position`` and its live step at it."""
    from annotation.core.models import ImageBlob
    from annotation.inspections.models import LiveStep

    digest = hashlib.sha256(png).hexdigest()
    ImageBlob.objects.get_or_create(sha256=digest, defaults={"png": png})
    rollout = Rollout.objects.get(candidate=candidate, index=0)
    rollout.data["steps"][position]["tool_result"]["image"]["png_sha256"] = digest
    rollout.save(update_fields=["data"])
    for live in LiveStep.objects.filter(candidate=candidate, rollout_index=0):
        if live.step_index == rollout.data["steps"][position]["index"]:
            live.data["tool_result"]["image"]["png_sha256"] = digest
            live.save(update_fields=["data"])
    return digest


@pytest.mark.django_db
def test_it_takes_the_same_pixels_in_other_png_bytes_as_the_same_image(cv, owner) -> None:
    """A PNG is one encoding of its picture: the same pixels deflated by another library (here
    zlib instead of ISA-L) are the image the inspector saw, noted, never a difference."""
    import io
    import zlib

    from PIL import Image

    from annotation.core.models import ImageBlob

    run = create_run(cv, spectra_pool("BYTES", 1), owner)
    jobs.run_candidates(inspections_services.candidates_claim(candidate_ids=candidate_ids(run)))
    candidate = Candidate.objects.get(run=run)
    position, digest = _stored_step_images(candidate)[0]
    original = bytes(ImageBlob.objects.get(sha256=digest).png)
    with Image.open(io.BytesIO(original)) as image:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG", compress_level=9)
    reencoded = buffer.getvalue()
    assert reencoded != original and zlib.crc32(reencoded) != zlib.crc32(original)
    _restore_step_image(candidate, position, reencoded)

    outcome = candidate_reproduce(candidate.pk)
    assert outcome.matches, outcome.differences
    assert any("the same pixels in other PNG bytes" in note for note in outcome.notes)


@pytest.mark.django_db
def test_it_reports_a_step_image_of_another_spectrum_with_the_same_window(cv, owner) -> None:
    """Only the picture differs (same window, label, text and answer): still a difference."""
    from annotation.core.models import ImageBlob

    run = create_run(cv, spectra_pool("PICTURE", 2), owner)
    jobs.run_candidates(inspections_services.candidates_claim(candidate_ids=candidate_ids(run)))
    first, second = Candidate.objects.filter(run=run).order_by("pk")
    position, _ = _stored_step_images(first)[0]
    other = dict(_stored_step_images(second))[position]
    _restore_step_image(first, position, bytes(ImageBlob.objects.get(sha256=other).png))

    outcome = candidate_reproduce(first.pk)
    assert not outcome.matches
    wheres = {d.where for d in outcome.differences}
    assert f"rollout 0 steps {position} tool_result image png_sha256" in wheres
    assert f"rollout 0 live steps {position} tool_result image png_sha256" in wheres
    assert not any("same pixels" in note for note in outcome.notes)


@pytest.mark.django_db
def test_it_refuses_to_store_a_rollout_computed_for_another_spectrum(cv, owner) -> None:
    from agent.rollout import inspect
    from annotation.core.errors import WorkflowError
    from annotation.spectra.selectors import spectrum_value, task_value

    run = create_run(cv, spectra_pool("WRONG", 2), owner)
    first, second = Candidate.objects.filter(run=run).order_by("pk")
    trajectory = inspect(
        spectrum_value(second.spectrum),
        task_value(cv),
        run_policies.build_run_policy(run.policy_spec),
        meta=inspections_services.rollout_meta(candidate=second, index=0),
    )
    with pytest.raises(WorkflowError, match="computed for spectrum"):
        inspections_services.rollout_result(
            candidate=first, index=0, trajectory=trajectory, confidence=None, seconds=0.0, steps=[]
        )


# --- worker threads sharing the process's policy ------------------------------------------------


class Interleave:
    """Makes two threads' episodes overlap: each waits at its first step for the other, so the
    second begins while the first is still answering (what a threads pool does under load)."""

    def __init__(self) -> None:
        self.barrier = threading.Barrier(2, timeout=5)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        add = inspections_services.LiveStepBuffer.add
        barrier = self.barrier

        def add_and_wait(buffer: Any, step: Any, trajectory: Any) -> None:
            add(buffer, step, trajectory)
            if step.index == 0:
                try:
                    barrier.wait()
                except threading.BrokenBarrierError:
                    barrier.reset()  # the other thread has no episode left to pair with

        monkeypatch.setattr(inspections_services.LiveStepBuffer, "add", add_and_wait)


def run_in_threads(batches: list[list[int]]) -> None:
    errors: list[BaseException] = []

    def work(batch: list[int]) -> None:
        try:
            jobs.run_candidates(inspections_services.candidates_claim(candidate_ids=batch))
        except BaseException as error:  # reported by the test thread
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(batch,)) for batch in batches]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors


@pytest.fixture
def fresh_policies(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each test starts as a fresh worker process does: no cached policy yet.
    monkeypatch.setattr(run_policies, "_policies", {})


@needs_postgres
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_it_keeps_each_verdict_on_its_own_spectrum_when_two_threads_share_the_policy(
    settings, cv, owner, monkeypatch, fresh_policies
) -> None:
    settings.INSPECTION_BATCH_SIZE = 4
    Interleave().install(monkeypatch)
    run = create_run(cv, spectra_pool("THREADS"), owner)
    ids = candidate_ids(run)
    run_in_threads([ids[0::2], ids[1::2]])
    assert_all_reproduce([run])


@needs_postgres
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
@pytest.mark.parametrize("same_spectra", [True, False], ids=["same-spectra", "other-spectra"])
def test_it_keeps_two_runs_at_once_apart(
    settings, cv, owner, monkeypatch, fresh_policies, same_spectra
) -> None:
    Interleave().install(monkeypatch)
    first_spectra = spectra_pool("PAIR-A", 6)
    second_spectra = first_spectra if same_spectra else spectra_pool("PAIR-B", 6)[::-1]
    # Two rollouts each: twelve episodes a run, so each episode overlaps one of the other run.
    first = create_run(cv, first_spectra, owner, rollouts=2)
    second = create_run(cv, second_spectra, owner, rollouts=2)
    run_in_threads([candidate_ids(first), candidate_ids(second)])
    assert_all_reproduce([first, second])


@needs_postgres
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_it_keeps_runs_of_different_tasks_at_once_apart(
    settings, cv, owner, monkeypatch, fresh_policies
) -> None:
    Interleave().install(monkeypatch)
    spectra = spectra_pool("TASKS", 6)
    runs = [create_run(Task.objects.get(code=code), spectra, owner) for code in ("CV", "WD")]
    run_in_threads([candidate_ids(run) for run in runs])
    assert_all_reproduce(runs)


# --- a model policy: a scripted model that answers from the spectrum it is shown ----------------


def _first_image_digest(body: dict[str, Any]) -> str:
    for message in body["messages"]:
        for part in message.get("content") or []:
            if isinstance(part, dict) and part.get("type") == "image_url":
                return hashlib.sha256(part["image_url"]["url"].encode()).hexdigest()
    raise AssertionError("the request shows no image")


def spectrum_model_reply(body: dict[str, Any]) -> dict[str, Any]:
    """Looks at I0 (the full spectrum) and answers from it: the answer, the reasoning and the
    token counts all follow from the image, so a reply stored on another spectrum shows."""
    digest = _first_image_digest(body)
    turn = sum(1 for message in body["messages"] if message["role"] == "assistant")
    think = f"I0 digest {digest[:16]}, turn {turn}"
    if turn == 0:
        content = tool_call_turn(6500, 6630, "H-alpha", think=think)
    else:
        content = answer_turn("YES" if int(digest[0], 16) % 2 else "NO", think=think)
    return {
        "choices": [{"message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": int(digest[:4], 16), "completion_tokens": 7 + turn},
    }


@pytest.fixture
def spectrum_model() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            payload = json.dumps(spectrum_model_reply(body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@needs_postgres
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
@pytest.mark.parametrize("in_flight", [1, 64], ids=["K=1", "K=64"])
def test_it_keeps_a_model_s_answers_and_token_counts_on_their_own_spectra(
    settings, cv, owner, staff, monkeypatch, fresh_policies, spectrum_model, in_flight
) -> None:
    from annotation.inspections import in_flight as in_flight_module

    # Episodes in flight (issue 34): each thread's batch runs up to K episodes at once, the
    # two threads sharing the process's K.
    settings.INSPECTION_IN_FLIGHT = in_flight
    monkeypatch.setattr(in_flight_module, "_gates", {})
    make_endpoint(name="scripted", base_url=spectrum_model, model="scripted")
    Interleave().install(monkeypatch)
    run = create_run(
        cv,
        spectra_pool("MODEL", 6),
        staff,
        policy_spec={"kind": "openai", "endpoint": "scripted"},
        sampling={"temperature": 0.0, "seed": 7},
    )
    ids = candidate_ids(run)
    run_in_threads([ids[0::2], ids[1::2]])
    assert_all_reproduce([run])
    tokens = {
        step["prompt_tokens"]
        for rollout in Rollout.objects.filter(candidate__run=run)
        for step in rollout.data["steps"]
    }
    assert len(tokens) > 1  # the counts came from the replies, one per spectrum
