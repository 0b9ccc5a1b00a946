"""Counts past COUNT_CAP: the planner's estimate, labelled as one (issue 16)."""

from __future__ import annotations

import pytest
from django.db import connection

from annotation.catalog import selectors as catalog
from annotation.catalog.selectors import CatalogFilters, CatalogPage
from annotation.inspections.models import CatalogEntry, InspectionRun
from annotation.spectra.models import Task


def a_run() -> InspectionRun:
    return InspectionRun.objects.create(
        name="estimate", task=Task.objects.get(code="CV"), policy_spec={"kind": "rule-based"}
    )


def page(*, count: int, capped: bool, estimate: int | None) -> CatalogPage:
    return CatalogPage(
        entries=[],
        number=1,
        page_size=50,
        count=count,
        count_capped=capped,
        count_estimate=estimate,
    )


def test_it_labels_an_exact_count_as_a_plain_number() -> None:
    assert page(count=1234, capped=False, estimate=None).count_label == "1,234"


def test_it_labels_the_planner_estimate_as_an_estimate_rounded_to_two_figures() -> None:
    label = page(count=10_000, capped=True, estimate=4_213_977).count_label
    assert label == "about 4,200,000 (estimate)"


def test_it_keeps_the_lower_bound_when_there_is_no_estimate_or_it_is_below_the_count() -> None:
    assert page(count=10_000, capped=True, estimate=None).count_label == "10,000+"
    assert page(count=10_000, capped=True, estimate=8_000).count_label == "10,000+"


@pytest.mark.django_db
def test_it_estimates_nothing_when_the_count_is_exact(monkeypatch) -> None:
    monkeypatch.setattr(catalog, "COUNT_CAP", 5)
    run = a_run()
    CatalogEntry.objects.bulk_create(
        CatalogEntry(run=run, object_id=f"J{i:04d}", survey="LAMOST", task_code="CV")
        for i in range(3)
    )
    result = catalog.catalog_page(catalog.catalog_rows(CatalogFilters()))
    assert (result.count, result.count_capped, result.count_estimate) == (3, False, None)


@pytest.mark.postgres
@pytest.mark.django_db
@pytest.mark.skipif(connection.vendor != "postgresql", reason="reads PostgreSQL's planner")
def test_it_estimates_a_capped_count_from_the_planner_on_postgresql(monkeypatch) -> None:
    monkeypatch.setattr(catalog, "COUNT_CAP", 10)
    run = a_run()
    CatalogEntry.objects.bulk_create(
        CatalogEntry(run=run, object_id=f"J{i:04d}", survey="LAMOST", task_code="CV")
        for i in range(400)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {CatalogEntry._meta.db_table}")
    result = catalog.catalog_page(catalog.catalog_rows(CatalogFilters(task="CV")))
    assert result.count_capped
    assert result.count_estimate is not None
    assert 200 <= result.count_estimate <= 800  # statistics, not a count
    assert result.count_label.endswith("(estimate)")
