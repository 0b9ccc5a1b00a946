"""The load script itself, run briefly against a live server so it cannot rot. No timings are
asserted: only that requests were made and none failed."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import call_command
from django.db import connection


@pytest.mark.postgres
@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="concurrent writers: SQLite's shared in-memory test database refuses them",
)
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_it_plays_experts_against_a_live_server_without_errors(live_server):
    out = io.StringIO()
    call_command(
        "loadtest",
        users=2,
        seconds=2,
        url=live_server.url,
        think="0,0.1",
        catalog_spectra=4,
        campaign_items=4,
        audits_per_user=2,
        stdout=out,
    )
    report = out.getvalue()
    result = re.search(r"RESULT requests=(\d+) .* errors=(\d+)", report)
    assert result, report
    assert int(result.group(1)) > 0 and int(result.group(2)) == 0, report
    assert "logins before the window (not in the figures above): 2," in report


@pytest.mark.postgres
@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="concurrent writers: SQLite's shared in-memory test database refuses them",
)
@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_it_steps_an_open_model_up_reports_saturation_and_cleans_up(live_server):
    from django.contrib.auth import get_user_model

    from annotation.bench.loadtest import USER_PREFIX
    from annotation.inspections.models import InspectionRun
    from annotation.rating.models import RatingCampaign
    from annotation.spectra.models import Spectrum

    out = io.StringIO()
    call_command(
        "loadtest",
        users=2,
        url=live_server.url,
        open_model=True,
        rates="2,4",
        step_seconds=1,
        p95_limit_ms=60_000,
        catalog_spectra=4,
        campaign_items=4,
        audits_per_user=2,
        cleanup=True,
        stdout=out,
    )
    report = out.getvalue()
    assert "machine: " in report and "after: machine: " in report
    steps = re.findall(r"^\s+(\d+\.\d)\s+\d+\.\d\s+(\d+)\s", report, re.MULTILINE)
    assert [rate for rate, _ in steps] == ["2.0", "4.0"], report
    assert all(int(requests) > 0 for _, requests in steps), report
    assert "saturation: 4 arrivals/s" in report, report
    assert not RatingCampaign.objects.exists()
    assert not InspectionRun.objects.exists()
    assert not Spectrum.objects.filter(dataset="loadtest", curation__isnull=True).exists()
    assert (
        not get_user_model()
        .objects.filter(username__startswith=USER_PREFIX, is_active=True)
        .exists()
    )
