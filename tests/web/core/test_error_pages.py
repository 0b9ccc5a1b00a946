"""The site's own 404/500 pages with DEBUG on (the demo runs with it), and quiet 403s (issue 26)."""

from __future__ import annotations

import logging

import pytest
from django.test import Client
from django.urls import reverse

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

DJANGO_DEBUG_MARKERS = ("Django tried these URL patterns", "URLconf", "Traceback", "DEBUG = True")


@pytest.fixture
def demo(settings):
    settings.DEBUG = True
    settings.FRIENDLY_ERROR_PAGES = True
    return settings


def client_for(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def assert_own_page(body: str) -> None:
    for marker in DJANGO_DEBUG_MARKERS:
        assert marker not in body


def test_it_answers_a_missing_object_with_its_own_404_page_in_the_demo(demo, expert):
    response = client_for(expert).get(reverse("spectrum_detail", args=[987654]))
    assert response.status_code == 404
    body = response.content.decode()
    assert "<h1>Not found</h1>" in body and "/spectra/987654/" in body
    assert f'href="{reverse("home")}"' in body
    assert_own_page(body)


def test_it_answers_an_unknown_address_with_its_own_404_page_in_the_demo(demo, expert):
    response = client_for(expert).get("/no-such-page/<b>x</b>/")
    assert response.status_code == 404
    body = response.content.decode()
    assert "<h1>Not found</h1>" in body and "<b>x</b>" not in body
    assert_own_page(body)


def test_it_still_adds_the_missing_slash_in_the_demo(demo, expert):
    response = client_for(expert).get(reverse("spectrum_list").rstrip("/"))
    assert response.status_code == 301


def test_it_answers_a_crash_with_its_own_500_page_and_logs_it_once(
    demo, expert, monkeypatch, caplog
):
    def boom(user):
        raise RuntimeError("the database went away")

    monkeypatch.setattr("annotation.home.pending_work", boom)
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = client_for(expert).get(reverse("home"))
    assert response.status_code == 500
    body = response.content.decode()
    assert "Something went wrong on our side" in body and "the database went away" not in body
    assert_own_page(body)
    errors = [r for r in caplog.records if r.name == "django.request"]
    assert len(errors) == 1 and errors[0].exc_info is not None


def test_it_gives_django_its_debug_pages_back_when_asked(demo, expert):
    demo.FRIENDLY_ERROR_PAGES = False
    response = client_for(expert).get("/no-such-page/")
    assert "Django tried these URL patterns" in response.content.decode()


def test_it_logs_a_403_as_one_line_without_a_traceback(demo, caplog):
    viewer = UserFactory(username="vera", roles=["viewer"])
    with caplog.at_level(logging.WARNING, logger="django.request"):
        response = client_for(viewer).get(reverse("run_create"))
    assert response.status_code == 403
    refusals = [r for r in caplog.records if getattr(r, "status_code", None) == 403]
    assert len(refusals) == 1
    assert refusals[0].exc_info is None and refusals[0].exc_text is None


def _stream_handlers_reached(name: str) -> list[logging.Handler]:
    """The settings' console handlers a record logged on ``name`` reaches (pytest's left out)."""
    reached: list[logging.Handler] = []
    logger: logging.Logger | None = logging.getLogger(name)
    while logger is not None:
        reached += [h for h in logger.handlers if type(h) is logging.StreamHandler]
        if not logger.propagate:
            break
        logger = logger.parent
    return reached


def test_it_prints_each_django_log_line_once():
    assert len(_stream_handlers_reached("django.request")) == 1
