"""An expert's vetting queue says what blinding hides from it, and which campaigns hide it:
on /vetting/, in the API's next-candidate answer and beside the home page's count."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from annotation.catalog.queue import vetter_queue, vetter_queue_hidden
from annotation.inspections.models import Candidate, Rollout
from annotation.rating.models import CampaignItem, RatingCampaign
from annotation.spectra.models import Task
from tests.factories import make_inspected, make_spectrum

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script> campaign"


def campaign(name: str, raters: list, shown: list[Candidate], *, closed: bool = False):
    """A campaign rated by ``raters`` whose items show these candidates' trajectories (an item
    from a rollout names its run; one without names only its spectrum)."""
    row = RatingCampaign.objects.create(name=name, closed=closed)
    row.raters.set(raters)
    for n, candidate in enumerate(shown):
        rollout, _ = Rollout.objects.get_or_create(
            candidate=candidate, index=0, defaults={"data": {}}
        )
        CampaignItem.objects.create(
            campaign=row,
            blind_id=f"B{n}",
            data={},
            policy_name="rule-based",
            source=f"rollout:{rollout.pk}" if name == HOSTILE else f"import:file#{n}",
            task=Task.objects.get(code="CV"),
            spectrum=candidate.spectrum,
        )
    return row


@pytest.fixture
def world(expert, outsider):
    """Two runs with every candidate waiting for experts; ``expert`` rates two open campaigns:
    one holding a rollout of run A (hiding all of run A) and one showing the spectra of a2 and
    b1 (hiding those two, a2 a second time); a closed one and one they do not rate hide
    nothing."""
    spectra = [make_spectrum(object_id=f"HID-{i}", seed=i) for i in range(5)]
    unsure = {row.pk: ("YES", 0.6) for row in spectra}
    run_a = make_inspected(spectra=spectra[:3], verdicts=unsure)
    run_b = make_inspected(spectra=spectra[3:], verdicts=unsure)
    a1, a2, _a3 = run_a.candidates.order_by("pk")
    b1, b2 = run_b.candidates.order_by("pk")
    first = campaign(HOSTILE, [expert], [a1])
    second = campaign("Second look", [expert], [a2, b1])
    campaign("Closed", [expert], [b2], closed=True)
    campaign("Not theirs", [outsider], [b2])
    return {"first": first, "second": second, "visible": b2}


def expected_hidden(world) -> dict:
    return {
        "count": 4,
        "campaigns": [
            {
                "id": world["first"].pk,
                "name": HOSTILE,
                "count": 3,
                "url": reverse("rating_campaign", args=[world["first"].pk]),
            },
            {
                "id": world["second"].pk,
                "name": "Second look",
                "count": 2,
                "url": reverse("rating_campaign", args=[world["second"].pk]),
            },
        ],
    }


def test_it_counts_what_each_open_campaign_hides_from_the_queue(world, expert, outsider):
    assert list(vetter_queue(expert)) == [world["visible"]]
    hidden = vetter_queue_hidden(expert)
    assert hidden.count == 4
    assert [(row.name, row.count) for row in hidden.campaigns] == [
        (HOSTILE, 3),
        ("Second look", 2),
    ]
    assert vetter_queue(outsider).count() == 4  # b2 is hidden from them (campaign "Not theirs")
    assert vetter_queue_hidden(outsider).count == 1


def test_it_says_in_the_api_what_is_hidden_and_by_which_campaign(world, expert, outsider):
    client = APIClient()
    client.force_authenticate(expert)
    data = client.get(reverse("api_vetting_next")).json()
    assert (data["remaining"], data["candidate"]["id"]) == (1, world["visible"].pk)
    assert data["hidden"] == expected_hidden(world)


def test_it_says_on_the_vetting_page_what_is_hidden_and_by_which_campaign(world, expert):
    client = Client()
    client.force_login(expert)
    body = client.get(reverse("vetting_queue")).content.decode()
    assert "4 more candidates would wait for you but are hidden" in body
    for row in expected_hidden(world)["campaigns"]:
        assert f'href="{row["url"]}"' in body
        assert f"{row['count']} hidden" in body
    assert HOSTILE not in body and "&lt;script&gt;alert(1)&lt;/script&gt; campaign" in body


def test_it_says_beside_the_home_page_count_what_is_hidden(world, expert):
    client = Client()
    client.force_login(expert)
    body = client.get(reverse("home")).content.decode()
    assert '<strong class="count">1</strong> candidates waiting for your vetting' in body
    assert "(4 more hidden while you rate" in body
    assert f'href="{reverse("rating_campaign", args=[world["second"].pk])}">Second look</a>' in body
    assert HOSTILE not in body


def test_it_explains_an_empty_queue_and_forgets_a_closed_campaign(world, expert):
    Candidate.objects.filter(pk=world["visible"].pk).update(needs_expert=False)
    client = APIClient()
    client.force_authenticate(expert)
    data = client.get(reverse("api_vetting_next")).json()
    assert (data["remaining"], data["candidate"], data["hidden"]["count"]) == (0, None, 4)
    page = Client()
    page.force_login(expert)
    assert (
        "4 more candidates would wait for you"
        in page.get(reverse("vetting_queue")).content.decode()
    )

    RatingCampaign.objects.filter(pk=world["first"].pk).update(closed=True)
    data = client.get(reverse("api_vetting_next")).json()
    assert (data["remaining"], data["hidden"]["count"]) == (2, 2)  # a1 and a3 back
    assert [row["name"] for row in data["hidden"]["campaigns"]] == ["Second look"]


def test_it_says_nothing_is_hidden_from_an_expert_who_rates_nothing(world, auditor):
    client = Client()
    client.force_login(auditor)
    assert 'id="vetting-hidden"' not in client.get(reverse("vetting_queue")).content.decode()
    api = APIClient()
    api.force_authenticate(auditor)
    assert api.get(reverse("api_vetting_next")).json()["hidden"] == {"count": 0, "campaigns": []}
