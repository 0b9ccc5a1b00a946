"""The same file in three data sets: three spectra, told apart and flagged in the catalog (issue 26)."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from annotation.catalog import selectors as catalog
from annotation.inspections.models import CatalogEntry
from annotation.spectra.models import Task
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def three_copies(ml_client, django_capture_on_commit_callbacks):
    """One spectrum's content stored in three data sets, one other spectrum, all inspected."""
    cv = Task.objects.get(code="CV")
    original = make_spectrum(object_id="TWIN", task=cv, label="YES", seed=4, line_amplitude=3.0)
    original.ra, original.dec = 83.63308, 22.0145
    original.save(update_fields=["ra", "dec"])
    copies = [original]
    for dataset in ("lamost-dr7", "mirror"):
        copy = make_spectrum(
            object_id="TWIN", task=cv, label="YES", seed=4, line_amplitude=3.0, dataset=dataset
        )
        copy.ra, copy.dec = original.ra, original.dec
        copy.save(update_fields=["ra", "dec"])
        copies.append(copy)
    single = make_spectrum(object_id="LONE", task=cv, label="NO", seed=9, line_amplitude=0.0)
    data = {
        "task": "CV", "labelled_for_task": "on", "limit": 10, "policy": "rule-based",
        "temperature": 0, "rollouts": 1, "max_tool_calls": 8, "confidence_threshold": 0.5,
    }  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        ml_client.post(reverse("run_create"), data)
    return copies, single


def test_it_stores_each_entrys_own_spectrum_data_set_and_designation(three_copies):
    copies, single = three_copies
    for spectrum in [*copies, single]:
        entry = CatalogEntry.objects.get(candidate__spectrum=spectrum)
        # each entry names its own spectrum (rows swapped would fail here)
        assert entry.spectrum_id == spectrum.pk
        assert entry.dataset == spectrum.dataset
        assert entry.content_hash == spectrum.content_hash
    twin = CatalogEntry.objects.get(candidate__spectrum=copies[1])
    assert twin.designation == "J053431.93+220052.2"


def test_it_counts_the_other_copies_of_each_entrys_content(three_copies):
    copies, single = three_copies
    assert len({c.content_hash for c in copies}) == 1 and len({c.dataset for c in copies}) == 3
    rows = catalog.catalog_rows(catalog.CatalogFilters())
    counts = dict(rows.values_list("spectrum_id", "duplicates"))
    assert counts == {copies[0].pk: 2, copies[1].pk: 2, copies[2].pk: 2, single.pk: 0}


def test_it_flags_duplicates_with_their_data_sets_and_spectrum_links_in_the_list(
    three_copies, ml_client
):
    copies, single = three_copies
    body = ml_client.get(reverse("catalog_list")).content.decode()
    assert body.count("duplicate ×3") == 3
    for spectrum in copies:
        assert f'<a href="/spectra/{spectrum.pk}/"' in body
        assert f"<td>{spectrum.dataset}</td>" in body
    assert f"{copies[1].dataset} (spectrum {copies[1].pk})" in body
    assert f'<a href="/spectra/{single.pk}/"' in body


def test_it_exports_data_set_designation_spectrum_and_duplicates(three_copies, ml_client):
    copies, single = three_copies
    response = ml_client.get(reverse("catalog_export_csv"))
    text = b"".join(response.streaming_content).decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    by_spectrum = {int(row["spectrum_id"]): row for row in rows}
    assert set(by_spectrum) == {c.pk for c in copies} | {single.pk}
    for spectrum in copies:
        row = by_spectrum[spectrum.pk]
        assert row["dataset"] == spectrum.dataset and row["duplicates"] == "2"
        assert row["content_hash"] == spectrum.content_hash
        assert row["designation"] == "J053431.93+220052.2"
    assert by_spectrum[single.pk]["duplicates"] == "0"
