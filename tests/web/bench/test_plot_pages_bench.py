"""The plot benchmark (annotation.bench.plot_pages) checks the thinned plot before it times it,
and prints today's budget beside the reference in the same run."""

from __future__ import annotations

import pytest

from annotation.bench import plot_pages
from annotation.spectra import selectors


def test_it_prints_both_budgets_and_their_ratio(capsys):
    assert plot_pages.main(["--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "today     budget  3000:" in out and "reference budget  8000:  7781 points" in out
    assert "today / reference build time:" in out


def test_it_times_nothing_when_the_thinned_plot_loses_the_spike(capsys, monkeypatch):
    real = selectors._plot_series

    def clipped(wave, flux, error, max_points):
        series = real(wave, flux, error, max_points)
        series["flux"] = [None if v is not None and v > 10 else v for v in series["flux"]]
        return series

    monkeypatch.setattr(selectors, "_plot_series", clipped)
    assert plot_pages.main(["--rounds", "1"]) == 1
    out = capsys.readouterr().out
    assert "lowest or highest pixel is lost" in out and "built in" not in out


def test_it_refuses_a_tiny_spectrum():
    with pytest.raises(SystemExit):
        plot_pages.main(["--pixels", "10"])
