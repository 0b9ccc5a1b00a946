"""Upload limits (count, size, type read from the content) where spectra/test_views.py does not
cover them (the API, the trajectory import), and the API's per-user throttle."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.test import APIClient
from rest_framework.throttling import UserRateThrottle

from annotation.curation.models import Curation
from annotation.spectra.models import Spectrum
from tests.factories import UserFactory
from tests.web.spectra.test_views import csv_upload, good_csv

pytestmark = pytest.mark.django_db

HTML = b"<!doctype html><html><head><title>Spectrum</title></head><body>404</body></html>"


def api_upload(client: APIClient, files: list[SimpleUploadedFile]):
    return client.post(
        reverse("api_spectrum_upload"), {"files": files, "dataset": "api"}, format="multipart"
    )


def test_it_refuses_more_files_than_the_limit_through_the_api(api_client, settings):
    settings.SPECTRUM_UPLOAD_MAX_FILES = 1
    files = [csv_upload("a.csv", good_csv()), csv_upload("b.csv", good_csv())]
    response = api_upload(api_client, files)
    assert response.status_code == 400
    assert "2 files uploaded; at most 1 at once" in response.data["detail"]
    assert not Spectrum.objects.exists()


def test_it_refuses_a_file_over_the_size_limit_through_the_api(api_client, settings):
    settings.SPECTRUM_UPLOAD_MAX_BYTES = 100
    response = api_upload(api_client, [csv_upload("big.csv", good_csv())])
    assert response.status_code == 400
    assert "big.csv" in response.data["detail"] and "over the limit" in response.data["detail"]
    assert not Spectrum.objects.exists()


@pytest.mark.parametrize("channel", ["page", "api"])
def test_it_reads_the_type_from_the_content_not_the_name(expert_client, api_client, channel):
    upload = SimpleUploadedFile("spec-1234-56789-0123.fits", HTML, content_type="application/fits")
    if channel == "api":
        detail = str(api_upload(api_client, [upload]).data["detail"])
    else:
        response = expert_client.post(
            reverse("spectrum_upload"), {"files": [upload], "dataset": "page"}
        )
        detail = response.content.decode()
    assert "spec-1234-56789-0123.fits" in detail
    assert "HTML" in detail
    assert not Spectrum.objects.exists()


def test_it_refuses_a_trajectory_import_over_the_size_limit(ml_client, settings):
    settings.SPECTRUM_UPLOAD_MAX_BYTES = 10
    upload = SimpleUploadedFile("drafts.jsonl", b'{"id": "x"}\n' * 5)
    response = ml_client.post(reverse("curation_import"), {"file": upload})
    body = response.content.decode()
    assert response.status_code == 400
    assert "Nothing was stored" in body and "over the limit of 10 bytes" in body
    assert not Curation.objects.exists()


@pytest.fixture
def three_per_minute(monkeypatch):
    monkeypatch.setattr(UserRateThrottle, "THROTTLE_RATES", {"user": "3/minute"})
    cache.clear()
    yield
    cache.clear()


def test_it_throttles_an_api_user_past_the_rate(api_client, three_per_minute):
    statuses = [api_client.get(reverse("api_task_list")).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]


def test_it_throttles_each_user_on_their_own(api_client, three_per_minute):
    for _ in range(4):
        api_client.get(reverse("api_task_list"))
    other = APIClient()
    other.force_authenticate(UserFactory(username="other", roles=["viewer"]))
    assert other.get(reverse("api_task_list")).status_code == 200
