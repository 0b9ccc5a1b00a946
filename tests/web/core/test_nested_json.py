"""Every JSON entry point answers a body nested past the limit with 400, never a 500."""

from __future__ import annotations

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from agent.bounded_json import MAX_JSON_DEPTH
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db

BOMB = "[" * 100_000 + "]" * 100_000  # 200 KB; json.loads raises RecursionError on it


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def post_raw(client: APIClient, url: str, text: str):
    return client.generic("POST", url, text, content_type="application/json")


def test_it_answers_a_deeply_nested_render_body_with_400_for_a_viewer(viewer):
    spectrum = make_spectrum()
    response = post_raw(
        client_for(viewer), reverse("api_spectrum_render", args=[spectrum.pk]), BOMB
    )
    assert response.status_code == 400
    detail = response.json()["detail"]
    assert "the request body" in detail
    assert "100000 levels deep" in detail and f"limit is {MAX_JSON_DEPTH}" in detail


@pytest.mark.parametrize("url_name", ["api_run_create", "api_curation_drafts"])
def test_it_answers_a_deeply_nested_body_with_400_on_each_create_api(ml_engineer, url_name):
    response = post_raw(client_for(ml_engineer), reverse(url_name), BOMB)
    assert response.status_code == 400
    assert "levels deep" in response.json()["detail"]


def test_it_still_reads_a_body_nested_to_the_limit(viewer):
    spectrum = make_spectrum()
    nested_label = "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1)
    body = '{"wavelength_range": [6500, 6600], "label": ' + nested_label + "}"
    response = post_raw(
        client_for(viewer), reverse("api_spectrum_render", args=[spectrum.pk]), body
    )
    # Parsed, then refused by the serializer for what it holds, not by the parser for its depth.
    assert response.status_code == 400
    assert "label" in response.json()


def test_it_still_refuses_nan_in_a_body(viewer):
    spectrum = make_spectrum()
    body = '{"wavelength_range": [NaN, 6600]}'
    response = post_raw(
        client_for(viewer), reverse("api_spectrum_render", args=[spectrum.pk]), body
    )
    assert response.status_code == 400
    assert "JSON parse error" in response.json()["detail"]
