"""Uploading an IRAF onedstds AB-magnitude table: refused with what to declare, or declared."""

from __future__ import annotations

from pathlib import Path

from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from annotation.spectra.models import Spectrum

GD108 = Path(__file__).parents[2] / "agent" / "data" / "onedstds" / "gd108.dat"


def upload() -> SimpleUploadedFile:
    return SimpleUploadedFile("gd108.dat", GD108.read_bytes(), content_type="text/plain")


def test_it_refuses_a_headerless_magnitude_table_and_says_what_to_declare(expert_client):
    response = expert_client.post(
        reverse("spectrum_upload"), {"files": [upload()], "dataset": "standards"}
    )
    body = response.content.decode()
    assert "Nothing was stored" in body and "gd108.dat" in body
    assert "looks like magnitudes" in body and "wavelength,ab_mag" in body
    assert not Spectrum.objects.exists()


def test_it_stores_a_declared_magnitude_table_as_flux(expert_client):
    response = expert_client.post(
        reverse("spectrum_upload"),
        {"files": [upload()], "dataset": "standards", "columns": "wavelength, ab_mag"},
    )
    assert response.status_code == 302
    row = Spectrum.objects.get(dataset="standards")
    assert row.meta["flux_unit"] == "erg s-1 cm-2 Angstrom-1"
    assert "f_nu = 10^(-0.4 (m + 48.60))" in row.meta["flux_from_ab_magnitudes"]["conversion"]
