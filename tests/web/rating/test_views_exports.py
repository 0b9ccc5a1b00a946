"""The Training data page: the three export kinds of the loop, their roles and the blinding rule
(a rater of an open campaign neither lists, downloads nor makes an export that shows its items'
spectra, their curations or runs)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotation.curation.models import DatasetExport, ExportKind
from annotation.curation.revised import revised_export_create
from annotation.rating import preferences
from annotation.rating import services as rating_services
from annotation.training_runs.forms import TrainingRunForm
from tests.factories import UserFactory, make_revised_curation
from tests.web.rating.test_preferences import OUTCOMES, judged_campaign

pytestmark = pytest.mark.django_db


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def world(staff, training_dirs):
    """A revision that passed audit and a closed campaign's judged pairs."""
    from tests.factories import make_spectrum

    raters = [
        UserFactory(username="alice", roles=["rater"]),
        UserFactory(username="bob", roles=["rater"]),
    ]
    revision = make_revised_curation(
        reviser=UserFactory(username="rev", roles=["expert"]),
        auditors=[UserFactory(username="a1"), UserFactory(username="a2")],
        object_id="REV-V",
        seed=31,
    )
    spectra = [make_spectrum(object_id=f"VIEW-{i}", seed=60 + i) for i in range(len(OUTCOMES))]
    _, pairs = judged_campaign(raters, staff, spectra, OUTCOMES, close=True)
    return {"revision": revision, "pairs": pairs, "spectra": spectra}


@pytest.fixture
def rating_engineer(db):
    """An ML engineer who also rates (separation of duties is not enforced between the two)."""
    return UserFactory(username="hubble", roles=["ml_engineer", "rater"])


def open_campaign_on(spectrum, rater, creator):
    """An open campaign whose one item shows ``spectrum`` (a trajectory of another source)."""
    from annotation.spectra.models import Task
    from tests.web.rating.test_preferences import two_policy_sources

    sources = two_policy_sources(Task.objects.get(code="CV"), [spectrum])[:1]
    return rating_services.campaign_create(
        name="open", raters=[rater], raters_per_item=1, sources=sources, created_by=creator, seed=3
    )


def test_it_makes_and_lists_all_three_kinds(world, ml_engineer):
    client = logged_in(ml_engineer)
    page = client.get(reverse("label_export_list"))
    assert page.status_code == 200
    html = page.content.decode()
    for section in ("grpo-exports", "revised-exports", "preference-exports"):
        assert f'id="{section}"' in html
    assert client.post(reverse("revised_export_create")).status_code == 302
    assert client.post(reverse("preference_export_create")).status_code == 302
    revised = DatasetExport.objects.get(kind=ExportKind.REVISED)
    preference = DatasetExport.objects.get(kind=ExportKind.PREFERENCE)
    html = client.get(reverse("label_export_list")).content.decode()
    for export in (revised, preference):
        assert reverse("dataset_download", args=[export.pk]) in html
        download = client.get(reverse("dataset_download", args=[export.pk]))
        assert download.status_code == 200
        assert f"specvet-{export.kind}-v1.zip" in download["Content-Disposition"]
    assert preference.manifest["rows"] == 3  # two judged pairs and the revision


def test_it_keeps_the_page_to_its_roles(world, expert, rater, staff):
    assert logged_in(rater).get(reverse("label_export_list")).status_code == 403
    assert logged_in(expert).get(reverse("label_export_list")).status_code == 403
    assert logged_in(staff).get(reverse("label_export_list")).status_code == 200
    # Staff read; only ML engineers export.
    assert logged_in(staff).post(reverse("preference_export_create")).status_code == 403
    assert not DatasetExport.objects.filter(kind=ExportKind.PREFERENCE).exists()


def test_it_hides_the_exports_from_a_rater_of_an_open_campaign_on_their_spectra(
    world, rating_engineer, ml_engineer, staff
):
    revised = revised_export_create(actor=ml_engineer)
    preference = preferences.preference_export_create(actor=ml_engineer)
    campaign = open_campaign_on(world["spectra"][0], rating_engineer, staff)
    rater = logged_in(rating_engineer)
    html = rater.get(reverse("label_export_list")).content.decode()
    assert reverse("dataset_download", args=[preference.pk]) not in html
    assert reverse("dataset_download", args=[revised.pk]) in html  # shows none of their items
    assert rater.get(reverse("dataset_download", args=[preference.pk])).status_code == 404
    assert (
        logged_in(ml_engineer).get(reverse("dataset_download", args=[preference.pk])).status_code
        == 200
    )
    refused = rater.post(reverse("preference_export_create"))
    assert refused.status_code == 403 and "open campaign" in refused.content.decode()
    # Nor can they train on it.
    form = TrainingRunForm(user=rating_engineer)
    assert preference not in form.fields["preference_export"].queryset
    rating_services.campaign_close(campaign=campaign, actor=staff)
    assert rater.get(reverse("dataset_download", args=[preference.pk])).status_code == 200


def test_it_hides_a_revised_export_from_a_rater_of_its_spectrum(
    world, rating_engineer, ml_engineer, staff
):
    revised = revised_export_create(actor=ml_engineer)
    open_campaign_on(world["revision"].spectrum, rating_engineer, staff)
    rater = logged_in(rating_engineer)
    assert rater.get(reverse("dataset_download", args=[revised.pk])).status_code == 404
    refused = rater.post(reverse("revised_export_create"))
    assert refused.status_code == 403
