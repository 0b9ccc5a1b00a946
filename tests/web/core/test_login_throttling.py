"""Login throttling: failed logins for one username from one address lock it out (django-axes);
many failures from one address under any names pause that address (webapp.auth)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.core.cache import caches
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

LIMIT = 3


@pytest.fixture(autouse=True)
def _throttling(settings):
    settings.AXES_ENABLED = True
    settings.AXES_FAILURE_LIMIT = LIMIT
    settings.AXES_COOLOFF_TIME = timedelta(minutes=15)
    caches["logins"].clear()  # the per-address failure counts live in the shared cache
    yield
    caches["logins"].clear()


@pytest.fixture
def irene(db):
    return UserFactory(username="irene")


def log_in(password: str, *, username: str = "irene", address: str = "198.51.100.7", url="login"):
    client = Client(REMOTE_ADDR=address)
    return client, client.post(reverse(url), {"username": username, "password": password})


def fail(times: int, **kwargs) -> None:
    for attempt in range(1, times + 1):
        _, response = log_in("wrong password", **kwargs)
        # the form again with its error; the failure that reaches the limit answers the lockout
        assert response.status_code == (429 if attempt >= LIMIT else 200)


def test_it_locks_out_a_username_and_address_after_the_failure_limit(irene):
    fail(LIMIT)
    client, response = log_in(PASSWORD)  # even the right password now
    assert response.status_code == 429
    assert "Too many failed logins" in response.text
    assert "irene" in response.text
    assert "_auth_user_id" not in client.session


def test_it_lets_the_same_user_in_from_another_address(irene):
    fail(LIMIT)
    client, response = log_in(PASSWORD, address="203.0.113.9")
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(irene.pk)


def test_it_lets_another_user_in_from_the_locked_address(irene):
    UserFactory(username="otto")
    fail(LIMIT)
    _, response = log_in(PASSWORD, username="otto")
    assert response.status_code == 302


def test_it_lets_the_user_in_again_after_the_cool_off(irene):
    fail(LIMIT)
    AccessAttempt.objects.update(attempt_time=timezone.now() - timedelta(minutes=16))
    _, response = log_in(PASSWORD)
    assert response.status_code == 302


def test_it_forgets_failures_after_a_successful_login(irene):
    fail(LIMIT - 1)
    assert log_in(PASSWORD)[1].status_code == 302
    fail(LIMIT - 1)
    assert log_in(PASSWORD)[1].status_code == 302


def test_it_throttles_the_admin_login_too(irene):
    fail(LIMIT, url="admin:login")
    _, response = log_in(PASSWORD, url="admin:login")
    assert response.status_code == 429


def test_it_counts_the_address_a_trusted_proxy_saw(irene, settings):
    settings.TRUSTED_PROXY_COUNT = 1
    for _ in range(LIMIT):
        Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="192.0.2.1, 198.51.100.7").post(
            reverse("login"), {"username": "irene", "password": "wrong"}
        )
    locked = Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="198.51.100.7")
    assert (
        locked.post(reverse("login"), {"username": "irene", "password": PASSWORD}).status_code
        == 429
    )
    # a client forging addresses to the left of what the proxy appended gains nothing
    forged = Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="1.2.3.4, 198.51.100.7")
    assert (
        forged.post(reverse("login"), {"username": "irene", "password": PASSWORD}).status_code
        == 429
    )
    other = Client(REMOTE_ADDR="10.0.0.2", HTTP_X_FORWARDED_FOR="203.0.113.9")
    assert (
        other.post(reverse("login"), {"username": "irene", "password": PASSWORD}).status_code == 302
    )


def test_it_leaves_force_login_alone(irene):
    fail(LIMIT)
    client = Client(REMOTE_ADDR="198.51.100.7")
    client.force_login(irene)  # what the other tests do: no password, no throttling
    assert client.get(reverse("home")).status_code == 200


@pytest.fixture
def spray_limit(settings):
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 4
    return 4


def test_it_pauses_an_address_that_sprays_many_user_names(irene, spray_limit):
    """One wrong password for each of many names never reached the per-name limit."""
    for number in range(spray_limit):
        _, response = log_in("wrong password", username=f"guess{number}")
        assert response.status_code == 200
    client, response = log_in(PASSWORD)  # irene's right password, from the spraying address
    assert response.status_code == 429
    assert "under any user names" in response.text
    assert "_auth_user_id" not in client.session


def test_it_keeps_other_addresses_open_while_one_is_paused(irene, spray_limit):
    for number in range(spray_limit):
        log_in("wrong password", username=f"guess{number}")
    client, response = log_in(PASSWORD, address="203.0.113.9")
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(irene.pk)


def test_it_pauses_the_admin_login_of_a_spraying_address_too(irene, spray_limit):
    for number in range(spray_limit):
        log_in("wrong password", username=f"guess{number}", url="admin:login")
    _, response = log_in(PASSWORD, url="login")
    assert response.status_code == 429


def test_it_counts_nothing_with_throttling_off(irene, spray_limit, settings):
    settings.AXES_ENABLED = False
    for number in range(spray_limit + 2):
        log_in("wrong password", username=f"guess{number}")
    _, response = log_in(PASSWORD)
    assert response.status_code == 302


def test_it_counts_address_failures_in_the_database_shared_by_every_worker(irene):
    """The count lived in each process's memory: 5 gunicorn workers allowed 5 times the limit."""
    from django.db import connection

    fail(2, username="someone-else")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM specvet_login_failures")
        assert cursor.fetchone()[0] == 1


def test_it_shares_login_counts_without_a_cache_url_by_default():
    from webapp import settings as project_settings

    assert not project_settings.CACHE_URL
    backend = project_settings.CACHES["logins"]["BACKEND"]
    assert backend == "django.core.cache.backends.db.DatabaseCache"


def test_it_answers_a_lockout_on_the_token_api_in_json(irene):
    """POST /api/token/issue/ with a password counts toward the lockout; once locked, it
    answered the HTML lockout page, which no API client (nor its schema) expects."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    client = APIClient(REMOTE_ADDR="198.51.100.7")
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=irene).key}")
    url = reverse("api_token_issue")
    statuses = [
        client.post(url, {"password": "wrong"}, format="json").status_code for _ in range(LIMIT)
    ]
    assert statuses == [403] * (LIMIT - 1) + [429]
    response = client.post(url, {"password": PASSWORD}, format="json")  # even the right one
    assert response.status_code == 429
    assert response["Content-Type"] == "application/json"
    detail = response.json()["detail"]
    assert f"locked after {LIMIT} failed attempts" in detail and "irene" in detail
    assert response["Retry-After"] == str(15 * 60)
