"""Time the catalog under load: bulk-generate rows, then measure the list page and the CSV
export server-side under common filters, printing p50/p95 per filter.

    createdb -h 127.0.0.1 -U postgres specvet_bench
    export DATABASE_URL=postgres://postgres@127.0.0.1:5432/specvet_bench
    .venv/bin/python manage.py migrate
    .venv/bin/python manage.py bench_catalog --rows 1000000
    dropdb -h 127.0.0.1 -U postgres specvet_bench

Each timed request goes through the whole Django stack (middleware, session, view, template)
with the test Client as a logged-in user; only the network is left out. Every case is run
once untimed first, so the figures are for a warm database and warm caches.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from urllib.parse import urlencode
from uuid import uuid4

import numpy as np
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.http import StreamingHttpResponse
from django.http.response import HttpResponseBase
from django.test import Client
from django.urls import reverse

from annotation.catalog import selectors as catalog
from annotation.core.roles import Role
from annotation.inspections.models import CatalogEntry, InspectionRun
from annotation.spectra.models import Task

BENCH_USER = "bench-catalog"
TASK_CODES = ("CV", "CS", "SS", "MG", "WD", "O", "B", "A")
SURVEYS = (("LAMOST", 0.6), ("SDSS", 0.3), ("DESI", 0.1))
POLICIES = ("rule-based", "qwen2.5-vl-7b-sft", "qwen2.5-vl-7b-grpo")
COPY_COLUMNS = (
    "run_id",
    "object_id",
    "survey",
    "ra",
    "dec",
    "task_code",
    "verdict",
    "confidence",
    "snr",
    "policy_name",
    "model_key",
    "model_label",
    "expert_decision",
    "vetted_label",
    "label_state",
    "synthetic",
    "created_at",
)


EXPORT_VIEWS = {
    "CSV": "catalog_export_csv",
    "VOTable": "catalog_export_votable",
    "FITS": "catalog_export_fits",
}


def _streamed(response: HttpResponseBase) -> Iterator[bytes]:
    """The blocks of an export answer. The test Client's stubs type every answer as an
    HttpResponse, but the export views stream (a StreamingHttpResponse or FileResponse, whose
    content is a plain iterator under WSGI)."""
    return cast(Iterator[bytes], cast(StreamingHttpResponse, response).streaming_content)


def _max_rss_bytes() -> int:
    """This process's peak resident set so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass(frozen=True)
class Case:
    name: str
    params: dict[str, str]


CASES = (
    Case("no filter", {}),
    Case("task=CV", {"task": "CV"}),
    Case(
        "task=CV verdict=YES sort=-confidence",
        {"task": "CV", "verdict": "YES", "sort": "-confidence"},
    ),
    Case("survey=LAMOST task=CS", {"survey": "LAMOST", "task": "CS"}),
    Case("confidence 0.60-0.70", {"confidence_min": "0.6", "confidence_max": "0.7"}),
    Case("object_id prefix J1234", {"object_id": "J1234"}),
    Case("expert_decision=none sort=-snr", {"expert_decision": "none", "sort": "-snr"}),
    Case("task=MG page 100", {"task": "MG", "page": "100"}),
)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (p95 of 30 samples is the 29th smallest)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _designation(ra: float, dec: float) -> str:
    """A LAMOST-style designation, JHHMMSS.ss+DDMMSS.s, from a position in degrees."""
    hours = ra / 15.0
    h, rem = divmod(hours * 3600.0, 3600.0)
    m, s = divmod(rem, 60.0)
    sign = "+" if dec >= 0 else "-"
    d, rem = divmod(abs(dec) * 3600.0, 3600.0)
    dm, ds = divmod(rem, 60.0)
    return f"J{int(h):02d}{int(m):02d}{s:05.2f}{sign}{int(d):02d}{int(dm):02d}{ds:04.1f}"


def generated_rows(
    *, rows: int, batch: int, run_id: int, seed: int, start: datetime
) -> Iterator[list[tuple[Any, ...]]]:
    """Realistic catalog rows in batches, as tuples in COPY_COLUMNS order.

    created_at steps 30 s per row from `start` (through COPY; the ORM path on other
    databases stamps the insertion time instead, as auto_now_add does).
    """
    rng = np.random.default_rng(seed)
    survey_names = [name for name, _ in SURVEYS]
    survey_weights = [weight for _, weight in SURVEYS]
    for offset in range(0, rows, batch):
        n = min(batch, rows - offset)
        ra = rng.uniform(0.0, 360.0, n)
        dec = np.degrees(np.arcsin(rng.uniform(-0.5, 1.0, n)))  # mostly northern, like LAMOST
        tasks = rng.choice(TASK_CODES, n)
        surveys = rng.choice(survey_names, n, p=survey_weights)
        verdicts = rng.choice(["YES", "NO", ""], n, p=[0.18, 0.8, 0.02])
        confidence = np.clip(0.5 + 0.5 * rng.beta(4.0, 1.5, n), 0.5, 1.0)
        snr = np.round(rng.lognormal(3.0, 0.8, n), 2)
        snr_missing = rng.random(n) < 0.01
        expert = rng.choice(["", "YES", "NO", "unsure"], n, p=[0.97, 0.01, 0.015, 0.005])
        synthetic = rng.random(n) < 0.1
        policies = rng.choice(POLICIES, n)
        yield [
            (
                run_id,
                _designation(float(ra[i]), float(dec[i])),
                str(surveys[i]),
                round(float(ra[i]), 6),
                round(float(dec[i]), 6),
                str(tasks[i]),
                str(verdicts[i]),
                0.0 if not verdicts[i] else round(float(confidence[i]), 4),
                None if snr_missing[i] else float(snr[i]),
                str(policies[i]),
                f"bench:{policies[i]}",
                str(policies[i]),
                str(expert[i]),
                "",
                "",
                bool(synthetic[i]),
                start + timedelta(seconds=30 * (offset + i)),
            )
            for i in range(n)
        ]


def _insert_postgresql(batches: Iterator[list[tuple[Any, ...]]]) -> None:
    table = CatalogEntry._meta.db_table
    with connection.cursor() as cursor:
        raw = cursor.cursor  # the psycopg cursor under Django's wrapper
        statement = f"COPY {table} ({', '.join(COPY_COLUMNS)}) FROM STDIN"
        for rows in batches:
            with raw.copy(statement) as copy:
                for row in rows:
                    copy.write_row(row)


def _insert_orm(batches: Iterator[list[tuple[Any, ...]]], batch: int) -> None:
    for rows in batches:
        CatalogEntry.objects.bulk_create(
            [CatalogEntry(**dict(zip(COPY_COLUMNS, row, strict=True))) for row in rows],
            batch_size=batch,
        )


class Command(BaseCommand):
    help = (
        "Bulk-generate catalog rows, then print p50/p95 server time of the catalog list page "
        "and the CSV export under common filters. Removes its rows unless --keep."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--rows", type=int, default=1_000_000)
        parser.add_argument("--batch", type=int, default=20_000, help="rows per insert batch")
        parser.add_argument("--repeats", type=int, default=30, help="timed requests per case")
        parser.add_argument(
            "--export-rows", type=int, default=1000, help="CSV rows streamed per export request"
        )
        parser.add_argument(
            "--full-exports",
            action="store_true",
            help="also export every row as CSV, VOTable and FITS: time, size and peak memory",
        )
        parser.add_argument(
            "--measure-export", choices=sorted(EXPORT_VIEWS), help=argparse.SUPPRESS
        )
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--keep", action="store_true", help="keep the generated rows")
        parser.add_argument(
            "--existing",
            action="store_true",
            help="generate nothing; time the rows already in the catalog (e.g. kept with --keep)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["measure_export"]:
            self._measure_export(options["measure_export"])
            return
        for name in ("rows", "batch", "repeats", "export_rows"):
            if options[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
        user = get_user_model().objects.create_user(username=f"{BENCH_USER}-{uuid4().hex[:12]}")
        # A throwaway reader: the viewer role is all the catalog needs, and no audited grant is
        # made for an account that lives only as long as this command.
        Group.objects.get_or_create(name=Role.VIEWER.value)[0].user_set.add(user)
        run = None
        try:
            if options["existing"]:
                total = CatalogEntry.objects.count()
                if not total:
                    raise CommandError("--existing: the catalog has no rows to time")
                summary = f"{total:,} existing rows"
            else:
                run = self._make_run()
                seconds = self._generate(run, options)
                summary = f"{options['rows']:,} rows inserted in {seconds:.1f} s"
            self.stdout.write(
                f"bench_catalog: {summary} on {connection.vendor}; {options['repeats']} timed "
                f"requests per case after one warm-up; page size {catalog.PAGE_SIZE}; CSV export "
                f"of the first {options['export_rows']:,} rows"
            )
            self._report(self._measure(user, options))
            if options["full_exports"]:
                self._report_full_exports()
        finally:
            user.delete()
            if run is not None and not options["keep"]:
                run.delete()
                self.stdout.write("removed the generated rows (use --keep to keep them)")

    def _make_run(self) -> InspectionRun:
        task = Task.objects.filter(code="CV").first() or Task.objects.first()
        if task is None:
            raise CommandError("no task is defined; run `manage.py seed_tasks` first")
        return InspectionRun.objects.create(
            name="bench_catalog",
            task=task,
            policy_spec={"kind": "rule-based"},
            policy_info={"name": "bench_catalog"},
        )

    def _generate(self, run: InspectionRun, options: dict[str, Any]) -> float:
        started = time.perf_counter()
        start = datetime(2025, 1, 1, tzinfo=UTC)
        batches = generated_rows(
            rows=options["rows"],
            batch=options["batch"],
            run_id=run.pk,
            seed=options["seed"],
            start=start,
        )
        if connection.vendor == "postgresql":
            _insert_postgresql(batches)
        else:
            _insert_orm(batches, options["batch"])
        with connection.cursor() as cursor:
            table = CatalogEntry._meta.db_table
            # VACUUM sets the visibility map as autovacuum would on a settled table; without
            # it, the capped counts cannot be index-only scans right after a bulk load. It
            # cannot run inside a transaction (as in the tests), where ANALYZE has to do.
            if connection.vendor == "postgresql" and not connection.in_atomic_block:
                cursor.execute(f"VACUUM ANALYZE {table}")
            else:
                cursor.execute(f"ANALYZE {table}" if connection.vendor != "sqlite" else "ANALYZE")
        return time.perf_counter() - started

    def _client(self, user: Any) -> Client:
        hosts = [h.lstrip(".") for h in settings.ALLOWED_HOSTS if h not in ("*", "")]
        host = "testserver" if "testserver" in hosts or not hosts else hosts[0]
        client = Client(HTTP_HOST=host)
        client.force_login(user)
        return client

    def _measure(self, user: Any, options: dict[str, Any]) -> list[dict[str, Any]]:
        client = self._client(user)
        results = []
        for case in CASES:
            list_url = f"{reverse('catalog_list')}?{urlencode(case.params)}"
            api_url = f"{reverse('api_catalog_list')}?{urlencode(case.params)}"
            export_params = {k: v for k, v in case.params.items() if k != "page"}
            export_params["limit"] = str(options["export_rows"])
            export_url = f"{reverse('catalog_export_csv')}?{urlencode(export_params)}"
            results.append(
                {
                    "case": case,
                    "matches": self._matches(case),
                    "list": self._time_list(client, list_url, options["repeats"]),
                    "api": self._time_list(client, api_url, options["repeats"]),
                    "csv": self._time_export(client, export_url, options["repeats"]),
                }
            )
        client.logout()
        return results

    def _matches(self, case: Case) -> str:
        rows = catalog.catalog_rows(catalog.filters_from_query(case.params))
        return catalog.catalog_page(rows).count_label

    def _time_list(self, client: Client, url: str, repeats: int) -> list[float]:
        times = []
        for attempt in range(repeats + 1):
            started = time.perf_counter()
            response = client.get(url)
            elapsed = time.perf_counter() - started
            if response.status_code != 200:
                raise CommandError(f"{url} answered {response.status_code}")
            if attempt:  # the first one warms up
                times.append(elapsed)
        return times

    def _time_export(self, client: Client, url: str, repeats: int) -> list[float]:
        times = []
        for attempt in range(repeats + 1):
            started = time.perf_counter()
            response = client.get(url)
            # Consuming the content closes the response (the test Client's wrapper does it).
            body = b"".join(_streamed(response))
            elapsed = time.perf_counter() - started
            if response.status_code != 200 or not body:
                raise CommandError(f"{url} answered {response.status_code}")
            if attempt:  # the first one warms up
                times.append(elapsed)
        return times

    def _report_full_exports(self) -> None:
        """Every row in each format, each in a fresh process that reports its own peak memory.

        A fresh process, because this one's resident set already holds whatever generating and
        timing the rows left in the allocator: an export could reuse it and look free.
        """
        self.stdout.write(
            f"\nfull exports (every row, cap {catalog.EXPORT_ROW_LIMIT:,}), each through the view "
            "in a fresh process; peak = its maximum resident set minus the level after Django "
            "started and served one small request"
        )
        self.stdout.write(f"{'format':<8}{'rows':>12}{'seconds':>10}{'MB out':>10}{'peak MB':>10}")
        for name in EXPORT_VIEWS:
            completed = subprocess.run(
                [sys.executable, "manage.py", "bench_catalog", "--measure-export", name],
                capture_output=True,
                text=True,
                check=False,
                cwd=settings.BASE_DIR,
            )
            if completed.returncode != 0:
                raise CommandError(f"the {name} export failed: {completed.stderr[-2000:]}")
            figures = json.loads(completed.stdout.strip().splitlines()[-1])
            self.stdout.write(
                f"{name:<8}{figures['rows']:>12}{figures['seconds']:>10.1f}"
                f"{figures['bytes'] / 1e6:>10.3f}{figures['peak_bytes'] / 1e6:>10.1f}"
            )

    def _measure_export(self, name: str) -> None:
        """Run one full export in this (fresh) process and print its figures as JSON."""
        user = get_user_model().objects.create_user(username=f"{BENCH_USER}-{uuid4().hex[:12]}")
        Group.objects.get_or_create(name=Role.VIEWER.value)[0].user_set.add(user)
        try:
            client = self._client(user)
            warm = client.get(reverse(EXPORT_VIEWS[name]), {"limit": "10"})
            b"".join(_streamed(warm))
            baseline = _max_rss_bytes()
            started = time.perf_counter()
            response = client.get(reverse(EXPORT_VIEWS[name]))
            size = sum(len(block) for block in _streamed(response))
            seconds = time.perf_counter() - started
            if response.status_code != 200:
                raise CommandError(f"{name} export answered {response.status_code}")
            rows = response.get("X-Catalog-Rows") or str(CatalogEntry.objects.count())
            self.stdout.write(
                json.dumps(
                    {
                        "rows": int(rows),
                        "seconds": seconds,
                        "bytes": size,
                        "peak_bytes": max(0, _max_rss_bytes() - baseline),
                    }
                )
            )
        finally:
            user.delete()

    def _report(self, results: list[dict[str, Any]]) -> None:
        width = max(len(result["case"].name) for result in results)
        shown = max(8, *(len(result["matches"]) for result in results))
        header = (
            f"{'case':<{width}}  {'matches':>{shown}}  {'list p50':>8}  {'list p95':>8}  "
            f"{'csv p50':>8}  {'csv p95':>8}  {'api p50':>8}  {'html/api':>8}   (ms)"
        )
        self.stdout.write(header)
        self.stdout.write("-" * len(header))
        for result in results:
            list_ms = [1000 * t for t in result["list"]]
            csv_ms = [1000 * t for t in result["csv"]]
            api_ms = [1000 * t for t in result["api"]]
            self.stdout.write(
                f"{result['case'].name:<{width}}  {result['matches']:>{shown}}  "
                f"{statistics.median(list_ms):8.1f}  {percentile(list_ms, 0.95):8.1f}  "
                f"{statistics.median(csv_ms):8.1f}  {percentile(csv_ms, 0.95):8.1f}  "
                f"{statistics.median(api_ms):8.1f}  "
                f"{statistics.median(list_ms) / statistics.median(api_ms):8.2f}"
            )
