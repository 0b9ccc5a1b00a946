"""SpectralVisualizationTool: what the model gets back for good, odd and impossible requests."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from agent.render import LINE_COLOURS, plot_area
from agent.spectra import Spectrum
from agent.tool import (
    IMAGE_SIZE,
    TOOL_NAME,
    SpectralVisualizationTool,
    ToolResult,
    display_exponent,
    sanitize_label,
)

# 3700..9100 A in 4000 steps of exactly 1.35 A, so coverage and pixel counts are easy by hand.
COARSE_STEP = 1.35


def linear_spectrum(
    *,
    points: int = 4001,
    lo: float = 3700.0,
    hi: float = 9100.0,
    masked: tuple[float, float] | None = None,
    redshift: float = 0.0,
) -> Spectrum:
    wavelength = np.linspace(lo, hi, points)
    flux = 100.0 + 5.0 * np.sin(wavelength / 7.0)
    mask = np.zeros(points, dtype=bool)
    if masked is not None:
        mask[(wavelength >= masked[0]) & (wavelength <= masked[1])] = True
    return Spectrum(wavelength=wavelength, flux=flux, mask=mask, redshift=redshift)


def line_pixels(result: ToolResult) -> np.ndarray:
    assert result.png is not None
    with Image.open(io.BytesIO(result.png)) as image:
        rgb = np.asarray(image.convert("RGB"))
    # Any blend of the anti-aliased line counts: a stroke straddling two pixels paints both.
    return np.any(
        [np.all(rgb == np.array(colour, dtype=np.uint8), axis=2) for colour in LINE_COLOURS],
        axis=0,
    )


def column_of(value: float, x_range: tuple[float, float]) -> int:
    area = plot_area(IMAGE_SIZE)
    lo, hi = x_range
    return int(area.left + (value - lo) / (hi - lo) * area.width)


def test_it_returns_a_png_of_the_fixed_token_friendly_size():
    result = SpectralVisualizationTool(linear_spectrum()).render([6500, 6630], "H-alpha")
    assert result.ok and result.png is not None
    with Image.open(io.BytesIO(result.png)) as image:
        assert image.format == "PNG"
        assert image.size == IMAGE_SIZE
    assert IMAGE_SIZE[0] % 28 == 0 and IMAGE_SIZE[1] % 28 == 0


def test_it_is_named_like_the_paper_tool():
    assert SpectralVisualizationTool.name == TOOL_NAME == "spectral_visualization_tool"


def test_it_describes_what_it_showed():
    # pixels 3700 + 1.35 k for k = 2075..2170 lie in [6500, 6630]: 96 pixels;
    # k = 2112..2114 (6551.20, 6552.55, 6553.90) are masked
    spectrum = linear_spectrum(masked=(6550.0, 6554.0))
    result = SpectralVisualizationTool(spectrum).render([6500, 6630], "H-alpha")
    assert result.text == "Showing 6500.0–6630.0 Å (observed frame), 96 pixels, 3 masked."
    assert result.wavelength_range == (6500.0, 6630.0)
    assert result.label == "H-alpha"


@pytest.mark.parametrize(("points", "name"), [(4001, "sparse"), (40001, "dense")])
def test_it_leaves_a_gap_over_masked_pixels(points, name):
    window = (6000.0, 6400.0)
    spectrum = linear_spectrum(points=points, masked=(6150.0, 6250.0))
    painted = line_pixels(SpectralVisualizationTool(spectrum).render(window, name))
    columns_painted = painted.any(axis=0)
    gap = columns_painted[column_of(6150.0, window) + 3 : column_of(6250.0, window) - 2]
    assert gap.size > 100 and not gap.any()
    assert columns_painted[column_of(6100.0, window) : column_of(6140.0, window)].all()
    assert columns_painted[column_of(6260.0, window) : column_of(6300.0, window)].all()


def test_it_shows_the_rest_frame_when_the_redshift_is_known():
    wavelength = np.linspace(6000.0, 8000.0, 2001)
    flux = 10.0 + 100.0 * np.exp(-0.5 * ((wavelength - 7219.08) / 3.0) ** 2)  # 6562.8 * 1.1
    tool = SpectralVisualizationTool(Spectrum(wavelength=wavelength, flux=flux, redshift=0.1))
    result = tool.render([6500, 6630], "H-alpha")
    assert result.ok and result.wavelength_range == (6500.0, 6630.0)
    assert "rest frame" in result.text
    rows, columns = np.nonzero(line_pixels(result))
    peak_column = columns[rows == rows.min()].mean()
    assert abs(peak_column - column_of(6562.8, (6500.0, 6630.0))) <= 4


def test_it_reports_the_observed_frame_without_a_redshift():
    result = SpectralVisualizationTool(linear_spectrum()).render([6500, 6630])
    assert "observed frame" in result.text


def test_it_gives_rest_frame_coverage():
    tool = SpectralVisualizationTool(linear_spectrum(redshift=0.5))
    assert tool.coverage() == pytest.approx((3700.0 / 1.5, 9100.0 / 1.5))


def test_it_gives_coverage_of_good_pixels_only():
    spectrum = linear_spectrum()
    assert spectrum.mask is not None
    spectrum.mask[:10] = True
    spectrum.mask[-5:] = True
    tool = SpectralVisualizationTool(spectrum)
    assert tool.coverage() == pytest.approx((3700.0 + 10 * COARSE_STEP, 9100.0 - 5 * COARSE_STEP))


def test_it_renders_the_full_view_over_the_whole_coverage():
    tool = SpectralVisualizationTool(linear_spectrum())
    result = tool.render_full()
    assert result.ok and result.png is not None
    assert result.wavelength_range == pytest.approx(tool.coverage())
    assert "clipped" not in result.text


@pytest.mark.parametrize(
    ("wavelength_range", "message"),
    [
        (None, "must be two numbers [min, max] in Angstrom; got None"),
        ("abc", "must be two numbers [min, max] in Angstrom; got 'abc'"),
        ("4000, 5000", "must be two numbers"),
        ([1], "got 1 values"),
        ([1, 2, 3], "got 3 values"),
        ([float("nan"), 5000], "both finite"),
        ([float("inf"), 1], "both finite"),
        ([True, 5000], "must be two numbers"),
        (["4000Å", "5000"], "must be two numbers"),
        ({"a": 1}, "must be two numbers"),
        (np.zeros((2, 2)), "array of shape (2, 2)"),
        (np.float64(4000.0), "must be two numbers"),
        ([5000, 5000], "too narrow"),
    ],
)
def test_it_refuses_unusable_ranges_without_raising(wavelength_range, message):
    result = SpectralVisualizationTool(linear_spectrum()).render(wavelength_range, "x")
    assert not result.ok
    assert result.png is None and result.wavelength_range is None
    assert message in result.text


@pytest.mark.parametrize(
    "wavelength_range",
    [["4000", "5000"], (4000, 5000), np.array([4000.0, 5000.0]), [" 4000 ", 5e3]],
)
def test_it_accepts_numbers_and_numeric_strings(wavelength_range):
    result = SpectralVisualizationTool(linear_spectrum()).render(wavelength_range)
    assert result.ok and result.wavelength_range == (4000.0, 5000.0)


def test_it_swaps_an_inverted_range_and_says_so():
    result = SpectralVisualizationTool(linear_spectrum()).render([6630, 6500])
    assert result.ok and result.png is not None
    assert result.wavelength_range == (6500.0, 6630.0)
    assert "swapped it to [6500, 6630]" in result.text


def test_it_refuses_a_window_outside_the_coverage_and_states_the_coverage():
    result = SpectralVisualizationTool(linear_spectrum()).render([9500, 9800])
    assert not result.ok
    assert "The spectrum covers 3700–9100 Å (observed frame); ask for a window inside it" in (
        result.text
    )


def test_it_clips_a_window_partly_outside_the_coverage():
    result = SpectralVisualizationTool(linear_spectrum()).render([3500, 4000])
    assert result.ok and result.wavelength_range == (3700.0, 4000.0)
    assert "clipped to 3700.0–4000.0 Å" in result.text


def test_it_clips_an_absurdly_wide_window_to_the_full_coverage():
    result = SpectralVisualizationTool(linear_spectrum()).render([0, 1e6])
    assert result.ok and result.wavelength_range == (3700.0, 9100.0)
    assert "much wider than the spectrum" in result.text


@pytest.mark.parametrize(
    ("spectrum", "wavelength_range", "expected"),
    [
        # narrower than 5 A, holding 6563.35 and 6564.70; suggestion is the centre 6564 +- 25 A
        (linear_spectrum(), [6563, 6565], "too narrow (2.0 Å, 2 pixels)"),
        (linear_spectrum(), [6563, 6565], "e.g. [6539, 6589]"),
        # 8 A wide but on a 5 A grid only 2 pixels (6500, 6505)
        (linear_spectrum(points=1081), [6499, 6507], "2 pixels"),
        # clipped to 9099-9100: 1 A of data (9099.25 and 9100.00)
        (linear_spectrum(), [9099, 9500], "too narrow (1.0 Å"),
    ],
)
def test_it_refuses_an_absurdly_narrow_window_with_a_suggestion(
    spectrum, wavelength_range, expected
):
    result = SpectralVisualizationTool(spectrum).render(wavelength_range)
    assert not result.ok and expected in result.text


def test_it_renders_a_window_with_just_two_isolated_good_pixels():
    # on a 5 A grid [6499, 6511] holds 6500, 6505 and 6510; the middle one is masked
    spectrum = linear_spectrum(points=1081, masked=(6504.0, 6506.0))
    result = SpectralVisualizationTool(spectrum).render([6499, 6511])
    assert result.ok and result.text.endswith("3 pixels, 1 masked.")
    assert line_pixels(result).any()


def test_it_names_the_nearest_good_data_when_a_window_is_all_masked():
    # masking 6001..6100 masks k = 1705..1777; good neighbours are k = 1704 (6000.40 A) and
    # k = 1778 (6100.30 A); the suggestion pads them by 10 A. The window holds k = 1719..1762.
    spectrum = linear_spectrum(masked=(6001.0, 6100.0))
    result = SpectralVisualizationTool(spectrum).render([6020, 6080])
    assert not result.ok
    assert "all masked: 44 pixels, 44 masked" in result.text
    assert "6000.4 Å (below) and 6100.3 Å (above)" in result.text
    assert "e.g. [5990, 6111]" in result.text


def test_it_fails_softly_for_a_spectrum_without_good_pixels():
    spectrum = linear_spectrum(masked=(0.0, 1e5))
    result = SpectralVisualizationTool(spectrum).render_full()
    assert not result.ok and "all masked" in result.text


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        (None, None),
        ("  H-alpha\n\x00 core ", "H-alpha core"),
        ("\x07\t", None),
        (6563, "6563"),
        ("x" * 100, "x" * 60),
    ],
)
def test_it_sanitizes_labels_from_the_model(label, expected):
    assert sanitize_label(label) == expected


def test_it_serves_an_identical_request_from_the_cache():
    tool = SpectralVisualizationTool(linear_spectrum())
    first = tool.render([6500, 6630], "H-alpha")
    second = tool.render([6500.0, 6630.0], "H-alpha")
    assert second is first and second.png is first.png
    assert tool.cache_hits == 1
    tool.render([6500, 6630], "H-beta")
    assert tool.cache_hits == 1


def test_it_evicts_the_least_recently_used_view():
    tool = SpectralVisualizationTool(linear_spectrum(), cache_size=2)
    oldest = tool.render([4000, 4100])
    tool.render([5000, 5100])
    tool.render([6000, 6100])
    assert tool.render([4000, 4100]) is not oldest
    assert tool.cache_hits == 0


def test_it_rejects_a_spectrum_whose_arrays_do_not_line_up():
    spectrum = Spectrum(wavelength=np.linspace(4000, 5000, 10), flux=np.ones(9))
    with pytest.raises(ValueError, match="equal length"):
        SpectralVisualizationTool(spectrum)


@pytest.mark.parametrize(
    ("scale", "expected"), [(3e-17, -17), (0.5, 0), (500.0, 0), (9999.0, 0), (2.5e5, 5)]
)
def test_it_picks_a_power_of_ten_for_the_flux_axis(scale, expected):
    assert display_exponent(np.full(50, scale)) == expected


def test_it_renders_tiny_physical_flux_units():
    spectrum = linear_spectrum()
    spectrum.flux = spectrum.flux * 1e-19
    result = SpectralVisualizationTool(spectrum).render([6500, 6630])
    assert result.ok and result.png is not None
