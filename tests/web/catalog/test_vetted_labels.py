"""Vetting decisions become labels with provenance; conflicts show in the catalog and queue."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from annotation.catalog import selectors as catalog
from annotation.core.models import AuditLog
from annotation.inspections import services
from annotation.inspections.models import CatalogEntry
from annotation.spectra.models import SpectrumLabel
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def third(db):
    return UserFactory(username="third", roles=["expert"])


@pytest.fixture
def spectra(db):
    return [make_spectrum(object_id=f"LAB-{i}", seed=i) for i in range(3)]


@pytest.fixture
def run(spectra, owner):
    verdicts = {row.pk: ("YES" if i % 2 else "NO", 0.6 + 0.01 * i) for i, row in enumerate(spectra)}
    return make_inspected(spectra=spectra, verdicts=verdicts, created_by=owner, model=("m:a", "A"))


def candidate_of(run, spectrum):
    return run.candidates.select_related("spectrum").get(spectrum=spectrum)


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_it_labels_a_spectrum_when_two_experts_agree_with_who_when_and_what_they_saw(
    run, spectra, expert, outsider
):
    candidate = candidate_of(run, spectra[1])
    services.expert_decision_record(candidate=candidate, expert=expert, decision="YES")
    label = SpectrumLabel.objects.get(spectrum=spectra[1])
    assert (label.state, label.value) == ("pending", "")
    services.expert_decision_record(candidate=candidate, expert=outsider, decision="YES")
    label.refresh_from_db()
    assert (label.state, label.value) == ("agreed", "YES")
    assert label.labelled_at is not None
    assert [(d["expert"], d["value"], d["counted"]) for d in label.decisions] == [
        ("payne", "YES", True),
        ("outsider", "YES", True),
    ]
    seen = {(d["model_key"], d["verdict_seen"], d["confidence_seen"]) for d in label.decisions}
    assert seen == {("m:a", candidate.verdict, candidate.confidence)}
    assert all(d["run_id"] == run.pk and d["candidate_id"] == candidate.pk for d in label.decisions)
    entry = CatalogEntry.objects.get(candidate=candidate)
    assert (entry.vetted_label, entry.label_state) == ("YES", "agreed")
    logged = AuditLog.objects.filter(action="spectrum_label", object_pk=str(label.pk))
    assert [e.to_state for e in logged.order_by("id")] == ["pending", "agreed YES"]


def test_it_labels_each_spectrum_from_its_own_decisions(run, spectra, expert, outsider):
    # Swapping which candidate got which decisions would swap the labels.
    answers = {spectra[0].pk: "NO", spectra[1].pk: "YES", spectra[2].pk: "NO"}
    for row in spectra:
        for user in (expert, outsider):
            services.expert_decision_record(
                candidate=candidate_of(run, row), expert=user, decision=answers[row.pk]
            )
    labels = dict(SpectrumLabel.objects.values_list("spectrum_id", "value"))
    assert labels == answers
    entries = {
        e.candidate.spectrum_id: e.vetted_label
        for e in CatalogEntry.objects.select_related("candidate")
    }
    assert entries == answers


def test_it_sends_a_conflict_to_a_third_expert_first_and_never_back_to_the_first_two(
    run, spectra, expert, outsider, third
):
    contested = candidate_of(run, spectra[2])
    services.expert_decision_record(candidate=contested, expert=expert, decision="YES")
    services.expert_decision_record(candidate=contested, expert=outsider, decision="NO")
    assert CatalogEntry.objects.get(candidate=contested).label_state == "conflict"
    queue = list(catalog.vetting_queue(third))
    assert queue[0] == contested and len(queue) == 3
    assert contested not in list(catalog.vetting_queue(expert))
    assert contested not in list(catalog.vetting_queue(outsider))
    page = client_for(third).get(reverse("vetting_queue")).content.decode()
    assert "Conflict: the first two experts disagree" in page
    services.expert_decision_record(candidate=contested, expert=third, decision="NO")
    label = SpectrumLabel.objects.get(spectrum=spectra[2])
    assert (label.state, label.value) == ("resolved", "NO")
    assert [d["expert"] for d in label.decisions if d["counted"]] == ["payne", "outsider", "third"]
    # A labelled spectrum waits for nobody.
    for user in (expert, outsider, third):
        assert contested not in list(catalog.vetting_queue(user))


def test_it_shows_conflicts_and_labels_in_the_catalog_list_and_filter(
    run, spectra, expert, outsider, expert_client
):
    contested, agreed = candidate_of(run, spectra[0]), candidate_of(run, spectra[1])
    services.expert_decision_record(candidate=contested, expert=expert, decision="YES")
    services.expert_decision_record(candidate=contested, expert=outsider, decision="NO")
    for user in (expert, outsider):
        services.expert_decision_record(candidate=agreed, expert=user, decision="NO")
    listed = expert_client.get(reverse("catalog_list"), {"label_state": "conflict"})
    assert [row.object_id for row in listed.context["rows"]] == ["LAB-0"]
    assert "label-conflict" in listed.content.decode()
    labelled = expert_client.get(reverse("catalog_list"), {"label_state": "agreed"})
    assert [(r.object_id, r.vetted_label) for r in labelled.context["rows"]] == [("LAB-1", "NO")]
    bad = expert_client.get(reverse("catalog_list"), {"label_state": "maybe"})
    assert bad.status_code == 400 and "label_state" in bad.content.decode()


def test_it_shows_the_decisions_behind_a_label_on_the_entry_page(
    run, spectra, expert, outsider, expert_client
):
    candidate = candidate_of(run, spectra[0])
    services.expert_decision_record(candidate=candidate, expert=expert, decision="NO")
    services.expert_decision_record(candidate=candidate, expert=outsider, decision="NO")
    entry = CatalogEntry.objects.get(candidate=candidate)
    response = expert_client.get(reverse("catalog_detail", args=[entry.pk]))
    body = response.content.decode()
    assert response.context["label"].value == "NO"
    assert [d["expert"] for d in response.context["label_decisions"]] == ["payne", "outsider"]
    assert "two experts agree" in body and 'title="m:a"' in body


def test_it_carries_an_existing_label_onto_a_new_runs_entries(run, spectra, expert, outsider):
    candidate = candidate_of(run, spectra[0])
    for user in (expert, outsider):
        services.expert_decision_record(candidate=candidate, expert=user, decision="YES")
    later = make_inspected(
        spectra=spectra, verdicts={row.pk: ("NO", 0.9) for row in spectra}, model=("m:b", "B")
    )
    entries = {
        e.candidate.spectrum_id: (e.vetted_label, e.label_state)
        for e in CatalogEntry.objects.filter(run=later).select_related("candidate")
    }
    assert entries == {
        spectra[0].pk: ("YES", "agreed"),
        spectra[1].pk: ("", ""),
        spectra[2].pk: ("", ""),
    }
