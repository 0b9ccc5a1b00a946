"""Catalog exports: streamed CSV, VOTable and FITS, read back with astropy."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest
from astropy.io import fits
from astropy.io.votable import parse as parse_votable
from astropy.table import Table
from django.urls import reverse

from annotation.catalog import exports as catalog_export
from annotation.catalog import selectors as catalog
from annotation.inspections.models import CatalogEntry
from tests.web.catalog.test_views import make_entry, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def entries(db):
    run = make_run()
    return [
        make_entry(run, "J0001+0001", ra=0.25, dec=-1.5, confidence=0.75, snr=12.5),
        make_entry(run, "J0002+0002", task_code="WD", verdict="NO", snr=None, ra=None, dec=None),
        make_entry(run, "Ωmega-3", survey="SDSS", expert_decision="unsure", synthetic=True),
    ]


def csv_rows(response) -> list[dict[str, str]]:
    text = b"".join(response.streaming_content).decode("utf-8")
    return list(csv.DictReader(io.StringIO(text)))


def body(response) -> bytes:
    assert response.streaming  # VOTable and FITS are streamed from a temporary file
    return b"".join(response.streaming_content)


def votable_of(response) -> tuple[Table, dict[str, str]]:
    votable = parse_votable(io.BytesIO(body(response)))
    infos = {info.name: info.value for info in votable.resources[0].infos}
    return votable.get_first_table().to_table(), infos


def fits_of(response) -> tuple[Table, fits.Header]:
    data = body(response)
    with fits.open(io.BytesIO(data)) as hdus:
        header = hdus["CATALOG"].header.copy()
    return Table.read(io.BytesIO(data), format="fits", hdu="CATALOG"), header


def text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def test_it_streams_a_csv_with_the_documented_header_and_every_row(expert_client, entries):
    response = expert_client.get(reverse("catalog_export_csv"))
    assert response.streaming
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    rows = csv_rows(response)
    assert tuple(rows[0].keys()) == catalog.COLUMN_NAMES
    assert [row["object_id"] for row in rows] == ["J0001+0001", "J0002+0002", "Ωmega-3"]
    first = rows[0]
    assert (first["ra"], first["dec"], first["confidence"], first["snr"]) == (
        "0.25",
        "-1.5",
        "0.75",
        "12.5",
    )
    assert (first["task"], first["verdict"], first["synthetic"]) == ("CV", "YES", "false")
    assert first["created_at"].endswith("Z")
    assert (rows[1]["snr"], rows[1]["ra"]) == ("", "")
    assert (rows[2]["expert_decision"], rows[2]["synthetic"]) == ("unsure", "true")


def test_it_exports_only_the_filtered_rows_in_the_requested_order(expert_client, entries):
    response = expert_client.get(
        reverse("catalog_export_csv"), {"task": "CV", "sort": "-object_id"}
    )
    assert [row["object_id"] for row in csv_rows(response)] == ["Ωmega-3", "J0001+0001"]


def test_it_stops_the_csv_at_the_requested_limit(expert_client, entries):
    response = expert_client.get(reverse("catalog_export_csv"), {"limit": "2"})
    assert [row["object_id"] for row in csv_rows(response)] == ["J0001+0001", "J0002+0002"]


@pytest.mark.parametrize("hostile", ['=HYPERLINK("http://x")', "+1+1", "@SUM(A1)", "-2+3"])
def test_it_keeps_formula_like_text_from_running_in_spreadsheets(expert_client, hostile):
    make_entry(make_run(), hostile)
    rows = csv_rows(expert_client.get(reverse("catalog_export_csv")))
    assert rows[0]["object_id"] == "'" + hostile


def test_it_writes_csv_in_chunks_of_many_rows():
    run_rows = 1201
    run = make_run()
    CatalogEntry.objects.bulk_create(
        [CatalogEntry(run=run, object_id=f"O{i}", task_code="CV") for i in range(run_rows)]
    )
    chunks = list(
        catalog_export.catalog_csv_chunks(catalog.catalog_rows(catalog.CatalogFilters(), "id"))
    )
    assert len(chunks) == 1 + math.ceil(run_rows / 500)
    assert sum(chunk.count("\n") for chunk in chunks) == run_rows + 1


def test_it_exports_a_votable_that_astropy_reads_back(expert_client, entries):
    response = expert_client.get(reverse("catalog_export_votable"))
    assert response.status_code == 200
    assert response["X-Catalog-Row-Limit"] == str(catalog.EXPORT_ROW_LIMIT)
    assert response["X-Catalog-Truncated"] == "false"
    table, infos = votable_of(response)
    assert table.colnames == list(catalog.COLUMN_NAMES)
    assert [text(v) for v in table["object_id"]] == ["J0001+0001", "J0002+0002", "Ωmega-3"]
    assert table["ra"].unit == "deg" and table["dec"].unit == "deg"
    assert table["ra"][0] == pytest.approx(0.25)
    assert np.ma.is_masked(table["snr"][1])
    assert list(table["synthetic"]) == [False, False, True]
    assert table["confidence"].description == "Agent probability of its verdict, 0-1"
    assert infos["QUERY_STATUS"] == "OK"


def test_it_puts_ucds_on_the_votable_fields(expert_client, entries):
    votable = parse_votable(io.BytesIO(body(expert_client.get(reverse("catalog_export_votable")))))
    ucds = {field.name: field.ucd for field in votable.get_first_table().fields}
    assert ucds["ra"] == "pos.eq.ra;meta.main"
    assert ucds["object_id"] == "meta.id;meta.main"


def test_it_exports_a_fits_table_that_astropy_reads_back(expert_client, entries):
    response = expert_client.get(reverse("catalog_export_fits"), {"survey": "LAMOST"})
    assert response.status_code == 200
    assert response["X-Catalog-Rows"] == "2"
    table, header = fits_of(response)
    assert [text(v) for v in table["object_id"]] == ["J0001+0001", "J0002+0002"]
    assert table["dec"][0] == pytest.approx(-1.5)
    assert np.ma.is_masked(table["snr"][1])  # NaN on disk; astropy reads it as masked
    names = [header[f"TTYPE{i}"] for i in range(1, header["TFIELDS"] + 1)]
    assert names == list(catalog.COLUMN_NAMES)
    position = names.index("ra") + 1
    assert header[f"TUNIT{position}"] == "deg"
    assert header[f"TCOMM{position}"] == "Right ascension (ICRS); NaN if unknown"
    assert header["TRUNCATD"] is False


def test_it_keeps_non_ascii_object_ids_in_fits(expert_client, entries):
    table, _ = fits_of(expert_client.get(reverse("catalog_export_fits"), {"survey": "SDSS"}))
    assert [text(v) for v in table["object_id"]] == ["Ωmega-3"]


@pytest.mark.parametrize("export", ["catalog_export_votable", "catalog_export_fits"])
def test_it_caps_table_exports_and_says_so(expert_client, entries, monkeypatch, export):
    monkeypatch.setattr(catalog, "EXPORT_ROW_LIMIT", 2)
    response = expert_client.get(reverse(export))
    assert response["X-Catalog-Truncated"] == "true"
    assert response["X-Catalog-Row-Limit"] == "2"
    if export == "catalog_export_votable":
        table, infos = votable_of(response)
        assert infos["QUERY_STATUS"] == "OVERFLOW"
    else:
        table, header = fits_of(response)
        assert header["TRUNCATD"] is True
    assert len(table) == 2


@pytest.mark.parametrize("export", ["catalog_export_votable", "catalog_export_fits"])
def test_it_exports_an_empty_but_typed_table_when_nothing_matches(expert_client, entries, export):
    response = expert_client.get(reverse(export), {"task": "B"})
    assert response.status_code == 200
    table = votable_of(response)[0] if export == "catalog_export_votable" else fits_of(response)[0]
    assert len(table) == 0
    assert table.colnames == list(catalog.COLUMN_NAMES)


@pytest.mark.parametrize(
    "export", ["catalog_export_csv", "catalog_export_votable", "catalog_export_fits"]
)
@pytest.mark.parametrize("params", [{"confidence_min": "x"}, {"limit": "0"}, {"limit": "-5"}])
def test_it_refuses_unreadable_export_parameters(expert_client, entries, export, params):
    response = expert_client.get(reverse(export), params)
    assert response.status_code == 400


def test_it_sends_anonymous_export_requests_to_the_login_page(client, entries):
    response = client.get(reverse("catalog_export_csv"))
    assert response.status_code == 302
