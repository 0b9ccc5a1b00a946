"""The raster renderer: ticks, robust y limits, decimation, image geometry; and the bench CLI."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFont

from agent.bench.cli import make_parser
from agent.bench.render import (
    TunedMatplotlibRenderer,
    format_render_report,
    random_windows,
    run_render_benchmark,
)
from agent.render import (
    LINE_COLOUR,
    LINE_COLOURS,
    RENDERER_VERSION,
    SpectrumPlot,
    column_envelope,
    encode_indexed_png,
    find_dejavu_font,
    load_font,
    minor_ticks,
    nice_ticks,
    plot_area,
    render_png,
    robust_limits,
    running_median,
    tick_labels,
)
from agent.spectra import Spectrum
from agent.tool import SpectralVisualizationTool

SIZE = (644, 392)
REPO_ROOT = Path(__file__).resolve().parents[2]


def line_pixels(png: bytes) -> np.ndarray:
    """Boolean (height, width) map of pixels painted in the data-line colour."""
    with Image.open(io.BytesIO(png)) as image:
        rgb = np.asarray(image.convert("RGB"))
    # Any blend of the anti-aliased line counts: a stroke straddling two pixels paints both.
    return np.any(
        [np.all(rgb == np.array(colour, dtype=np.uint8), axis=2) for colour in LINE_COLOURS],
        axis=0,
    )


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


def test_it_reports_the_benchmark_structure_on_a_tiny_config(tmp_path):
    summary = run_render_benchmark(windows_per_spectrum=2, save_dir=tmp_path)
    assert summary["windows"] == 2 * (2 if "real LAMOST" in summary["spectra"] else 2)
    for name in ("ours", "tuned", "tuned-isal", "paper"):
        assert set(summary[name]) >= {"median_ms", "p95_ms", "calls", "png_bytes_median"}
        assert summary[name]["calls"] == summary["windows"]
    assert summary["ours"]["image_sizes"] == [SIZE]
    assert summary["tuned"]["image_sizes"] == [SIZE]  # the tuned reference draws the same pixels
    assert summary["tuned-isal"]["image_sizes"] == [SIZE]
    assert summary["ours"]["colours_median"] <= 16
    assert {Path(path).name for path in summary["saved"]} == {
        "render-ours.png",
        "render-tuned.png",
        "render-tuned-isal.png",
        "render-paper.png",
    }
    tuned, tuned_isal = (tmp_path / f"render-{name}.png" for name in ("tuned", "tuned-isal"))
    with Image.open(tuned) as first, Image.open(tuned_isal) as second:  # same pixels, other encoder
        assert np.array_equal(np.asarray(first.convert("RGB")), np.asarray(second.convert("RGB")))
    report = format_render_report(summary)
    assert "the tuned matplotlib renderer" in report and "paper-style" in report
    assert "with our PNG encoder" in report


def dense_spectrum_for_windows() -> Spectrum:
    wavelength = np.linspace(3700.0, 9100.0, 3000)
    flux = 1.0 + 0.1 * np.sin(wavelength / 50.0)
    return Spectrum(wavelength=wavelength, flux=flux, survey="LAMOST", object_id="render-bench")


def test_it_draws_distinct_windows_inside_the_coverage():
    spectrum = dense_spectrum_for_windows()
    windows = random_windows(spectrum, 25, np.random.default_rng(1))
    assert len(set(windows)) == 25
    assert all(spectrum.wavelength[0] <= lo < hi <= spectrum.wavelength[-1] for lo, hi in windows)


def test_it_renders_the_tuned_reference_at_the_tool_size():
    spectrum = dense_spectrum_for_windows()
    png = TunedMatplotlibRenderer().render(spectrum, (4000.0, 4500.0), "<b>x</b>")
    with Image.open(io.BytesIO(png)) as image:
        assert image.size == SIZE


def test_it_parses_the_render_subcommand():
    arguments = make_parser().parse_args(["render", "--windows", "3", "--save-dir", "out"])
    assert (arguments.command, arguments.windows, arguments.save_dir) == ("render", 3, Path("out"))


def test_it_anti_aliases_the_data_line():
    """A sloped line crosses pixels partly: their colour is a blend, not all-or-nothing."""
    wavelength = np.linspace(4000.0, 5000.0, 50)
    plot = SpectrumPlot(
        wavelength=wavelength,
        flux=np.linspace(0.0, 1.0, 50),
        good=np.ones(50, dtype=bool),
        x_range=(4000.0, 5000.0),
        y_range=(-0.1, 1.1),
        title="slope",
        x_label="Wavelength (Å)",
        y_label="Flux",
    )
    with Image.open(io.BytesIO(render_png(plot, SIZE))) as image:
        rgb = np.asarray(image.convert("RGB")).reshape(-1, 3)
    colours = {tuple(int(c) for c in pixel) for pixel in np.unique(rgb, axis=0)}
    blends = {c for c in colours if c != LINE_COLOUR and c[2] > c[0] + 20}  # bluish, not grey
    assert LINE_COLOUR in colours
    assert len(blends) >= 2


@pytest.mark.parametrize("width", [7, 8])
def test_it_encodes_indexed_pngs_that_pillow_reads_back_exactly(width):
    rng = np.random.default_rng(width)
    indices = rng.integers(0, 16, size=(5, width), dtype=np.uint8)
    palette = [value for index in range(16) for value in (index * 16, 255 - index, index)]
    with Image.open(io.BytesIO(encode_indexed_png(indices, palette, 1))) as image:
        assert image.mode == "P" and image.size == (width, 5)
        assert np.array_equal(np.asarray(image), indices)
        assert image.getpalette()[:48] == palette


@pytest.mark.parametrize(
    ("major", "lo", "hi", "expected_count"),
    [
        ([4000.0, 5000.0, 6000.0], 3900.0, 6100.0, 8),  # 5 per step: 4 between each pair
        ([0.0, 0.2, 0.4], 0.0, 0.4, 6),  # mantissa 2: 4 per step, 3 between each pair
    ],
)
def test_it_places_minor_ticks_between_the_major_ones(major, lo, hi, expected_count):
    minors = minor_ticks(major, lo, hi)
    assert len(minors) == expected_count
    assert not set(np.round(minors, 6)) & set(np.round(major, 6))


def test_it_records_the_renderer_in_every_trajectory():
    from agent.inspection_tasks import get_task
    from agent.policies.rule_based import RuleBasedInspector
    from agent.rollout import inspect

    spectrum = dense_spectrum_for_windows()
    trajectory = inspect(spectrum, get_task("CV"), RuleBasedInspector(), max_tool_calls=1)
    assert trajectory.meta["renderer"] == {
        "name": "specvet-pillow-aa",
        "version": RENDERER_VERSION,
        "image_size": list(SIZE),
    }


# --- the fast paths give Pillow's pixels ---------------------------------------------------------


def test_it_counts_supersample_blocks_as_pillows_reduce_averages_them():
    from agent.render import _count_blocks

    rng = np.random.default_rng(5)
    strokes = (rng.random((64, 90)) < 0.3).astype(np.uint8)
    counts = _count_blocks(strokes)
    assert np.array_equal(counts, np.asarray(Image.fromarray(strokes * 4).reduce(2)))
    assert counts.max() <= 4 and counts.shape == (32, 45)


def test_it_reads_a_drawn_mask_as_numpy_reads_it():
    from PIL import ImageDraw

    from agent.render import _mask_pixels

    mask = Image.new("L", (1291, 787), 0)  # odd sizes: no row or block is assumed
    ImageDraw.Draw(mask).line([(0, 5), (400, 700), (1290, 30)], fill=1, width=3)
    pixels = _mask_pixels(mask)
    assert pixels.shape == (787, 1291) and pixels.dtype == np.uint8
    assert pixels.any() and np.array_equal(pixels, np.asarray(mask))


def test_it_draws_grid_and_ticks_on_the_pixels_pillow_lines_would_cover():
    from PIL import ImageDraw

    from agent.render import GRID_INDEX, INK, MINOR_TICK_LENGTH, TICK_LENGTH, axis_ticks
    from agent.render import _draw_grid_and_ticks as draw_grid_and_ticks

    area = plot_area(SIZE)
    plot = SpectrumPlot(
        wavelength=np.array([4000.0]),
        flux=np.array([1.0]),
        good=np.array([True]),
        x_range=(4012.3, 4987.6),
        y_range=(-0.137, 2.71),
        title="",
        x_label="",
        y_label="",
    )
    ticks = axis_ticks(plot, area)
    fast = np.full((SIZE[1], SIZE[0]), 11, dtype=np.uint8)
    draw_grid_and_ticks(fast, ticks, area)
    canvas = Image.new("L", SIZE, 11)
    draw = ImageDraw.Draw(canvas)
    for px in ticks.x_positions:
        draw.line([(px, area.top), (px, area.bottom)], fill=GRID_INDEX)
    for py in ticks.y_positions:
        draw.line([(area.left, py), (area.right, py)], fill=GRID_INDEX)
    for px in ticks.x_minor:
        draw.line([(px, area.bottom), (px, area.bottom + MINOR_TICK_LENGTH)], fill=INK)
    for py in ticks.y_minor:
        draw.line([(area.left - MINOR_TICK_LENGTH, py), (area.left, py)], fill=INK)
    for px in ticks.x_positions:
        draw.line([(px, area.bottom), (px, area.bottom + TICK_LENGTH)], fill=INK)
    for py in ticks.y_positions:
        draw.line([(area.left - TICK_LENGTH, py), (area.left, py)], fill=INK)
    assert np.array_equal(fast, np.asarray(canvas))


@pytest.mark.parametrize("text", ["4150", "-0.025", "Tower  4100.0–4350.0 Å", "Flux (×1e-17)"])
def test_it_sets_text_from_glyphs_as_freetype_sets_the_whole_string(text):
    from agent.render import _set_from_glyphs, _text_mask

    whole = np.asarray(_text_mask.__wrapped__(text, 14)[0]).astype(int)
    glyphs = _set_from_glyphs(text, 14).astype(int)
    assert glyphs.shape[0] == whole.shape[0]
    assert abs(glyphs.shape[1] - whole.shape[1]) <= 1  # pen positions rounded to whole pixels
    assert abs(glyphs.sum() - whole.sum()) <= 0.03 * whole.sum()


def test_it_applies_the_fonts_kerning_when_setting_from_glyphs():
    from agent.render import _set_from_glyphs

    kerned = _set_from_glyphs("To", 14).shape[1]
    apart = _set_from_glyphs("T", 14).shape[1] + _set_from_glyphs("o", 14).shape[1]
    assert kerned < apart


def test_it_sets_other_scripts_with_freetype():
    from agent.render import _text_mask, _text_patch

    title = "Hα zoom  6540.0–6590.0 Å"
    assert _text_patch(title, 14).shape == np.asarray(_text_mask(title, 14)[0]).shape


def test_it_compresses_pngs_that_zlib_inflates_to_the_same_rows():
    import zlib

    from agent.render import deflate

    rows = bytes(np.random.default_rng(3).integers(0, 16, 5000, dtype=np.uint8))
    assert zlib.decompress(deflate.compress(rows, 1)) == rows


def test_it_gives_the_same_picture_digest_to_the_same_pixels_in_other_png_bytes():
    import struct
    import zlib

    from agent.render import _PALETTE, picture_digest, png_chunk

    tool = SpectralVisualizationTool(dense_spectrum_for_windows())
    ours = tool.render_full().png
    assert ours is not None
    with Image.open(io.BytesIO(ours)) as image:
        indices = np.asarray(image)
        buffer = io.BytesIO()
        image.save(buffer, format="PNG", compress_level=9)  # Pillow's zlib, other bytes
    other = buffer.getvalue()
    assert other != ours
    assert picture_digest(other) == picture_digest(ours) is not None
    # One pixel changed is another picture, however it is encoded.
    changed = indices.copy()
    changed[200, 300] = (changed[200, 300] + 1) % 16
    assert picture_digest(encode_indexed_png(changed, _PALETTE, 1)) != picture_digest(ours)
    assert picture_digest(b"not a png") is None
    # A header that claims 100,000 x 100,000 pixels is refused before any pixel is read.
    header = struct.pack(">IIBBBBB", 100_000, 100_000, 4, 3, 0, 0, 0)
    claimed = b"\x89PNG\r\n\x1a\n" + png_chunk(b"IHDR", header)
    claimed += png_chunk(b"IDAT", zlib.compress(b"\x00" * 100))
    assert picture_digest(claimed) is None


def test_it_clips_a_title_wider_than_the_image():
    plot = SpectrumPlot(
        wavelength=np.linspace(4000.0, 5000.0, 50),
        flux=np.ones(50),
        good=np.ones(50, dtype=bool),
        x_range=(4000.0, 5000.0),
        y_range=(0.0, 2.0),
        title="W" * 60,
        x_label="Wavelength (Å)",
        y_label="Flux",
    )
    with Image.open(io.BytesIO(render_png(plot, SIZE))) as image:
        assert image.size == SIZE
        top_band = np.asarray(image.convert("L"))[:25]
    assert top_band[:, 0].min() < 128 and top_band[:, -1].min() < 128  # ink up to both edges


def test_it_checks_every_timed_render_against_a_fresh_render_of_its_own_window():
    from agent.bench.render import RenderMismatch, load_bench_spectra, verify_renders

    spectrum = load_bench_spectra().spectra[0]
    tool = SpectralVisualizationTool(spectrum, cache_size=0)
    blue, red = (4800.0, 4900.0), (6500.0, 6630.0)
    blue_png, red_png = (tool.render(window, "w").png for window in (blue, red))
    assert "2 of 2 windows" in verify_renders(
        [(spectrum, blue, "w", blue_png, blue_png), (spectrum, red, "w", red_png, red_png)]
    )
    with pytest.raises(RenderMismatch, match="1 of 2 timed renders"):
        # A cache that handed back another window's image.
        verify_renders(
            [(spectrum, blue, "w", blue_png, blue_png), (spectrum, red, "w", red_png, blue_png)]
        )


@pytest.mark.parametrize("sigma_pixels", [0.7, 0.8, 1.0, 1.5])
def test_it_keeps_the_peak_of_a_line_only_a_pixel_or_two_wide(sigma_pixels):
    # Issue 26: a CSV with a flat continuum of 1.0 and an H-alpha line peaking at 1.3 was drawn
    # with its peak clipped at ~1.13 (the peak pixel was taken for a cosmic ray).
    pixels = np.arange(500.0)
    flux = 1.0 + 0.3 * np.exp(-0.5 * ((pixels - 263.0) / sigma_pixels) ** 2)
    lo, hi = robust_limits(flux, running_median(flux, 5))
    assert lo < 1.0 and hi >= flux.max()


def test_it_still_drops_a_two_pixel_cosmic_ray_in_noise():
    flux = np.random.default_rng(5).normal(100.0, 5.0, 3000)
    flux[2000:2002] = [800.0, 900.0]
    lo, hi = robust_limits(flux, running_median(flux, 5))
    others = np.delete(flux, [2000, 2001])
    assert lo <= others.min() and others.max() <= hi < 200.0
