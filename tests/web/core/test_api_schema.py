"""The served schema: an unknown ?format= is a documented 400, and uploads are binary parts."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(viewer) -> APIClient:
    client = APIClient()
    client.force_authenticate(viewer)
    return client


def served(api: APIClient) -> dict:
    response = api.get(reverse("api_schema"), {"format": "json"})
    assert response.status_code == 200
    return json.loads(response.content)


def test_it_refuses_an_unknown_schema_format_with_a_documented_400(api):
    response = api.get(reverse("api_schema"), {"format": "AAA"})  # was an undocumented 404
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    assert "'AAA' is not one of json, yaml" in response.json()["format"][0]
    documented = served(api)["paths"]["/api/schema/"]["get"]["responses"]
    assert "400" in documented and "404" not in documented


def test_it_still_serves_the_schema_as_yaml_and_json(api):
    assert api.get(reverse("api_schema")).content.startswith(b"openapi: ")
    assert api.get(reverse("api_schema"), {"format": "yaml"}).content.startswith(b"openapi: ")
    assert served(api)["openapi"].startswith("3.")


def test_it_declares_uploaded_files_as_binary_parts(api):
    """The import's `file` was a URI string: a generated client sent text, refused with 400."""
    schemas = served(api)["components"]["schemas"]
    assert schemas["CurationImportInput"]["properties"]["file"] == {
        "type": "string",
        "format": "binary",
    }
    files = schemas["SpectrumUploadInput"]["properties"]["files"]
    assert files["items"] == {"type": "string", "format": "binary"}
