"""Uploads read under the SPECTRUM_MAX_* limits: bombs refused naming the file, the limit and the
setting; a call without a multipart body answered 400; an Excel CSV accepted; and no temporary
file left behind, whether the upload is refused, cut off, or its reader raises."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client
from django.test.client import FakePayload
from django.urls import reverse

from agent.bench.bombs import csv_gz_rows, fits_gz_zeros, measure_peak, write_zip
from agent.reading import MIB
from annotation.curation.forms import ImportFileError, read_import_upload
from annotation.spectra import services
from annotation.spectra.models import Spectrum
from tests.web.spectra.test_upload_limits import api_upload

pytestmark = pytest.mark.django_db

LIMIT = 8 * MIB
EXCEL_CSV = b"\xef\xbb\xbfwavelength,flux\r\n" + b"".join(
    f"{4000 + i},{1 + i / 100:.2f}\r\n".encode() for i in range(50)
)


@pytest.fixture
def small_limit(settings):
    settings.SPECTRUM_MAX_UNCOMPRESSED_BYTES = LIMIT


@pytest.fixture
def scratch(settings, tmp_path, monkeypatch) -> list[Path]:
    """Django's temporary upload files and the import's scratch folders, under tmp_path."""
    uploads, folders = tmp_path / "uploads", tmp_path / "scratch"
    uploads.mkdir()
    folders.mkdir()
    settings.FILE_UPLOAD_TEMP_DIR = str(uploads)
    settings.FILE_UPLOAD_MAX_MEMORY_SIZE = 0  # every uploaded file goes to a temporary file
    settings.SPECVET_TEMP_DIR = folders
    return [uploads, folders]


def leftovers(folders: list[Path]) -> list[str]:
    return sorted(str(path.relative_to(folder)) for folder in folders for path in folder.rglob("*"))


def client_for(user) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


# --- bombs ---------------------------------------------------------------------------------------


def test_it_refuses_a_gzipped_fits_bomb_through_the_api_within_twice_the_limit(
    api_client, small_limit, tmp_path
):
    bomb = fits_gz_zeros(tmp_path, 64 * MIB)
    api_upload(api_client, [SimpleUploadedFile("warm-up.fits.gz", gzip.compress(b"<html>"))])
    upload = SimpleUploadedFile("spec-zeros.fits.gz", bomb.path.read_bytes())
    measured = measure_peak(lambda: api_upload(api_client, [upload]))
    response = measured.result
    assert response.status_code == 400
    detail = response.data["detail"]
    assert detail.startswith(
        f"Nothing was stored. spec-zeros.fits.gz: more than {LIMIT} bytes once decompressed"
    )
    assert "raise SPECTRUM_MAX_UNCOMPRESSED_BYTES" in detail
    assert measured.peak_bytes < 2 * LIMIT
    assert not Spectrum.objects.exists()


def test_it_refuses_a_gzipped_csv_bomb_on_the_page_within_twice_the_limit(
    expert_client, small_limit, tmp_path
):
    bomb = csv_gz_rows(tmp_path, 3_000_000, row=b"4000.000000000000000000,1.000000000000000000\n")
    warm_up = SimpleUploadedFile("warm-up.csv.gz", gzip.compress(b"<html>"))
    expert_client.post(reverse("spectrum_upload"), {"files": [warm_up], "dataset": "x"})
    upload = SimpleUploadedFile("table.csv.gz", bomb.path.read_bytes())
    measured = measure_peak(
        lambda: expert_client.post(reverse("spectrum_upload"), {"files": [upload], "dataset": "x"})
    )
    body = measured.result.content.decode()
    assert f"table.csv.gz: more than {LIMIT} bytes once decompressed" in body
    assert "SPECTRUM_MAX_UNCOMPRESSED_BYTES" in body
    assert measured.peak_bytes < 2 * LIMIT
    assert not Spectrum.objects.exists()


def test_it_reads_uploads_under_the_pixel_setting(api_client, settings):
    settings.SPECTRUM_MAX_PIXELS = 49
    response = api_upload(api_client, [SimpleUploadedFile("excel.csv", EXCEL_CSV)])
    assert response.status_code == 400
    assert "excel.csv: more than 49 rows (pixels) in one spectrum" in response.data["detail"]
    assert "raise SPECTRUM_MAX_PIXELS" in response.data["detail"]


def test_it_loads_files_under_the_settings_from_the_command(settings, tmp_path, capsys):
    settings.SPECTRUM_MAX_PIXELS = 49
    path = tmp_path / "excel.csv"
    path.write_bytes(EXCEL_CSV)
    with pytest.raises(CommandError):
        call_command("load_spectra", str(path))
    assert "more than 49 rows (pixels)" in capsys.readouterr().err


def test_it_refuses_a_trajectory_zip_member_that_inflates_past_its_declared_size(tmp_path):
    path = tmp_path / "drafts.zip"
    write_zip(path, [("train.json", [b"[]", bytes(4 * MIB)], 2)])
    upload = SimpleUploadedFile("drafts.zip", path.read_bytes())
    with pytest.raises(ImportFileError, match="'train.json' unpacks to more than the 2 bytes"):
        read_import_upload(upload)


# --- smaller items -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_kwargs",
    [{}, {"data": {"dataset": "x"}, "format": "json"}, {"data": "", "content_type": "text/csv"}],
    ids=["no body", "json", "empty csv body"],
)
def test_it_answers_an_upload_without_a_multipart_body_with_400(api_client, request_kwargs):
    response = api_client.post(reverse("api_spectrum_upload"), **request_kwargs)
    assert response.status_code == 400
    assert "multipart/form-data" in response.data["detail"]


def test_it_stores_an_excel_csv_with_a_byte_order_mark(expert_client):
    upload = SimpleUploadedFile("excel.csv", EXCEL_CSV, content_type="text/csv")
    response = expert_client.post(reverse("spectrum_upload"), {"files": [upload], "dataset": "x"})
    assert response.status_code == 302
    row = Spectrum.objects.get()
    assert (row.n_pixels, row.wavelength_min, row.wavelength_max) == (50, 4000.0, 4049.0)


# --- temporary files -----------------------------------------------------------------------------


def test_it_deletes_the_temporary_file_of_an_upload_refused_for_its_size(expert, settings, scratch):
    settings.SPECTRUM_UPLOAD_MAX_BYTES = 100
    upload = SimpleUploadedFile("big.csv", EXCEL_CSV)
    response = client_for(expert).post(
        reverse("spectrum_upload"), {"files": [upload], "dataset": "x"}
    )
    assert "over the limit of 100 bytes" in response.content.decode()
    assert leftovers(scratch) == []


def test_it_deletes_the_temporary_file_of_an_upload_cut_off_mid_body(expert, scratch, monkeypatch):
    real_read = FakePayload.read
    sent = []

    def disconnect_after_64_kib(self, size=-1, /):
        if sum(sent) > 64 * 1024:
            raise OSError("connection reset by peer")
        data = real_read(self, size)
        sent.append(len(data))
        return data

    monkeypatch.setattr(FakePayload, "read", disconnect_after_64_kib)
    upload = SimpleUploadedFile("big.csv", EXCEL_CSV * 500)
    response = client_for(expert).post(
        reverse("spectrum_upload"), {"files": [upload], "dataset": "x"}
    )
    assert sum(sent) > 64 * 1024  # the file had started arriving
    assert "over the limit" not in response.content.decode()
    assert leftovers(scratch) == []
    assert not Spectrum.objects.exists()


@pytest.mark.parametrize("channel", ["page", "api"])
def test_it_deletes_every_temporary_file_when_the_reader_raises(
    expert, scratch, monkeypatch, channel
):
    seen: list[list[str]] = []

    def failing_reader(path, **kwargs):
        seen.append(leftovers(scratch))
        raise RuntimeError("reader crashed mid-file")

    monkeypatch.setattr(services, "load_spectra", failing_reader)
    upload = SimpleUploadedFile("excel.csv", EXCEL_CSV)
    if channel == "page":
        response = client_for(expert).post(
            reverse("spectrum_upload"), {"files": [upload], "dataset": "x"}
        )
    else:
        from rest_framework.test import APIClient

        client = APIClient(raise_request_exception=False)
        client.force_authenticate(expert)
        response = client.post(
            reverse("api_spectrum_upload"), {"files": [upload], "dataset": "x"}, format="multipart"
        )
    assert response.status_code == 500
    assert len(seen) == 1 and len(seen[0]) >= 3  # the upload, the scratch folder and its copy
    assert leftovers(scratch) == []
    assert not Spectrum.objects.exists()


def test_it_keeps_the_arrays_of_an_excel_csv_identical_to_a_plain_one(tmp_path):
    from agent.spectra import load_spectra

    plain, excel = tmp_path / "plain.csv", tmp_path / "excel.csv"
    plain.write_bytes(EXCEL_CSV[3:])
    excel.write_bytes(EXCEL_CSV)
    np.testing.assert_array_equal(load_spectra(excel)[0].flux, load_spectra(plain)[0].flux)


def _sharegpt_zip(json_bytes: bytes, images: dict[str, bytes]) -> SimpleUploadedFile:
    import io
    import zipfile

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("train.json", json_bytes)
        for name, content in images.items():
            archive.writestr(f"images/{name}", content)
    return SimpleUploadedFile("drafts.zip", buffer.getvalue())


def test_it_refuses_a_sharegpt_file_over_its_own_limit_before_unpacking(settings):
    """The JSON is parsed whole; it once could be as large as the whole 1 GiB unpacked limit."""
    settings.CURATION_IMPORT_MAX_JSON_BYTES = 1000
    upload = _sharegpt_zip(b"[" + b" " * 5000 + b"]", {})
    with pytest.raises(ImportFileError) as refused:
        read_import_upload(upload)
    assert "train.json is 5002 bytes, over the 1000 bytes" in str(refused.value)
    assert "CURATION_IMPORT_MAX_JSON_BYTES" in str(refused.value)


def test_it_refuses_a_zip_that_unpacks_past_the_setting(settings):
    settings.CURATION_IMPORT_MAX_UNPACKED_BYTES = 10_000
    upload = _sharegpt_zip(b"[]", {"a.png": bytes(20_000)})
    with pytest.raises(ImportFileError, match="CURATION_IMPORT_MAX_UNPACKED_BYTES"):
        read_import_upload(upload)
