"""No score or pair judgement lands after its campaign closes (issue 11: one landed 21 ms after).

Score, judgement and close all lock the campaign row, so they serialize. The PostgreSQL tests
hold one side's transaction open and check the other waits; run them with
DATABASE_URL=postgres://postgres@127.0.0.1:5432/specvet_audit .venv/bin/pytest this file.
"""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction

from annotation.core import errors as core_errors
from annotation.core.models import AuditLog
from annotation.rating import services as rating_services
from annotation.rating.models import CampaignItem, PairJudgement, RatingAssignment, RatingCampaign
from annotation.spectra import services as spectra_services
from tests.factories import UserFactory
from tests.web.rating.test_campaigns import make_campaign


def on_postgresql(test):
    for mark in (
        pytest.mark.django_db(transaction=True, serialized_rollback=True),
        pytest.mark.skipif(
            connection.vendor != "postgresql", reason="needs PostgreSQL row locks (DATABASE_URL)"
        ),
        pytest.mark.postgres,
    ):
        test = mark(test)
    return test


@pytest.fixture
def raters(db):
    return [UserFactory(username=f"rater{i}", roles=["rater"]) for i in range(2)]


def loaded_assignment(campaign, rater) -> RatingAssignment:
    """An assignment as a request holds it: its campaign read (open) before anything else."""
    assignment = (
        RatingAssignment.objects.select_related("item__campaign")
        .filter(item__campaign=campaign, rater=rater)
        .first()
    )
    assert assignment.item.campaign.closed is False
    return assignment


def a_pair(campaign) -> PairJudgement:
    a, b = CampaignItem.objects.filter(campaign=campaign).order_by("source")[:2]
    b.spectrum = a.spectrum
    b.save()
    pair = rating_services.campaign_add_pairs(
        campaign=campaign, pairs=[(a, b)], raters_per_pair=1, actor=None
    )[0]
    judgement = PairJudgement.objects.select_related("pair__campaign").get(pair=pair)
    assert judgement.pair.campaign.closed is False
    return judgement


# --- any database ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_refuses_a_score_from_a_request_that_read_the_campaign_before_it_closed(raters, staff):
    campaign = make_campaign(raters, staff, n=2, per_item=2)
    assignment = loaded_assignment(campaign, raters[0])
    rating_services.campaign_close(campaign=RatingCampaign.objects.get(pk=campaign.pk), actor=staff)
    with pytest.raises(core_errors.WrongState, match="closed"):
        rating_services.rating_submit(assignment=assignment, rater=raters[0], score=3)
    assert RatingAssignment.objects.get(pk=assignment.pk).score is None


@pytest.mark.django_db
def test_it_refuses_a_pair_judgement_after_the_campaign_closed(raters, staff):
    campaign = make_campaign(raters, staff, n=2, per_item=1)
    judgement = a_pair(campaign)
    rating_services.campaign_close(campaign=RatingCampaign.objects.get(pk=campaign.pk), actor=staff)
    with pytest.raises(core_errors.WrongState, match="closed"):
        rating_services.pair_judgement_submit(
            judgement=judgement, rater=judgement.rater, outcome="left"
        )
    assert PairJudgement.objects.get(pk=judgement.pk).outcome == ""


@pytest.mark.django_db
def test_it_refuses_closing_twice(raters, staff):
    campaign = make_campaign(raters, staff, n=2, per_item=1)
    stale = RatingCampaign.objects.get(pk=campaign.pk)
    rating_services.campaign_close(campaign=campaign, actor=staff)
    with pytest.raises(core_errors.WrongState, match="already closed"):
        rating_services.campaign_close(campaign=stale, actor=staff)
    assert AuditLog.objects.filter(action="campaign_closed").count() == 1


# --- PostgreSQL: the two paths serialize on the campaign row ---------------------------------


def in_thread(call, *, hold: threading.Event | None = None) -> tuple[threading.Thread, dict]:
    """Run ``call`` in a thread with its own connection; with ``hold``, keep its transaction
    open (and its locks held) until ``hold`` is set."""
    outcome: dict = {}

    def worker() -> None:
        try:
            with transaction.atomic():
                outcome["value"] = call()
                outcome["done_inside"] = time.monotonic()
                if hold is not None:
                    hold.wait(timeout=20)
            outcome["committed"] = time.monotonic()
        except Exception as error:  # the outcome is what the test checks
            outcome["error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    return thread, outcome


def wait_for(outcome: dict, key: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while key not in outcome and "error" not in outcome and time.monotonic() < deadline:
        time.sleep(0.01)
    assert key in outcome, outcome


def wait_until_blocked(thread: threading.Thread, timeout: float = 10.0) -> None:
    """Until another session of this database waits on a lock (the thread's), or the thread ends.

    Event-driven, instead of sleeping a fixed time and hoping the thread got as far as the lock.
    """
    deadline = time.monotonic() + timeout
    while thread.is_alive() and time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
            )
            if cursor.fetchone()[0]:
                return
        time.sleep(0.01)


@pytest.mark.parametrize("path", ["score", "pair"])
@on_postgresql
def test_it_makes_a_write_wait_for_a_close_in_progress_then_refuses_it(raters, staff, path):
    spectra_services.tasks_seed_builtin()
    campaign = make_campaign(raters, staff, n=2, per_item=2 if path == "score" else 1)
    if path == "score":
        assignment = loaded_assignment(campaign, raters[0])
        write = lambda: rating_services.rating_submit(  # noqa: E731
            assignment=assignment, rater=raters[0], score=4
        )
    else:
        judgement = a_pair(campaign)
        write = lambda: rating_services.pair_judgement_submit(  # noqa: E731
            judgement=judgement, rater=judgement.rater, outcome="tie"
        )

    release = threading.Event()
    closer, closed = in_thread(
        lambda: rating_services.campaign_close(campaign=campaign, actor=staff), hold=release
    )
    wait_for(closed, "done_inside")
    writer, written = in_thread(write)
    wait_until_blocked(writer)
    assert writer.is_alive(), f"the write did not wait for the close: {written}"
    release.set()
    closer.join(timeout=20)
    writer.join(timeout=20)

    assert isinstance(written.get("error"), core_errors.WrongState), written
    assert "closed" in str(written["error"])
    assert not AuditLog.objects.filter(action__in=["rating_scored", "pair_judged"]).exists()


@pytest.mark.parametrize("path", ["score", "pair"])
@on_postgresql
def test_it_makes_a_close_wait_for_a_write_in_progress(raters, staff, path):
    spectra_services.tasks_seed_builtin()
    campaign = make_campaign(raters, staff, n=2, per_item=2 if path == "score" else 1)
    if path == "score":
        assignment = loaded_assignment(campaign, raters[0])
        write = lambda: rating_services.rating_submit(  # noqa: E731
            assignment=assignment, rater=raters[0], score=4
        )
    else:
        judgement = a_pair(campaign)
        write = lambda: rating_services.pair_judgement_submit(  # noqa: E731
            judgement=judgement, rater=judgement.rater, outcome="tie"
        )

    release = threading.Event()
    writer, written = in_thread(write, hold=release)
    wait_for(written, "done_inside")
    closer, closed = in_thread(
        lambda: rating_services.campaign_close(campaign=campaign, actor=staff)
    )
    wait_until_blocked(closer)
    assert closer.is_alive(), f"the close did not wait for the write: {closed}"
    release.set()
    writer.join(timeout=20)
    closer.join(timeout=20)

    assert "error" not in written and "error" not in closed, (written, closed)
    campaign.refresh_from_db()
    landed = written["value"].rated_at if path == "score" else written["value"].judged_at
    assert landed < campaign.closed_at
