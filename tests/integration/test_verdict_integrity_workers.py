"""Real workers store each verdict on its own spectrum (issue 28): two runs of different tasks
at once, in small batches, through two workers of two processes or two threads each on Redis
and PostgreSQL; every candidate then reproduces in-process from its own spectrum.

Run with: DATABASE_URL=postgres://postgres@127.0.0.1:5432/specvet \
    .venv/bin/pytest tests/integration/test_verdict_integrity_workers.py -q
"""

from __future__ import annotations

import warnings

import pytest

from agent import synthetic
from annotation.inspections import services as inspections_services
from annotation.inspections.models import Candidate, CandidateState, InspectionRun
from annotation.inspections.reproduction import run_reproduce
from annotation.spectra import services as spectra_services
from annotation.spectra.models import Task
from tests.integration.conftest import WORKER_TEST_MARKS, wait_until

pytestmark = WORKER_TEST_MARKS


@pytest.fixture
def tasks(db) -> dict[str, Task]:
    spectra_services.tasks_seed_builtin()  # a transactional test may start from a flushed db
    return {code: Task.objects.get(code=code) for code in ("CV", "WD")}


def synthetic_rows(n: int) -> list[int]:
    """Varied SpecVI-mini spectra (positives and hard negatives of CV)."""
    drawn = synthetic.generate_split("CV", "test", n_pos=n // 3, n_neg=n - n // 3, seed=28)
    ids = []
    for index, sample in enumerate(drawn):
        sample.spectrum.object_id = f"INTEGRITY-{index:03d}"
        result = spectra_services.spectra_store(
            values=[sample.spectrum], dataset="integrity", source_name="synthetic", synthetic=True
        )
        ids.append(result.created[0].pk)
    return ids


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_it_stores_each_verdict_on_its_own_spectrum_through_real_workers(
    settings, tasks, broker, start_worker, pool
) -> None:
    settings.INSPECTION_BATCH_SIZE = 3
    spectrum_ids = synthetic_rows(18)
    runs = [
        inspections_services.inspection_run_create(
            task=task,
            spectrum_ids=spectrum_ids,
            policy_spec={"kind": "rule-based"},
            created_by=None,
            enqueue=False,
        )
        for task in tasks.values()
    ]
    # The two runs' batches interleaved on the queue, so both workers run both at once.
    batches = [
        inspections_services.candidate_batches(
            policy_spec=run.policy_spec,
            candidate_ids=list(run.candidates.order_by("pk").values_list("pk", flat=True)),
        )
        for run in runs
    ]
    for pair in zip(*batches, strict=True):
        for batch in pair:
            broker.enqueue("annotation.inspections.tasks.run_candidates", batch)
    workers = [start_worker(f"{pool}-{n}", pool=pool, concurrency=2) for n in range(2)]

    def finished() -> bool:
        runs_ids = [run.pk for run in runs]
        left = Candidate.objects.filter(run_id__in=runs_ids).exclude(state=CandidateState.DONE)
        return not left.exists()

    wait_until(finished, workers=workers, what="both runs to finish")
    for run in runs:
        reproductions = run_reproduce(InspectionRun.objects.get(pk=run.pk))
        assert len(reproductions) == 18
        reencoded = {r.candidate_id: r.notes for r in reproductions if r.notes}
        if reencoded:  # allowed, and worth seeing in the run's warnings summary
            warnings.warn(f"{pool}: same pixels in other PNG bytes: {reencoded}", stacklevel=1)
        wrong = {r.candidate_id: r.differences[:4] for r in reproductions if not r.matches}
        if wrong:  # pytest.fail prints the whole text; an assertion's repr is cut short
            pytest.fail(f"{wrong}\n{mismatch_details(wrong, workers)}", pytrace=False)


def test_it_stores_each_model_verdict_once_with_64_episodes_in_flight_under_429s(
    settings, tasks, broker, start_worker
) -> None:
    """Issue 34: two worker processes of two threads, K = 64 episodes in flight each, against a
    stand-in model server of four slots that refuses the rest with HTTP 429. Every candidate
    ends done, once, with the answer the stand-in gave for its own spectrum."""
    from agent.tool import SpectralVisualizationTool
    from annotation.bench.standin import LatencyModel, StandIn, answer_for_png
    from annotation.inspections.models import Rollout
    from annotation.spectra.selectors import spectrum_value
    from tests.factories import make_endpoint

    server = StandIn(slots=4, latency=LatencyModel(0.05), reject=True)
    make_endpoint(name="standin", base_url=server.start(), model="stand-in")
    try:
        settings.INSPECTION_MODEL_BATCH_SIZE = 8
        spectrum_ids = synthetic_rows(24)
        run = inspections_services.inspection_run_create(
            task=tasks["CV"],
            spectrum_ids=spectrum_ids,
            policy_spec={"kind": "openai", "endpoint": "standin", "max_retries": 1},
            sampling={"temperature": 0.0, "seed": 7},
            created_by=None,
            enqueue=False,
        )
        ids = list(run.candidates.order_by("pk").values_list("pk", flat=True))
        for batch in inspections_services.candidate_batches(
            policy_spec=run.policy_spec, candidate_ids=ids
        ):
            broker.enqueue("annotation.inspections.tasks.run_candidates", batch)
        workers = [
            start_worker(f"fly-{n}", pool="threads", concurrency=2, INSPECTION_IN_FLIGHT="64")
            for n in range(2)
        ]

        def finished() -> bool:
            return not run.candidates.exclude(state=CandidateState.DONE).exists()

        wait_until(finished, workers=workers, what="the model run to finish")
        assert server.record.rejected > 0  # the server was full and said so
        # The run's background re-check reproduces its sampled candidates (the first always)
        # on the same server: wait for it, then count its turns.
        from annotation.core.models import Job
        from annotation.inspections.services import RECHECK_JOB

        rechecks = Job.objects.filter(kind=RECHECK_JOB, params__run_id=run.pk)
        wait_until(
            lambda: (
                rechecks.exists() and not rechecks.exclude(state__in=Job.FINISHED_STATES).exists()
            ),
            workers=workers,
            what="the run's re-check",
        )
        rechecked_ids = {pk for job in rechecks for pk in job.params["candidate_ids"]}
        # Every model turn the server answered is a stored step or a re-check's turn (an episode
        # is two turns, three when a zoom the spectrum does not cover is asked again). A
        # candidate whose episode a transport error stopped waits and starts over: its answered
        # first turn is asked again. Nothing else may ask the server twice.
        stored = dict(
            Rollout.objects.filter(candidate__run=run).values_list("candidate_id", "data")
        )
        steps = sum(len(data["steps"]) for data in stored.values())
        rechecked = sum(len(stored[pk]["steps"]) for pk in rechecked_ids)
        attempts = list(run.candidates.values_list("attempts", flat=True))
        restarted = sum(max(0, count - 1) for count in attempts)
        assert steps >= 24 * 2, steps
        # (a re-check refused by the full server asks less, never more)
        assert steps <= server.record.served <= steps + rechecked + restarted, (
            server.record.served,
            steps,
            rechecked,
            server.record.asked_twice(),
            attempts,
            "\n".join(w.log_tail() for w in workers),
        )
        for candidate in Candidate.objects.filter(run=run).select_related("spectrum"):
            png = SpectralVisualizationTool(spectrum_value(candidate.spectrum)).render_full().png
            assert candidate.verdict == answer_for_png(png), candidate.pk
        assert Rollout.objects.filter(candidate__run=run).count() == 24
        reproductions = run_reproduce(InspectionRun.objects.get(pk=run.pk))
    finally:
        server.stop()
    wrong = {r.candidate_id: r.differences[:2] for r in reproductions if not r.matches}
    assert len(reproductions) == 24 and not wrong, wrong


def mismatch_details(wrong: dict[int, list], workers: list) -> str:
    """What a failure needs to be understood (a worker stored an image the reproduction does not
    draw, seen once in CI): each image's pixels against the other's, the candidate's attempts
    and live steps, and the workers' logs."""
    import hashlib
    import io

    import numpy as np
    from PIL import Image

    from annotation.core.models import ImageBlob
    from annotation.inspections.models import LiveStep

    lines = []
    for candidate_id, differences in wrong.items():
        candidate = Candidate.objects.get(pk=candidate_id)
        lines.append(f"candidate {candidate_id}: attempts {candidate.attempts}")
        for step in LiveStep.objects.filter(candidate=candidate).order_by(
            "rollout_index", "step_index"
        ):
            image = ((step.data.get("tool_result") or {}).get("image") or {}).get("png_sha256")
            lines.append(f"  live step {step.rollout_index}.{step.step_index}: image {image}")
        for difference in differences:
            pixels = []
            for shown in (difference.stored, difference.reproduced):
                prefix = shown.strip("'").split(".")[0]
                blob = ImageBlob.objects.filter(sha256__startswith=prefix).first()
                if blob is None:
                    lines.append(f"  image {prefix[:16]}: not stored")
                    continue
                png = bytes(blob.png)
                try:
                    array = np.asarray(Image.open(io.BytesIO(png)))
                except Exception as error:  # a corrupted PNG is itself the finding
                    lines.append(f"  image {prefix[:16]}: unreadable ({error})")
                    continue
                sha = hashlib.sha256(png).hexdigest()
                lines.append(
                    f"  image {prefix[:16]}: {len(png)} bytes, sha ok {sha == blob.sha256}"
                )
                pixels.append(array)
            if len(pixels) == 2:
                same = pixels[0].shape == pixels[1].shape and bool((pixels[0] == pixels[1]).all())
                changed = (
                    int((pixels[0] != pixels[1]).sum())
                    if not same and pixels[0].shape == pixels[1].shape
                    else -1
                )
                lines.append(f"  same pixels: {same}; pixels that differ: {changed}")
                if changed > 0:
                    rows, columns = np.nonzero(pixels[0] != pixels[1])
                    lines.append(
                        f"  where: rows {rows.min()}-{rows.max()}, columns "
                        f"{columns.min()}-{columns.max()}; first values "
                        f"{pixels[0][rows[:8], columns[:8]].tolist()} against "
                        f"{pixels[1][rows[:8], columns[:8]].tolist()}"
                    )
    logs = "\n".join(f"--- {w.log_path.name}\n{w.log_tail()}" for w in workers)
    return "\n".join(lines) + "\n" + logs
