"""Every page and API endpoint turns anonymous visitors away, except the login page.

The URL patterns are walked from the resolver, so a URL added later (training pages, say) is
checked without touching this file. Path parameters are filled with the ids of objects that
exist, so a view that forgot its check would answer with their data.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.urls.converters import IntConverter

from tests.web.security_world import World, world_rolled_back

pytestmark = pytest.mark.django_db

PUBLIC = {"login", "admin:login"}  # log-in pages; logging out needs no one to be logged in
LOGOUT = {"logout", "admin:logout"}


def url_patterns() -> list[tuple[str, list[str], bool]]:
    """(name, path parameters, whether they are integers) of every named pattern."""
    found = []

    def walk(resolver: URLResolver, namespace: str) -> Iterator[tuple[str, URLPattern]]:
        for entry in resolver.url_patterns:
            if isinstance(entry, URLResolver):
                inner = entry.namespace or ""
                yield from walk(entry, f"{namespace}{inner}:" if inner else namespace)
            elif entry.name:
                yield f"{namespace}{entry.name}", entry

    for name, pattern in walk(get_resolver(), ""):
        converters = getattr(pattern.pattern, "converters", {})
        params = list(converters) or list(pattern.pattern.regex.groupindex)
        integers = all(isinstance(converters.get(p), IntConverter) for p in params)
        found.append((name, params, integers and bool(params)))
    return sorted({(n, tuple(p), i) for n, p, i in found})  # type: ignore[misc]


PATTERNS = url_patterns()


@pytest.fixture(scope="module")
def world(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[World]:
    with world_rolled_back(
        "plain text", django_db_blocker=django_db_blocker, tmp_path_factory=tmp_path_factory
    ) as built:
        yield built


def existing_values(world: World) -> dict[str, object]:
    """An existing object behind every path parameter the app's URLs use."""
    return {
        "spectrum_id": world.spectrum.pk,
        "curation_id": world.curation.pk,
        "number": world.curation.head_number,
        "sha256": world.image_sha,
        "job_id": world.job.pk,
        "export_id": world.export.pk,
        "run_id": world.run.pk,
        "candidate_id": world.candidate.pk,
        "entry_id": world.entry.pk,
        "campaign_id": world.campaign.pk,
        "blind_id": world.item.blind_id,
        "figure": "histograms",
        "judge_id": world.judge.pk,
        "assignment_id": world.assignment.pk,
        "judgement_id": world.judgement.pk,
        "app_label": "annotation",
        "object_id": world.curation.pk,
        "content_type_id": 1,
    }


def url_for(name: str, params: tuple[str, ...], integers: bool, world: World) -> str:
    known = existing_values(world)
    # A parameter added later (a training run id, say) gets 1: an object made first.
    kwargs = {p: known.get(p, 1 if integers else "1") for p in params}
    return reverse(name, kwargs=kwargs)


def test_it_finds_the_app_urls():
    names = {name for name, _, _ in PATTERNS}
    assert {"curation_audit", "rating_rate", "catalog_detail", "api_rating_submit"} <= names


@pytest.mark.parametrize("method", ["get", "post"])
@pytest.mark.parametrize(
    ("name", "params", "integers"), [p for p in PATTERNS if p[0] not in PUBLIC | LOGOUT]
)
def test_it_turns_anonymous_visitors_away(world, name, params, integers, method):
    url = url_for(name, params, integers, world)
    response = getattr(Client(), method)(url)
    if response.status_code == 302:
        logins = (reverse("login"), reverse("admin:login"))
        assert response["Location"].startswith(logins), (url, response["Location"])
    else:
        assert response.status_code in (401, 403), (url, response.status_code)


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_it_shows_the_login_pages_to_anonymous_visitors(name):
    assert Client().get(reverse(name)).status_code == 200


@pytest.mark.parametrize(
    ("name", "params", "integers"), [p for p in PATTERNS if p[0] not in LOGOUT]
)
def test_it_refuses_a_signed_in_post_without_the_csrf_token(world, name, params, integers):
    client = Client(enforce_csrf_checks=True)
    client.force_login(world.users["staff"])
    response = client.post(url_for(name, params, integers, world), {"comment": "x"})
    assert response.status_code == 403, (name, response.status_code)
