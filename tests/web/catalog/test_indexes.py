"""The catalog's common pages are index walks, not sorts of every matching row (PostgreSQL).

A million-row catalog is only responsive if the list's ORDER BY is served by an index; on a
small test table the planner would rather sort, so sequential scans and sorts are priced out
and the plan is read: whatever still needs a full Sort node has no index that serves it.
"""

from __future__ import annotations

import re

import pytest
from django.db import connection

from annotation.catalog import selectors as catalog
from annotation.catalog.selectors import CatalogFilters

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="reads PostgreSQL query plans"),
    pytest.mark.django_db,
]

FULL_SORT = re.compile(r"(^|->\s+)Sort\s+\(")  # a Sort node; Incremental Sort is fine

SERVED = [
    (CatalogFilters(), catalog.DEFAULT_SORT),
    (CatalogFilters(task="CV"), catalog.DEFAULT_SORT),
    (CatalogFilters(task="CV", verdict="YES"), "-confidence"),
    (CatalogFilters(), "-confidence"),
    (CatalogFilters(), "-snr"),
    (CatalogFilters(expert_decision="none"), "-snr"),
    (CatalogFilters(confidence_min=0.6, confidence_max=0.7), catalog.DEFAULT_SORT),
]


def plan_of(filters: CatalogFilters, sort: str) -> str:
    page = catalog.catalog_rows(filters, sort).only(*catalog.LIST_FIELDS)[:50]
    sql, params = page.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute(f"EXPLAIN {sql}", params)
        return "\n".join(row[0] for row in cursor.fetchall())


@pytest.mark.parametrize(("filters", "sort"), SERVED, ids=lambda value: repr(value)[:60])
def test_it_serves_the_page_order_from_an_index(filters: CatalogFilters, sort: str) -> None:
    plan = plan_of(filters, sort)
    full_sorts = [line for line in plan.splitlines() if FULL_SORT.search(line)]
    assert not full_sorts, plan
