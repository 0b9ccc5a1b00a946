"""Long spectra: the page's plot is thinned to a bounded size, the zoom API serves the pixels."""

from __future__ import annotations

import json
import re
from html import unescape

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse

from agent.render import robust_limits, running_median
from agent.spectra import Spectrum as SpectrumValue
from annotation.core.charts import min_max_indices
from annotation.spectra import services
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

N_PIXELS = 500_000
MAX_POINTS = 4000
SPIKE, DIP = 123_457, 400_001  # one pixel each: an emission spike and a deep trough


def long_value() -> SpectrumValue:
    rng = np.random.default_rng(7)
    wave = np.linspace(3700.0, 9100.0, N_PIXELS)
    flux = 1.0 + rng.normal(0.0, 0.01, N_PIXELS)
    flux[SPIKE] = 50.0
    flux[DIP] = -20.0
    mask = np.zeros(N_PIXELS, dtype=bool)
    mask[250_000:250_050] = True  # a bad-column gap
    return SpectrumValue(
        wavelength=wave,
        flux=flux,
        ivar=np.full(N_PIXELS, 1.0 / 0.01**2),
        mask=mask,
        survey="TEST",
        object_id="LONG-1",
    )


@pytest.fixture
def long_spectrum(settings):
    settings.SPECTRUM_PLOT_MAX_POINTS = MAX_POINTS
    value = long_value()
    return services.spectra_store(values=[value], dataset="long", source_name="long.csv").created[0]


@pytest.fixture
def browser():
    client = Client()
    client.force_login(UserFactory(username="vera", roles=["viewer"]))
    return client


def embedded_plot(body: str) -> dict:
    found = re.search(r'<script id="plot-data" type="application/json">(.*?)</script>', body, re.S)
    assert found is not None
    return json.loads(unescape(found.group(1)))


def test_it_keeps_the_page_of_a_long_spectrum_small(long_spectrum, browser):
    response = browser.get(reverse("spectrum_detail", args=[long_spectrum.pk]))
    assert response.status_code == 200
    assert len(response.content) < 600_000  # all 500k pixels: ~25 MB
    plot = embedded_plot(response.content.decode())
    for trace in ("wavelength", "flux", "lower", "upper"):
        assert 0 < len(plot[trace]) <= MAX_POINTS, trace
    assert plot["decimated"] is True
    assert plot["n_pixels"] == N_PIXELS
    assert plot["zoom_url"] == reverse("api_spectrum_plot", args=[long_spectrum.pk])


def test_it_keeps_the_spikes_troughs_and_gaps_of_a_thinned_plot(long_spectrum, browser):
    plot = embedded_plot(browser.get(reverse("spectrum_detail", args=[long_spectrum.pk])).text)
    flux = [f for f in plot["flux"] if f is not None]
    assert max(flux) == pytest.approx(50.0)
    assert min(flux) == pytest.approx(-20.0)
    assert None in plot["flux"]  # the masked columns still break the line
    # the thinned band still spans the extremes of the full one
    assert max(u for u in plot["upper"] if u is not None) == pytest.approx(50.01)
    assert min(lo for lo in plot["lower"] if lo is not None) == pytest.approx(-20.01)


def test_it_serves_the_exact_pixels_of_a_window_with_fewer_than_n(long_spectrum, browser):
    value = long_value()
    lo, hi = float(value.wavelength[SPIKE - 100]), float(value.wavelength[SPIKE + 100])
    response = browser.get(
        reverse("api_spectrum_plot", args=[long_spectrum.pk]), {"lo": lo, "hi": hi}
    )
    assert response.status_code == 200
    data = response.json()
    inside = (value.wavelength >= lo) & (value.wavelength <= hi)
    assert data["decimated"] is False
    assert data["n_pixels"] == int(inside.sum()) == len(data["flux"])
    assert data["wavelength"] == pytest.approx(np.round(value.wavelength[inside], 3).tolist())
    # rounded to 7 significant digits of the window's largest value (50), nothing else
    assert data["flux"] == pytest.approx(value.flux[inside].tolist(), abs=1e-5)
    assert max(data["flux"]) == pytest.approx(50.0)


def test_it_thins_a_wide_window_to_at_most_n_points(long_spectrum, browser):
    response = browser.get(
        reverse("api_spectrum_plot", args=[long_spectrum.pk]),
        {"lo": 4000, "hi": 8000, "max_points": 1000},
    )
    data = response.json()
    assert data["decimated"] is True
    assert len(data["flux"]) <= 1000
    assert min(data["wavelength"]) >= 4000 and max(data["wavelength"]) <= 8000
    assert max(f for f in data["flux"] if f is not None) == pytest.approx(50.0)


def test_it_never_serves_more_than_the_configured_points(long_spectrum, browser):
    url = reverse("api_spectrum_plot", args=[long_spectrum.pk])
    data = browser.get(url, {"max_points": 10**9}).json()
    assert len(data["flux"]) <= MAX_POINTS


@pytest.mark.parametrize(
    "query", [{"lo": 6000, "hi": 5000}, {"lo": "x"}, {"max_points": 0}], ids=str
)
def test_it_refuses_a_bad_window_with_a_400(long_spectrum, browser, query):
    response = browser.get(reverse("api_spectrum_plot", args=[long_spectrum.pk]), query)
    assert response.status_code == 400
    assert set(response.json()) & {"lo", "hi", "max_points"}


def test_it_sends_a_short_spectrum_whole_without_a_zoom_url(browser, settings):
    settings.SPECTRUM_PLOT_MAX_POINTS = MAX_POINTS
    from tests.factories import make_spectrum

    row = make_spectrum(n_pixels=3900)
    plot = embedded_plot(browser.get(reverse("spectrum_detail", args=[row.pk])).text)
    assert len(plot["flux"]) == 3900
    assert plot["decimated"] is False
    assert "zoom_url" not in plot


# --- min-max decimation ---------------------------------------------------------------------


def test_it_keeps_the_global_minimum_and_maximum():
    values = np.random.default_rng(1).normal(size=100_001)
    values[31_337], values[77_777] = 9.0, -9.0
    kept = min_max_indices(values, 600)
    assert len(kept) <= 600
    assert {31_337, 77_777} <= set(kept.tolist())
    assert list(kept) == sorted(set(kept.tolist()))


def test_it_keeps_every_pixel_when_there_are_few():
    assert min_max_indices(np.arange(50.0), 50).tolist() == list(range(50))


def test_it_keeps_a_gap_inside_a_bucket():
    values = np.ones(10_000)
    values[5_000] = np.nan
    kept = min_max_indices(values, 99)
    assert 5_000 in kept.tolist()
    assert len(kept) <= 99


def test_it_keeps_an_all_masked_stretch_as_a_gap():
    values = np.full(10_000, np.nan)
    values[:10] = 1.0
    kept = min_max_indices(values, 30)
    assert np.isnan(values[kept]).any()
    assert len(kept) <= 30


def test_it_bounds_the_y_axis_by_the_flux_of_every_pixel_not_the_spikes(long_spectrum, browser):
    value = long_value()
    plot = embedded_plot(browser.get(reverse("spectrum_detail", args=[long_spectrum.pk])).text)
    low, high = plot["y_range"]
    # the unit-flux noise, padded: the one-pixel 50 spike and -20 trough stay out
    assert 0.9 < low < 1.0 < high < 1.1
    lo, hi = float(value.wavelength[DIP - 5000]), float(value.wavelength[DIP + 5000])
    window = browser.get(
        reverse("api_spectrum_plot", args=[long_spectrum.pk]), {"lo": lo, "hi": hi}
    )
    inside = (value.wavelength >= lo) & (value.wavelength <= hi)
    shown = value.flux[inside]
    # the agent's own image limits of every pixel in the window (issue 26), the trough left out
    expected = robust_limits(shown, running_median(shown, 5))
    assert window.json()["y_range"] == pytest.approx(list(expected))
    assert expected[0] > 0.9
