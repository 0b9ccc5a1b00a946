"""Curation imports: nesting and line-size limits answer with a reason, never a 500."""

from __future__ import annotations

import io
import tracemalloc
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.curation.forms import ImportFileError, read_import_upload
from annotation.curation.models import Curation
from annotation.spectra.models import Task
from tests.factories import make_spectrum, make_trajectory

pytestmark = pytest.mark.django_db

DEEP = "[" * 50_000 + "]" * 50_000


def jsonl_with_deep_line() -> bytes:
    return ('{"id": "x", "meta": ' + DEEP + "}\n").encode()


def zip_with(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_it_answers_a_deeply_nested_jsonl_line_with_400_through_the_api(ml_engineer):
    client = APIClient()
    client.force_authenticate(ml_engineer)
    upload = SimpleUploadedFile("deep.jsonl", jsonl_with_deep_line())
    response = client.post(reverse("api_curation_import"), {"file": upload}, format="multipart")
    assert response.status_code == 400
    assert "deep.jsonl line 1" in response.json()["detail"]
    assert "levels deep; the limit is 64" in response.json()["detail"]


def test_it_answers_a_deeply_nested_jsonl_line_with_400_on_the_page(ml_engineer):
    client = Client()
    client.force_login(ml_engineer)
    upload = SimpleUploadedFile("deep.jsonl", jsonl_with_deep_line())
    response = client.post(reverse("curation_import"), {"file": upload})
    assert response.status_code == 400
    assert b"Nothing was stored. deep.jsonl line 1" in response.content
    assert b"the limit is 64" in response.content


def test_it_answers_a_deeply_nested_sharegpt_file_in_a_zip_with_400(ml_engineer):
    client = Client()
    client.force_login(ml_engineer)
    upload = SimpleUploadedFile("cold.zip", zip_with({"data.json": DEEP.encode()}))
    response = client.post(reverse("curation_import"), {"file": upload})
    assert response.status_code == 400
    assert b"ShareGPT file data.json nests arrays and objects 50000 levels deep" in response.content


def test_it_refuses_a_jsonl_line_over_the_line_limit_naming_the_setting(settings):
    settings.CURATION_IMPORT_MAX_LINE_BYTES = 1000
    data = b"\n" + b'{"id": "' + b"x" * 5000 + b'"}\n'
    with pytest.raises(ImportFileError) as refused:
        read_import_upload(SimpleUploadedFile("big.jsonl", data))
    message = str(refused.value)
    assert "big.jsonl line 2 is over the 1000 bytes" in message
    assert "CURATION_IMPORT_MAX_LINE_BYTES" in message


def test_it_accepts_a_line_exactly_at_the_limit(settings):
    task = Task.objects.get(code="CV")
    line = make_trajectory(make_spectrum(object_id="KNOWN", task=task, label="YES")).to_json()
    settings.CURATION_IMPORT_MAX_LINE_BYTES = len(line.encode())
    parsed = read_import_upload(SimpleUploadedFile("exact.jsonl", (line + "\r\n").encode()))
    assert [trajectory.spectrum.object_id for trajectory in parsed.trajectories] == ["KNOWN"]


def test_it_holds_a_huge_line_to_the_limit_not_to_its_size(settings):
    """A 40 MB line once cost 5 times its size: now it is refused having read the limit."""
    settings.CURATION_IMPORT_MAX_LINE_BYTES = 1024 * 1024
    upload = SimpleUploadedFile("huge.jsonl", b'{"id": "' + b"x" * (24 * 1024 * 1024) + b'"}\n')
    tracemalloc.start()
    try:
        with pytest.raises(ImportFileError, match="line 1 is over"):
            read_import_upload(upload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024


def test_it_keeps_a_line_separator_inside_a_json_string(settings):
    """U+2028 is legal inside a JSON string; splitting lines on it cut trajectories in two."""
    task = Task.objects.get(code="CV")
    trajectory = make_trajectory(make_spectrum(object_id="SEP", task=task, label="YES"))
    trajectory.meta = {"note": "first\u2028second"}
    parsed = read_import_upload(SimpleUploadedFile("sep.jsonl", trajectory.to_json().encode()))
    assert parsed.trajectories[0].meta == {"note": "first\u2028second"}


def test_it_still_says_an_empty_file_is_empty():
    with pytest.raises(ImportFileError, match="empty.jsonl is empty"):
        read_import_upload(SimpleUploadedFile("empty.jsonl", b"\n  \n"))
    assert not Curation.objects.exists()


def test_it_names_the_line_of_undecodable_bytes():
    data = b"  \n\xff\xfe\n"
    with pytest.raises(ImportFileError, match="neither a ZIP nor UTF-8 JSONL text: line 2"):
        read_import_upload(SimpleUploadedFile("bad.jsonl", data))
