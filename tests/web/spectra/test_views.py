from __future__ import annotations

import io
import json

import numpy as np
import pytest
from django.urls import reverse
from PIL import Image

from annotation.core.models import AuditLog
from annotation.spectra import selectors
from annotation.spectra.models import Spectrum, Task
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db


def csv_upload(name: str, text: str):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, text.encode(), content_type="text/csv")


def good_csv() -> str:
    wave = np.linspace(4000.0, 7000.0, 200)
    rows = ["wavelength,flux,error"] + [
        f"{w:.3f},{1.0 + 0.001 * i:.5f},0.05" for i, w in enumerate(wave)
    ]
    return "\n".join(rows) + "\n"


def test_it_sends_anonymous_visitors_to_the_login_page(client):
    response = client.get(reverse("spectrum_list"))
    assert response.status_code == 302
    assert reverse("login") in response["Location"]


def test_it_lists_spectra_filtered_by_label(expert_client):
    cv = Task.objects.get(code="CV")
    make_spectrum(object_id="POS-1", task=cv, label="YES", seed=1)
    make_spectrum(object_id="NEG-1", task=cv, label="NO", seed=2)
    response = expert_client.get(reverse("spectrum_list"), {"label": "YES"})
    assert b"POS-1" in response.content
    assert b"NEG-1" not in response.content


def test_it_returns_only_the_results_partial_to_htmx(expert_client):
    make_spectrum(object_id="ONLY-1")
    response = expert_client.get(reverse("spectrum_list"), HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert 'id="results"' in body
    assert "<html" not in body


def test_it_paginates_the_list(expert_client):
    for number in range(55):
        make_spectrum(object_id=f"MANY-{number:03d}", seed=number)
    response = expert_client.get(reverse("spectrum_list"))
    assert response.context["page"].paginator.num_pages == 2
    assert len(response.context["page"].object_list) == 50


def test_it_gives_the_plot_the_task_windows_and_the_error_band(expert_client, settings):
    row = make_spectrum()
    response = expert_client.get(reverse("spectrum_detail", args=[row.pk]), {"task": "CV"})
    data = response.context["plot_data"]
    # thinned to the lowest and highest pixel per plot column (issue 37 item 10)
    assert 0 < len(data["wavelength"]) <= settings.SPECTRUM_PLOT_MAX_POINTS < row.n_pixels
    assert data["upper"] is not None
    names = [window["name"] for window in data["windows"]]
    assert names and all(isinstance(name, str) for name in names)
    assert 'id="plot-data"' in response.content.decode()


def test_it_gives_the_plot_seven_significant_digits_and_gaps_for_bad_pixels():
    from agent.spectra import Spectrum as SpectrumValue
    from annotation.spectra import selectors, services

    value = SpectrumValue(
        wavelength=[4000.0, 4001.0, 4002.0, 4003.0],
        flux=[1234.56789123, 0.001234567, float("nan"), -12.3456789],
        object_id="DIGITS",
    )
    row = services.spectra_store(values=[value], dataset="d", source_name="d.csv").created[0]
    data = selectors.spectrum_plot_data(row=row, task=None)
    assert data["flux"] == [1234.568, 0.001, None, -12.346]


def test_it_renders_the_agent_png_for_a_window(expert_client):
    row = make_spectrum()
    response = expert_client.get(
        reverse("spectrum_render_png", args=[row.pk]), {"lo": 6500, "hi": 6630, "label": "H-alpha"}
    )
    assert response["Content-Type"] == "image/png"
    image = Image.open(io.BytesIO(response.content))
    assert image.size[0] % 28 == 0 and image.size[1] % 28 == 0


def test_it_shows_the_tool_text_when_the_window_is_outside_coverage(expert_client):
    row = make_spectrum()
    response = expert_client.get(
        reverse("spectrum_render", args=[row.pk]), {"lo": 12000, "hi": 13000, "label": ""}
    )
    body = response.content.decode()
    assert 'class="error"' in body
    assert "covers" in body
    assert "<img" not in body


def test_it_stores_an_uploaded_table(expert_client):
    response = expert_client.post(
        reverse("spectrum_upload"),
        {"files": [csv_upload("star.csv", good_csv())], "dataset": "mine", "label": ""},
    )
    assert response.status_code == 302
    row = Spectrum.objects.get(dataset="mine")
    assert row.n_pixels == 200
    assert row.source_name == "star.csv"
    assert AuditLog.objects.filter(action="spectra_imported").exists()


def test_it_refuses_a_bad_file_naming_it_and_stores_nothing(expert_client):
    response = expert_client.post(
        reverse("spectrum_upload"),
        {
            "files": [
                csv_upload("good.csv", good_csv()),
                csv_upload("broken.csv", "wavelength,flux\n5000,1\n4000,2\n4000,3\n"),
            ],
            "dataset": "mine",
        },
    )
    assert response.status_code == 200
    body = response.content.decode()
    assert "Nothing was stored" in body
    assert "broken.csv" in body
    assert not Spectrum.objects.filter(dataset="mine").exists()


def test_it_refuses_more_files_than_the_limit(expert_client, settings):
    settings.SPECTRUM_UPLOAD_MAX_FILES = 1
    response = expert_client.post(
        reverse("spectrum_upload"),
        {
            "files": [csv_upload("a.csv", good_csv()), csv_upload("b.csv", good_csv())],
            "dataset": "x",
        },
    )
    assert "at most 1" in response.content.decode()
    assert not Spectrum.objects.exists()


def test_it_refuses_a_file_over_the_size_limit(expert_client, settings):
    settings.SPECTRUM_UPLOAD_MAX_BYTES = 100
    response = expert_client.post(
        reverse("spectrum_upload"), {"files": [csv_upload("big.csv", good_csv())], "dataset": "x"}
    )
    assert "over the limit" in response.content.decode()
    assert not Spectrum.objects.exists()


def test_it_skips_a_spectrum_already_in_the_data_set(expert_client):
    for _ in range(2):
        expert_client.post(
            reverse("spectrum_upload"),
            {"files": [csv_upload("star.csv", good_csv())], "dataset": "d"},
        )
    assert Spectrum.objects.filter(dataset="d").count() == 1


def test_it_escapes_hostile_object_ids(expert_client):
    row = make_spectrum(object_id="<script>alert(1)</script>")
    list_body = expert_client.get(reverse("spectrum_list")).content.decode()
    detail_body = expert_client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    for body in (list_body, detail_body):
        assert "<script>alert(1)</script>" not in body
    plot = json.loads(
        detail_body.split('id="plot-data" type="application/json">')[1].split("</script>")[0]
    )
    assert plot["object_id"] == "<script>alert(1)</script>"


# --- instrumental resolution ---------------------------------------------------------------------


def test_it_records_the_resolution_a_bare_table_implies(expert_client):
    expert_client.post(
        reverse("spectrum_upload"), {"files": [csv_upload("star.csv", good_csv())], "dataset": "r"}
    )
    row = Spectrum.objects.get(dataset="r")
    # 200 pixels over 4000-7000 Å: 15.08 Å steps, FWHM = 2 pixels = 30.15 Å, R = 6000 / 30.15
    assert row.resolution_source == "sampling estimate"
    assert row.resolution_r == pytest.approx(6000.0 / (2 * 3000.0 / 199), rel=1e-3)


def test_it_lets_the_uploader_override_the_resolution(expert_client):
    response = expert_client.post(
        reverse("spectrum_upload"),
        {"files": [csv_upload("star.csv", good_csv())], "dataset": "r", "resolution": "R=1800"},
    )
    assert response.status_code == 302
    row = Spectrum.objects.get(dataset="r")
    assert (row.resolution_r, row.resolution_source) == (pytest.approx(1800.0), "user")
    stored = selectors.spectrum_value(row).resolution
    assert stored is not None and stored.source == "user"
    assert stored.resolving_power_at(4500.0) == pytest.approx(1800.0)


def test_it_refuses_a_resolution_it_cannot_read_and_stores_nothing(expert_client):
    response = expert_client.post(
        reverse("spectrum_upload"),
        {"files": [csv_upload("star.csv", good_csv())], "dataset": "r", "resolution": "sharp"},
    )
    assert response.status_code == 200
    assert "is not a resolving power" in response.content.decode()
    assert not Spectrum.objects.exists()


def test_it_shows_the_resolution_and_its_source_on_the_spectrum_page(expert_client):
    row = make_spectrum()
    body = expert_client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    value = selectors.spectrum_value(row)
    assert f"R ≈ {value.resolution.resolving_power_at(6000.0):.0f} at 6000 Å" in body
    assert "sampling estimate" in body


def headerless_three_columns() -> str:
    # wavelength, F_lambda, F_nu: the third column is no uncertainty
    return "".join(f"{4000 + 10 * i},{1 + i / 100},{3.3e-9 * (1 + i / 100)}\n" for i in range(200))


def test_it_refuses_a_headerless_third_column_and_says_what_to_declare(expert_client):
    response = expert_client.post(
        reverse("spectrum_upload"),
        {"files": [csv_upload("o95.csv", headerless_three_columns())], "dataset": "mine"},
    )
    body = response.content.decode()
    assert "Nothing was stored" in body and "o95.csv" in body
    assert "headerless table with 3 columns" in body and "Columns" in body
    assert not Spectrum.objects.exists()


def test_it_stores_a_table_with_declared_columns_and_frame(expert_client):
    response = expert_client.post(
        reverse("spectrum_upload"),
        {
            "files": [csv_upload("o95.csv", headerless_three_columns())],
            "dataset": "mine",
            "columns": "wavelength, flux, ignore",
            "wavelength_frame": "air",
        },
    )
    assert response.status_code == 302
    row = Spectrum.objects.get(dataset="mine")
    assert row.meta["wavelength_frame"] == "air"
    assert row.meta["wavelength_frame_source"] == "declared"
    # stored in vacuum: 4000 A in air is 4001.13 A in vacuum
    assert row.wavelength_min == pytest.approx(4001.13, abs=0.01)
    page = expert_client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    assert "declared on upload" in page


def test_it_shows_an_assumed_frame_on_the_spectrum_page(expert_client):
    expert_client.post(
        reverse("spectrum_upload"), {"files": [csv_upload("star.csv", good_csv())], "dataset": "m"}
    )
    row = Spectrum.objects.get(dataset="m")
    assert row.meta["wavelength_frame_source"] == "assumed"
    page = expert_client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    assert 'class="badge assumed"' in page


def test_it_refuses_a_column_role_it_does_not_know(expert_client):
    response = expert_client.post(
        reverse("spectrum_upload"),
        {
            "files": [csv_upload("o95.csv", headerless_three_columns())],
            "dataset": "mine",
            "columns": "wavelength,flux,sky",
        },
    )
    assert "&#x27;sky&#x27; is not one of wavelength, flux" in response.content.decode()
    assert not Spectrum.objects.exists()
