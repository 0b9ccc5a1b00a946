"""Survey scale (issue 34): does the inspection path keep a model server saturated?

    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/specvet_scale
    .venv/bin/python -m annotation.bench.scale --candidates 2000 --slots 64 --latency 0.2 \\
        --workers 1 2 4 --redis redis://127.0.0.1:6379/7

A loopback stand-in model server (``annotation.bench.standin``: ``--slots`` sequences at once,
``--latency`` seconds per turn, ``--turns`` model turns per episode) answers real Celery workers
(``celery -A webapp worker --pool threads``) that run ``--candidates`` candidates of runs on a
registered endpoint pointing at it, on PostgreSQL and Redis, exactly as a deployment would. For
each number of worker processes it prints, in this order:

- verified: every stored verdict against the stand-in's answer for the candidate's own spectrum
  (recomputed here from the spectrum: its I0 rendered and hashed), each candidate with exactly
  its rollouts, each rollout naming its own spectrum. Any mismatch aborts before a speed.
- ``occupancy: NN %``: busy share of the server's slot-seconds over the middle 80 % of the run
  (steady state; the whole run is shown beside it), from the stand-in's own record;
- ``ratio to ideal: X.XX``: wall time from the first message sent to the last verdict stored,
  over candidates x turns x latency / slots;
- orchestration CPU per candidate-turn: the worker processes' CPU (user + system, from /proc,
  start-up excluded) over the turns the stand-in served;
- database transactions and rows written per candidate (PostgreSQL's own counters for this
  database, the benchmark's polls subtracted);
- peak memory of a worker process (VmHWM).

``--worker-code DIR`` runs the workers from another checkout (``/work/main``: the path before
issue 34, with ``--batch 1 --concurrency 64``). The benchmark keeps a pool of synthetic spectra
(dataset ``bench-scale``) between invocations; its runs are deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
POOL_DATASET = "bench-scale"
ENDPOINT = "scale-standin"
POLL_SECONDS = 1.0
STALL_SECONDS = 180.0


# --- measuring -------------------------------------------------------------------------------------


@dataclass
class Case:
    workers: int
    wall: float
    ideal: float
    occupancy: float
    occupancy_all: float
    mean_busy: float
    cpu_per_turn_ms: float
    turns: int
    transactions: float
    rows: float
    peak_mib: float
    rejected: int


def database_counters() -> tuple[int, int]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT xact_commit + xact_rollback, tup_inserted + tup_updated + tup_deleted "
            "FROM pg_stat_database WHERE datname = current_database()"
        )
        transactions, rows = cursor.fetchone()
    return int(transactions), int(rows)


def spectra_pool(n: int) -> list[int]:
    """``n`` synthetic CV spectra of the benchmark's pool, stored on first use."""
    from agent import synthetic
    from annotation.spectra import services as spectra_services
    from annotation.spectra.models import Spectrum

    have = list(
        Spectrum.objects.filter(dataset=POOL_DATASET).order_by("pk").values_list("pk", flat=True)
    )
    if len(have) < n:
        missing = n - len(have)
        samples = synthetic.generate_split(
            "CV",
            "test",
            n_pos=max(1, missing // 3),
            n_neg=missing - max(1, missing // 3),
            seed=34 + len(have),
        )
        values = []
        for index, sample in enumerate(samples):
            sample.spectrum.object_id = f"scale-{len(have) + index:07d}"
            values.append(sample.spectrum)
        for start in range(0, len(values), 200):
            result = spectra_services.spectra_store(
                values=values[start : start + 200],
                dataset=POOL_DATASET,
                source_name="bench scale (synthetic)",
                synthetic=True,
            )
            have.extend(row.pk for row in result.created)
    return have[:n]


def expected_answers(spectrum_ids: list[int]) -> dict[int, str]:
    """What the stand-in answers for each spectrum, recomputed here from the spectrum."""
    from agent.tool import SpectralVisualizationTool
    from annotation.bench.standin import answer_for_png
    from annotation.spectra.models import Spectrum
    from annotation.spectra.selectors import spectrum_value

    answers = {}
    for row in Spectrum.objects.filter(pk__in=spectrum_ids).iterator(chunk_size=200):
        result = SpectralVisualizationTool(spectrum_value(row)).render_full()
        if result.png is None:
            raise SystemExit(f"spectrum {row.pk} does not render: {result.text}")
        answers[row.pk] = answer_for_png(result.png)
    return answers


def episode_cpu_ms(spectrum_ids: list[int], *, turns: int, n: int = 100) -> float:
    """CPU per model turn of the episodes themselves (reading the spectrum, rendering, parsing,
    the tool) run in this process against ``StandInPolicy``: no HTTP, no database writes."""
    from agent.inspection_tasks import get_task
    from agent.rollout import inspect
    from annotation.bench.standin import StandInPolicy
    from annotation.spectra.models import Spectrum
    from annotation.spectra.selectors import spectrum_value

    rows = list(Spectrum.objects.filter(pk__in=spectrum_ids[:n]))
    policy, task = StandInPolicy(turns), get_task("CV")
    inspect(spectrum_value(rows[0]), task, policy, max_tool_calls=max(1, turns - 1))
    started = time.process_time()
    for row in rows:
        inspect(spectrum_value(row), task, policy, max_tool_calls=max(1, turns - 1))
    return 1000 * (time.process_time() - started) / (len(rows) * turns)


def verify(run_ids: list[int], expected: dict[int, str], *, turns: int) -> str:
    """Every candidate done with the stand-in's answer for its own spectrum, one rollout of
    ``turns`` steps naming that spectrum; abort with the count otherwise."""
    from django.db.models import Count

    from annotation.inspections.models import Candidate, CandidateState, Rollout

    candidates = list(
        Candidate.objects.filter(run_id__in=run_ids).values_list(
            "pk", "spectrum_id", "state", "verdict", "error"
        )
    )
    rollouts = dict(
        Rollout.objects.filter(candidate__run_id__in=run_ids)
        .values_list("candidate_id")
        .annotate(n=Count("id"))
        .values_list("candidate_id", "n")
    )
    named = dict(
        Rollout.objects.filter(candidate__run_id__in=run_ids).values_list(
            "candidate_id", "data__meta__spectrum_id"
        )
    )
    steps = dict(
        Rollout.objects.filter(candidate__run_id__in=run_ids).values_list(
            "candidate_id", "n_tool_calls"
        )
    )
    wrong = []
    for pk, spectrum_id, state, verdict, error in candidates:
        why = ""
        if state != CandidateState.DONE:
            why = f"state {state} {error[:120]!r}"
        elif verdict != expected[spectrum_id]:
            why = f"verdict {verdict!r}, the stand-in said {expected[spectrum_id]!r}"
        elif rollouts.get(pk) != 1:
            why = f"{rollouts.get(pk, 0)} rollouts stored"
        elif named.get(pk) != spectrum_id:
            why = f"its rollout names spectrum {named.get(pk)}, not {spectrum_id}"
        elif steps.get(pk) != turns - 1:
            why = f"{steps.get(pk)} tool calls, not {turns - 1}"
        if why:
            wrong.append((pk, why))
    if wrong:
        raise SystemExit(
            f"verification failed: {len(wrong)} of {len(candidates)} candidates (first: "
            f"candidate {wrong[0][0]}: {wrong[0][1]}); no speed is reported for a path that "
            "stores wrong answers"
        )
    return (
        f"verified: {len(candidates)} of {len(candidates)} stored verdicts equal the stand-in's "
        f"answer for their own spectrum (one rollout each, {turns - 1} tool calls, naming its "
        "own spectrum)"
    )


# --- one case ---------------------------------------------------------------------------------------


def run_case(options: argparse.Namespace, workers: int, spectrum_ids: list[int]) -> Case:
    from django.conf import settings

    from annotation.bench.standin import LatencyModel, StandIn
    from annotation.bench.workers import Workers
    from annotation.core.models import ModelEndpoint
    from annotation.inspections import services as inspections_services
    from annotation.inspections.models import Candidate, CandidateState, InspectionRun
    from annotation.spectra.models import Task

    server = StandIn(
        slots=options.slots,
        latency=LatencyModel(options.latency, cv=options.latency_cv, seed=options.seed),
        turns=options.turns,
        reject=options.reject,
    )
    url = server.start()
    ModelEndpoint.objects.update_or_create(
        name=ENDPOINT,
        defaults={"base_url": url, "model": "stand-in", "timeout": max(60.0, 30 * options.latency)},
    )
    settings.INSPECTION_MODEL_BATCH_SIZE = options.batch
    spec = {
        "kind": "openai",
        "endpoint": ENDPOINT,
        "max_retries": 4,
        "backoff": 0.2,
        "timeout": max(60.0, 30 * options.latency),
    }
    task = Task.objects.get(code="CV")
    run_ids: list[int] = []
    batches: list[list[int]] = []
    left = options.candidates
    while left > 0:
        chosen = spectrum_ids[: min(left, len(spectrum_ids))]
        run = inspections_services.inspection_run_create(
            task=task,
            spectrum_ids=chosen,
            policy_spec=spec,
            sampling={"temperature": 0.0},
            created_by=None,
            name="bench scale",
            max_tool_calls=max(1, options.turns - 1),
            enqueue=False,
        )
        run_ids.append(run.pk)
        ids = list(run.candidates.order_by("pk").values_list("pk", flat=True))
        batches += inspections_services.candidate_batches(policy_spec=spec, candidate_ids=ids)
        left -= len(chosen)
    expected = expected_answers(spectrum_ids[: min(options.candidates, len(spectrum_ids))])

    pool = Workers(options.redis, Path(options.log_dir), code=Path(options.worker_code))
    try:
        pool.start(
            workers,
            threads=options.concurrency,
            pool="threads",
            env={"INSPECTION_IN_FLIGHT": str(options.in_flight)},
            name="scale",
        )
        pool.wait_ready()
        cpu_before = pool.cpu_seconds()
        transactions_before, rows_before = database_counters()
        sent = pool.send(batches)
        sent_at = sent - (time.time() - time.monotonic()) - server.record.started
        polls, last_done, last_change = 0, -1, time.monotonic()
        finished = Candidate.objects.filter(
            run_id__in=run_ids,
            state__in=[CandidateState.DONE, CandidateState.FAILED, CandidateState.CANCELLED],
        )
        while True:
            done = finished.count()
            polls += 1
            if done >= options.candidates:
                break
            if done != last_done:
                last_done, last_change = done, time.monotonic()
            elif time.monotonic() - last_change > STALL_SECONDS:
                raise SystemExit(
                    f"no candidate finished for {STALL_SECONDS:.0f} s ({done} of "
                    f"{options.candidates}); worker logs in {options.log_dir}"
                )
            time.sleep(POLL_SECONDS)
        end_wall = time.time()
        cpu = pool.cpu_seconds() - cpu_before
        peak = pool.peak_mib()
        time.sleep(1.0)  # PostgreSQL publishes its counters at most every second
        transactions_after, rows_after = database_counters()
        polls += 1
    finally:
        pool.stop()
        pool.clear_broker()
        server.stop()
    from django.db.models import Max

    last = Candidate.objects.filter(run_id__in=run_ids).aggregate(Max("finished_at"))
    stored_at = last["finished_at__max"].timestamp() if last["finished_at__max"] else end_wall
    wall = stored_at - sent
    print(verify(run_ids, expected, turns=options.turns), flush=True)
    InspectionRun.objects.filter(pk__in=run_ids).delete()
    record = server.record
    start, end = sent_at, sent_at + wall
    n = options.candidates
    return Case(
        workers=workers,
        wall=wall,
        ideal=n * options.turns * options.latency / options.slots,
        occupancy=record.occupancy(start + 0.1 * wall, start + 0.9 * wall),
        occupancy_all=record.occupancy(start, end),
        mean_busy=record.mean_busy(start + 0.1 * wall, start + 0.9 * wall),
        cpu_per_turn_ms=1000 * cpu / max(1, record.served),
        turns=record.served,
        transactions=(transactions_after - transactions_before - polls) / n,
        rows=(rows_after - rows_before) / n,
        peak_mib=peak,
        rejected=record.rejected,
    )


# --- the command ------------------------------------------------------------------------------------


def parser() -> argparse.ArgumentParser:
    found = argparse.ArgumentParser(
        prog="python -m annotation.bench.scale", description=__doc__.split("\n\n")[0]
    )
    found.add_argument("--candidates", type=int, default=2000)
    found.add_argument("--slots", type=int, default=64, help="sequences the server runs at once")
    found.add_argument("--latency", type=float, default=0.2, help="mean seconds per model turn")
    found.add_argument("--latency-cv", type=float, default=0.0, help="0: a fixed latency")
    found.add_argument("--turns", type=int, default=2, help="model turns per episode (1-9)")
    found.add_argument("--workers", type=int, nargs="+", default=[1], help="worker processes")
    found.add_argument("--concurrency", type=int, default=2, help="pool threads per worker")
    found.add_argument("--in-flight", type=int, default=0, help="K per process (default: slots)")
    found.add_argument("--batch", type=int, default=0, help="candidates per message (default K)")
    found.add_argument("--reject", action="store_true", help="429 when full instead of queueing")
    found.add_argument("--seed", type=int, default=34)
    found.add_argument("--redis", default="redis://127.0.0.1:6379/7")
    found.add_argument("--worker-code", default=str(ROOT), help="checkout the workers run from")
    found.add_argument("--log-dir", default="")
    return found


def check(options: argparse.Namespace) -> None:
    limits = {
        "--candidates": (options.candidates, 1, 1_000_000),
        "--slots": (options.slots, 1, 4096),
        "--turns": (options.turns, 1, 9),
        "--concurrency": (options.concurrency, 1, 512),
        "--in-flight": (options.in_flight, 1, 4096),
        "--batch": (options.batch, 1, 10_000),
    }
    for flag, (value, low, high) in limits.items():
        if not low <= value <= high:
            raise SystemExit(f"{flag} must be {low}-{high}; got {value}")
    if not 0.001 <= options.latency <= 120:
        raise SystemExit(f"--latency must be 0.001-120 seconds; got {options.latency}")
    for count in options.workers:
        if not 1 <= count <= 64:
            raise SystemExit(f"--workers must each be 1-64; got {count}")
    if not (Path(options.worker_code) / "webapp" / "celery.py").is_file():
        raise SystemExit(f"--worker-code {options.worker_code} is not a specvet checkout")


def main(argv: list[str] | None = None) -> None:
    options = parser().parse_args(argv)
    options.in_flight = options.in_flight or options.slots
    options.batch = options.batch or options.in_flight
    check(options)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from annotation.bench.candidates import conditions

    if connection.vendor != "postgresql":
        raise SystemExit("needs PostgreSQL for the workers to share: set DATABASE_URL")
    import tempfile

    options.log_dir = options.log_dir or tempfile.mkdtemp(prefix="bench-scale-")
    call_command("migrate", verbosity=0)
    spectrum_ids = spectra_pool(min(options.candidates, 1000))
    code = "this checkout" if Path(options.worker_code).resolve() == ROOT else options.worker_code
    print(
        f"scale: {options.candidates} candidates x {options.turns} model turns; stand-in "
        f"{options.slots} slots, {options.latency:g} s per turn "
        f"({'log-normal cv ' + str(options.latency_cv) if options.latency_cv else 'fixed'}), "
        f"{'429 when full' if options.reject else 'queued when full'}; workers: threads x "
        f"{options.concurrency}, K = {options.in_flight} in flight per process, "
        f"{options.batch} candidates per message; worker code: {code}",
        flush=True,
    )
    print(f"conditions: {conditions()}", flush=True)
    reference = episode_cpu_ms(spectrum_ids, turns=options.turns)
    for workers in options.workers:
        case = run_case(options, workers, spectrum_ids)
        print(f"--- {workers} worker process{'es' if workers > 1 else ''}")
        print(
            f"occupancy: {100 * case.occupancy:.0f} %   (middle 80 % of the run; whole run "
            f"{100 * case.occupancy_all:.0f} %; mean {case.mean_busy:.1f} of {options.slots} "
            "slots busy)"
        )
        print(
            f"ratio to ideal: {case.wall / case.ideal:.2f}   (wall {case.wall:.1f} s from the "
            f"first message to the last verdict stored; ideal {case.ideal:.1f} s = "
            f"{options.candidates} x {options.turns} x {options.latency:g} / {options.slots})"
        )
        print(f"throughput: {options.candidates / case.wall:.1f} candidates/s")
        print(
            f"orchestration CPU per candidate-turn: {case.cpu_per_turn_ms:.1f} ms   (worker "
            f"processes, {case.turns} turns served"
            + (f", {case.rejected} refused with 429" if case.rejected else "")
            + f"); the episode itself in-process: {reference:.1f} ms (reading, rendering, "
            f"parsing), so orchestration adds {case.cpu_per_turn_ms - reference:.1f} ms"
        )
        print(
            f"database per candidate: {case.transactions:.2f} transactions, "
            f"{case.rows:.1f} rows written"
        )
        print(f"peak worker memory: {case.peak_mib:.0f} MiB per process", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
