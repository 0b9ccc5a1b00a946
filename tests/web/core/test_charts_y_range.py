"""The interactive plot's y range (charts.robust_y_range) is the agent's image's (issue 26)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from django.urls import reverse

from agent.render import robust_limits, running_median
from annotation.core import charts


def _cv_like_flux() -> np.ndarray:
    # A cataclysmic variable: a continuum of ~1000 and [O III] 5007 reaching ~35,000 over a few
    # pixels of a 3900-pixel spectrum (the interactive plot stopped at ~4,000).
    pixels = np.arange(3900.0)
    noise = np.random.default_rng(7).normal(0.0, 30.0, pixels.size)
    line = 34_000.0 * np.exp(-0.5 * ((pixels - 1200.0) / 2.0) ** 2)
    return 1000.0 + noise + line


def test_it_shows_the_whole_of_a_strong_emission_line():
    flux = _cv_like_flux()
    low, high = charts.robust_y_range(flux)
    assert high >= flux.max() > 30_000.0
    assert low <= flux.min()


def test_it_gives_the_same_range_as_the_agents_own_image():
    flux = _cv_like_flux()
    flux[50:60] = np.nan  # masked pixels are left out, as the tool leaves out bad pixels
    finite = flux[np.isfinite(flux)]
    expected = robust_limits(finite, running_median(finite, 5))
    assert charts.robust_y_range(flux) == list(expected)


def test_it_has_no_range_without_a_finite_pixel():
    assert charts.robust_y_range(np.full(4, np.nan)) is None


# --- issue 37: a few multi-pixel spikes flattened the rating, pairs and curation plots ----------


def _spiky_flux() -> np.ndarray:
    # A LAMOST-like continuum of ~1000 with three 3-pixel saturated spikes and one single-pixel
    # cosmic ray at 150-230k (the pages showed 0-230k and a flat line).
    flux = 1000.0 + np.random.default_rng(1).normal(0.0, 10.0, 3900)
    for start in (500, 1500, 2500):
        flux[start : start + 3] = 230_000.0
    flux[3000] = 150_000.0
    return flux


def test_it_leaves_a_few_multi_pixel_spikes_out_of_the_range():
    low, high = charts.robust_y_range(_spiky_flux())
    assert low > 900.0 and high < 1100.0


@pytest.mark.parametrize("sigma", [1.06, 1.5, 2.0, 3.0])
@pytest.mark.parametrize("peak", [200.0, 34_000.0])
def test_it_still_shows_the_whole_of_a_resolved_line(sigma, peak):
    pixels = np.arange(3900.0)
    flux = 1000.0 + np.random.default_rng(2).normal(0.0, 10.0, pixels.size)
    flux += peak * np.exp(-0.5 * ((pixels - 1200.3) / sigma) ** 2)
    assert charts.robust_y_range(flux)[1] >= flux.max()


def _spiky_spectrum():
    from agent.spectra import Spectrum as SpectrumValue
    from annotation.spectra import services as spectra_services
    from annotation.spectra.models import Task

    wave = np.logspace(np.log10(3700.0), np.log10(9100.0), 3900)
    value = SpectrumValue(
        wavelength=wave, flux=_spiky_flux(), ivar=np.full(wave.size, 0.01), survey="TEST",
        object_id="SPIKY",
    )  # fmt: skip
    return spectra_services.spectra_store(
        values=[value], dataset="t", source_name="spiky.fits", task=Task.objects.get(code="CV")
    ).created[0]


def _page_y_ranges(client, url: str) -> list[list[float]]:
    body = client.get(url).content.decode()
    scripts = re.findall(r'<script id="plot-[a-z]+" type="application/json">(.*?)</script>', body)
    assert scripts, f"no plot on {url}"
    return [json.loads(script)["y_range"] for script in scripts]


@pytest.mark.django_db
def test_it_keeps_the_continuum_readable_on_the_rating_pairs_and_curation_pages(client, expert):
    from annotation.curation import services as curation_services
    from annotation.rating import services as rating_services
    from tests.factories import UserFactory, make_trajectory

    row = _spiky_spectrum()
    rater = UserFactory(username="maury-37", roles=["rater"])
    stored = curation_services.trajectory_to_stored(make_trajectory(row))
    campaign = rating_services.campaign_create(
        name="spikes", raters=[rater], raters_per_item=1, created_by=expert, seed=3,
        sources=[
            rating_services.RatingSource(
                source=f"t:{i}", data=stored, policy_name=name, task=row.task, spectrum=row,
                dataset="SDSS",
            )
            for i, name in enumerate(("model-a", "model-b"))
        ],
    )  # fmt: skip
    items = list(campaign.items.order_by("source"))
    rating_services.campaign_add_pairs(
        campaign=campaign, pairs=[(items[0], items[1])], raters_per_pair=1, actor=None
    )
    curation = curation_services.curation_create(
        spectrum=row, task=row.task, trajectory=make_trajectory(row), ground_truth="YES",
        teacher={"name": "scripted"},
    )  # fmt: skip
    client.force_login(rater)
    ranges = _page_y_ranges(client, reverse("rating_rate", args=[campaign.pk]))
    ranges += _page_y_ranges(client, reverse("rating_pairs", args=[campaign.pk]))
    client.force_login(expert)
    ranges += _page_y_ranges(client, reverse("curation_screen", args=[curation.pk]))
    assert len(ranges) == 4  # rate, pairs left and right, screen
    for low, high in ranges:
        assert low > 900.0 and high < 1100.0, (low, high)
