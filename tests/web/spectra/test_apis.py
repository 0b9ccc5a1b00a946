from __future__ import annotations

import base64

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.spectra.models import Spectrum, Task
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db


def test_it_refuses_anonymous_api_calls():
    response = APIClient().get(reverse("api_spectrum_list"))
    assert response.status_code in (401, 403)


def test_it_lists_spectra_with_filters(api_client):
    cv = Task.objects.get(code="CV")
    make_spectrum(object_id="A", task=cv, label="YES", seed=1)
    make_spectrum(object_id="B", task=cv, label="NO", seed=2)
    response = api_client.get(reverse("api_spectrum_list"), {"task": "cv", "label": "NO"})
    assert response.status_code == 200
    assert [row["object_id"] for row in response.data["results"]] == ["B"]
    assert response.data["count"] == 1


def test_it_rejects_an_unknown_label_filter(api_client):
    response = api_client.get(reverse("api_spectrum_list"), {"label": "MAYBE"})
    assert response.status_code == 400
    assert "label" in response.data


def test_it_returns_arrays_on_request(api_client):
    row = make_spectrum()
    response = api_client.get(reverse("api_spectrum_detail", args=[row.pk]), {"arrays": "1"})
    arrays = response.data["arrays"]
    assert len(arrays["wavelength"]) == arrays["count"] == arrays["total"] == row.n_pixels
    assert arrays["ivar"] is not None
    assert arrays["next_offset"] is None and "next" not in arrays


def test_it_pages_arrays_past_the_per_response_limit(api_client, settings):
    """A 1 M-pixel upload once came back as one ~100 MB JSON body: now pages of a set size."""
    settings.SPECTRUM_API_MAX_ARRAY_PIXELS = 1000
    row = make_spectrum()
    url = reverse("api_spectrum_detail", args=[row.pk])
    first = api_client.get(url, {"arrays": "1", "limit": 10}).data["arrays"]
    assert (first["count"], first["next_offset"]) == (10, 10)
    pages, offset = [], 0
    while offset is not None:
        arrays = api_client.get(url, {"arrays": "1", "offset": offset}).data["arrays"]
        assert arrays["count"] <= 1000
        pages.append(arrays)
        offset = arrays["next_offset"]
    assert len(pages) == -(-row.n_pixels // 1000) > 1
    assert sum(page["count"] for page in pages) == row.n_pixels == first["total"]
    assert pages[0]["next"].endswith("?arrays=1&offset=1000&limit=1000")
    stitched = [w for page in pages for w in page["wavelength"]]
    assert stitched == sorted(stitched) and len(set(stitched)) == row.n_pixels


def test_it_refuses_a_page_larger_than_the_limit(api_client, settings):
    settings.SPECTRUM_API_MAX_ARRAY_PIXELS = 1000
    row = make_spectrum()
    response = api_client.get(
        reverse("api_spectrum_detail", args=[row.pk]), {"arrays": "1", "limit": 5000}
    )
    assert response.status_code == 400
    assert "SPECTRUM_API_MAX_ARRAY_PIXELS" in str(response.data["limit"])


def test_it_renders_through_the_api(api_client):
    row = make_spectrum()
    response = api_client.post(
        reverse("api_spectrum_render", args=[row.pk]),
        {"wavelength_range": [6500, 6630], "label": "H-alpha"},
        format="json",
    )
    assert response.data["ok"] is True
    assert base64.b64decode(response.data["png_base64"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_it_says_why_a_render_failed(api_client):
    row = make_spectrum()
    response = api_client.post(
        reverse("api_spectrum_render", args=[row.pk]),
        {"wavelength_range": [20000, 21000]},
        format="json",
    )
    assert response.data["ok"] is False
    assert response.data["png_base64"] is None
    assert response.data["text"]


def test_it_uploads_through_the_api(api_client):
    wave = np.linspace(4000, 7000, 50)
    text = "wavelength flux\n" + "\n".join(f"{w} 1.0" for w in wave)
    upload = SimpleUploadedFile("star.txt", text.encode())
    response = api_client.post(
        reverse("api_spectrum_upload"), {"files": [upload], "dataset": "api"}, format="multipart"
    )
    assert response.status_code == 201, response.data
    assert Spectrum.objects.filter(dataset="api").count() == 1


def test_it_answers_400_with_the_reason_for_a_bad_upload(api_client):
    upload = SimpleUploadedFile("junk.fits", b"not a spectrum at all")
    response = api_client.post(
        reverse("api_spectrum_upload"), {"files": [upload], "dataset": "api"}, format="multipart"
    )
    assert response.status_code == 400
    assert "junk.fits" in response.data["detail"]
    assert not Spectrum.objects.exists()


def test_it_lists_the_builtin_tasks(api_client):
    codes = {row["code"] for row in api_client.get(reverse("api_task_list")).data}
    assert {"CV", "CS", "SS", "MG", "WD", "O", "B", "A"} <= codes


def test_it_serves_the_openapi_schema(api_client):
    response = api_client.get(reverse("api_schema"))
    assert response.status_code == 200
    assert b"/api/spectra/" in response.content


def test_it_takes_a_resolution_override_through_the_api(api_client):
    wave = np.linspace(4000, 7000, 50)
    text = "wavelength flux\n" + "\n".join(f"{w} 1.0" for w in wave)
    upload = SimpleUploadedFile("star.txt", text.encode())
    response = api_client.post(
        reverse("api_spectrum_upload"),
        {"files": [upload], "dataset": "api", "resolution": "2.5 A"},
        format="multipart",
    )
    assert response.status_code == 201, response.data
    created = response.data["created"][0]
    # a constant FWHM of 2.5 Å is R = 6000 / 2.5 at 6000 Å
    assert created["resolution_source"] == "user"
    assert created["resolution_r"] == pytest.approx(2400.0)


def test_it_answers_400_for_a_resolution_it_cannot_read(api_client):
    upload = SimpleUploadedFile("star.txt", b"wavelength flux\n4000 1\n4001 1\n4002 1\n")
    response = api_client.post(
        reverse("api_spectrum_upload"),
        {"files": [upload], "dataset": "api", "resolution": "-3 km/s"},
        format="multipart",
    )
    assert response.status_code == 400
    assert "resolution" in response.data
    assert not Spectrum.objects.exists()


def three_column_upload() -> SimpleUploadedFile:
    rows = "".join(f"{4000 + 10 * i} {1 + i / 100} {2 + i / 100}\n" for i in range(100))
    return SimpleUploadedFile("three.txt", rows.encode())


def test_it_refuses_an_undeclared_third_column_over_the_api(api_client):
    response = api_client.post(
        reverse("api_spectrum_upload"), {"files": [three_column_upload()]}, format="multipart"
    )
    assert response.status_code == 400
    assert "API parameter 'columns'" in response.data["detail"]
    assert not Spectrum.objects.exists()


def test_it_reads_columns_declared_over_the_api(api_client):
    response = api_client.post(
        reverse("api_spectrum_upload"),
        {"files": [three_column_upload()], "dataset": "api", "columns": "wavelength,flux,error"},
        format="multipart",
    )
    assert response.status_code == 201, response.data
    row = Spectrum.objects.get(dataset="api")
    assert row.meta["wavelength_frame_source"] == "assumed"
    assert row.snr == pytest.approx(np.median([(1 + i / 100) / (2 + i / 100) for i in range(100)]))


def test_it_answers_400_for_a_frame_it_does_not_know(api_client):
    response = api_client.post(
        reverse("api_spectrum_upload"),
        {"files": [three_column_upload()], "wavelength_frame": "water"},
        format="multipart",
    )
    assert response.status_code == 400
    assert "wavelength_frame" in response.data
