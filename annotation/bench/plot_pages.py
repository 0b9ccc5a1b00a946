"""What one spectrum plot costs the server and the page, at today's point budget against the
old one (issue 37 item 10), in the same run:

    .venv/bin/python -m annotation.bench.plot_pages
    .venv/bin/python -m annotation.bench.plot_pages --pixels 7781 --rounds 20

A DESI-length spectrum (``--pixels``, 7,781 by default) with an emission line, a one-pixel
spike and a masked run is turned into the plot's series (annotation.spectra.selectors: the
min-max thinning, rounding, the error band) at ``SPECTRUM_PLOT_MAX_POINTS`` and at REFERENCE
(8,000, the budget before: such a spectrum went whole). Checked first: the thinned plot keeps
the spectrum's lowest and highest pixel, the spike and the gap; then the median build time of
each, their ratio, the points per trace and the bytes of the page's JSON. The browser's side
(time to a drawn plot per page) is printed by tests/e2e/test_plot_timing_e2e.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

REFERENCE = 8000
SEED = 37


def spectrum(pixels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    wave = np.logspace(np.log10(3600.0), np.log10(9824.0), pixels)
    flux = 1.0 + 2.0 * np.exp(-0.5 * ((wave - 6564.6) / 8.0) ** 2)
    flux += rng.normal(0.0, 0.02, pixels)
    flux[pixels // 3] = 40.0  # a cosmic ray: one pixel
    flux[pixels // 2 : pixels // 2 + 25] = np.nan  # a masked run
    return wave, flux, np.full(pixels, 0.02)


def _timed(build: Any, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        build()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def check(series: dict[str, Any], flux: np.ndarray) -> list[str]:
    """What the thinned plot must still show; empty when it does."""
    shown = np.array([np.nan if v is None else v for v in series["flux"]], dtype=float)
    problems = []
    tolerance = 1e-6 * np.nanmax(np.abs(flux))  # the plot's values are rounded (PLOT_DIGITS)
    extremes = (np.nanmax(shown) - np.nanmax(flux), np.nanmin(shown) - np.nanmin(flux))
    if max(abs(d) for d in extremes) > tolerance:
        problems.append("the lowest or highest pixel is lost")
    if not np.isnan(shown).any():
        problems.append("the masked run is drawn as data")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pixels", type=int, default=7781)
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args(argv)
    if options.pixels < 100 or options.rounds < 1:
        parser.error("--pixels >= 100 and --rounds >= 1")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
    import django

    django.setup()
    from django.conf import settings

    from annotation.spectra.selectors import _plot_series

    wave, flux, error = spectrum(options.pixels)
    budgets = {"today": settings.SPECTRUM_PLOT_MAX_POINTS, "reference": REFERENCE}
    built = {name: _plot_series(wave, flux, error, budget) for name, budget in budgets.items()}
    for name, series in built.items():
        problems = check(series, flux)
        if problems:
            print(f"{name} ({budgets[name]} points): {'; '.join(problems)}; nothing timed")
            return 1
    print(f"a {options.pixels}-pixel spectrum, median of {options.rounds} builds:")
    seconds = {}
    for name, budget in budgets.items():
        series = built[name]
        seconds[name] = _timed(
            lambda budget=budget: _plot_series(wave, flux, error, budget), options.rounds
        )
        size = len(json.dumps(series, separators=(",", ":")))
        print(
            f"  {name:9s} budget {budget:5d}: {len(series['flux']):5d} points per trace, "
            f"{size / 1000:6.1f} kB of JSON, built in {seconds[name] * 1000:6.1f} ms"
        )
    ratio = seconds["today"] / seconds["reference"]
    print(f"  today / reference build time: {ratio:.2f} (load {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
