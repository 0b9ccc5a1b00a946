"""The raster renderer: ticks, robust y limits, decimation, image geometry; and the bench CLI."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFont

from agent.bench import format_render_report, make_parser, run_render_benchmark
from agent.render import (
    LINE_COLOUR,
    SpectrumPlot,
    column_envelope,
    find_dejavu_font,
    load_font,
    nice_ticks,
    plot_area,
    render_png,
    robust_limits,
    running_median,
    tick_labels,
)

SIZE = (644, 392)
REPO_ROOT = Path(__file__).resolve().parents[2]


def line_pixels(png: bytes) -> np.ndarray:
    """Boolean (height, width) map of pixels painted in the data-line colour."""
    with Image.open(io.BytesIO(png)) as image:
        rgb = np.asarray(image.convert("RGB"))
    return np.all(rgb == np.array(LINE_COLOUR, dtype=np.uint8), axis=2)


def column_of(value: float, x_range: tuple[float, float]) -> int:
    area = plot_area(SIZE)
    lo, hi = x_range
    return int(area.left + (value - lo) / (hi - lo) * area.width)


@pytest.mark.parametrize(
    ("lo", "hi", "max_ticks", "expected"),
    [
        # step 10 would give 14 ticks, 20 gives 7
        (6500, 6630, 8, [6500, 6520, 6540, 6560, 6580, 6600, 6620]),
        # step 500 would give 11 (4000..9000), 1000 gives 6
        (3700, 9100, 8, [4000, 5000, 6000, 7000, 8000, 9000]),
        # 0.1 gives 11, 0.2 gives 6
        (0.0, 1.0, 6, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        # 1 gives 11, 2 gives -2..6
        (-3.0, 7.0, 6, [-2, 0, 2, 4, 6]),
        # 0.5 gives 10 (6561.5..6566.0), 1 gives 5
        (6561.3, 6566.1, 8, [6562, 6563, 6564, 6565, 6566]),
    ],
)
def test_it_chooses_round_ticks(lo, hi, max_ticks, expected):
    assert nice_ticks(lo, hi, max_ticks) == pytest.approx(expected)


@pytest.mark.parametrize(("lo", "hi"), [(5.0, 5.0), (6.0, 5.0), (float("nan"), 1.0)])
def test_it_refuses_ticks_for_an_empty_range(lo, hi):
    with pytest.raises(ValueError, match="lo < hi"):
        nice_ticks(lo, hi, 8)


@pytest.mark.parametrize(
    ("ticks", "expected"),
    [
        ([6500.0, 6520.0, 6540.0], ["6500", "6520", "6540"]),
        ([0.0, 0.2, 0.4], ["0.0", "0.2", "0.4"]),
        ([0.3, 0.30000000000000004 + 0.05], ["0.30", "0.35"]),
        ([-2.0, 0.0, 2.0], ["-2", "0", "2"]),
    ],
)
def test_it_labels_ticks_with_just_enough_decimals(ticks, expected):
    assert tick_labels(ticks) == expected


def test_it_computes_a_running_median_with_edge_padding():
    # windows (5,5,1) (5,1,2) (1,2,2) -> 5, 2, 2
    assert running_median(np.array([5.0, 1.0, 2.0]), 3).tolist() == [5.0, 2.0, 2.0]
    assert running_median(np.array([1.0, 1.0, 9.0, 1.0, 1.0]), 3).tolist() == [1.0] * 5


def test_it_ignores_an_isolated_spike_when_choosing_y_limits():
    flux = np.tile([9.0, 11.0], 20)
    flux[21] = 1000.0
    smooth = running_median(flux, 5)
    # without the spike the data span 9..11; margin 6% of 2 on each side
    assert robust_limits(flux, smooth) == pytest.approx((8.88, 11.12))


def test_it_keeps_a_broad_emission_line_inside_the_y_limits():
    pixels = np.arange(400.0)
    flux = 10.0 + 50.0 * np.exp(-0.5 * ((pixels - 200.0) / 5.0) ** 2)
    _, hi = robust_limits(flux, running_median(flux, 5))
    assert hi >= flux.max()


@pytest.mark.parametrize(
    ("core", "expected_lo"),
    [
        # the others span 87..92 (reach 2.5): a core at 85 is within reach and sets the limit,
        # which then spans 85..92 with a 6% margin
        (85.0, 85.0 - 0.06 * 7.0),
        # a core at 80 would squash the plot: the limit stays at 87 and the core is clipped
        (80.0, 87.0 - 0.06 * 5.0),
    ],
)
def test_it_drops_a_narrow_dip_from_the_limits_only_when_it_would_squash_the_plot(
    core, expected_lo
):
    # alternating 90/92 equals its own 5-pixel running median, so only the dip's core has a
    # residual: its running median is 87 (window 89, 87, core, 87, 89)
    flux = np.tile([90.0, 92.0], 50)
    flux[48:53] = [89.0, 87.0, core, 87.0, 89.0]
    lo, _ = robust_limits(flux, running_median(flux, 5))
    assert lo == pytest.approx(expected_lo)


def test_it_pads_the_y_limits_of_a_flat_spectrum():
    flat = np.full(10, 100.0)
    assert robust_limits(flat, flat) == pytest.approx((95.0, 105.0))


def test_it_keeps_all_noise_inside_the_y_limits():
    flux = np.random.default_rng(3).normal(100.0, 5.0, 2000)
    lo, hi = robust_limits(flux, running_median(flux, 5))
    assert lo <= flux.min() and hi >= flux.max()


def test_it_reduces_each_column_to_first_min_max_last():
    columns = np.array([0, 0, 0, 1, 1, 2])
    values = np.array([5.0, 1.0, 3.0, 2.0, 8.0, 4.0])
    x, y, runs = column_envelope(columns, values, np.zeros(6, dtype=int))
    assert x.tolist() == [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]
    assert y.tolist() == [5, 1, 5, 3, 2, 2, 8, 8, 4, 4, 4, 4]
    assert runs.tolist() == [0] * 12


def test_it_never_merges_two_runs_into_one_envelope_column():
    x, y, runs = column_envelope(
        np.array([0, 0, 1, 1]), np.array([1.0, 2.0, 3.0, 4.0]), np.array([0, 1, 1, 1])
    )
    assert runs.tolist() == [0] * 4 + [1] * 8
    assert y.tolist() == [1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 4, 4]


def dense_plot(flux: np.ndarray, y_range: tuple[float, float]) -> SpectrumPlot:
    wavelength = np.linspace(5000.0, 6000.0, flux.size)
    return SpectrumPlot(
        wavelength=wavelength,
        flux=flux,
        good=np.ones(flux.size, dtype=bool),
        x_range=(5000.0, 6000.0),
        y_range=y_range,
        title="test",
        x_label="Wavelength (Å)",
        y_label="Flux",
    )


def test_it_keeps_a_one_pixel_spike_when_decimating_a_dense_window():
    flux = np.sin(np.arange(4000) / 50.0)
    spike = 2001
    flux[spike] = 100.0
    plot = dense_plot(flux, (-2.0, 2.0))
    painted = line_pixels(render_png(plot, SIZE))
    area = plot_area(SIZE)
    spike_column = column_of(plot.wavelength[spike], plot.x_range)
    near_top = painted[area.top + 1 : area.top + 3]
    assert near_top[:, spike_column - 1 : spike_column + 2].any()
    assert not near_top[:, : spike_column - 2].any()
    assert not near_top[:, spike_column + 3 :].any()


def test_it_draws_an_image_of_exactly_the_requested_size():
    png = render_png(dense_plot(np.zeros(100), (-1.0, 1.0)), SIZE)
    with Image.open(io.BytesIO(png)) as image:
        assert image.size == SIZE


def test_it_refuses_to_render_an_empty_y_range():
    with pytest.raises(ValueError, match="increasing ranges"):
        render_png(dense_plot(np.zeros(100), (1.0, 1.0)), SIZE)


def test_it_finds_dejavu_sans_from_matplotlib_and_loads_it():
    path = find_dejavu_font()
    assert path is not None and path.name == "DejaVuSans.ttf"
    assert isinstance(load_font(12), ImageFont.FreeTypeFont)


def test_it_imports_the_renderer_and_tool_without_matplotlib():
    code = "import sys, agent.render, agent.tool; print('matplotlib' in sys.modules)"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"


def test_it_reports_the_benchmark_structure_on_a_tiny_config():
    summary = run_render_benchmark(repeats=2, n_spectra=1, max_windows=1)
    assert summary["config"] == {"repeats": 2, "spectra": 1, "windows": 1}
    for name in ("ours", "reference"):
        for mode in ("uncached", "cached"):
            assert set(summary[name][mode]) == {"median_ms", "p95_ms", "calls"}
            assert summary[name][mode]["calls"] == 2
        assert summary[name]["png_bytes_median"] > 0
    assert summary["ours"]["image_sizes"] == [SIZE]
    assert summary["speedup_uncached"] > 0 and summary["speedup_cached"] > 0
    assert "speed-up" in format_render_report(summary)


def test_it_parses_the_render_subcommand():
    arguments = make_parser().parse_args(["render", "--repeats", "3", "--spectra", "2"])
    assert (arguments.command, arguments.repeats, arguments.spectra) == ("render", 3, 2)
