"""Blinding: while a campaign is open, raters never receive the model that wrote a trajectory,
its source, or another rater's scores and comments, through pages or the API."""

from __future__ import annotations

import json

import pytest
from django.db.models import Model
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.curation import services as curation_services
from annotation.rating import services as rating_services
from annotation.rating.models import CampaignItem, PairJudgement, RatingAssignment
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_spectrum, make_trajectory

pytestmark = pytest.mark.django_db

POLICIES = ("model-a", "model-b")
OTHER_COMMENT = "zebra-comment-123"
SEED = 987654321
CONTEXT_PROCESSOR_KEYS = {
    "True",
    "False",
    "None",
    "csrf_token",
    "request",
    "user",
    "perms",
    "messages",
    "DEFAULT_MESSAGE_LEVELS",
}


@pytest.fixture
def alice(db):
    return UserFactory(username="alice", roles=["rater"])


@pytest.fixture
def bob(db):
    return UserFactory(username="bob", roles=["rater"])


@pytest.fixture
def carol(db):
    return UserFactory(username="carol", roles=["rater"])


@pytest.fixture
def stella(db):
    return UserFactory(username="stella", is_staff=True)


def paired_sources(n_spectra: int) -> list[rating_services.RatingSource]:
    """Each spectrum explained by both models; the trajectories name their model inside."""
    cv = Task.objects.get(code="CV")
    out = []
    for i in range(n_spectra):
        row = make_spectrum(object_id=f"OBJ{i}", seed=i, task=cv, label="YES")
        for j, policy in enumerate(POLICIES):
            data = curation_services.trajectory_to_stored(make_trajectory(row))
            data["policy"] = {"name": policy, "model": f"{policy}-checkpoint"}
            data["meta"] = {"note": "meta-secret"}
            out.append(
                rating_services.RatingSource(
                    source=f"secret-source-{2 * i + j}",
                    data=data,
                    policy_name=policy,
                    task=cv,
                    spectrum=row,
                    dataset="SDSS",
                )
            )
    return out


@pytest.fixture
def campaign(alice, bob, carol, stella):
    """Every rater on every item and pair; bob has scored, commented and judged everything."""
    campaign = rating_services.campaign_create(
        name="blind",
        raters=[alice, bob, carol],
        raters_per_item=3,
        sources=paired_sources(2),
        created_by=stella,
        seed=SEED,
    )
    items = list(campaign.items.order_by("source"))
    rating_services.campaign_add_pairs(
        campaign=campaign,
        pairs=[(items[0], items[1]), (items[2], items[3])],
        raters_per_pair=3,
        actor=None,
    )
    for assignment in RatingAssignment.objects.filter(item__campaign=campaign, rater=bob):
        rating_services.rating_submit(
            assignment=assignment, rater=bob, score=2, comment=OTHER_COMMENT
        )
    for judgement in PairJudgement.objects.filter(pair__campaign=campaign, rater=bob):
        rating_services.pair_judgement_submit(judgement=judgement, rater=bob, outcome="left")
    return campaign


def hidden_values(campaign) -> list[str]:
    """What a rater must not receive: models, sources, trajectory ids, meta, others' comments,
    and what leads back to the inspection run: the spectrum's object id, the campaign seed."""
    values = [*POLICIES, "checkpoint", "meta-secret", "secret-source", OTHER_COMMENT]
    values += ["OBJ0", "OBJ1", str(SEED)]
    values += [item.data["id"] for item in CampaignItem.objects.filter(campaign=campaign)]
    return values


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.mark.parametrize(
    "url_name", ["rating_rate", "rating_pairs", "rating_campaign", "rating_campaigns"]
)
def test_it_keeps_models_sources_and_others_comments_out_of_rater_pages(campaign, alice, url_name):
    args = [] if url_name == "rating_campaigns" else [campaign.pk]
    response = logged_in(alice).get(reverse(url_name, args=args))
    body = response.content.decode()
    assert response.status_code == 200
    for value in hidden_values(campaign):
        assert value not in body, value


def test_it_shows_the_rater_a_trajectory_on_the_rate_and_pairs_pages(campaign, alice):
    client = logged_in(alice)
    rate = client.get(reverse("rating_rate", args=[campaign.pk])).content.decode()
    pairs = client.get(reverse("rating_pairs", args=[campaign.pk])).content.decode()
    blind_ids = set(campaign.items.values_list("blind_id", flat=True))
    assert any(blind in rate for blind in blind_ids)
    assert sum(blind in pairs for blind in blind_ids) == 2


def _walk(value, path="context"):
    """Every leaf of a template context value, with where it was found."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _walk(inner, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for index, inner in enumerate(value):
            yield from _walk(inner, f"{path}[{index}]")
    else:
        yield path, value


@pytest.mark.parametrize("url_name", ["rating_rate", "rating_pairs"])
def test_it_gives_rater_templates_plain_values_without_hidden_data(campaign, alice, url_name):
    response = logged_in(alice).get(reverse(url_name, args=[campaign.pk]))
    context = {
        key: value
        for rendered in response.context  # one context per template rendered
        for key, value in rendered.flatten().items()
        if key not in CONTEXT_PROCESSOR_KEYS
    }
    leaves = [(path, leaf) for path, leaf in _walk(context) if not isinstance(leaf, float | int)]
    hidden = hidden_values(campaign)
    assert leaves
    for path, leaf in leaves:
        assert not isinstance(leaf, Model), f"{path} is a model instance: {leaf!r}"
        text = str(leaf)
        for value in hidden:
            assert value not in text, f"{path} holds {value!r}"


def _keys(value):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key
            yield from _keys(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _keys(inner)


@pytest.mark.parametrize("url_name", ["api_rating_next_item", "api_rating_next_pair"])
def test_it_keeps_hidden_data_out_of_the_rater_api(campaign, alice, url_name):
    response = api_for(alice).get(reverse(url_name, args=[campaign.pk]))
    text = json.dumps(response.json())
    assert response.status_code == 200
    assert response.json().get("item") or response.json().get("left")
    for value in hidden_values(campaign):
        assert value not in text, value
    forbidden_keys = {"policy", "policy_name", "source", "meta", "comment", "score"}
    assert not forbidden_keys & set(_keys(response.json()))


def test_it_keeps_hidden_data_out_of_the_campaign_apis_for_a_rater(campaign, alice):
    client = api_for(alice)
    listing = client.get(reverse("api_rating_campaigns"))
    detail = client.get(reverse("api_rating_campaign", args=[campaign.pk]))
    text = json.dumps(listing.json()) + json.dumps(detail.json())
    for value in hidden_values(campaign):
        assert value not in text, value
    assert detail.json()["raters"] is None  # no one else's progress either


ANALYSIS_URLS = [
    ("rating_analysis", []),
    ("rating_analysis_csv", ["histograms"]),
    ("rating_analysis_csv", ["judge_scores"]),
    ("api_rating_analysis", []),
    ("api_rating_analysis_figure", ["judge_scores"]),
]


def _get(user, url_name, campaign_id, *extra):
    url = reverse(url_name, args=[campaign_id, *extra])
    client = api_for(user) if url_name.startswith("api_") else logged_in(user)
    return client.get(url)


@pytest.mark.parametrize(("url_name", "args"), ANALYSIS_URLS)
def test_it_refuses_a_rater_the_analysis_while_the_campaign_is_open(
    campaign, alice, url_name, args
):
    response = _get(alice, url_name, campaign.pk, *args)
    assert response.status_code == 403
    assert "closed" in response.content.decode()
    assert OTHER_COMMENT not in response.content.decode()


@pytest.mark.parametrize(("url_name", "args"), ANALYSIS_URLS)
def test_it_opens_the_analysis_to_raters_once_closed(campaign, alice, stella, url_name, args):
    rating_services.campaign_close(campaign=campaign, actor=stella)
    response = _get(alice, url_name, campaign.pk, *args)
    assert response.status_code == 200


def test_it_refuses_a_rater_the_item_page_while_open_and_shows_it_once_closed(
    campaign, alice, stella
):
    item = campaign.items.first()
    url = reverse("rating_item", args=[campaign.pk, item.blind_id])
    assert logged_in(alice).get(url).status_code == 403
    rating_services.campaign_close(campaign=campaign, actor=stella)
    body = logged_in(alice).get(url).content.decode()
    assert item.policy_name in body and OTHER_COMMENT in body


@pytest.mark.parametrize("url_name", ["rating_analysis", "api_rating_analysis"])
def test_it_shows_the_analysis_to_staff_who_do_not_rate_before_closing(campaign, stella, url_name):
    assert _get(stella, url_name, campaign.pk).status_code == 200


def test_it_refuses_the_analysis_to_a_staff_member_who_rates(alice, stella):
    boss = UserFactory(username="boss", is_staff=True)
    campaign = rating_services.campaign_create(
        name="staff rater",
        raters=[alice, boss],
        raters_per_item=1,
        sources=paired_sources(1),
        created_by=stella,
        seed=1,
    )
    assert _get(boss, "rating_analysis", campaign.pk).status_code == 403
    assert _get(boss, "api_rating_analysis", campaign.pk).status_code == 403


def test_it_links_managers_to_the_analysis_of_a_running_campaign_unless_they_rate_in_it(
    campaign, alice, stella
):
    analysis = reverse("rating_analysis", args=[campaign.pk])
    assert (
        f'href="{analysis}"' in logged_in(stella).get(reverse("rating_campaigns")).content.decode()
    )
    boss = UserFactory(username="boss", is_staff=True)
    rated = rating_services.campaign_create(
        name="staff rater",
        raters=[alice, boss],
        raters_per_item=1,
        sources=paired_sources(1),
        created_by=stella,
        seed=1,
    )
    body = logged_in(boss).get(reverse("rating_campaigns")).content.decode()
    assert f'href="{analysis}"' in body  # boss manages "blind" and does not rate in it
    assert f'href="{reverse("rating_analysis", args=[rated.pk])}"' not in body
    assert "analysis after close" in body
