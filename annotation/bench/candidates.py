"""What a candidate costs through the real stack, and how inspection workers scale out.

    createdb -h 127.0.0.1 -U postgres specvet_bench
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/specvet_bench
    .venv/bin/python manage.py migrate
    .venv/bin/python manage.py bench_candidates --candidates 200
    .venv/bin/python manage.py bench_candidates --candidates 200 --scale-out \\
        --redis redis://127.0.0.1:6379/14 --workers 1 2 --concurrency 1 8 32 --latency-ms 200

Cost (always): the rule-based inspector on the same SpecVI-mini CV spectra, first in-process
(``agent.rollout.inspect`` on spectra held in memory: the reference), then through the job
(the Celery task applied in this process: lease, claim, spectrum read from the database, live
steps, images, rollout, verdict, catalog entry), with every SQL statement counted. With
``--redis`` the same candidates also go through one real ``celery worker`` on Redis.

Scale-out (``--scale-out``, needs ``--redis``): a fake OpenAI-compatible server in this process
answers each turn after ``--latency-ms`` (a zoom, then an answer); for each number of workers
and threads per worker (each thread runs one candidate, so one request in flight), real workers
run the candidates and the figure is candidates per second from the first message sent to the
last candidate finished, with its ratio to one worker with one thread.

Every figure is printed only after its answers are checked: each candidate a path stored is
reproduced in-process from its own spectrum (``annotation.inspections.reproduction``: verdict,
confidence, rollouts, steps, images, live steps, catalog row); a mismatch aborts the benchmark
with the count. A fast path that stores wrong answers is not fast.

Everything written (spectra, runs, candidates, rollouts, live steps, their images, the endpoint)
is deleted at the end; the audit log keeps its entries (it is append-only).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.models import Max

from annotation.bench.workers import Workers
from annotation.core.models import ImageBlob, ModelEndpoint
from annotation.inspections import services as inspections_services
from annotation.inspections import tasks
from annotation.inspections.models import (
    Candidate,
    CandidateState,
    InspectionRun,
    LiveStep,
    Rollout,
)
from annotation.spectra import services as spectra_services
from annotation.spectra.models import Spectrum, Task

SEED = 7
WAIT_SECONDS = 600.0


def conditions() -> str:
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    return (
        f"{os.cpu_count()} cores, load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} "
        f"(1/5/15 min), database {connection.vendor}"
    )


@contextmanager
def counted_statements() -> Iterator[list[int]]:
    """Count the SQL statements this process sends (cheaper than capturing their text)."""
    count = [0]

    def wrapper(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        count[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield count


class Timer:
    """Wall and CPU seconds and SQL statements summed over the blocks it times."""

    def __init__(self) -> None:
        self.seconds = self.cpu = 0.0
        self.statements = 0
        self.blocks: list[float] = []

    def __enter__(self) -> None:
        self._counting = counted_statements()
        self._count = self._counting.__enter__()
        self._started, self._cpu = time.perf_counter(), time.process_time()

    def __exit__(self, *exc: object) -> None:
        self.blocks.append(time.perf_counter() - self._started)
        self.seconds += self.blocks[-1]
        self.cpu += time.process_time() - self._cpu
        self._counting.__exit__(None, None, None)
        self.statements += self._count[0]


class Command(BaseCommand):
    help = "Per-candidate cost in-process vs through the job (SQL counted), and worker scale-out."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--candidates", type=int, default=200)
        parser.add_argument("--redis", default="", help="broker URL for real workers")
        parser.add_argument("--scale-out", action="store_true")
        parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
        parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
        parser.add_argument("--latency-ms", type=float, default=200.0)
        parser.add_argument(
            "--worker-threads",
            type=int,
            default=2,
            help="threads of the real worker in the cost part (the demo runs 2; 1: solo pool)",
        )
        parser.add_argument(
            "--verify-sample",
            type=int,
            default=0,
            help="check only this many candidates per path (default 0: every candidate)",
        )
        parser.add_argument(
            "--scale-candidates",
            type=int,
            default=0,
            help="candidates per scale-out case (default: max(40, 6 x workers x threads))",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if connection.vendor != "postgresql":
            raise CommandError(
                "the stack part needs PostgreSQL (leases, real workers): set DATABASE_URL"
            )
        if options["candidates"] < 10:
            raise CommandError("--candidates must be at least 10")
        if options["scale_out"] and not options["redis"]:
            raise CommandError("--scale-out needs --redis URL (real workers on a Redis broker)")
        logging.getLogger("celery.app.trace").setLevel(logging.WARNING)  # a line per task
        self.dataset = f"bench-candidates-{uuid.uuid4().hex[:8]}"
        self.started_at = time.time()
        self.run_ids: list[int] = []
        self.endpoint: ModelEndpoint | None = None
        try:
            self.task = Task.objects.get(code="CV")
            needed = options["candidates"]
            if options["scale_out"]:
                most = max(options["workers"]) * max(options["concurrency"])
                needed = max(needed, _scale_candidates(options, most) + 2 * max(options["workers"]))
            spectra = self.seed_spectra(needed)
            self.verify_sample = int(options["verify_sample"]) or None
            self.cost(
                spectra[: options["candidates"]],
                redis_url=options["redis"],
                worker_threads=options["worker_threads"],
            )
            if options["scale_out"]:
                self.scale_out(spectra, options)
        finally:
            self.cleanup()

    # --- setup and cleanup ---------------------------------------------------------------------

    def seed_spectra(self, n: int) -> list[tuple[Spectrum, Any]]:
        from agent import synthetic

        samples = synthetic.generate_split(
            "CV", "test", n_pos=max(1, n // 6), n_neg=n - max(1, n // 6), seed=SEED
        )
        rows = []
        for index, sample in enumerate(samples):
            sample.spectrum.object_id = f"bench-{index:06d}"
            result = spectra_services.spectra_store(
                values=[sample.spectrum],
                dataset=self.dataset,
                source_name="bench_candidates (synthetic)",
                synthetic=True,
            )
            rows.append((result.created[0], sample.spectrum))
        return rows

    def new_run(self, spectra: list[Spectrum], spec: dict[str, Any]) -> list[int]:
        run = inspections_services.inspection_run_create(
            task=self.task,
            spectrum_ids=[row.pk for row in spectra],
            policy_spec=spec,
            created_by=None,
            name="bench_candidates",
            enqueue=False,
        )
        self.run_ids.append(run.pk)
        return list(run.candidates.order_by("pk").values_list("pk", flat=True))

    def cleanup(self) -> None:
        hashes: set[str] = set()
        for model in (Rollout, LiveStep):
            for data in model.objects.filter(candidate__run_id__in=self.run_ids).values_list(
                "data", flat=True
            ):
                hashes |= _hashes(data)
        InspectionRun.objects.filter(pk__in=self.run_ids).delete()
        Spectrum.objects.filter(dataset=self.dataset).delete()
        # Only images nothing else refers to: ones stored during this run by this benchmark.
        ImageBlob.objects.filter(
            sha256__in=hashes, created_at__gte=_aware(self.started_at)
        ).delete()
        if self.endpoint is not None:
            self.endpoint.delete()

    # --- per-candidate cost --------------------------------------------------------------------

    def verify(self, ids: list[int], what: str, *, sample: int | None = None) -> str:
        """Reproduce what ``what`` stored for ``ids`` in-process; abort on any mismatch."""
        from annotation.inspections.reproduction import candidate_reproduce, reference_policy

        sample = sample or self.verify_sample
        if sample is not None and sample < len(ids):
            step = len(ids) / sample
            ids = [ids[int(position * step)] for position in range(sample)]
        run = Candidate.objects.select_related("run").get(pk=ids[0]).run
        policy = reference_policy(run)
        outcomes = [candidate_reproduce(pk, policy=policy) for pk in ids]
        wrong = [o for o in outcomes if not o.matches]
        if wrong:
            first = wrong[0]
            shown = (
                "; ".join(
                    f"{d.where}: stored {d.stored}, reproduced {d.reproduced}"
                    for d in first.differences[:3]
                )
                or first.reason
            )
            raise CommandError(
                f"{what}: {len(wrong)} of {len(outcomes)} stored candidates do not match the "
                f"in-process answer for their own spectrum (first: candidate "
                f"{first.candidate_id}: {shown}); no speed is reported for a path that stores "
                "wrong answers"
            )
        return f"{what}: {len(outcomes)} of {len(outcomes)} reproduce"

    def cost(
        self, spectra: list[tuple[Spectrum, Any]], *, redis_url: str, worker_threads: int = 1
    ) -> None:
        from agent.inspection_tasks import get_task
        from agent.policies import build_policy
        from agent.rollout import inspect

        spec = {"kind": "rule-based"}
        size = inspections_services.candidate_batch_size(spec)
        policy = build_policy(spec)
        task = get_task("CV")
        batched = self.new_run([row for row, _ in spectra], spec)
        single = self.new_run([row for row, _ in spectra], spec)
        for _, value in spectra[:2]:
            inspect(value, task, policy)
        tasks.run_candidates.apply(args=[batched[:4]])
        tasks.run_candidates.apply(args=[single[:4]])

        # The three ways take turns on each slice of the spectra, so a change in the load of
        # this shared machine weighs on each alike.
        reference, job, one = Timer(), Timer(), Timer()
        n = len(spectra) - 4
        step = 2 * size

        def inspect_slice(start: int, end: int) -> None:
            for _, value in spectra[start:end]:
                inspect(value, task, policy)

        for start in range(4, len(spectra), step):
            end = min(start + step, len(spectra))
            with reference:
                inspect_slice(start, end)
            with job:
                ids = batched[start:end]
                for first in range(0, len(ids), size):
                    tasks.run_candidates.apply(args=[ids[first : first + size]])
            with one:
                for pk in single[start:end]:
                    tasks.run_candidates.apply(args=[[pk]])
        timed = batched[4:] + single[4:]
        done = Candidate.objects.filter(pk__in=timed, state=CandidateState.DONE).count()
        if done != len(timed):
            raise CommandError(f"only {done} of {len(timed)} candidates finished through the job")

        checks = [
            self.verify(batched, f"through the job, {size} per message"),
            self.verify(single, "through the job, one per message"),
        ]
        in_process = n / reference.seconds
        slices = [b / a for a, b in zip(reference.blocks, job.blocks, strict=True)]
        lines = [
            f"per-candidate cost, rule-based inspector, {n} SpecVI-mini CV spectra (synthetic), "
            f"the three ways taking turns on slices of {step}",
            f"  in-process (agent.rollout.inspect, spectra in memory): {in_process:7.1f} spectra/s",
            f"  through the job (Celery task applied, PostgreSQL), {size} candidates per message "
            f"(INSPECTION_BATCH_SIZE): {n / job.seconds:7.1f} spectra/s",
            f"  cost ratio job / in-process: {job.seconds / reference.seconds:.2f}x "
            f"(slice by slice: median {_median(slices):.2f}x, {min(slices):.2f}-{max(slices):.2f}x)",
            f"  SQL statements per candidate: {job.statements / n:.1f}",
            f"  CPU of this process per candidate: in-process {1000 * reference.cpu / n:.1f} ms, "
            f"through the job {1000 * job.cpu / n:.1f} ms "
            f"({job.cpu / reference.cpu:.2f}x; the rest of the wall time is waiting "
            "for PostgreSQL, which shares the cores here)",
            f"  one candidate per message instead: {n / one.seconds:7.1f} spectra/s "
            f"({one.seconds / reference.seconds:.2f}x, {one.statements / n:.1f} SQL statements "
            f"per candidate, CPU {1000 * one.cpu / n:.1f} ms)",
        ]
        if redis_url:
            worker, again, worker_ids = self.worker_in_turns(
                spectra,
                spec,
                redis_url=redis_url,
                step=step,
                inspect_slice=inspect_slice,
                threads=worker_threads,
            )
            pool_name = f"threads pool of {worker_threads}" if worker_threads > 1 else "solo pool"
            checks.append(self.verify(worker_ids, f"one real worker ({pool_name})"))
            lines.append(
                f"  through one real worker (Redis, {pool_name}, {size} per message), taking "
                f"turns with the in-process way again ({n / again:.1f} spectra/s): "
                f"{n / worker:7.1f} spectra/s ({worker / again:.2f}x)"
            )
        lines.append("  answers checked before any speed: " + "; ".join(checks) + " (0 mismatches)")
        lines.append(f"  conditions: {conditions()}")
        self.stdout.write("\n".join(lines))

    def worker_in_turns(
        self,
        spectra: list[tuple[Spectrum, Any]],
        spec: dict[str, Any],
        *,
        redis_url: str,
        step: int,
        inspect_slice: Callable[[int, int], None],
        threads: int = 1,
    ) -> tuple[float, float, list[int]]:
        """Seconds one real worker takes for the candidates (from sending each slice's messages
        to its last candidate finished), and seconds in-process, the two taking turns; and the
        candidates the worker ran."""
        ids = self.new_run([row for row, _ in spectra], spec)
        worker = in_process = 0.0
        with tempfile.TemporaryDirectory() as logs:
            pool = Workers(redis_url, Path(logs))
            try:
                pool.start(1, threads=threads)
                pool.send(
                    inspections_services.candidate_batches(policy_spec=spec, candidate_ids=ids[:4])
                )
                self.wait_done(ids[:4], pool)
                for start in range(4, len(spectra), step):
                    end = min(start + step, len(spectra))
                    started = time.perf_counter()
                    inspect_slice(start, end)
                    in_process += time.perf_counter() - started
                    part = ids[start:end]
                    sent = pool.send(
                        inspections_services.candidate_batches(policy_spec=spec, candidate_ids=part)
                    )
                    self.wait_done(part, pool)
                    last = Candidate.objects.filter(pk__in=part).aggregate(last=Max("finished_at"))
                    worker += last["last"].timestamp() - sent
            finally:
                pool.stop()
                pool.clear_broker()
        return worker, in_process, ids

    # --- real workers --------------------------------------------------------------------------

    def through_workers(
        self,
        warm: list[int],
        timed: list[int],
        *,
        redis_url: str,
        workers: int,
        threads: int,
        spec: dict[str, Any],
    ) -> float:
        """Candidates per second on real workers, after each worker process has warmed up; the
        candidates go in messages as ``services.candidate_batches`` makes them."""

        def batches(ids: list[int]) -> list[list[int]]:
            return inspections_services.candidate_batches(policy_spec=spec, candidate_ids=ids)

        with tempfile.TemporaryDirectory() as logs:
            pool = Workers(redis_url, Path(logs))
            try:
                pool.start(workers, threads=threads)
                pool.send(batches(warm))
                self.wait_done(warm, pool)
                sent = pool.send(batches(timed))
                self.wait_done(timed, pool)
                last = Candidate.objects.filter(pk__in=timed).aggregate(last=Max("finished_at"))[
                    "last"
                ]
            finally:
                pool.stop()
                pool.clear_broker()
        return len(timed) / max(last.timestamp() - sent, 1e-6)

    def wait_done(self, ids: list[int], pool: Workers) -> None:
        finished = [CandidateState.DONE, CandidateState.FAILED, CandidateState.CANCELLED]
        deadline = time.monotonic() + WAIT_SECONDS
        while Candidate.objects.filter(pk__in=ids).exclude(state__in=finished).exists():
            if time.monotonic() > deadline:
                raise CommandError(f"workers did not finish {len(ids)} candidates in time")
            if pool.exited():
                raise CommandError("a worker exited; see its log (run with a shell to keep it)")
            time.sleep(0.1)
        failed = list(
            Candidate.objects.filter(pk__in=ids, state=CandidateState.FAILED).values_list(
                "error", flat=True
            )[:3]
        )
        if failed:
            raise CommandError(f"candidates failed on the workers: {failed}")

    # --- scale-out -----------------------------------------------------------------------------

    def scale_out(self, spectra: list[tuple[Spectrum, Any]], options: dict[str, Any]) -> None:
        from agent.bench.eval_concurrency import fake_openai_server

        rows = [row for row, _ in spectra]
        limit = int(_setting("max_connections"))
        lines = [
            f"scale-out: fake OpenAI-compatible server, {options['latency_ms']:.0f} ms per turn "
            "(2 turns: a zoom, then an answer); real workers on Redis, threads pool "
            "(solo for 1 thread), PostgreSQL",
            "workers  threads  candidates  candidates/s  vs 1x1  per-worker-thread/s",
        ]
        with fake_openai_server(options["latency_ms"] / 1000) as base_url:
            self.endpoint = ModelEndpoint.objects.create(
                name=f"bench-{uuid.uuid4().hex[:8]}", base_url=base_url, model="fake"
            )
            spec = {"kind": "openai", "endpoint": self.endpoint.name}
            reference = None
            for workers in options["workers"]:
                for threads in options["concurrency"]:
                    if workers * threads + 10 > limit:
                        lines.append(
                            f"{workers:7d}  {threads:7d}  skipped: needs {workers * threads} "
                            f"database connections, the server allows {limit}"
                        )
                        continue
                    n = _scale_candidates(options, workers * threads)
                    ids = self.new_run(rows[: n + 2 * workers], spec)
                    rate = self.through_workers(
                        ids[: 2 * workers],
                        ids[2 * workers :],
                        redis_url=options["redis"],
                        workers=workers,
                        threads=threads,
                        spec=spec,
                    )
                    # Each reproduction asks the slow fake model again: a sample spread over
                    # the run (every candidate with --verify-sample 0 is too slow here).
                    checked = self.verify(
                        ids, f"scale-out {workers} x {threads}", sample=self.verify_sample or 20
                    )
                    reference = reference or rate
                    lines.append(
                        f"{workers:7d}  {threads:7d}  {n:10d}  {rate:12.2f}  "
                        f"{rate / reference:5.1f}x  {rate / (workers * threads):19.2f}  "
                        f"({checked})"
                    )
        lines.append(self.enqueue_rate(options["redis"]))
        ideal = 1.0 / (2 * options["latency_ms"] / 1000)
        lines.append(
            f"  model-bound ceiling per worker thread: {ideal:.2f} candidates/s (2 turns x latency)"
        )
        lines.append(f"  conditions: {conditions()}")
        self.stdout.write("\n".join(lines))

    def enqueue_rate(self, redis_url: str, n: int = 5000) -> str:
        """How fast one process puts candidate messages on the queue, and what they weigh in
        Redis (no worker consumes them; they are deleted)."""
        import redis

        with tempfile.TemporaryDirectory() as logs:
            pool = Workers(redis_url, Path(logs))
            client = redis.Redis.from_url(redis_url)
            before = int(client.info("memory")["used_memory"])
            started = time.perf_counter()
            pool.send([[pk] for pk in range(1, n + 1)])
            seconds = time.perf_counter() - started
            weight = (int(client.info("memory")["used_memory"]) - before) / n
            client.close()
            pool.clear_broker()
        return (
            f"  enqueue: {n / seconds:.0f} candidate messages/s from one process, about "
            f"{weight:.0f} bytes each in Redis"
        )


def _median(values: list[float]) -> float:
    import statistics

    return statistics.median(values)


def _scale_candidates(options: dict[str, Any], in_flight: int) -> int:
    return int(options["scale_candidates"] or max(40, 6 * in_flight))


def _setting(name: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SHOW {name}")
        return str(cursor.fetchone()[0])


def _aware(timestamp: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp, tz=UTC)


def _hashes(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {v for k, v in node.items() if k == "png_sha256" and isinstance(v, str)}
        for value in node.values():
            found |= _hashes(value)
        return found
    if isinstance(node, list):
        return {h for item in node for h in _hashes(item)}
    return set()
