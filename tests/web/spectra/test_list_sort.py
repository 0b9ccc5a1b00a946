"""The spectra list sorts by every column, both ways, and keeps its filters (issue 15)."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from annotation.spectra.models import Spectrum
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db


@pytest.fixture
def three(db) -> list[Spectrum]:
    rows = [make_spectrum(object_id=name, seed=i) for i, name in enumerate(("B-2", "C-3", "A-1"))]
    for row, snr in zip(rows, (20.0, None, 5.0), strict=True):
        row.snr = snr
        row.save(update_fields=["snr"])
    return rows


def listed(client, **params) -> list[str]:
    body = client.get(reverse("spectrum_list"), params).content.decode()
    return re.findall(r'<a href="/spectra/\d+/(?:\?list=[^"]*)?">([^<]+)</a>', body)


def test_it_sorts_by_a_column_and_flips_it(expert_client, three) -> None:
    assert listed(expert_client, sort="object") == ["A-1", "B-2", "C-3"]
    assert listed(expert_client, sort="-object") == ["C-3", "B-2", "A-1"]


def test_it_puts_missing_values_last_both_ways(expert_client, three) -> None:
    assert listed(expert_client, sort="snr") == ["A-1", "B-2", "C-3"]
    assert listed(expert_client, sort="-snr") == ["B-2", "A-1", "C-3"]


def test_it_ignores_an_unknown_sort(expert_client, three) -> None:
    assert listed(expert_client, sort="arrays") == ["B-2", "C-3", "A-1"]  # by id


def test_it_links_each_header_to_its_sort_and_marks_the_current_one(expert_client, three) -> None:
    body = expert_client.get(reverse("spectrum_list"), {"sort": "snr", "q": "-"}).content.decode()
    assert 'aria-sort="ascending"' in body
    assert "sort=-snr" in body  # clicking S/N again flips it
    links = re.findall(r'class="sort-link" href="\?([^"]+)"', body)
    assert len(links) == 8 and all("q=-" in link for link in links)  # the filter is kept
    assert 'name="sort" value="snr"' in body  # and the filter form keeps the sort
