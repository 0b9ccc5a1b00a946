"""A vetter with a gold item waiting does not learn from the catalog that its spectrum is already
labelled (which would tell them it is gold): the entry page, its API, and the list (page and API,
with their vetting filters) hide the label and the decisions until they answer."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotation.inspections import services as inspection_services
from annotation.inspections.models import CatalogEntry
from annotation.learning import queue
from annotation.learning import services as learning_services
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def vetter(db):
    return UserFactory(username="newcomer", roles=["expert"])


@pytest.fixture
def gold_entry(owner, expert, outsider, staff):
    spectrum = make_spectrum(object_id="GOLD-1", seed=71)
    run = make_inspected(
        spectra=[spectrum], verdicts={spectrum.pk: ("YES", 0.9)}, created_by=owner, threshold=0.999
    )
    candidate = run.candidates.get()
    for user in (expert, outsider):
        inspection_services.expert_decision_record(candidate=candidate, expert=user, decision="YES")
    gold = learning_services.gold_item_mark(candidate=candidate, actor=staff)
    entry = CatalogEntry.objects.get(candidate=candidate)
    assert (entry.vetted_label, entry.label_state, entry.expert_decision) == (
        "YES",
        "agreed",
        "YES",
    )
    return entry, gold


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def seen_by(user, entry) -> dict:
    client = client_for(user)
    page = client.get(reverse("catalog_detail", args=[entry.pk]))
    api = client.get(reverse("api_catalog_detail", args=[entry.pk])).json()
    listed = client.get(reverse("api_catalog_list")).json()["results"]
    decided = client.get(reverse("api_catalog_list"), {"expert_decision": "YES"}).json()
    agreed = client.get(reverse("catalog_list"), {"label_state": "agreed"})
    list_page = client.get(reverse("catalog_list")).content.decode()
    return {
        "page_label": page.context["label"],
        "page_decisions": len(page.context["decisions"]) + len(page.context["label_decisions"]),
        "page_badge": "expert: YES" in page.content.decode(),
        "api": (api["vetted_label"], api["label_state"], api["expert_decision"]),
        "api_decisions": len(api["expert_decisions"]),
        "listed": [(row["vetted_label"], row["label_state"]) for row in listed],
        "filtered": len(decided["results"]) + len(agreed.context["rows"]),
        "list_page_label": 'title="agreed"' in list_page,
    }


def test_it_hides_a_waiting_gold_spectrum_s_label_from_the_vetter(gold_entry, vetter, expert):
    entry, gold = gold_entry
    assert [c.pk for c in queue.gold_candidates(vetter)] == [entry.candidate_id]
    hidden = seen_by(vetter, entry)
    assert hidden == {
        "page_label": None,
        "page_decisions": 0,
        "page_badge": False,
        "api": ("", "", ""),
        "api_decisions": 0,
        "listed": [("", "")],
        "filtered": 0,
        "list_page_label": False,
    }
    # An expert who helped label it has no gold item waiting there: they see it all.
    shown = seen_by(expert, entry)
    assert shown["api"] == ("YES", "agreed", "YES") and shown["api_decisions"] == 2
    assert shown["page_label"] is not None and shown["page_badge"]
    assert shown["filtered"] == 2 and shown["listed"] == [("YES", "agreed")]
    # Once the vetter answers the gold item, the catalog shows them the label.
    learning_services.gold_answer_record(gold=gold, vetter=vetter, answer="YES")
    assert seen_by(vetter, entry) == shown
    # The mask lives in memory only: the stored entry keeps its label.
    entry.refresh_from_db()
    assert entry.vetted_label == "YES"
