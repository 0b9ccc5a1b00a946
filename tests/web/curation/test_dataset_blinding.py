"""SFT dataset exports under the blinding rule: an export names its curations and holds their
trajectories, so while a campaign rates trajectories taken from a curation, its raters (an ML
engineer may rate too) neither list, download, build on nor make an export holding it."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.curation import datasets
from annotation.curation.models import Curation, CurationState, DatasetExport
from annotation.rating import services as rating_services
from tests.factories import UserFactory, make_curation

pytestmark = pytest.mark.django_db


@pytest.fixture
def rating_engineer(db):
    """An ML engineer who also rates (separation of duties is not enforced between the two)."""
    return UserFactory(username="hubble", roles=["ml_engineer", "rater"])


@pytest.fixture
def accepted(training_dirs) -> Curation:
    curation = make_curation(object_id="ACCEPTED-B")
    Curation.objects.filter(pk=curation.pk).update(state=CurationState.ACCEPTED)
    return Curation.objects.get(pk=curation.pk)


def rating_campaign(curation: Curation, rater, created_by):
    """An open campaign whose one item is the trajectory of ``curation``."""
    return rating_services.campaign_create(
        name="blind sources",
        raters=[rater],
        raters_per_item=1,
        sources=rating_services.rating_sources_from_curations([curation]),
        created_by=created_by,
        seed=11,
    )


@pytest.fixture
def open_campaign(accepted, rating_engineer, owner):
    return rating_campaign(accepted, rating_engineer, owner)


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_it_records_the_curations_an_export_holds(accepted):
    export = datasets.dataset_export_create(actor=None)
    assert export.curation_ids == [accepted.pk]
    with zipfile.ZipFile(export.archive.open("rb")) as bundle:
        rows = [json.loads(line) for line in bundle.read("trl.jsonl").splitlines()]
    assert [row["curation_id"] for row in rows] == export.curation_ids


def test_it_hides_an_export_from_a_rater_of_its_curations_while_the_campaign_is_open(
    accepted, rating_engineer, ml_engineer, open_campaign
):
    export = datasets.dataset_export_create(actor=ml_engineer)
    rater, engineer = logged_in(rating_engineer), logged_in(ml_engineer)
    download = reverse("dataset_download", args=[export.pk])
    assert rater.get(download).status_code == 404  # as a missing export answers
    assert engineer.get(download).status_code == 200
    assert f"v{export.version}" not in rater.get(reverse("dataset_list")).content.decode()
    api = APIClient()
    api.force_authenticate(rating_engineer)
    assert api.get(reverse("api_dataset_download", args=[export.pk])).status_code == 404
    assert api.get(reverse("api_dataset_list")).data["count"] == 0

    rating_services.campaign_close(campaign=open_campaign, actor=open_campaign.created_by)
    assert rater.get(download).status_code == 200


def test_it_refuses_to_make_an_export_for_a_rater_of_its_curations(
    accepted, rating_engineer, open_campaign
):
    response = logged_in(rating_engineer).post(reverse("dataset_export"))
    assert response.status_code == 403
    assert "open campaign" in response.content.decode()
    assert not DatasetExport.objects.exists()


def test_it_leaves_an_unrelated_export_readable(accepted, rating_engineer, ml_engineer):
    other = make_curation(object_id="OTHER-C")
    Curation.objects.filter(pk=other.pk).update(state=CurationState.ACCEPTED)
    Curation.objects.filter(pk=accepted.pk).update(state=CurationState.SCREENING)
    export = datasets.dataset_export_create(actor=ml_engineer)
    Curation.objects.filter(pk=accepted.pk).update(state=CurationState.ACCEPTED)
    rating_campaign(accepted, rating_engineer, ml_engineer)
    assert (
        logged_in(rating_engineer).get(reverse("dataset_download", args=[export.pk])).status_code
        == 200
    )


def test_it_treats_an_export_without_recorded_curations_as_holding_any(
    accepted, rating_engineer, ml_engineer, open_campaign
):
    from annotation.blinding import dataset_exports_visible_to

    export = datasets.dataset_export_create(actor=ml_engineer)
    DatasetExport.objects.filter(pk=export.pk).update(curation_ids=None)
    assert not dataset_exports_visible_to(user=rating_engineer).exists()
    assert dataset_exports_visible_to(user=ml_engineer).exists()


def test_it_offers_a_rater_no_hidden_export_to_train_on(
    accepted, rating_engineer, ml_engineer, open_campaign
):
    export = datasets.dataset_export_create(actor=ml_engineer)
    api = APIClient()
    api.force_authenticate(rating_engineer)
    response = api.post(
        reverse("api_training_create"),
        {"stage": "sft", "preset": "cpu-tiny", "dataset_export": export.version},
        format="json",
    )
    assert response.status_code == 404  # as a missing export answers (issue 32: 404)
    assert response.data["detail"].startswith("dataset_export: ")
    page = logged_in(rating_engineer).get(reverse("training_create"))
    assert f'value="{export.pk}"' not in page.content.decode()


def test_it_reads_the_curations_of_earlier_exports_from_their_archives(accepted):
    from importlib import import_module

    migration = import_module("annotation.migrations.0017_dataset_export_curations")
    export = datasets.dataset_export_create(actor=None)
    assert migration._curation_ids(export.archive) == [accepted.pk]
    broken = io.BytesIO(b"not a zip")
    broken.open = lambda mode="rb": broken  # type: ignore[attr-defined]
    assert migration._curation_ids(broken) is None


def accepted_rows(client: Client, api: APIClient) -> tuple[str, list[dict]]:
    page = client.get(reverse("dataset_list"))
    table = page.content.decode().split("<h2>Exports</h2>")[0].split("<h2>Accepted trajectories")[1]
    return table, api.get(reverse("api_dataset_list")).data["accepted"]


def test_it_counts_no_curation_of_an_open_campaign_for_its_rater(
    accepted, rating_engineer, ml_engineer, open_campaign
):
    """The rater cannot read the curation (404; 0 in the curation API), so /datasets/ and
    /api/datasets/ do not count it, nor tell its label, while the campaign is open."""
    rater, engineer = logged_in(rating_engineer), logged_in(ml_engineer)
    assert rater.get(reverse("curation_detail", args=[accepted.pk])).status_code == 404
    api = APIClient()
    api.force_authenticate(rating_engineer)
    assert api.get(reverse("api_curation_list"), {"state": "accepted"}).data["count"] == 0
    page, counts = accepted_rows(rater, api)
    assert counts == [] and "No accepted trajectory yet." in page and "<td>CV</td>" not in page
    api.force_authenticate(ml_engineer)
    page, counts = accepted_rows(engineer, api)
    assert counts == [{"task": "CV", "YES": 1, "NO": 0, "total": 1}]
    assert "<td>CV</td><td>1</td><td>0</td><td>1</td>" in page
    # Once the campaign is closed nothing stays hidden.
    rating_services.campaign_close(campaign=open_campaign, actor=UserFactory(roles=["staff"]))
    api.force_authenticate(rating_engineer)
    assert accepted_rows(rater, api)[1] == counts
