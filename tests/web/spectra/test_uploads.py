"""The upload handler keeps nothing of a file past the limit, yet the limit's message stands."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from annotation.spectra.models import Spectrum
from annotation.spectra.uploads import OversizedUpload, SizeCappedUploadHandler


def receive(handler: SizeCappedUploadHandler, chunks: list[bytes]) -> list[bytes | None]:
    handler.new_file("files", "big.csv", "text/csv", sum(map(len, chunks)))
    passed, start = [], 0
    for chunk in chunks:
        passed.append(handler.receive_data_chunk(chunk, start))
        start += len(chunk)
    return passed


def test_it_stops_passing_bytes_on_once_a_file_is_over_the_limit(settings):
    settings.SPECTRUM_UPLOAD_MAX_BYTES = 10
    passed = receive(SizeCappedUploadHandler(), [b"a" * 6, b"b" * 6, b"c" * 6])
    assert passed == [b"a" * 6, None, None]


def test_it_hands_over_an_empty_file_that_reports_the_real_size(settings):
    settings.SPECTRUM_UPLOAD_MAX_BYTES = 10
    handler = SizeCappedUploadHandler()
    receive(handler, [b"a" * 6, b"b" * 6])
    upload = handler.file_complete(12)
    assert isinstance(upload, OversizedUpload)
    assert (upload.name, upload.size, upload.read()) == ("big.csv", 12, b"")


def test_it_leaves_a_file_within_the_limit_to_the_usual_handlers(settings):
    settings.SPECTRUM_UPLOAD_MAX_BYTES = 10
    handler = SizeCappedUploadHandler()
    assert receive(handler, [b"a" * 10]) == [b"a" * 10]
    assert handler.file_complete(10) is None


@pytest.mark.django_db
def test_it_refuses_an_oversized_page_upload_without_keeping_its_content(
    expert_client, settings, monkeypatch
):
    settings.SPECTRUM_UPLOAD_MAX_BYTES = 100
    seen: list[Any] = []
    from annotation.spectra import services

    real_import = services.spectra_import_uploads

    def spy(**kwargs: Any) -> Any:
        seen.extend(kwargs["files"])
        return real_import(**kwargs)

    monkeypatch.setattr(services, "spectra_import_uploads", spy)
    upload = SimpleUploadedFile("big.csv", b"wavelength,flux\n" + b"4000.0,1.0\n" * 50)
    response = expert_client.post(reverse("spectrum_upload"), {"files": [upload], "dataset": "x"})
    assert "big.csv" in response.content.decode()
    assert "over the limit of 100 bytes" in response.content.decode()
    assert [type(file) for file in seen] == [OversizedUpload]
    assert not Spectrum.objects.exists()


def test_it_explains_a_bad_data_set_name_without_the_word_slug(expert_client):
    upload = SimpleUploadedFile("ok.csv", b"wavelength,flux\n" + b"4000.0,1.0\n" * 5)
    response = expert_client.post(
        reverse("spectrum_upload"), {"files": [upload], "dataset": "my data/set"}
    )
    body = response.content.decode()
    assert "slug" not in body.lower()
    assert "The data set name may hold only letters, digits, underscores (_) and hyphens" in body
    assert "my data/set" in body
    assert not Spectrum.objects.exists()


@pytest.mark.django_db
def test_it_names_the_file_and_where_a_truncated_fits_upload_ends(expert_client):
    # Issue 37: a truncated FITS upload showed "(TypeError: buffer is too small for requested
    # array)" under the form.
    import io

    import numpy as np
    from astropy.io import fits

    buffer = io.BytesIO()
    hdu = fits.PrimaryHDU(np.ones(3000, dtype=np.float32))
    hdu.header.update({"CRVAL1": 4000.0, "CDELT1": 2.0, "CRPIX1": 1.0})
    hdu.writeto(buffer)
    upload = SimpleUploadedFile("spec-cut.fits", buffer.getvalue()[:6000])
    response = expert_client.post(reverse("spectrum_upload"), {"files": [upload], "dataset": "x"})
    body = response.content.decode()
    assert "Nothing was stored. spec-cut.fits: truncated FITS file: HDU 0 (PRIMARY)" in body
    assert "but the file ends at byte 6,000" in body
    assert "TypeError" not in body and "buffer is too small" not in body
    assert not Spectrum.objects.exists()
