"""An API body over DATA_UPLOAD_MAX_MEMORY_SIZE is refused with 413 before it is read whole."""

from __future__ import annotations

import pytest
from django.urls import reverse
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db


def test_it_refuses_a_json_body_over_the_upload_limit_with_413(viewer, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    client = APIClient()
    client.force_authenticate(viewer)
    body = '{"wavelength_range": [6500, 6600], "label": "' + "x" * 2000 + '"}'
    response = client.generic(
        "POST",
        reverse("api_spectrum_render", args=[make_spectrum().pk]),
        body,
        content_type="application/json",
    )
    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    detail = response.json()["detail"]
    assert "1000-byte limit (DATA_UPLOAD_MAX_MEMORY_SIZE)" in detail
    assert f"({len(body)} bytes)" in detail


def test_it_documents_413_on_each_operation_taking_a_body():
    schema = SchemaGenerator().get_schema(request=None, public=True)
    render = schema["paths"]["/api/spectra/{spectrum_id}/render/"]["post"]["responses"]
    assert render["413"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorOutput"
    }
    takes_body = [
        (path, method)
        for path, operations in schema["paths"].items()
        for method, operation in operations.items()
        if "requestBody" in operation
    ]
    assert len(takes_body) > 20
    missing = [
        (path, method)
        for path, method in takes_body
        if "413" not in schema["paths"][path][method]["responses"]
    ]
    assert missing == []
