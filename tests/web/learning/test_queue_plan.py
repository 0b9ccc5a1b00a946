"""The active queue's SQL has no OR of two id subqueries, with or without an open audit sample
(issue 34: PostgreSQL runs `id IN (a) OR id IN (b)` as a per-row subplan, scanned linearly once
the queue outgrows work_mem; the next item at 10^6 candidates took over seven minutes), and the
routed and conflicting candidates are one UNION, not `needs_expert OR EXISTS (conflict)` (a
filter on every candidate of every run)."""

from __future__ import annotations

import pytest

from annotation.catalog.queue import vetter_queue_rows
from annotation.learning import services
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = pytest.mark.django_db


def _sql(user) -> str:
    return str(vetter_queue_rows(user).query)


def test_the_queue_without_an_open_audit_sample_is_one_id_set() -> None:
    sql = _sql(UserFactory())
    assert sql.count('"annotation_candidate"."id" IN (') == 1, sql
    assert " UNION " in sql
    assert ' OR "annotation_candidate"."id" IN' not in sql
    assert '"needs_expert" OR' not in sql


def test_the_queue_with_an_open_audit_sample_is_one_union_of_id_sets(owner, staff) -> None:
    spectrum = make_spectrum(object_id="P-1", seed=77)
    run = make_inspected(
        spectra=[spectrum], verdicts={spectrum.pk: ("YES", 0.99)}, created_by=owner, threshold=0.5
    )
    sample = services.audit_sample_draw(
        task=run.task, model_key=run.model_key, per_stratum=2, actor=staff
    )
    assert sample.items.exists()
    sql = _sql(UserFactory())
    # the sample's items are a third member of the queue's UNION ...
    members = sql[sql.index('"annotation_candidate"."id" IN (') :]
    assert members.count(" UNION ") >= 2 and "annotation_auditsampleitem" in members, sql
    # ... and the only id set OR'ed is theirs, sparing them staff's filter (never the queue's)
    ored = sql.split(' OR "annotation_candidate"."id" IN (')
    assert len(ored) == 2, sql
    assert 'FROM "annotation_auditsampleitem"' in ored[1].split("WHERE")[0], sql
