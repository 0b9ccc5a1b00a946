"""The curation API: the whole loop with token auth, conflicts, reasons, reads."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from annotation.core import services as core_services
from annotation.core.models import Job
from annotation.curation import services as curation_services
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_curation, make_spectrum, make_trajectory

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviser(db):
    return UserFactory(username="reviser", roles=["expert", "ml_engineer"])  # drafts, exports


@pytest.fixture
def second_auditor(db):
    return UserFactory(username="second_auditor", roles=["expert"])


@pytest.fixture
def curation(db):
    return make_curation()


def token_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    return client


def body(base_number: int, *, think: str = "Zoom on the core.", window=(6540, 6590)) -> dict:
    return {
        "base_number": base_number,
        "steps": [{"think": think, "wavelength_range": list(window), "label": "H-alpha core"}],
        "answer": {
            "think": "Broad emission.",
            "prediction": "YES",
            "justification": "Broad Balmer emission.",
        },
    }


def url(name: str, curation, *extra) -> str:
    return reverse(name, args=[curation.pk, *extra])


def ok(response, status: int = 200):
    assert response.status_code == status, response.content[:500]
    return response.json()


def test_it_runs_the_whole_loop_with_a_round_of_changes(
    curation, reviser, auditor, second_auditor, django_capture_on_commit_callbacks
):
    r, a, b = token_client(reviser), token_client(auditor), token_client(second_auditor)
    ok(a.post(url("api_curation_screen", curation), {"keep": True}, format="json"))
    ok(r.post(url("api_curation_claim_revision", curation)))
    version = ok(r.post(url("api_curation_save_revision", curation), body(1), format="json"), 201)
    ok(r.post(url("api_curation_submit", curation), {"base_number": version["number"]}))
    for client in (a, b):
        ok(client.post(url("api_curation_claim_audit", curation)))
    ok(
        a.post(
            url("api_curation_audit", curation),
            {
                "version_number": 2,
                "verdict": "request_changes",
                "step_comments": {"0": "Widen to the wings."},
            },
            format="json",
        ),
        201,
    )
    ok(
        b.post(
            url("api_curation_audit", curation),
            {"version_number": 2, "verdict": "approve"},
            format="json",
        ),
        201,
    )
    assert ok(r.get(url("api_curation_detail", curation)))["state"] == "changes_requested"
    wider = body(2, window=(6480, 6650))
    ok(r.post(url("api_curation_save_revision", curation), wider, format="json"), 201)
    ok(r.post(url("api_curation_submit", curation), {"base_number": 3}))
    with django_capture_on_commit_callbacks(execute=True):
        for client in (a, b):
            ok(
                client.post(
                    url("api_curation_audit", curation),
                    {"version_number": 3, "verdict": "approve"},
                    format="json",
                ),
                201,
            )
    assert ok(r.get(url("api_curation_detail", curation)))["state"] == "in_vote"
    for client in (r, a, b):
        ok(client.post(url("api_curation_vote", curation), {"value": "accept"}, format="json"), 201)
    assert ok(r.get(url("api_curation_detail", curation)))["state"] == "accepted"

    export = ok(r.post(reverse("api_dataset_export"), {}, format="json"), 201)
    assert export["manifest"]["counts"] == {"CV": {"YES": 1, "NO": 0}}
    assert export["manifest"]["n_trajectories"] == 1
    download = r.get(reverse("api_dataset_download", args=[export["id"]]))
    archive = zipfile.ZipFile(io.BytesIO(b"".join(download.streaming_content)))
    assert json.loads(archive.read("manifest.json"))["content_hash"] == export["content_hash"]


def in_revision(curation, reviser, auditor):
    curation_services.curation_screen(curation=curation, user=auditor, keep=True)
    curation_services.curation_claim_revision(curation=curation, user=reviser)


def test_it_answers_a_stale_save_with_409_and_the_head(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    client = token_client(reviser)
    ok(client.post(url("api_curation_save_revision", curation), body(1), format="json"), 201)
    response = client.post(url("api_curation_save_revision", curation), body(1), format="json")
    assert response.status_code == 409
    assert response.json()["head"] == 2
    assert "based on version 1" in response.json()["detail"]


def test_it_gives_the_edit_error_as_the_reason_of_a_400(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    bad = body(1, think="Hidden <tool_call>{}</tool_call>")
    response = token_client(reviser).post(
        url("api_curation_save_revision", curation), bad, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {
        "detail": "step 1 reasoning must not contain <think>, <tool_call> or <answer> tags"
    }


def test_it_gives_the_rule_as_the_reason_of_a_400(curation, reviser, auditor):
    response = token_client(auditor).post(
        url("api_curation_screen", curation), {"keep": False}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"detail": "discarding a draft needs a reason"}


def test_it_answers_a_wrong_state_with_409(curation, reviser, auditor):
    response = token_client(reviser).post(url("api_curation_claim_audit", curation))
    assert response.status_code == 409
    assert response.json()["detail"] == "cannot claim an audit: the trajectory is screening"


def test_it_lists_my_work_with_counts_and_ids(curation, reviser):
    queues = ok(token_client(reviser).get(reverse("api_curation_my_work")))["queues"]
    assert queues["screening"] == {"count": 1, "ids": [curation.pk]}
    assert queues["vote"] == {"count": 0, "ids": []}


def test_it_filters_and_paginates_the_curation_list(curation, auditor):
    make_curation(object_id="CUR-2", seed=2)
    curation_services.curation_screen(curation=curation, user=auditor, keep=True)
    data = ok(token_client(auditor).get(reverse("api_curation_list"), {"state": "in_revision"}))
    assert data["count"] == 1
    assert [row["id"] for row in data["results"]] == [curation.pk]


def test_it_gives_the_head_trajectory_with_image_references(curation, auditor):
    data = ok(token_client(auditor).get(url("api_curation_detail", curation)))
    step = data["head"]["trajectory"]["steps"][0]
    sha = step["tool_result"]["image"]["png_sha256"]
    assert "png_base64" not in json.dumps(data)
    image = token_client(auditor).get(reverse("api_curation_image", args=[sha]))
    assert image["Content-Type"] == "image/png"


def test_it_gives_any_version(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    ok(
        token_client(reviser).post(
            url("api_curation_save_revision", curation), body(1), format="json"
        ),
        201,
    )
    first = ok(token_client(auditor).get(url("api_curation_version", curation, 1)))
    assert first["kind"] == "draft"
    assert first["trajectory"]["steps"][0]["think"] == "Check the line."


def test_it_keeps_an_autosave_the_editor_restores(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    client = token_client(reviser)
    ok(
        client.post(
            url("api_curation_autosave", curation), body(1, think="Draft idea"), format="json"
        )
    )
    page = APIClient()
    page.force_login(reviser)
    assert (
        b"Draft idea</textarea>" in page.get(reverse("curation_revise", args=[curation.pk])).content
    )


def test_it_lists_the_history_with_the_version_chain(curation, reviser, auditor):
    in_revision(curation, reviser, auditor)
    data = ok(token_client(auditor).get(url("api_curation_history", curation)))
    assert [entry["action"] for entry in data["results"]][:3] == [
        "curation_created",
        "screening_opened",
        "screened_keep",
    ]
    assert [version["kind"] for version in data["versions"]] == ["draft"]


def test_it_creates_a_draft_job(reviser):
    task = Task.objects.get(code="CV")
    rows = [make_spectrum(object_id=f"S{i}", task=task, label="NO", seed=i) for i in range(2)]
    job = ok(
        token_client(reviser).post(
            reverse("api_curation_drafts"), {"task": "CV", "limit": 5}, format="json"
        ),
        201,
    )
    assert job["kind"] == "draft"
    assert job["params"]["spectrum_ids"] == [row.pk for row in rows]
    assert job["total"] == 2


def test_it_refuses_the_openai_teacher_when_none_is_configured(reviser, settings):
    settings.USE_OPENAI_POLICY = False
    task = Task.objects.get(code="CV")
    make_spectrum(object_id="S", task=task, label="NO")
    response = token_client(reviser).post(
        reverse("api_curation_drafts"), {"task": "CV", "teacher": "openai"}, format="json"
    )
    assert response.status_code == 404  # no such teacher: a reference to nothing (issue 32)
    assert "teacher 'openai' is not one of" in response.json()["detail"]
    assert not Job.objects.exists()


def test_it_imports_a_jsonl_through_the_api(reviser):
    task = Task.objects.get(code="CV")
    trajectory = make_trajectory(make_spectrum(object_id="KNOWN", task=task, label="YES"))
    from django.core.files.uploadedfile import SimpleUploadedFile

    upload = SimpleUploadedFile("rows.jsonl", (trajectory.to_json() + "\n").encode())
    data = ok(
        token_client(reviser).post(
            reverse("api_curation_import"), {"file": upload}, format="multipart"
        ),
        201,
    )
    assert data["created"] == 1
    assert data["skipped"] == []


def test_it_cancels_my_job_and_says_so(reviser):
    job = core_services.job_create(kind="draft", params={}, created_by=reviser)
    data = ok(token_client(reviser).post(reverse("api_job_cancel", args=[job.pk])))
    assert data["cancelled"] is True
    assert data["job"]["state"] == "cancelled"


def test_it_lists_accepted_counts_and_exports(curation, auditor):
    data = ok(token_client(auditor).get(reverse("api_dataset_list")))
    assert data["accepted"] == []
    assert data["results"] == []


def test_it_answers_the_same_export_with_200_and_the_existing_version(
    curation, reviser, auditor, second_auditor
):
    from tests.web.curation.test_views import accept

    accept(curation, reviser, auditor, second_auditor)
    client = token_client(reviser)
    first = ok(client.post(reverse("api_dataset_export"), {}, format="json"), 201)
    again = ok(client.post(reverse("api_dataset_export"), {}, format="json"), 200)
    assert (again["version"], again["new"]) == (first["version"], False)


def test_it_documents_every_curation_endpoint_in_the_schema(reviser):
    schema = token_client(reviser).get(reverse("api_schema"), {"format": "json"})
    paths = json.loads(schema.content)["paths"]
    for path in (
        "/api/curation/{curation_id}/revisions/",
        "/api/curation/{curation_id}/audits/",
        "/api/datasets/exports/",
        "/api/jobs/{job_id}/cancel/",
    ):
        assert path in paths
