"""The active queue's SQL has no OR of two id subqueries while no audit sample is open
(issue 34: PostgreSQL runs `id IN (a) OR id IN (b)` as a per-row subplan, scanned linearly once
the queue outgrows work_mem; the next item at 10^6 candidates took over seven minutes)."""

from __future__ import annotations

import pytest

from annotation.catalog import selectors as catalog
from annotation.learning import queue
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


def test_the_queue_without_an_open_audit_sample_is_one_id_subquery() -> None:
    user = UserFactory()
    rows = queue.active_queue(user=user, base=catalog.vetting_queue(user))
    sql = str(rows.query)
    assert sql.count('."id" IN (SELECT') == 1, sql
    assert ' OR "annotation_candidate"."id" IN' not in sql
