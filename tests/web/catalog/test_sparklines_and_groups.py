"""The catalog to work from (issue 26): a sparkline per row, drawn for the page's rows only and
cached; duplicates (same content) grouped on a page listing the members with their data sets."""

from __future__ import annotations

import re

import numpy as np
import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotation.catalog import sparklines
from annotation.inspections.models import CatalogEntry
from tests.factories import make_spectrum
from tests.web.catalog import test_duplicates
from tests.web.catalog.test_views import make_entry, make_run

pytestmark = pytest.mark.django_db
three_copies = test_duplicates.three_copies  # the fixture


@pytest.fixture(autouse=True)
def _empty_cache():
    cache.clear()
    yield
    cache.clear()


def polyline(svg: str) -> np.ndarray:
    points = re.search(r'points="([^"]+)"', svg)
    assert points, svg
    return np.array([[float(v) for v in p.split(",")] for p in points.group(1).split()])


def test_it_keeps_a_one_pixel_line_in_the_sparkline():
    wave = np.linspace(4000.0, 9000.0, 4000)
    flux = np.ones_like(wave)
    flux[2100] = 1.3  # one pixel, as in issue 26's CSV
    points = polyline(sparklines.sparkline_svg(wave, flux))
    assert points[:, 0].min() >= 0 and points[:, 0].max() <= sparklines.WIDTH
    top = points[np.argmin(points[:, 1])]
    # the line's column (2100/4000 of the width) reaches the top, the continuum the bottom
    assert abs(top[0] - 2100 / 4000 * sparklines.WIDTH) < 1.5
    assert top[1] == pytest.approx(1.0)
    assert np.median(points[:, 1]) == pytest.approx(sparklines.HEIGHT - 1.0)


def test_it_leaves_out_bad_pixels_and_draws_an_empty_spectrum_as_a_dashed_line():
    wave = np.linspace(4000.0, 9000.0, 500)
    flux = np.ones_like(wave)
    flux[100] = 1e6  # a masked cosmic ray
    bad = np.zeros_like(wave, dtype=bool)
    bad[100] = True
    assert np.ptp(polyline(sparklines.sparkline_svg(wave, flux, bad))[:, 1]) == 0
    empty = sparklines.sparkline_svg(wave, np.full_like(wave, np.nan))
    assert "stroke-dasharray" in empty and "polyline" not in empty


def test_it_serves_a_cached_sparkline_of_a_stored_spectrum(expert_client, monkeypatch):
    spectrum = make_spectrum(object_id="SPARK", line_amplitude=3.0)
    calls = []
    real = sparklines.spectrum_value
    monkeypatch.setattr(sparklines, "spectrum_value", lambda row: calls.append(row.pk) or real(row))
    url = reverse("catalog_sparkline", args=[spectrum.pk])
    first = expert_client.get(url)
    assert first.status_code == 200 and first["Content-Type"] == "image/svg+xml"
    assert "default-src 'none'" in first["Content-Security-Policy"]
    assert "max-age" in first["Cache-Control"]
    second = expert_client.get(url)
    assert second.content == first.content and calls == [spectrum.pk]
    # the factory's H-alpha line at 6564.61 Å is the sparkline's highest point
    points = polyline(first.content.decode())
    value = real(spectrum)
    at = (6564.61 - value.wavelength[0]) / (value.wavelength[-1] - value.wavelength[0])
    assert abs(points[np.argmin(points[:, 1]), 0] - at * sparklines.WIDTH) < 2
    assert (
        expert_client.get(reverse("catalog_sparkline", args=[spectrum.pk + 99])).status_code == 404
    )


def test_it_refuses_the_sparkline_to_anonymous_visitors(client):
    spectrum = make_spectrum(object_id="SPARK")
    response = client.get(reverse("catalog_sparkline", args=[spectrum.pk]))
    assert response.status_code == 302 and reverse("login") in response["Location"]


def test_it_links_each_row_to_its_own_sparkline_and_draws_none_while_listing(
    three_copies, ml_client, monkeypatch
):
    copies, single = three_copies
    monkeypatch.setattr(sparklines, "spectrum_value", lambda row: pytest.fail("drawn in the list"))
    body = ml_client.get(reverse("catalog_list")).content.decode()
    for spectrum in [*copies, single]:
        cell = re.search(
            rf'<a href="/spectra/{spectrum.pk}/"[^>]*><img class="sparkline" src="([^"]+)"', body
        )
        assert cell and cell.group(1) == f"/catalog/sparklines/{spectrum.pk}.svg"


def list_statements(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(reverse("catalog_list")).status_code == 200
    return len(queries)


def test_it_lists_with_as_many_statements_for_fifty_rows_as_for_three(expert_client, db):
    run = make_run()
    spectra = [make_spectrum(object_id=f"S-{i}", seed=i, dataset=f"d{i}") for i in range(50)]
    for spectrum in spectra[:3]:
        make_entry(run, spectrum.object_id, spectrum=spectrum, content_hash=spectrum.content_hash)
    list_statements(expert_client)  # fills the cached survey choices
    few = list_statements(expert_client)
    for spectrum in spectra[3:]:
        make_entry(run, spectrum.object_id, spectrum=spectrum, content_hash=spectrum.content_hash)
    assert CatalogEntry.objects.count() == 50
    assert list_statements(expert_client) == few


def test_it_groups_the_copies_of_one_content_with_their_data_sets(three_copies, ml_client):
    copies, single = three_copies
    content_hash = copies[0].content_hash
    body = ml_client.get(reverse("catalog_list")).content.decode()
    assert body.count(f'href="/catalog/duplicates/{content_hash}/"') == 3
    page = ml_client.get(reverse("duplicate_group", args=[content_hash]))
    assert page.status_code == 200
    assert [s.pk for s in page.context["group"].spectra] == [c.pk for c in copies]
    assert sorted(e.spectrum_id for e in page.context["group"].entries) == [c.pk for c in copies]
    html = page.content.decode()
    for spectrum in copies:
        assert f"<td>{spectrum.dataset}</td>" in html
        assert f'<a href="/spectra/{spectrum.pk}/">' in html
    assert single.object_id not in html
    groups = ml_client.get(reverse("duplicate_groups"))
    assert groups.context["groups"] == [
        {
            "content_hash": content_hash,
            "members": 3,
            "object_id": "TWIN",
            "datasets": sorted(c.dataset for c in copies),
        }
    ]


def test_it_answers_404_for_a_content_nobody_holds_or_a_bad_hash(ml_client, db):
    assert ml_client.get(reverse("duplicate_group", args=["0" * 64])).status_code == 404
    assert ml_client.get(reverse("duplicate_group", args=["not-a-hash"])).status_code == 404


def test_it_leaves_out_of_a_group_the_entries_the_reader_may_not_see(
    three_copies, ml_client, monkeypatch
):
    copies, _single = three_copies
    from annotation import blinding

    hidden = CatalogEntry.objects.get(spectrum=copies[1])
    real = blinding.catalog_entries_visible_to

    def hiding(*, user, rows=None):
        return real(user=user, rows=rows).exclude(pk=hidden.pk)

    monkeypatch.setattr(blinding, "catalog_entries_visible_to", hiding)
    page = ml_client.get(reverse("duplicate_group", args=[copies[0].content_hash]))
    shown = sorted(e.pk for e in page.context["group"].entries)
    assert hidden.pk not in shown and len(shown) == 2
    assert f'href="/catalog/{hidden.pk}/"' not in page.content.decode()
