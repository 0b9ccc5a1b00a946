"""An export whose zip is gone from storage answers 404 with the reason, not a 500."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


@pytest.fixture
def lost_export(export):
    """The web conftest's export, its zip deleted from MEDIA_ROOT since."""
    export.archive.storage.delete(export.archive.name)
    return export


def test_it_answers_a_missing_archive_with_404_and_the_reason_on_the_api(ml_engineer, lost_export):
    client = APIClient()
    client.force_authenticate(ml_engineer)
    response = client.get(reverse("api_dataset_download", args=[lost_export.pk]))
    assert response.status_code == 404
    detail = response.json()["detail"]
    assert f"export version {lost_export.version}" in detail
    assert "missing from the server's storage" in detail


def test_it_answers_a_missing_archive_with_404_and_the_reason_on_the_page(ml_engineer, lost_export):
    client = Client()
    client.force_login(ml_engineer)
    response = client.get(reverse("dataset_download", args=[lost_export.pk]))
    assert response.status_code == 404
    assert "missing from the server&#x27;s storage" in response.content.decode()


def test_it_still_serves_an_archive_that_is_there(ml_engineer, export):
    client = Client()
    client.force_login(ml_engineer)
    response = client.get(reverse("dataset_download", args=[export.pk]))
    assert response.status_code == 200
    assert b"".join(response.streaming_content).startswith(b"PK")
