"""The home page counts each user's pending work, by what their roles do (issue 15)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotation.home import pending_work
from tests.factories import make_curation

pytestmark = pytest.mark.django_db


def counts(user) -> dict[str, int]:
    return {row["text"]: row["count"] for row in pending_work(user)}


def test_it_counts_the_trajectories_an_expert_can_screen(expert) -> None:
    make_curation(object_id="CUR-1", seed=1)
    make_curation(object_id="CUR-2", seed=2)
    mine = counts(expert)
    assert mine["trajectories to screen"] == 2
    assert mine["votes waiting for you"] == 0
    assert "trajectories to rate" not in mine  # not a rater


def test_it_shows_a_rater_only_rating_work(rater) -> None:
    mine = counts(rater)
    assert set(mine) == {"trajectories to rate", "pairs to compare"}


def test_it_shows_a_viewer_no_pending_work(viewer) -> None:
    assert pending_work(viewer) == []


def test_it_links_each_count_to_where_the_work_is_done(expert) -> None:
    make_curation(object_id="CUR-1", seed=1)
    client = Client()
    client.force_login(expert)
    body = client.get(reverse("home")).content.decode()
    assert 'id="pending-work"' in body
    assert (
        f'href="{reverse("curation_my_work")}"><strong class="count">1</strong> trajectories to screen'
        in body
    )


def test_it_counts_a_vetter_s_queue_as_the_vetting_page_does(owner, expert, outsider, staff):
    """Routed candidates assigned to another expert or closed by staff do not wait for this
    expert; an open audit sample's auto-accepted candidate does (annotation/catalog/queue.py)."""
    from annotation.inspections import queue_actions
    from annotation.learning import services as learning_services
    from tests.factories import make_inspected, make_spectrum

    routed = [make_spectrum(object_id=f"HOME-{i}", seed=300 + i) for i in range(3)]
    run = make_inspected(
        spectra=routed,
        verdicts={row.pk: ("YES", 0.6) for row in routed},
        created_by=owner,
        threshold=0.999,
        model=("model:a", "model a"),
    )
    waiting, assigned, closed = (run.candidates.get(spectrum=row) for row in routed)
    queue_actions.candidates_reassign(candidate_ids=[assigned.pk], expert=outsider, actor=staff)
    queue_actions.candidates_close(candidate_ids=[closed.pk], reason="bad data", actor=staff)
    auto = make_spectrum(object_id="HOME-auto", seed=310)
    make_inspected(
        spectra=[auto],
        verdicts={auto.pk: ("YES", 0.99)},
        created_by=owner,
        threshold=0.5,
        model=("model:b", "model b"),
    )
    learning_services.audit_sample_draw(
        task=run.task, model_key="model:b", per_stratum=5, actor=staff
    )
    client = Client()
    client.force_login(expert)
    remaining = client.get(reverse("vetting_queue")).context["remaining"]
    assert remaining == 2  # the waiting one and the audit sample's
    assert counts(expert)["candidates waiting for your vetting"] == remaining
    assert counts(outsider)["candidates waiting for your vetting"] == 3  # and the one assigned
