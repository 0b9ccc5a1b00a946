"""The expert's own vetting queue filtered by task, data set and S/N range, the filters kept
across decisions, skips and undos until cleared (issue 26)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotation.inspections.models import ExpertDecision
from annotation.spectra.models import Spectrum
from tests.web.catalog import test_vetting

pytestmark = pytest.mark.django_db
run_candidates = test_vetting.run_candidates  # the fixture


@pytest.fixture
def three(run_candidates):
    low, high, other = run_candidates([0.6, 0.6, 0.6])
    Spectrum.objects.filter(pk=low.spectrum_id).update(snr=4.0, dataset="lamost-dr7")
    Spectrum.objects.filter(pk=high.spectrum_id).update(snr=40.0, dataset="lamost-dr7")
    Spectrum.objects.filter(pk=other.spectrum_id).update(snr=20.0, dataset="sdss")
    return low, high, other


def shown(response):
    assert response.status_code == 200
    candidate = response.context["candidate"]
    return (candidate.pk if candidate else None), response.context["remaining"]


def test_it_filters_the_experts_queue_and_keeps_the_filters_across_decisions(three, expert):
    low, high, other = three
    client = Client()
    client.force_login(expert)
    queue = reverse("vetting_queue")
    assert shown(client.get(queue)) == (low.pk, 3)
    assert shown(client.get(queue, {"dataset": "sdss"})) == (other.pk, 1)
    assert shown(client.get(queue, {"dataset": "lamost-dr7", "snr_min": "10"})) == (high.pk, 1)

    response = test_vetting.decide(client, high, "YES")
    assert shown(client.get(response["Location"])) == (None, 0)  # the filter held
    client.post(reverse("vetting_undo"), {"candidate": high.pk})
    assert shown(client.get(queue)) == (high.pk, 1)
    page = client.get(queue).content.decode()
    assert 'value="10.0"' in page and "Filters hold until you clear them" in page

    cleared = client.get(queue, {"task": "", "dataset": "", "snr_min": "", "snr_max": ""})
    assert shown(cleared) == (low.pk, 3)
    assert shown(client.get(queue, {"task": "cv", "snr_max": "25"})) == (low.pk, 2)
    assert shown(client.get(queue, {"task": "nosuch"})) == (None, 0)
    assert not ExpertDecision.objects.exists()


def test_it_drops_unreadable_filters_with_a_message(three, expert):
    low, _, _ = three
    client = Client()
    client.force_login(expert)
    response = client.get(reverse("vetting_queue"), {"snr_min": "9", "snr_max": "3"})
    assert shown(response) == (low.pk, 3)
    assert "Filters not applied: snr_min (9.0) is above snr_max (3.0)" in response.content.decode()
