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
