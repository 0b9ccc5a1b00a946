"""Object-level checks for an outsider: signed in, but no part of the object.

curation/test_permissions.py covers who may act on a curation and rating/test_blinding.py what a
rater of the campaign may see; this covers the rest: a rater of another campaign gets 404 for
this one (pages, API, reads and writes, open or closed), and someone outside a curation sees an
auditor's verdict or a voter's vote no sooner than the participants do.
"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.curation import services as curation_services
from annotation.rating import services as rating_services
from annotation.rating.models import RatingAssignment
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_curation, make_spectrum, make_trajectory
from tests.web.curation.test_views import SECRET, first_verdict_in, in_vote

pytestmark = pytest.mark.django_db

OTHER_COMMENT = "rater-comment-7"


@pytest.fixture
def stella(db):
    return UserFactory(username="stella", is_staff=True)


@pytest.fixture
def alice(db):
    return UserFactory(username="alice", roles=["rater"])


@pytest.fixture
def outside_rater(db):
    """A rater of another campaign, and an expert outside the curation under test."""
    return UserFactory(username="outsider", roles=["rater", "expert"])


def make_campaign(name: str, raters, creator, n: int = 2):
    cv = Task.objects.get(code="CV")
    sources = []
    for i in range(n):
        row = make_spectrum(object_id=f"{name}-{i}", task=cv)
        for policy in ("model-a", "model-b"):
            sources.append(
                rating_services.RatingSource(
                    source=f"{name}:{i}:{policy}",
                    data=curation_services.trajectory_to_stored(make_trajectory(row)),
                    policy_name=policy,
                    task=cv,
                    spectrum=row,
                )
            )
    campaign = rating_services.campaign_create(
        name=name, raters=raters, raters_per_item=len(raters), sources=sources, created_by=creator
    )
    items = list(campaign.items.order_by("source"))
    rating_services.campaign_add_pairs(
        campaign=campaign, pairs=[(items[0], items[1])], raters_per_pair=len(raters), actor=None
    )
    return campaign


@pytest.fixture
def campaign(alice, stella):
    """alice rates it and has commented; stella made it."""
    campaign = make_campaign("theirs", [alice], stella)
    for assignment in RatingAssignment.objects.filter(item__campaign=campaign):
        rating_services.rating_submit(
            assignment=assignment, rater=alice, score=4, comment=OTHER_COMMENT
        )
    return campaign


@pytest.fixture
def outsider_campaign(outside_rater, stella):
    """The outsider rates a campaign of their own, so they are a rater, just not of `campaign`."""
    return make_campaign("mine", [outside_rater], stella)


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


CAMPAIGN_READS = [
    ("rating_campaign", lambda c: []),
    ("rating_rate", lambda c: []),
    ("rating_pairs", lambda c: []),
    ("rating_analysis", lambda c: []),
    ("rating_analysis_csv", lambda c: ["judge_scores"]),
    ("rating_item", lambda c: [c.items.first().blind_id]),
    ("api_rating_campaign", lambda c: []),
    ("api_rating_next_item", lambda c: []),
    ("api_rating_item_plot", lambda c: [c.items.first().blind_id]),
    ("api_rating_next_pair", lambda c: []),
    ("api_rating_analysis", lambda c: []),
    ("api_rating_analysis_figure", lambda c: ["judge_scores"]),
]


def _get(user, name, campaign, extra):
    client = api_for(user) if name.startswith("api_") else logged_in(user)
    return client.get(reverse(name, args=[campaign.pk, *extra(campaign)]))


@pytest.mark.parametrize("closed", [False, True], ids=["open", "closed"])
@pytest.mark.parametrize(("name", "extra"), CAMPAIGN_READS, ids=[n for n, _ in CAMPAIGN_READS])
def test_it_answers_404_to_a_rater_of_another_campaign(
    campaign, outsider_campaign, outside_rater, stella, name, extra, closed
):
    if closed:
        rating_services.campaign_close(campaign=campaign, actor=stella)
    response = _get(outside_rater, name, campaign, extra)
    body = response.content.decode()
    assert response.status_code == 404
    assert OTHER_COMMENT not in body and "model-a" not in body and "theirs" not in body


# Closing is refused to every rater by role (403) before the campaign is even looked up.
@pytest.mark.parametrize(
    ("name", "status"),
    [("rating_rate", 404), ("rating_pairs", 404), ("rating_campaign_close", 403)],
)
def test_it_answers_404_to_an_outsiders_post_and_changes_nothing(
    campaign, outsider_campaign, outside_rater, name, status
):
    assignment = RatingAssignment.objects.filter(item__campaign=campaign).first()
    response = logged_in(outside_rater).post(
        reverse(name, args=[campaign.pk]), {"assignment": assignment.pk, "score": 0}
    )
    campaign.refresh_from_db()
    assignment.refresh_from_db()
    assert response.status_code == status
    assert assignment.score == 4 and not campaign.closed


def test_it_refuses_an_outsider_scoring_another_campaigns_item_through_the_api(
    campaign, outsider_campaign, outside_rater
):
    assignment = RatingAssignment.objects.filter(item__campaign=campaign).first()
    response = api_for(outside_rater).post(
        reverse("api_rating_submit", args=[assignment.pk]), {"score": 0}, format="json"
    )
    assignment.refresh_from_db()
    assert response.status_code == 403
    assert OTHER_COMMENT not in response.content.decode()
    assert assignment.score == 4


def test_it_lists_only_the_outsiders_own_campaigns(campaign, outsider_campaign, outside_rater):
    page = logged_in(outside_rater).get(reverse("rating_campaigns")).content.decode()
    listed = api_for(outside_rater).get(reverse("api_rating_campaigns")).json()
    assert "mine" in page and "theirs" not in page
    assert [row["name"] for row in listed] == ["mine"]


# --- curation: blinding holds for those outside the trajectory too ---------------------------------


@pytest.fixture
def people(db):
    names = ("reviser", "auditor", "second_auditor")
    return {name: UserFactory(username=name, roles=["expert"]) for name in names}


BLINDED_READS = [
    ("curation_detail", {}),
    ("curation_detail", {"tab": "history"}),
    ("curation_audit", {}),
    ("api_curation_detail", {}),
    ("api_curation_history", {}),
]


@pytest.mark.parametrize(("name", "query"), BLINDED_READS)
def test_it_hides_a_verdict_from_an_outsider_until_both_are_in(people, outside_rater, name, query):
    curation = make_curation()
    first_verdict_in(curation, people["reviser"], people["auditor"], people["second_auditor"])
    client = api_for(outside_rater) if name.startswith("api_") else logged_in(outside_rater)
    response = client.get(reverse(name, args=[curation.pk]), query)
    assert response.status_code == 200
    assert SECRET not in response.content.decode()
    assert "request_changes" not in response.content.decode()


@pytest.mark.parametrize("name", ["curation_vote", "curation_detail"])
def test_it_hides_votes_from_an_outsider_until_the_vote_closes(people, outside_rater, name):
    curation = in_vote(make_curation(), *people.values())
    curation_services.vote_cast(
        curation=curation, user=people["reviser"], value="reject", comment="VOTE-NOTE-9"
    )
    body = logged_in(outside_rater).get(reverse(name, args=[curation.pk])).content.decode()
    assert "VOTE-NOTE-9" not in body
    assert "reviser</strong>: reject" not in body


def test_it_hides_votes_from_an_outsider_in_the_api_until_the_vote_closes(people, outside_rater):
    curation = in_vote(make_curation(), *people.values())
    curation_services.vote_cast(
        curation=curation, user=people["reviser"], value="reject", comment="VOTE-NOTE-9"
    )
    response = api_for(outside_rater).get(reverse("api_curation_detail", args=[curation.pk]))
    assert response.json()["votes"] == []
    assert "VOTE-NOTE-9" not in response.content.decode()
