"""A fresh demo lets both shipped experts vet, and agree, while the demo campaign is open."""

from __future__ import annotations

import io

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.blinding import candidates_visible_to
from annotation.catalog.queue import vetter_queue, vetter_queue_hidden
from annotation.inspections.models import Candidate, CatalogEntry
from annotation.rating.models import RatingCampaign
from annotation.spectra.labels import LabelState

pytestmark = [pytest.mark.django_db, pytest.mark.slow]  # makes and loads SpecVI-mini: ~40 s


@pytest.fixture
def demo(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    settings.TRAINING_OUTPUT_ROOT = tmp_path / "training"
    call_command("demo_setup", "--scale", "0.1", stdout=io.StringIO())  # as the e2e test
    users = get_user_model().objects
    return users.get(username="payne"), users.get(username="leavitt")


def test_it_lets_both_demo_experts_vet_and_agree_while_the_demo_campaign_is_open(demo):
    payne, leavitt = demo
    campaign = RatingCampaign.objects.get()
    assert not campaign.closed
    assert set(campaign.raters.all()) >= {payne, leavitt}
    # blinding still holds: the campaign's spectra are hidden from its raters
    rated = {item.spectrum.content_hash for item in campaign.items.select_related("spectrum")}
    shown = candidates_visible_to(user=payne, rows=Candidate.objects.all())
    assert rated and not shown.filter(spectrum__content_hash__in=rated).exists()

    queues = {user.username: set(vetter_queue(user).values_list("pk", flat=True)) for user in demo}
    shared = queues["payne"] & queues["leavitt"]
    assert queues["payne"] and queues["leavitt"] and shared, queues
    assert vetter_queue_hidden(payne).count == 0

    candidate = Candidate.objects.get(pk=min(shared))
    for user in demo:
        client = APIClient()
        client.force_authenticate(user)
        waiting = client.get(reverse("api_vetting_next")).data
        assert waiting["remaining"] == len(queues[user.username])
        response = client.post(
            reverse("api_expert_decision_create"),
            {"candidate": candidate.pk, "decision": "YES"},
            format="json",
        )
        assert response.status_code == 201, response.data
    entry = CatalogEntry.objects.get(candidate=candidate)
    assert (entry.label_state, entry.vetted_label) == (LabelState.AGREED, "YES")
