"""The tool's renderer against the matplotlib renderers a good engineer would write.

    python -m agent.bench render [--windows 40] [--spectra-dir DIR] [--save-dir DIR]

Three renderers draw the same distinct, random windows of the same spectra in one run:

- ``ours``: SpectralVisualizationTool.render without its cache (the tool's per-request work:
  slicing, robust y limits, ticks, anti-aliased line, PNG).
- ``tuned``: matplotlib as one would tune it for throughput: one persistent figure of the same
  pixel size, ``Line2D.set_data``, the same limits and title, the Agg canvas read as RGBA and
  written to PNG by Pillow at the same compression level. This is the headline reference.
- ``tuned-isal``: the same, its RGB rows written as a PNG by hand with ISA-L's deflate, as ours
  are: what is left of the tuned renderer once its PNG step is as fast as ours.
- ``paper``: how the public Spec-o3 tool draws a view: a new pyplot figure per call, tight
  bounding box.

Spectra are the real LAMOST files shipped in ``agent/data/lamost`` (or ``--spectra-dir``); when
none are there, synthetic LAMOST-like spectra are used and the report says so.
"""

from __future__ import annotations

import functools
import io
import os
import statistics
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from agent.real_corpus import LAMOST_DIR
from agent.render import (
    LINE_COLOUR,
    PNG_COMPRESS_LEVEL,
    PNG_SIGNATURE,
    RENDERER_NAME,
    RENDERER_VERSION,
    deflate,
    png_chunk,
    robust_limits,
    running_median,
)
from agent.spectra import Spectrum, load_spectra
from agent.tool import IMAGE_SIZE, SpectralVisualizationTool

DEFAULT_LAMOST_DIR = LAMOST_DIR  # shipped with the project (agent/data/lamost)
WINDOW_WIDTH_RANGE = (30.0, 2000.0)  # Angstrom, sampled log-uniformly
RENDER_SEED = 20261124
RENDERERS = ("ours", "tuned", "tuned-isal", "paper")


@dataclass(frozen=True)
class BenchSpectra:
    spectra: list[Spectrum]
    origin: str  # "real LAMOST (2 files)" or "synthetic LAMOST-like"


def load_bench_spectra(spectra_dir: Path | None = None, n_synthetic: int = 2) -> BenchSpectra:
    folder = spectra_dir or Path(os.environ.get("SPECVET_LAMOST_DIR", DEFAULT_LAMOST_DIR))
    paths = sorted(folder.glob("*.fits*")) if folder.is_dir() else []
    spectra = [spectrum for path in paths for spectrum in load_spectra(path)]
    if spectra:
        return BenchSpectra(spectra, f"real LAMOST ({len(paths)} files in {folder})")
    from agent.bench.workloads import bench_spectra

    return BenchSpectra(bench_spectra(n_synthetic), "SYNTHETIC LAMOST-like (no real files found)")


def random_windows(
    spectrum: Spectrum, count: int, rng: np.random.Generator
) -> list[tuple[float, float]]:
    """``count`` distinct windows (rest frame, 0.1 A grid) inside the good-pixel coverage."""
    rest = spectrum.wavelength[spectrum.good] / (1.0 + spectrum.redshift)
    lo_edge, hi_edge = float(rest[0]), float(rest[-1])
    low, high = np.log(WINDOW_WIDTH_RANGE[0]), np.log(min(WINDOW_WIDTH_RANGE[1], hi_edge - lo_edge))
    windows: set[tuple[float, float]] = set()
    while len(windows) < count:
        width = float(np.exp(rng.uniform(low, high)))
        start = float(rng.uniform(lo_edge, hi_edge - width))
        windows.add((round(start, 1), round(start + width, 1)))
    return sorted(windows)


def _window_arrays(
    spectrum: Spectrum, window: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
    rest = spectrum.wavelength / (1.0 + spectrum.redshift)
    inside = (rest >= window[0]) & (rest <= window[1]) & spectrum.good
    flux = spectrum.flux[inside]
    limits = robust_limits(flux, running_median(flux, 5)) if flux.size else (0.0, 1.0)
    return rest[inside], flux, limits


class TunedMatplotlibRenderer:
    """One persistent Agg figure of the tool's pixel size, updated in place for every window."""

    def __init__(
        self, size: tuple[int, int] = IMAGE_SIZE, dpi: int = 80, *, png: str = "pillow"
    ) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        if png not in ("pillow", "isal"):
            raise ValueError(f"png must be 'pillow' or 'isal'; got {png!r}")
        self.png = png
        from matplotlib.figure import Figure

        self.figure = Figure(figsize=(size[0] / dpi, size[1] / dpi), dpi=dpi)
        self.canvas = FigureCanvasAgg(self.figure)
        self.axes = self.figure.add_subplot()
        (self.line,) = self.axes.plot([], [], color=np.array(LINE_COLOUR) / 255.0)
        self.axes.minorticks_on()
        self.axes.grid(True, which="major")
        self.axes.set_xlabel("Rest-frame wavelength (Å)")
        self.axes.set_ylabel("Flux")
        self.figure.subplots_adjust(left=0.13, right=0.975, top=0.92, bottom=0.12)

    def render(self, spectrum: Spectrum, window: tuple[float, float], label: str) -> bytes:
        wavelength, flux, limits = _window_arrays(spectrum, window)
        self.line.set_data(wavelength, flux)
        self.axes.set_xlim(*window)
        self.axes.set_ylim(*limits)
        self.axes.set_title(f"{label}: {window[0]:.0f}–{window[1]:.0f} Å")
        self.canvas.draw()
        rgba = np.asarray(self.canvas.buffer_rgba())
        if self.png == "isal":
            return _rgb_png(rgba[..., :3])
        buffer = io.BytesIO()
        Image.fromarray(rgba[..., :3]).save(buffer, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
        return buffer.getvalue()


def _rgb_png(rgb: np.ndarray) -> bytes:
    """An 8-bit RGB PNG, no row filters, deflated as the tool's own PNGs are."""
    height, width, _ = rgb.shape
    rows = np.zeros((height, width * 3 + 1), dtype=np.uint8)
    rows[:, 1:] = rgb.reshape(height, width * 3)
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"".join(
        (
            PNG_SIGNATURE,
            png_chunk(b"IHDR", header),
            png_chunk(b"IDAT", deflate.compress(rows.tobytes(), PNG_COMPRESS_LEVEL)),
            png_chunk(b"IEND", b""),
        )
    )


def paper_render(spectrum: Spectrum, window: tuple[float, float], label: str) -> bytes:
    """How the public Spec-o3 tool draws a view: a fresh pyplot figure for every call."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    wavelength, flux, _ = _window_arrays(spectrum, window)
    figure, axes = plt.subplots(figsize=(8, 5), dpi=80)
    try:
        axes.plot(wavelength, flux)
        axes.minorticks_on()
        axes.grid(True)
        axes.set_title(f"{label} {window[0]:.0f}-{window[1]:.0f} Å")
        axes.set_xlabel("Wavelength (Å)")
        axes.set_ylabel("Flux")
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", bbox_inches="tight")
    finally:
        plt.close(figure)
    return buffer.getvalue()


def _png_facts(png: bytes | None) -> tuple[tuple[int, int], int, int]:
    """(width, height), PNG bytes, number of distinct colours."""
    if png is None:
        raise RuntimeError("a benchmark render returned no image")
    with Image.open(io.BytesIO(png)) as image:
        colours = image.convert("RGB").getcolors(maxcolors=1 << 24) or []
        return image.size, len(png), len(colours)


def _tool_png(
    tool: SpectralVisualizationTool, window: tuple[float, float], label: str
) -> bytes | None:
    return tool.render(window, label).png


def _timed(function: Callable[[], bytes | None]) -> tuple[float, bytes | None]:
    start = time.perf_counter()
    output = function()
    return time.perf_counter() - start, output


def _summary(seconds: Sequence[float]) -> dict[str, float | int]:
    ms = np.asarray(seconds) * 1000.0
    return {
        "median_ms": float(np.median(ms)),
        "p95_ms": float(np.percentile(ms, 95)),
        "calls": int(ms.size),
    }


class RenderMismatch(RuntimeError):
    """A render the benchmark timed is not the image of its own window: no speed is reported."""


def verify_renders(
    checks: Sequence[tuple[Spectrum, tuple[float, float], str, bytes | None, bytes | None]],
) -> str:
    """Each timed window's image, its cached copy and a fresh tool's render of that window (a
    tool that never rendered anything else) are the same PNG of the tool's size; raises
    RenderMismatch with the count otherwise."""
    wrong = []
    for spectrum, window, label, timed, cached in checks:
        fresh = SpectralVisualizationTool(spectrum, cache_size=0).render(window, label).png
        size = _png_facts(fresh)[0] if fresh else None
        if fresh is None or timed != fresh or cached != fresh or size != IMAGE_SIZE:
            wrong.append((spectrum.object_id, window))
    if wrong:
        raise RenderMismatch(
            f"{len(wrong)} of {len(checks)} timed renders differ from a fresh render of their "
            f"own window (first: {wrong[0][0]} {wrong[0][1]}); no speed is reported"
        )
    return (
        f"{len(checks)} of {len(checks)} windows: the timed image, its cached copy and a fresh "
        f"tool's render are the same {IMAGE_SIZE[0]}x{IMAGE_SIZE[1]} PNG"
    )


def run_render_benchmark(
    windows_per_spectrum: int = 40,
    spectra_dir: Path | None = None,
    save_dir: Path | None = None,
    seed: int = RENDER_SEED,
) -> dict[str, Any]:
    """Time the three renderers on the same distinct random windows; JSON-ready summary."""
    if windows_per_spectrum < 1:
        raise ValueError(f"windows_per_spectrum must be >= 1; got {windows_per_spectrum}")
    bench = load_bench_spectra(spectra_dir)
    rng = np.random.default_rng(seed)
    tuned = TunedMatplotlibRenderer()
    tuned_isal = TunedMatplotlibRenderer(png="isal")
    seconds: dict[str, list[float]] = {name: [] for name in (*RENDERERS, "ours_cached")}
    facts: dict[str, list[tuple[tuple[int, int], int, int]]] = {name: [] for name in RENDERERS}
    saved: list[str] = []
    checks: list[tuple[Spectrum, tuple[float, float], str, bytes | None, bytes | None]] = []
    for spectrum_index, spectrum in enumerate(bench.spectra):
        windows = random_windows(spectrum, windows_per_spectrum + 1, rng)
        uncached = SpectralVisualizationTool(spectrum, cache_size=0)
        cached = SpectralVisualizationTool(spectrum)
        # Warm-up outside the timings: fonts, matplotlib's import and caches.
        warm = windows.pop()
        uncached.render(warm, "warm-up")
        tuned.render(spectrum, warm, "warm-up")
        tuned_isal.render(spectrum, warm, "warm-up")
        paper_render(spectrum, warm, "warm-up")
        for window_index, window in enumerate(windows):
            label = f"window {window_index}"
            calls: dict[str, Callable[[], bytes | None]] = {
                "ours": functools.partial(_tool_png, uncached, window, label),
                "tuned": functools.partial(tuned.render, spectrum, window, label),
                "tuned-isal": functools.partial(tuned_isal.render, spectrum, window, label),
                "paper": functools.partial(paper_render, spectrum, window, label),
            }
            for name, call in calls.items():
                elapsed, png = _timed(call)
                seconds[name].append(elapsed)
                facts[name].append(_png_facts(png))
                if save_dir is not None and spectrum_index == 0 and window_index == 0:
                    save_dir.mkdir(parents=True, exist_ok=True)
                    path = save_dir / f"render-{name}.png"
                    path.write_bytes(png or b"")
                    saved.append(str(path))
            cached.render(window, label)
            cached_call = functools.partial(_tool_png, cached, window, label)
            elapsed, from_cache = _timed(cached_call)
            seconds["ours_cached"].append(elapsed)
            timed_ours = _tool_png(uncached, window, label)
            checks.append((spectrum, window, label, timed_ours, from_cache))
    verified = verify_renders(checks)
    summary: dict[str, Any] = {
        "verified": verified,
        "conditions": _conditions(),
        "spectra": bench.origin,
        "windows": len(seconds["ours"]),
        "renderer": f"{RENDERER_NAME} {RENDERER_VERSION}",
        "saved": saved,
    }
    for name in RENDERERS:
        summary[name] = _summary(seconds[name])
        summary[name]["image_sizes"] = sorted({size for size, _, _ in facts[name]})
        summary[name]["png_bytes_median"] = int(statistics.median(n for _, n, _ in facts[name]))
        summary[name]["colours_median"] = int(statistics.median(c for _, _, c in facts[name]))
    summary["ours_cached"] = _summary(seconds["ours_cached"])
    ours = summary["ours"]["median_ms"]
    summary["speedup_vs_tuned"] = summary["tuned"]["median_ms"] / ours
    summary["speedup_vs_tuned_isal"] = summary["tuned-isal"]["median_ms"] / ours
    summary["speedup_vs_paper"] = summary["paper"]["median_ms"] / ours
    return summary


def _conditions() -> str:
    """Cores and load: the same ratio means more when nothing else was running."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return f"{os.cpu_count()} cores, load average {load:.2f} (1 min) at the end of the run"


def _size_span(sizes: list[tuple[int, int]]) -> str:
    widths = sorted({width for width, _ in sizes})
    heights = sorted({height for _, height in sizes})

    def span(values: list[int]) -> str:
        return str(values[0]) if len(values) == 1 else f"{values[0]}-{values[-1]}"

    return f"{span(widths)}x{span(heights)}"


def format_render_report(summary: dict[str, Any]) -> str:
    """The report; it starts with the check of the images (``verify_renders``)."""
    lines = [
        f"render benchmark: {summary['windows']} distinct random windows of {summary['spectra']}",
        f"ours = {summary['renderer']}; each renderer draws every window once, in the same run",
        f"conditions: {summary['conditions']}",
        f"outputs checked before any speed: {summary['verified']}",
        f"{'renderer':<13}{'median ms':>10}{'p95 ms':>10}{'calls':>7}  {'image px':<14}"
        f"{'PNG bytes':>10}{'colours':>9}",
    ]
    for name in RENDERERS:
        row = summary[name]
        lines.append(
            f"{name:<13}{row['median_ms']:>10.3f}{row['p95_ms']:>10.3f}{row['calls']:>7}  "
            f"{_size_span(row['image_sizes']):<14}{row['png_bytes_median']:>10}"
            f"{row['colours_median']:>9}"
        )
    cached = summary["ours_cached"]
    lines.append(
        f"{'ours cached':<13}{cached['median_ms']:>10.3f}{cached['p95_ms']:>10.3f}{cached['calls']:>7}"
    )
    lines.append(
        f"speed-up (median): {summary['speedup_vs_tuned']:.1f}x the tuned matplotlib renderer "
        f"({summary['speedup_vs_tuned_isal']:.1f}x with our PNG encoder), "
        f"{summary['speedup_vs_paper']:.1f}x the paper-style one"
    )
    if summary["saved"]:
        lines.append("saved for a look: " + ", ".join(summary["saved"]))
    return "\n".join(lines)
