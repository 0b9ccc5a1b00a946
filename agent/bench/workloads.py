"""What the agent-side benchmarks run on: synthetic LAMOST-like spectra, the diagnostic windows
a scripted policy zooms into, and the timing summary they report."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from agent.spectra import Spectrum

_T = TypeVar("_T")

# Full coverage plus typical diagnostic windows, 50-1500 Angstrom wide (rest frame).
BENCH_WINDOWS: tuple[tuple[str, tuple[float, float]], ...] = (
    ("H-alpha core", (6540.0, 6590.0)),
    ("H-beta", (4820.0, 4900.0)),
    ("H-alpha", (6500.0, 6630.0)),
    ("Ca II H&K", (3900.0, 4050.0)),
    ("C2 Swan 5165", (5050.0, 5250.0)),
    ("H-alpha wide", (6450.0, 6700.0)),
    ("TiO 7054", (6950.0, 7300.0)),
    ("Ca triplet", (8400.0, 8800.0)),
    ("Blue continuum", (4000.0, 4500.0)),
    ("Red continuum", (6000.0, 7000.0)),
    ("Blue half", (3800.0, 5300.0)),
)
FULL_WINDOW_LABEL = "Full spectrum"
LAMOST_LOG10_STEP = 1e-4
BENCH_SEED = 20240601


@dataclass(frozen=True)
class TimingSummary:
    median_ms: float
    p95_ms: float
    calls: int

    @classmethod
    def from_seconds(cls, seconds: Sequence[float]) -> TimingSummary:
        if not seconds:
            raise ValueError("TimingSummary needs at least one timing; got none")
        ms = np.asarray(seconds) * 1000.0
        return cls(float(np.median(ms)), float(np.percentile(ms, 95)), int(ms.size))

    def as_dict(self) -> dict[str, float | int]:
        return {"median_ms": self.median_ms, "p95_ms": self.p95_ms, "calls": self.calls}


# --- spectra ------------------------------------------------------------------------------------


def synthetic_lamost_spectrum(rng: np.random.Generator, index: int) -> Spectrum:
    """A LAMOST-like spectrum: 3700-9100 A log grid (~3900 px), sloped continuum, Balmer and
    metal absorption, an emission line, noise, a masked stretch and a cosmic ray."""
    wavelength = 10 ** np.arange(np.log10(3700.0), np.log10(9100.0), LAMOST_LOG10_STEP)
    temperature_slope = rng.uniform(-2.0, 1.0)
    flux = 800.0 * (wavelength / 6000.0) ** temperature_slope
    for centre, depth, sigma in (
        (3934.8, 0.5, 4.0),
        (3969.6, 0.4, 4.0),
        (4862.7, 0.4, 6.0),
        (5176.7, 0.2, 8.0),
        (6564.6, 0.3, 6.0),
        (8544.4, 0.2, 3.0),
    ):
        flux *= 1.0 - depth * rng.uniform(0.3, 1.0) * np.exp(
            -0.5 * ((wavelength - centre) / sigma) ** 2
        )
    flux += rng.uniform(0.0, 3.0) * flux.mean() * np.exp(-0.5 * ((wavelength - 6564.6) / 10.0) ** 2)
    flux += rng.normal(0.0, flux.mean() / rng.uniform(10.0, 50.0), wavelength.size)
    flux[rng.integers(100, wavelength.size - 100)] += 20.0 * flux.mean()
    mask = np.zeros(wavelength.size, dtype=bool)
    masked_start = int(rng.integers(200, wavelength.size - 300))
    mask[masked_start : masked_start + 25] = True
    return Spectrum(
        wavelength=wavelength,
        flux=flux,
        mask=mask,
        redshift=0.0,
        survey="LAMOST",
        object_id=f"bench-{index}",
        source="agent.bench synthetic",
    )


def bench_spectra(n_spectra: int, seed: int = BENCH_SEED) -> list[Spectrum]:
    rng = np.random.default_rng(seed)
    return [synthetic_lamost_spectrum(rng, index) for index in range(n_spectra)]


# --- timing -------------------------------------------------------------------------------------


def time_call(function: Callable[[], _T]) -> tuple[float, _T]:
    start = time.perf_counter()
    output = function()
    return time.perf_counter() - start, output
