"""Races on real row locks (PostgreSQL): concurrent saves and concurrent verdicts.

Run with: DATABASE_URL=postgres://postgres@127.0.0.1:5432/specvet \
    .venv/bin/pytest tests/web/curation/test_concurrency.py -q
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection

from agent.editing import EditedStep, apply_edit, edit_from_trajectory
from annotation.core import errors as core_errors
from annotation.core.models import AuditLog
from annotation.curation import selectors as curation_selectors
from annotation.curation import services as curation_services
from annotation.curation.models import Audit, Curation, CurationState
from annotation.spectra import selectors as spectra_selectors
from annotation.spectra import services as spectra_services
from tests.factories import UserFactory, make_curation

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="needs PostgreSQL row locks (DATABASE_URL)"
    ),
    pytest.mark.django_db(transaction=True, serialized_rollback=True),
]


@pytest.fixture
def people(db) -> dict[str, Any]:
    spectra_services.tasks_seed_builtin()  # a transactional test may start from a flushed database
    return {name: UserFactory(username=name) for name in ("reviser", "auditor", "second_auditor")}


def at_once(*calls: Callable[[], Any]) -> list[tuple[str, Any]]:
    """Run the calls in threads released together; each thread uses its own connection."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[tuple[str, Any]] = [("missing", None)] * len(calls)

    def worker(position: int, call: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout=10)
            outcomes[position] = ("ok", call())
        except Exception as error:  # the outcome is what the test checks
            outcomes[position] = ("error", error)
        finally:
            connection.close()

    threads = [
        threading.Thread(target=worker, args=(position, call))
        for position, call in enumerate(calls)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return outcomes


def edited(curation: Curation, think: str):
    base = curation_selectors.version_trajectory(curation_selectors.head_version(curation))
    _, answer = edit_from_trajectory(base)
    return apply_edit(
        base,
        tool=spectra_selectors.spectrum_tool(curation.spectrum),
        steps=[EditedStep(think, (6540.0, 6590.0), "H-alpha core")],
        answer=answer,
    )


def test_it_lets_exactly_one_of_two_simultaneous_saves_win(people):
    reviser = people["reviser"]
    curation = make_curation()
    curation_services.curation_screen(curation=curation, user=people["auditor"], keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    edits = [edited(curation, "First reviser tab."), edited(curation, "Second reviser tab.")]

    def save(trajectory):
        return lambda: curation_services.curation_save_revision(
            curation=Curation.objects.get(pk=curation.pk),
            user=reviser,
            base_number=1,
            trajectory=trajectory,
        )

    outcomes = at_once(save(edits[0]), save(edits[1]))
    kinds = sorted(kind for kind, _ in outcomes)
    errors = [value for kind, value in outcomes if kind == "error"]
    assert kinds == ["error", "ok"]
    assert isinstance(errors[0], core_errors.VersionConflict)
    curation.refresh_from_db()
    assert curation.head_number == 2
    assert list(curation.versions.values_list("number", flat=True)) == [1, 2]


@pytest.mark.parametrize(
    "verdicts, outcome",
    [
        (("approve", "request_changes"), "audit_round_changes_requested"),
        (("approve", "approve"), "audit_round_approved"),
    ],
)
def test_it_closes_a_round_once_when_both_verdicts_arrive_together(people, verdicts, outcome):
    reviser, first, second = people["reviser"], people["auditor"], people["second_auditor"]
    curation = make_curation()
    curation_services.curation_screen(curation=curation, user=first, keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)
    curation_services.curation_submit_for_audit(curation=curation, user=reviser, base_number=1)
    curation_services.curation_claim_audit(curation=curation, user=first)
    curation_services.curation_claim_audit(curation=curation, user=second)

    def submit(user, verdict):
        return lambda: curation_services.audit_submit(
            curation=Curation.objects.get(pk=curation.pk),
            user=user,
            version_number=1,
            verdict=verdict,
            comment="Widen the window." if verdict == "request_changes" else "",
        )

    outcomes = at_once(submit(first, verdicts[0]), submit(second, verdicts[1]))
    assert [kind for kind, _ in outcomes] == ["ok", "ok"], outcomes
    assert Audit.objects.filter(curation=curation, round=1).count() == 2
    log = AuditLog.objects.filter(object_type="Curation", object_pk=str(curation.pk))
    closing = log.filter(from_state=CurationState.IN_AUDIT).exclude(to_state=CurationState.IN_AUDIT)
    assert list(closing.values_list("action", flat=True)) == [outcome]
