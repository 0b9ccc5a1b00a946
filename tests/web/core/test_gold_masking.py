"""Gold masking in the query itself (annotation/gold_masking.py): whatever a read path does with
the catalog entries a vetter may read (rows, values, filters, sorts, counts, aggregates), the
entries of a gold item waiting for them, and of any spectrum with the same content, read as
unvetted; nobody else's reads change, and nothing stored does."""

from __future__ import annotations

import pytest
from django.db.models import Count, Max

from annotation import blinding
from annotation.catalog import selectors as catalog
from annotation.gold_masking import gold_mask_for
from annotation.inspections import services as inspection_services
from annotation.inspections.models import CatalogEntry
from annotation.learning import services as learning_services
from annotation.spectra.models import Task
from tests.factories import UserFactory, make_inspected, make_spectrum

pytestmark = pytest.mark.django_db

LABEL = ("YES", "agreed", "YES")  # vetted_label, label_state, expert_decision
BLANK = ("", "", "")


@pytest.fixture
def world(owner, expert, outsider, staff):
    """A gold spectrum, its copy in another data set, and another spectrum: all labelled YES."""
    cv = Task.objects.get(code="CV")
    gold_spectrum = make_spectrum(object_id="GOLD", task=cv, seed=5, line_amplitude=3.0)
    twin = make_spectrum(object_id="GOLD", task=cv, seed=5, line_amplitude=3.0, dataset="mirror")
    other = make_spectrum(object_id="OTHER", task=cv, seed=9)
    assert gold_spectrum.content_hash == twin.content_hash != other.content_hash
    spectra = [gold_spectrum, twin, other]
    run = make_inspected(
        spectra=spectra,
        verdicts={row.pk: ("YES", 0.9) for row in spectra},
        created_by=owner,
        threshold=0.999,
    )
    for candidate in run.candidates.all():
        for user in (expert, outsider):
            inspection_services.expert_decision_record(
                candidate=candidate, expert=user, decision="YES", quality=3, issues=["sky"]
            )
    gold_candidate = run.candidates.get(spectrum=gold_spectrum)
    learning_services.gold_item_mark(candidate=gold_candidate, actor=staff)
    entries = {
        name: CatalogEntry.objects.get(candidate__spectrum=row)
        for name, row in zip(("gold", "twin", "other"), spectra, strict=True)
    }
    return entries


@pytest.fixture
def vetter(db):
    return UserFactory(username="gold-newcomer", roles=["expert"])


def said(rows) -> dict[str, tuple[str, str, str]]:
    return {
        object_id + ("/" + dataset if dataset != "tests" else ""): (label, state, decision)
        for object_id, dataset, label, state, decision in rows.values_list(
            "object_id", "dataset", "vetted_label", "label_state", "expert_decision"
        )
    }


def test_it_reads_a_waiting_gold_item_s_entries_and_its_copies_as_unvetted(world, vetter):
    rows = blinding.catalog_entries_visible_to(user=vetter)
    assert said(rows) == {"GOLD": BLANK, "GOLD/mirror": BLANK, "OTHER": LABEL}
    by_id = {entry.pk: entry for entry in rows.select_related("run")}
    gold = by_id[world["gold"].pk]
    assert (gold.vetted_label, gold.label_state, gold.expert_decision) == BLANK
    assert gold.expert_quality is None and gold.expert_issues == ""
    assert by_id[world["other"].pk].expert_quality == 3.0
    assert set(rows.values_list("vetted_label", flat=True)) == {"", "YES"}
    assert rows.get(pk=world["gold"].pk).vetted_label == ""
    # filters, counts, groups, sorts and aggregates read the masked values too
    assert list(rows.filter(label_state="agreed").values_list("object_id", flat=True)) == ["OTHER"]
    assert rows.filter(vetted_label="").count() == 2
    assert rows.exclude(expert_decision="").count() == 1
    grouped = rows.order_by().values("label_state").annotate(n=Count("pk"))
    assert sorted((row["label_state"], row["n"]) for row in grouped) == [("", 2), ("agreed", 1)]
    assert rows.order_by("vetted_label", "pk").first().pk == world["gold"].pk
    assert rows.aggregate(vetted_label=Max("vetted_label")) == {"vetted_label": "YES"}
    assert rows.filter(spectrum_id=world["gold"].spectrum_id).aggregate(
        vetted_label=Max("vetted_label"), n=Count("pk")
    ) == {"vetted_label": "", "n": 1}


def test_it_leaves_the_entries_out_of_a_query_already_filtered_on_vetting(world, vetter):
    for filters in ({"label_state": "agreed"}, {"expert_decision": "YES"}):
        chosen = catalog.catalog_rows(catalog.CatalogFilters(**filters))
        rows = blinding.catalog_entries_visible_to(user=vetter, rows=chosen)
        assert said(rows) == {"OTHER": LABEL}
    unfiltered = catalog.catalog_rows(catalog.CatalogFilters(task="CV"))
    assert len(blinding.catalog_entries_visible_to(user=vetter, rows=unfiltered)) == 3


def test_it_masks_nothing_for_anyone_else_and_stores_nothing(world, vetter, expert, viewer):
    for reader in (expert, viewer):  # one who helped label it; one who does not vet
        assert not gold_mask_for(reader)
        rows = blinding.catalog_entries_visible_to(user=reader)
        assert said(rows) == {"GOLD": LABEL, "GOLD/mirror": LABEL, "OTHER": LABEL}
    masked = blinding.catalog_entries_visible_to(user=vetter).get(pk=world["gold"].pk)
    assert masked.vetted_label == ""
    assert CatalogEntry.objects.get(pk=world["gold"].pk).vetted_label == "YES"


def test_it_hides_the_decisions_and_the_label_behind_the_gold_answer(world, vetter, expert):
    gold = world["gold"]
    task_id = gold.run.task_id
    for reader, shown in ((vetter, 0), (expert, 2)):
        decisions = blinding.expert_decisions_visible_to(
            user=reader, rows=gold.candidate.expert_decisions.all()
        )
        assert decisions.count() == shown
        label = blinding.vetted_label_visible_to(
            user=reader, spectrum_id=gold.spectrum_id, task_id=task_id
        )
        assert (label is None) == (reader == vetter)
    twin = world["twin"]
    assert (
        blinding.vetted_label_visible_to(user=vetter, spectrum_id=twin.spectrum_id, task_id=task_id)
        is None
    )
    other = world["other"]
    assert (
        blinding.vetted_label_visible_to(
            user=vetter, spectrum_id=other.spectrum_id, task_id=task_id
        ).value
        == "YES"
    )
