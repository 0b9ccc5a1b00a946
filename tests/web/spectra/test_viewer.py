"""The spectrum viewer's data: line list, sky and telluric regions, masked pixels, units and the
file's metadata table (issue 15)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from django.urls import reverse

from agent.spectra import air_to_vacuum
from annotation.spectra import selectors
from annotation.spectra.models import Spectrum
from tests.factories import make_spectrum

pytestmark = pytest.mark.django_db


def _plot_data(body: str) -> dict:
    start = body.index('<script id="plot-data" type="application/json">') + len(
        '<script id="plot-data" type="application/json">'
    )
    return json.loads(body[start : body.index("</script>", start)])


def test_it_ships_the_standard_line_list_in_vacuum_and_air():
    lines = {line["name"]: line for line in selectors.viewer_line_list()}
    for name in ("Hα", "Hβ", "Hγ", "Hδ", "Hε", "Ca II K", "Ca II H", "Mg b", "Na D"):
        assert name in lines
    for name in ("He I", "He II", "[O III]", "[N II]", "[S II]", "[O II]", "Mg II", "C IV"):
        assert name in lines
    assert "Ca II triplet" in lines
    halpha = lines["Hα"]
    assert halpha["air"] == [6562.80]
    assert halpha["vacuum"] == [pytest.approx(float(air_to_vacuum(6562.80)), abs=0.01)]
    assert halpha["vacuum"][0] == pytest.approx(6564.61, abs=0.02)
    # Below 2000 Å the IAU quotes vacuum: no conversion.
    assert lines["C IV"]["air"] == lines["C IV"]["vacuum"]


def test_it_ships_the_sky_lines_and_telluric_bands_in_vacuum():
    regions = selectors.viewer_sky_regions()
    sky = [r for r in regions if r["kind"] == "sky"]
    telluric = {r["name"]: r["range"] for r in regions if r["kind"] == "telluric"}
    centres = sorted((r["range"][0] + r["range"][1]) / 2 for r in sky)
    expected = sorted(
        float(air_to_vacuum(w)) for w in (5577.34, 5889.95, 5895.92, 6300.30, 6363.78)
    )
    assert centres == pytest.approx(expected, abs=0.01)
    assert any(lo < 7600 < hi for lo, hi in telluric.values())  # A band
    assert any(lo < 6875 < hi for lo, hi in telluric.values())  # B band
    assert any(lo < 7250 < hi for lo, hi in telluric.values())  # water


def test_it_lists_masked_runs_and_merges_them_beyond_the_limit():
    wave = np.arange(100.0)
    flux = np.ones(100)
    flux[[3, 4, 5, 50, 90]] = np.nan
    assert selectors.masked_runs(wave, flux) == [[3.0, 5.0], [50.0, 50.0], [90.0, 90.0]]
    assert selectors.masked_runs(wave, flux, limit=2) == [
        [3.0, 5.0],
        [50.0, 90.0],
    ]  # nearest merged
    assert selectors.masked_runs(wave, np.ones(100)) == []


def test_it_ships_the_viewer_data_with_the_plot(expert_client):
    row = make_spectrum(object_id="VIEW-1")
    body = expert_client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    viewer = _plot_data(body)["viewer"]
    assert viewer["medium"] == {"stored": "vacuum", "in_file": "unknown"}
    assert len(viewer["lines"]) == len(selectors.viewer_line_list())
    assert {r["kind"] for r in viewer["sky"]} == {"sky", "telluric"}
    assert viewer["masked"] == []
    assert 'data-viewer-for="spectrum-plot"' in body
    assert "js/spectrum_viewer.js" in body
    assert 'data-viewer="z-slider"' in body and 'data-viewer="smooth"' in body


def test_it_shows_the_files_metadata_escaped_and_the_flux_unit(expert_client):
    row = make_spectrum(object_id="META-1")
    Spectrum.objects.filter(pk=row.pk).update(
        survey="LAMOST",
        meta={
            "DESIG": "J1234<script>alert(1)</script>",
            "CLASS": "STAR",
            "SUBCLASS": "G7",
            "SNRG": 41.23,
            "SNRR": 77.0,
            "BUNIT": "<b>erg</b>",
        },
        resolution_r=1800.0,
        resolution_source="survey default",
    )
    response = expert_client.get(reverse("spectrum_detail", args=[row.pk]))
    body = response.content.decode()
    table = body[body.index('class="viewer-meta') : body.index("</table>")]
    assert "J1234&lt;script&gt;alert(1)&lt;/script&gt;" in table
    assert "<script>alert" not in body
    assert "STAR" in table and "G7" in table
    assert "g 41.2" in table and "r 77.0" in table
    assert "R ≈ 1800 at 6000 Å" in table
    assert "&lt;b&gt;erg&lt;/b&gt;" in table
    viewer = _plot_data(body)["viewer"]
    assert viewer["medium"]["in_file"] == "vacuum"  # LAMOST publishes vacuum wavelengths
    assert "<b>" not in viewer["flux_unit"]  # made inert for the Plotly axis title
    assert viewer["flux_unit_source"] == "file"


def test_it_falls_back_to_the_surveys_flux_unit():
    row = make_spectrum(object_id="UNIT-1")
    row.survey, row.meta = "SDSS", {}
    assert selectors.spectrum_flux_unit(row)["source"] == "survey convention"
    row.survey = "LAMOST"
    assert selectors.spectrum_flux_unit(row) == {"unit": "", "source": "unknown"}


def test_it_marks_the_masked_pixels_of_a_spectrum(expert_client):
    row = make_spectrum(object_id="MASK-1")
    wave, flux, _ = selectors.spectrum_plot_arrays(row)
    flux[100:110] = np.nan
    runs = selectors.masked_runs(wave, flux)
    assert runs == [[round(wave[100], 2), round(wave[109], 2)]]


def test_it_offers_a_real_main_sequence_template_for_a_task_with_real_positives() -> None:
    from agent.real_corpus import CorpusUnavailable, fetch
    from annotation.spectra.selectors import task_template

    try:
        fetch(quiet=True)
    except CorpusUnavailable as exc:
        pytest.skip(f"the real-data cache cannot be built here: {exc}")
    template = task_template("A")
    assert template is not None
    assert template["name_text"].endswith("V)")  # a dwarf of the Pickles library
    assert len(template["wavelength"]) == len(template["flux"]) <= 1500
    assert task_template("CV") is None  # no real cataclysmic variable in the corpus


def test_it_gives_the_viewer_the_full_width_with_the_metadata_folded_under_it(expert_client):
    # Issue 26: the plot shared its row with the metadata and the agent's panel.
    row = make_spectrum(object_id="WIDE")
    body = expert_client.get(reverse("spectrum_detail", args=[row.pk])).content.decode()
    assert '<section class="split stacked">' in body
    assert '<details class="viewer-meta-box small"><summary>File metadata</summary>' in body
    assert "{#" not in body and "{%" not in body
