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


def test_it_declares_what_a_request_field_refuses(api):
    """Schemathesis found requests the schema allowed refused with 400: a blank name, a blank
    rater, an empty file list, a limit over the cap; and "" refused by a filter that takes it."""
    doc = served(api)
    schemas = doc["components"]["schemas"]
    judge = schemas["JudgeCreateInput"]["properties"]
    assert judge["name"]["minLength"] == 1 and judge["name"]["pattern"] == r"\S"
    raters = schemas["CampaignCreateInput"]["properties"]["raters"]
    assert raters["items"]["minLength"] == 1
    assert schemas["SpectrumUploadInput"]["properties"]["files"]["minItems"] == 1
    dataset = schemas["SpectrumUploadInput"]["properties"]["dataset"]
    assert dataset["pattern"] == "^[-a-zA-Z0-9_]+$"  # its own pattern kept
    label = next(
        p for p in doc["paths"]["/api/spectra/"]["get"]["parameters"] if p["name"] == "label"
    )
    assert "" in label["schema"]["enum"] and "minLength" not in label["schema"]
    # ?page= (empty) is read as not given, as DRF reads a blank optional query value
    assert all(
        p["allowEmptyValue"] is True
        for p in doc["paths"]["/api/spectra/"]["get"]["parameters"]
        if not p.get("required")
    )
    limit = next(
        p
        for p in doc["paths"]["/api/spectra/{spectrum_id}/"]["get"]["parameters"]
        if p["name"] == "limit"
    )
    assert limit["schema"]["maximum"] == 100_000


def test_it_answers_a_write_naming_a_missing_object_with_404_naming_the_field(api, staff):
    """A well-formed request naming a task code that does not exist was a 400 (the schema
    allowed it); now a 404 like an id in the path, documented, naming each such field. A
    request also wrong in another way keeps its 400 with every field's message."""
    client = APIClient()
    client.force_authenticate(staff)
    response = client.post(reverse("api_calibration_refit"), {"task": "NOPE"}, format="json")
    assert response.status_code == 404
    assert response.json() == {"detail": "task: Object with code=NOPE does not exist."}
    response = client.post(
        reverse("api_triage_target"), {"task": "NOPE", "target_purity": 7}, format="json"
    )
    assert response.status_code == 400
    assert set(response.json()) == {"task", "target_purity"}
    documented = served(api)["paths"]["/api/calibration/refit/"]["post"]["responses"]
    assert "404" in documented


def test_it_answers_404_for_a_missing_expert_version_or_spectrum(
    staff, expert, outsider, ml_engineer
):
    from annotation.curation import services as curation_services
    from tests.factories import make_curation

    client = APIClient()
    client.force_authenticate(staff)
    curation = make_curation()
    response = client.post(
        reverse("api_curation_reassign", args=[curation.pk]),
        {"role": "reviser", "username": "nobody"},
        format="json",
    )
    assert response.status_code == 404
    assert "no active expert is called 'nobody'" in response.json()["detail"]
    curation_services.curation_screen(curation=curation, user=outsider, keep=True)
    curation_services.curation_claim_revision(curation=curation, user=expert)
    reviser = APIClient()
    reviser.force_authenticate(expert)
    step = {"think": "t", "wavelength_range": [6500, 6600], "label": "H-alpha"}
    answer = {"think": "t", "prediction": "YES", "justification": "j"}
    response = reviser.post(
        reverse("api_curation_save_revision", args=[curation.pk]),
        {"base_number": 99, "steps": [step], "answer": answer},
        format="json",
    )
    assert response.status_code == 404, response.content
    assert "version 99 of this trajectory does not exist" in response.json()["detail"]
    client.force_authenticate(ml_engineer)
    response = client.post(
        reverse("api_run_create"),
        {"task": "CV", "spectrum_ids": [424242], "policy": {"kind": "rule-based"}},
        format="json",
    )
    assert response.status_code == 404
    assert "unknown spectrum ids: [424242]" in response.json()["detail"]


def test_it_reads_an_empty_after_as_not_given(ml_engineer):
    """The schema allows ?after= empty (optional query values may be); it answered 400."""
    from annotation.inspections.models import Candidate
    from tests.factories import make_inspected, make_spectrum

    row = make_spectrum(object_id="AFTER")
    make_inspected(spectra=[row], verdicts={row.pk: ("YES", 0.9)}, created_by=ml_engineer)
    candidate = Candidate.objects.first()
    client = APIClient()
    client.force_authenticate(ml_engineer)
    url = reverse("api_candidate_steps", args=[candidate.pk])
    assert client.get(url, {"after": ""}).status_code == 200
    assert client.get(url, {"after": "x"}).status_code == 400
