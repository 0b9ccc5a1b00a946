"""API tokens expire after API_TOKEN_TTL_HOURS; users issue new ones on a page or the API."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotation.core.models import ApiTokenOrigin, AuditLog
from tests.factories import PASSWORD, UserFactory
from webapp.auth import SIGNED_IN_AT

pytestmark = pytest.mark.django_db


@pytest.fixture
def vera(db):
    return UserFactory(username="vera", roles=["viewer"])


def token_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client


def aged(token: Token, hours: float) -> Token:
    Token.objects.filter(pk=token.pk).update(created=timezone.now() - timedelta(hours=hours))
    return token


def test_it_accepts_a_token_younger_than_the_ttl(vera, settings):
    settings.API_TOKEN_TTL_HOURS = 24
    token = aged(Token.objects.create(user=vera), 23)
    assert token_client(token.key).get(reverse("api_spectrum_list")).status_code == 200


def test_it_refuses_a_token_older_than_the_ttl_with_a_401(vera, settings):
    settings.API_TOKEN_TTL_HOURS = 24
    token = aged(Token.objects.create(user=vera), 25)
    response = token_client(token.key).get(reverse("api_spectrum_list"))
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Token")
    detail = response.json()["detail"]
    assert "API token expired on" in detail
    assert "24 hours" in detail
    assert reverse("api_token_page") in detail and reverse("api_token_issue") in detail


def test_it_defaults_to_thirty_days():
    from webapp import settings as project_settings

    assert project_settings.API_TOKEN_TTL_HOURS == 24 * 30


def test_it_refuses_to_let_a_token_issue_its_successor(vera):
    """A token once renewed itself: chained every 30 days it never expired."""
    old = Token.objects.create(user=vera)
    response = token_client(old.key).post(reverse("api_token_issue"))
    assert response.status_code == 403
    assert "a token cannot issue its successor" in response.json()["detail"]
    assert Token.objects.get(user=vera).key == old.key


def test_it_refuses_a_wrong_password_sent_with_a_token(vera):
    old = Token.objects.create(user=vera)
    response = token_client(old.key).post(
        reverse("api_token_issue"), {"password": "not it"}, format="json"
    )
    assert response.status_code == 403
    assert "password is wrong" in response.json()["detail"]
    assert Token.objects.get(user=vera).key == old.key


def test_it_issues_a_new_token_with_the_password_and_ends_the_old_one(vera):
    old = Token.objects.create(user=vera)
    response = token_client(old.key).post(
        reverse("api_token_issue"), {"password": PASSWORD}, format="json"
    )
    assert response.status_code == 201
    assert ApiTokenOrigin.objects.get(token__user=vera).via == "password"
    assert response["Cache-Control"] == "no-store"
    body = response.json()
    assert body["key"] != old.key and body["expired"] is False
    assert token_client(old.key).get(reverse("api_spectrum_list")).status_code == 401  # invalid
    assert token_client(body["key"]).get(reverse("api_spectrum_list")).status_code == 200


def test_it_lets_a_signed_in_user_replace_an_expired_token(vera, settings):
    settings.API_TOKEN_TTL_HOURS = 1
    aged(Token.objects.create(user=vera), 2)
    client = APIClient()
    client.force_login(vera)
    status = client.get(reverse("api_token")).json()["token"]
    assert status["expired"] is True
    key = client.post(reverse("api_token_issue")).json()["key"]
    assert token_client(key).get(reverse("api_spectrum_list")).status_code == 200


def test_it_shows_no_token_through_the_api_before_one_is_issued(vera):
    client = APIClient()
    client.force_authenticate(vera)
    assert client.get(reverse("api_token")).json() == {"token": None}


def test_it_shows_a_new_key_on_the_page_once(vera):
    client = Client()
    client.force_login(vera)
    assert "You have no API token yet" in client.get(reverse("api_token_page")).text
    response = client.post(reverse("api_token_page"))
    key = Token.objects.get(user=vera).key
    assert key in response.text
    assert "no-cache" in response["Cache-Control"] or "no-store" in response["Cache-Control"]
    again = client.get(reverse("api_token_page")).text
    assert key not in again
    assert "Expires" in again


def test_it_marks_an_expired_token_on_the_page(vera, settings):
    settings.API_TOKEN_TTL_HOURS = 1
    aged(Token.objects.create(user=vera), 2)
    client = Client()
    client.force_login(vera)
    assert "expired: issue a new one" in client.get(reverse("api_token_page")).text


def test_it_records_an_issued_token_in_the_audit_log_without_its_key(vera):
    client = Client()
    client.force_login(vera)
    client.post(reverse("api_token_page"))
    client.post(reverse("api_token_page"))
    entries = AuditLog.objects.filter(action="api_token_issued")
    assert [e.comment for e in entries.order_by("pk")] == [
        "first token, via session",
        "replaced the previous token, via session",
    ]
    # request.user is a lazy proxy: its class name was recorded as the object type.
    assert {(e.object_type, e.object_pk) for e in entries} == {("User", str(vera.pk))}
    key = Token.objects.get(user=vera).key
    assert all(key not in str(vars(entry)) for entry in entries)


def test_it_keeps_anonymous_visitors_off_the_token_page():
    response = Client().get(reverse("api_token_page"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_it_challenges_an_anonymous_api_call_with_a_401():
    """It answered 403, which tells a client nothing about signing in."""
    response = APIClient().get(reverse("api_spectrum_list"))
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_it_answers_an_unknown_token_with_a_401():
    response = token_client("0" * 40).get(reverse("api_spectrum_list"))
    assert response.status_code == 401
    assert "Invalid token" in response.data["detail"]


def test_it_still_answers_a_signed_in_user_without_the_role_with_a_403():
    client = APIClient()
    client.force_login(UserFactory(username="nobody", roles=[]))
    assert client.get(reverse("api_spectrum_list")).status_code == 403


# --- a token family's lifetime -------------------------------------------------------------------


def signed_in_hours_ago(user, hours: float) -> Client:
    client = Client()
    client.force_login(user)
    session = client.session
    session[SIGNED_IN_AT] = (timezone.now() - timedelta(hours=hours)).isoformat()
    session.save()
    return client


def test_it_ends_a_token_at_the_family_cap_after_the_sign_in_it_was_issued_on(vera, settings):
    settings.API_TOKEN_TTL_HOURS = 720
    settings.API_TOKEN_FAMILY_MAX_HOURS = 100
    client = signed_in_hours_ago(vera, 99)
    client.post(reverse("api_token_page"))
    token = Token.objects.get(user=vera)
    assert token_client(token.key).get(reverse("api_spectrum_list")).status_code == 200
    ApiTokenOrigin.objects.filter(token=token).update(
        proved_at=timezone.now() - timedelta(hours=101)
    )
    response = token_client(token.key).get(reverse("api_spectrum_list"))
    assert response.status_code == 401
    assert "at most 100 hours after the password sign-in" in response.json()["detail"]


def test_it_reissues_from_an_old_session_no_later_than_the_cap(vera, settings):
    settings.API_TOKEN_TTL_HOURS = 720
    settings.API_TOKEN_FAMILY_MAX_HOURS = 100
    client = signed_in_hours_ago(vera, 90)
    for _ in range(3):  # reissuing keeps the session's proof: the cap does not move
        client.post(reverse("api_token_page"))
    status = client.get(reverse("api_token")).json()["token"]
    expires = datetime.fromisoformat(status["expires_at"].replace("Z", "+00:00"))
    assert timedelta(hours=9) < expires - timezone.now() <= timedelta(hours=10)


def test_it_starts_a_new_family_on_a_fresh_sign_in(vera, settings):
    settings.API_TOKEN_FAMILY_MAX_HOURS = 100
    client = Client()
    client.force_login(vera)
    client.post(reverse("api_token_page"))
    origin = ApiTokenOrigin.objects.get(token__user=vera)
    assert origin.via == "session"
    assert timezone.now() - origin.proved_at < timedelta(minutes=5)
