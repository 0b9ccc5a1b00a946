"""VOTable and FITS exports written chunk by chunk: the same tables, bounded memory."""

from __future__ import annotations

import io
import tracemalloc

import numpy as np
import pytest
from astropy.io import fits
from astropy.io.votable import parse as parse_votable
from astropy.table import Table

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
        make_entry(run, "Ωmega-3 😀", survey="SDSS", expert_decision="unsure", synthetic=True),
    ]


def all_rows():
    return catalog.catalog_rows(catalog.CatalogFilters(), "id")


def read_votable(export: catalog_export.ExportFile) -> tuple[Table, dict[str, str]]:
    votable = parse_votable(io.BytesIO(export.file.read()))
    infos = {info.name: info.value for info in votable.resources[0].infos}
    return votable.get_first_table().to_table(), infos


def read_fits(export: catalog_export.ExportFile) -> tuple[Table, fits.Header]:
    data = export.file.read()
    assert len(data) % catalog_export.FITS_BLOCK == 0
    with fits.open(io.BytesIO(data)) as hdus:
        hdus.verify("exception")
        header = hdus["CATALOG"].header.copy()
    return Table.read(io.BytesIO(data), format="fits", hdu="CATALOG"), header


def text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def test_it_writes_a_votable_with_every_value_astropy_reads_back(entries):
    export = catalog_export.write_votable(all_rows(), limit=10, query="task=CV")
    table, infos = read_votable(export)
    assert (export.rows, export.truncated) == (3, False)
    assert infos == {"QUERY_STATUS": "OK", "ROW_LIMIT": "10", "QUERY": "task=CV"}
    assert list(table.colnames) == list(catalog.COLUMN_NAMES)
    assert [text(v) for v in table["object_id"]] == ["J0001+0001", "J0002+0002", "Ωmega-3 \ufffd"]
    assert table["ra"][0] == 0.25
    assert np.ma.is_masked(table["ra"][1])  # NaN is how VOTable writes a missing double
    assert table["ra"].unit == "deg"
    assert [bool(v) for v in table["synthetic"]] == [False, False, True]
    assert list(table["id"]) == [entry.id for entry in entries]
    assert text(table["created_at"][0]).endswith("Z")
    assert [text(v) for v in table["expert_decision"]] == ["", "", "unsure"]


def test_it_writes_a_fits_table_with_utf8_text_units_and_descriptions(entries):
    export = catalog_export.write_fits(all_rows(), limit=10, query="task=CV")
    table, header = read_fits(export)
    assert export.rows == 3 and header["NAXIS2"] == 3
    assert [text(v) for v in table["object_id"]] == ["J0001+0001", "J0002+0002", "Ωmega-3 😀"]
    assert table["dec"][0] == -1.5 and np.ma.is_masked(table["snr"][1])
    assert [bool(v) for v in table["synthetic"]] == [False, False, True]
    assert header["TUNIT4"] == "deg" and header["TUCD4"].startswith("pos.eq.ra")
    assert header["TCOMM2"] == "Survey object identifier"
    assert header["ROWLIMIT"] == 10 and header["TRUNCATD"] is False
    assert "task=CV" in str(header["HISTORY"])


@pytest.mark.parametrize("writer", [catalog_export.write_votable, catalog_export.write_fits])
def test_it_marks_an_export_cut_by_its_row_limit(entries, writer):
    export = writer(all_rows(), limit=2)
    assert (export.rows, export.truncated) == (2, True)


@pytest.mark.parametrize("writer", [catalog_export.write_votable, catalog_export.write_fits])
def test_it_writes_an_empty_export_that_astropy_reads(db, writer):
    export = writer(all_rows(), limit=5)
    table = (
        read_votable(export)[0] if writer is catalog_export.write_votable else read_fits(export)[0]
    )
    assert len(table) == 0 and list(table.colnames) == list(catalog.COLUMN_NAMES)


@pytest.mark.parametrize("writer", [catalog_export.write_votable, catalog_export.write_fits])
def test_it_refuses_a_limit_below_one(db, writer):
    with pytest.raises(catalog.CatalogQueryError, match="limit must be at least 1"):
        writer(all_rows(), limit=0)


def make_rows(count: int) -> None:
    run = make_run()
    CatalogEntry.objects.bulk_create(
        [
            CatalogEntry(run=run, object_id=f"LAMOST J{i:012d}", task_code="CV", survey="LAMOST")
            for i in range(count)
        ],
        batch_size=2000,
    )


def export_peak(writer, rows: int) -> int:
    tracemalloc.start()
    try:
        export = writer(all_rows(), limit=rows + 10)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert export.rows == rows
    export.file.close()
    return peak


@pytest.mark.parametrize("writer", [catalog_export.write_votable, catalog_export.write_fits])
def test_it_keeps_peak_memory_flat_as_the_export_grows(writer, settings, monkeypatch):
    """Four times the rows must not cost four times the memory: rows go out chunk by chunk."""
    settings.DEBUG = False  # DEBUG keeps every SQL query in memory
    chunk = 500
    monkeypatch.setattr(catalog_export, "EXPORT_CHUNK_ROWS", chunk)
    make_rows(2 * chunk)
    small = export_peak(writer, 2 * chunk)
    make_rows(6 * chunk)
    large = export_peak(writer, 8 * chunk)
    assert large < 1.5 * small, (small, large)
