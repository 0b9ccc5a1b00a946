"""CSRF on htmx requests: base.html hands htmx the token, and a POST without it is refused."""

from __future__ import annotations

import json
import re

import pytest
from django.test import Client
from django.urls import reverse

from annotation.rating.models import RatingAssignment
from tests.factories import UserFactory
from tests.web.core.test_object_access import make_campaign

pytestmark = pytest.mark.django_db

HX_HEADERS = re.compile(r"<body hx-headers='([^']*)'>")


@pytest.fixture
def campaign(rater):
    return make_campaign("csrf", [rater], UserFactory(username="stella", is_staff=True), n=1)


def strict_client(user) -> Client:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def htmx_token(client: Client, url: str) -> str:
    """The token htmx sends, read from the page the way htmx reads it (body hx-headers)."""
    match = HX_HEADERS.search(client.get(url).content.decode())
    assert match, "the page gives htmx no headers"
    return json.loads(match.group(1))["X-CSRFToken"]


def score_post(client: Client, campaign, **headers):
    assignment = RatingAssignment.objects.filter(item__campaign=campaign).first()
    url = reverse("rating_rate", args=[campaign.pk])
    return client.post(
        url, {"assignment": assignment.pk, "score": 3}, HTTP_HX_REQUEST="true", **headers
    )


def test_it_gives_htmx_the_csrf_token_on_every_page(rater, campaign):
    client = strict_client(rater)
    assert htmx_token(client, reverse("home"))
    assert htmx_token(client, reverse("rating_rate", args=[campaign.pk]))


def test_it_accepts_an_htmx_post_carrying_the_token_header(rater, campaign):
    client = strict_client(rater)
    token = htmx_token(client, reverse("rating_rate", args=[campaign.pk]))
    response = score_post(client, campaign, HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 200
    assert RatingAssignment.objects.filter(item__campaign=campaign, score=3).exists()


def test_it_refuses_an_htmx_post_without_the_token(rater, campaign):
    client = strict_client(rater)
    client.get(reverse("rating_rate", args=[campaign.pk]))  # the cookie alone is not enough
    response = score_post(client, campaign)
    assert response.status_code == 403
    assert not RatingAssignment.objects.filter(score__isnull=False).exists()
