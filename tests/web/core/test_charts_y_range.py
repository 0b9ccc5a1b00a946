"""The interactive plot's y range (charts.robust_y_range) is the agent's image's (issue 26)."""

from __future__ import annotations

import numpy as np

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
