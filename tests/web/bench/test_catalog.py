"""The catalog benchmark command: it generates rows, times every case and cleans up.

Only the shape of its report is checked, never a timing (the machine decides those).
"""

from __future__ import annotations

import io
import json
import re
import subprocess

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from annotation.bench import catalog as bench_catalog
from annotation.inspections.models import CatalogEntry, InspectionRun

pytestmark = pytest.mark.django_db

ROW = re.compile(r"^(?P<case>.+?)\s{2,}(?P<matches>[\d,]+\+?)(?:\s+\d+\.\d+){6}$")


def run_bench(*args: str) -> str:
    out = io.StringIO()
    call_command("bench_catalog", *args, stdout=out)
    return out.getvalue()


def test_it_prints_p50_and_p95_for_every_case_and_removes_its_rows():
    output = run_bench("--rows", "2000", "--batch", "500", "--repeats", "2", "--export-rows", "50")
    lines = output.splitlines()
    assert lines[0].startswith("bench_catalog: 2,000 rows inserted")
    header = next(line for line in lines if line.startswith("case"))
    assert header.split()[1:8] == ["matches", "list", "p50", "list", "p95", "csv", "p50"]
    rows = {m["case"].strip(): m["matches"] for line in lines if (m := ROW.match(line))}
    assert list(rows) == [case.name for case in bench_catalog.CASES]
    assert rows["no filter"] == "2,000"
    assert not CatalogEntry.objects.exists()
    assert not InspectionRun.objects.exists()
    assert not get_user_model().objects.filter(username__startswith="bench-catalog").exists()


def test_it_keeps_the_rows_when_asked():
    run_bench("--rows", "300", "--repeats", "1", "--keep")
    assert CatalogEntry.objects.count() == 300
    assert set(CatalogEntry.objects.values_list("task_code", flat=True)) <= set(
        bench_catalog.TASK_CODES
    )


def test_it_times_the_rows_already_there_without_adding_or_removing_any():
    run_bench("--rows", "200", "--repeats", "1", "--keep")
    output = run_bench("--existing", "--repeats", "1")
    assert output.startswith("bench_catalog: 200 existing rows")
    assert CatalogEntry.objects.count() == 200


def test_it_refuses_to_time_an_empty_catalog():
    with pytest.raises(CommandError, match="no rows to time"):
        run_bench("--existing")


def test_it_refuses_a_row_count_below_one():
    with pytest.raises(CommandError, match="--rows must be at least 1"):
        run_bench("--rows", "0")


@pytest.mark.parametrize(
    ("ra", "dec", "expected"),
    [
        (0.0, 0.0, "J000000.00+000000.0"),
        (188.5, -12.25, "J123400.00-121500.0"),
        (15.0 + 1 / 240, 45.5, "J010001.00+453000.0"),
    ],
)
def test_it_writes_lamost_style_designations(ra, dec, expected):
    assert bench_catalog._designation(ra, dec) == expected


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [(list(range(1, 21)), 0.95, 19), (list(range(1, 31)), 0.95, 29), ([7.0], 0.95, 7.0)],
)
def test_it_takes_the_nearest_rank_percentile(values, fraction, expected):
    assert bench_catalog.percentile(values, fraction) == expected


def test_it_measures_one_full_export_as_json():
    run_bench("--rows", "300", "--repeats", "1", "--keep")
    figures = json.loads(run_bench("--measure-export", "VOTable").strip().splitlines()[-1])
    assert figures["rows"] == 300
    assert figures["bytes"] > 0 and figures["seconds"] > 0 and figures["peak_bytes"] >= 0
    assert not get_user_model().objects.filter(username__startswith="bench-catalog").exists()


def test_it_reports_each_full_export_from_a_fresh_process(monkeypatch):
    calls = []

    def fake_run(command, **kwargs):
        calls.append(command)
        figures = {"rows": 300, "seconds": 1.5, "bytes": 2_000_000, "peak_bytes": 12_000_000}
        return subprocess.CompletedProcess(command, 0, stdout=json.dumps(figures) + "\n")

    monkeypatch.setattr(bench_catalog.subprocess, "run", fake_run)
    output = run_bench("--rows", "300", "--repeats", "1", "--full-exports")
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("full exports"))
    table = {line.split()[0]: line.split()[1:] for line in lines[start + 2 : start + 5]}
    assert set(table) == {"CSV", "VOTable", "FITS"}
    assert table["FITS"] == ["300", "1.5", "2.000", "12.0"]
    assert [command[-1] for command in calls] == ["CSV", "VOTable", "FITS"]
