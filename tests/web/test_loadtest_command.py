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
