"""The vetted redshift (the spectrum's newest RedshiftDecision) on the catalog entry page and in
every export as vetted_z and vetted_z_err, read in the list's own statements (issue 26)."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest
from astropy.io import fits
from astropy.io.votable import parse_single_table
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from annotation.spectra.models import RedshiftSource
from annotation.spectra.services import spectrum_redshift_decide
from tests.factories import make_spectrum
from tests.web.catalog.test_views import make_entry, make_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def entries(expert):
    """Three entries: one whose spectrum was given z twice (the newest counts), one with z and
    no error, one never given z."""
    run = make_run()
    spectra = [make_spectrum(object_id=f"Z-{i}", seed=i, dataset=f"d{i}") for i in range(3)]
    rows = [make_entry(run, s.object_id, spectrum=s, content_hash=s.content_hash) for s in spectra]
    spectrum_redshift_decide(
        spectrum=spectra[0], actor=expert, z=0.3, z_err=0.01, source=RedshiftSource.OVERRIDE
    )
    spectrum_redshift_decide(
        spectrum=spectra[0],
        actor=expert,
        z=0.12345,
        z_err=0.0002,
        source=RedshiftSource.FIT,
        template="qso",
        rank=1,
    )
    spectrum_redshift_decide(
        spectrum=spectra[1], actor=expert, z=1.5, source=RedshiftSource.OVERRIDE
    )
    wanted = {rows[0].pk: (0.12345, 0.0002), rows[1].pk: (1.5, None), rows[2].pk: (None, None)}
    return rows, wanted


def test_it_shows_the_vetted_redshift_on_the_entry_page(entries, expert_client):
    rows, _ = entries
    page = expert_client.get(reverse("catalog_detail", args=[rows[0].pk])).content.decode()
    cell = page.split('id="vetted-redshift">')[1].split("</dd>")[0]
    assert "z = 0.12345 ± 0.00020" in cell and "cross-correlation fit, qso" in cell
    page = expert_client.get(reverse("catalog_detail", args=[rows[1].pk])).content.decode()
    cell = page.split('id="vetted-redshift">')[1].split("</dd>")[0]
    assert "z = 1.50000" in cell and "±" not in cell
    page = expert_client.get(reverse("catalog_detail", args=[rows[2].pk])).content.decode()
    assert page.split('id="vetted-redshift">')[1].startswith("—")


def _value(raw) -> float | None:
    if raw is None or raw == "" or np.ma.is_masked(raw) or math.isnan(float(raw)):
        return None
    return float(raw)


def test_it_exports_vetted_z_and_its_error_in_csv_votable_and_fits(entries, expert_client):
    _, wanted = entries

    def read(table) -> dict:
        return {int(r["id"]): (_value(r["vetted_z"]), _value(r["vetted_z_err"])) for r in table}

    body = b"".join(expert_client.get(reverse("catalog_export_csv")).streaming_content)
    assert read(csv.DictReader(io.StringIO(body.decode()))) == wanted

    response = expert_client.get(reverse("catalog_export_votable"))
    table = parse_single_table(io.BytesIO(b"".join(response.streaming_content))).to_table()
    assert read(table) == wanted
    assert table["vetted_z"].meta.get("ucd", "src.redshift") == "src.redshift"

    response = expert_client.get(reverse("catalog_export_fits"))
    with fits.open(io.BytesIO(b"".join(response.streaming_content))) as hdus:
        assert read(hdus[1].data) == wanted


def list_statements(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(reverse("catalog_list")).status_code == 200
    return len(queries)


def test_it_lists_with_as_many_statements_with_vetted_redshifts_as_without(expert_client, expert):
    run = make_run()
    spectra = [make_spectrum(object_id=f"S-{i}", seed=i, dataset=f"d{i}") for i in range(20)]
    for spectrum in spectra:
        make_entry(run, spectrum.object_id, spectrum=spectrum, content_hash=spectrum.content_hash)
    list_statements(expert_client)  # fills the cached survey choices
    without = list_statements(expert_client)
    for spectrum in spectra:
        spectrum_redshift_decide(
            spectrum=spectrum, actor=expert, z=0.1, source=RedshiftSource.OVERRIDE
        )
    assert list_statements(expert_client) == without
