"""The Training data page's API twins (issue 32, item 11): vetted-label, SFT-revision and
DPO-pair exports are made, listed and downloaded through /api/labels/exports/..., by the same
services and under the same roles and blinding rule as the page."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.curation.models import DatasetExport, ExportKind
from annotation.inspections import services
from annotation.spectra.models import LabelExport
from tests.factories import UserFactory, make_inspected, make_revised_curation, make_spectrum

pytestmark = pytest.mark.django_db

ANSWERS = ["YES", "NO", "YES"]


def api(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def labelled(owner, expert, outsider):
    """Three spectra of task CV that two experts agree on."""
    spectra = [make_spectrum(object_id=f"API-L{i}", seed=70 + i) for i in range(len(ANSWERS))]
    run = make_inspected(
        spectra=spectra, verdicts={row.pk: ("YES", 0.6) for row in spectra}, created_by=owner
    )
    for row, answer in zip(spectra, ANSWERS, strict=True):
        candidate = run.candidates.get(spectrum=row)
        for user in (expert, outsider):
            services.expert_decision_record(candidate=candidate, expert=user, decision=answer)
    return spectra


@pytest.fixture
def revision(training_dirs):
    return make_revised_curation(
        reviser=UserFactory(username="rev", roles=["expert"]),
        auditors=[UserFactory(username="a1"), UserFactory(username="a2")],
        object_id="API-REV",
        seed=33,
    )


def open_campaign_on(spectra, rater, creator) -> None:
    """An open campaign whose items show ``spectra`` and which ``rater`` rates."""
    from annotation.rating.models import CampaignItem, RatingCampaign
    from annotation.spectra.models import Task

    campaign = RatingCampaign.objects.create(name="open", created_by=creator)
    campaign.raters.add(rater)
    for n, spectrum in enumerate(spectra):
        CampaignItem.objects.create(
            campaign=campaign,
            blind_id=f"b{n}",
            data={},
            policy_name="hidden",
            source=f"test:item{n}",
            task=Task.objects.get(code="CV"),
            spectrum=spectrum,
        )


@pytest.fixture
def rating_engineer(db):
    return UserFactory(username="hubble", roles=["ml_engineer", "rater"])


def test_it_makes_lists_and_downloads_vetted_label_exports(labelled, ml_engineer, staff):
    client = api(ml_engineer)
    made = client.post(reverse("api_label_export_create"), {"tasks": ["CV"]}, format="json")
    assert made.status_code == 201, made.content
    export = LabelExport.objects.get()
    assert made.json()["version"] == export.version == 1 and made.json()["new"] is True
    assert made.json()["manifest"]["rows"] == len(ANSWERS)
    # The same content again: the latest, not a new version.
    again = client.post(reverse("api_label_export_create"), {}, format="json")
    assert again.status_code == 200 and again.json()["new"] is False
    assert LabelExport.objects.count() == 1

    listed = api(staff).get(reverse("api_label_exports"))
    assert listed.status_code == 200
    assert [row["version"] for row in listed.json()["results"]] == [1]
    assert listed.json()["results"][0]["created_by"] == ml_engineer.get_username()

    download = api(staff).get(reverse("api_label_export_download", args=[1]))
    assert download.status_code == 200
    assert download["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in download.content.decode().splitlines()]
    assert lines[0] == {"manifest": export.manifest}
    assert {(row["object_id"], row["label"]) for row in lines[1:]} == {
        (row.object_id, answer) for row, answer in zip(labelled, ANSWERS, strict=True)
    }
    # The page's download is the same bytes.
    page = APIClient()
    page.force_login(staff)
    assert page.get(reverse("label_export_download", args=[1])).content == download.content
    assert api(staff).get(reverse("api_label_export_download", args=[2])).status_code == 404


def test_it_answers_a_refused_label_export_with_its_reason(db, ml_engineer, labelled):
    unknown = api(ml_engineer).post(
        reverse("api_label_export_create"), {"tasks": ["NOPE"]}, format="json"
    )
    assert unknown.status_code == 400 and "unknown task codes: NOPE" in unknown.json()["detail"]
    assert not LabelExport.objects.exists()


@pytest.mark.parametrize(
    ("name", "body", "reason"),
    [
        ("api_label_export_create", {}, "no vetted label to export yet"),
        ("api_preference_export_create", {"task": "CV"}, "no preference pair to export yet"),
    ],
)
def test_it_answers_nothing_to_export_yet_as_a_conflict_not_a_bad_request(
    db, ml_engineer, name, body, reason
):
    """A valid request refused by the server's state (nothing to export yet) is a 409, as the
    schema documents, not a 400 that says the request itself was wrong."""
    answer = api(ml_engineer).post(reverse(name), body, format="json")
    assert answer.status_code == 409
    assert reason in answer.json()["detail"]


def test_it_makes_lists_and_downloads_revised_and_preference_exports(revision, ml_engineer):
    client = api(ml_engineer)
    for kind, name in ((ExportKind.REVISED, "revised"), (ExportKind.PREFERENCE, "preference")):
        made = client.post(reverse(f"api_{name}_export_create"), {"task": "CV"}, format="json")
        assert made.status_code == 201, made.content
        export = DatasetExport.objects.get(kind=kind)
        body = made.json()
        assert (body["kind"], body["version"], body["new"]) == (kind, export.version, True)
        assert body["content_hash"] == export.content_hash and body["manifest"]["rows"] == 1
        again = client.post(reverse(f"api_{name}_export_create"), {}, format="json")
        assert again.status_code == 200 and again.json()["new"] is False

        listed = client.get(reverse(f"api_{name}_exports"))
        assert [(row["kind"], row["version"]) for row in listed.json()["results"]] == [
            (kind, export.version)
        ]
        download = client.get(reverse(f"api_{name}_export_download", args=[export.version]))
        assert download.status_code == 200
        assert f"specvet-{kind}-v1.zip" in download["Content-Disposition"]
        with zipfile.ZipFile(io.BytesIO(b"".join(download.streaming_content))) as archive:
            names = archive.namelist()
        assert ("trl.jsonl" if kind == ExportKind.REVISED else "dpo.jsonl") in names
    # A version names an export of its own kind: the revised v1 is not the preference v1.
    assert client.get(reverse("api_revised_export_download", args=[2])).status_code == 404


def test_it_answers_a_missing_archive_with_404_and_the_reason(revision, ml_engineer):
    made = api(ml_engineer).post(reverse("api_revised_export_create"), {}, format="json")
    export = DatasetExport.objects.get(pk=made.json()["id"])
    export.archive.storage.delete(export.archive.name)
    missing = api(ml_engineer).get(reverse("api_revised_export_download", args=[export.version]))
    assert missing.status_code == 404 and "missing" in missing.json()["detail"]


def test_it_keeps_the_export_apis_to_the_page_s_roles(revision, labelled, expert, staff, rater):
    for name in ("api_label_export_create", "api_revised_export_create"):
        refused = api(staff).post(reverse(name), {}, format="json")  # staff read, not export
        assert refused.status_code == 403 and "ml_engineer" in refused.json()["detail"]
    for user in (expert, rater):
        assert api(user).get(reverse("api_label_exports")).status_code == 403
        assert api(user).get(reverse("api_preference_exports")).status_code == 403
    assert not LabelExport.objects.exists() and not DatasetExport.objects.exists()


def test_it_hides_exports_from_a_rater_of_an_open_campaign_on_their_spectra(
    revision, labelled, ml_engineer, rating_engineer, staff
):
    maker = api(ml_engineer)
    label = maker.post(reverse("api_label_export_create"), {}, format="json").json()
    revised = maker.post(reverse("api_revised_export_create"), {}, format="json").json()
    open_campaign_on([labelled[0], revision.spectrum], rating_engineer, staff)
    rater = api(rating_engineer)
    assert rater.get(reverse("api_label_exports")).json()["results"] == []
    assert rater.get(reverse("api_revised_exports")).json()["results"] == []
    assert (
        rater.get(reverse("api_label_export_download", args=[label["version"]])).status_code == 404
    )
    assert (
        rater.get(reverse("api_revised_export_download", args=[revised["version"]])).status_code
        == 404
    )
    for name in ("api_label_export_create", "api_revised_export_create"):
        refused = rater.post(reverse(name), {}, format="json")
        assert refused.status_code == 403 and "open campaign" in refused.json()["detail"]
    # The engineer who rates nothing still reads them.
    assert (
        maker.get(reverse("api_label_export_download", args=[label["version"]])).status_code == 200
    )
