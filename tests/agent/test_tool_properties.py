"""Property tests of the tool's range handling: whatever the model asks for, the tool answers
with a window inside the spectrum or a refusal that says why, never with an internal failure."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.spectra import Spectrum
from agent.tool import (
    MAX_LABEL_CHARS,
    MIN_WINDOW_ANGSTROM,
    SpectralVisualizationTool,
    ToolResult,
    sanitize_label,
)

PROPERTY_SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
INTERNAL_FAILURE = "The tool failed to render"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

any_float = st.floats(allow_nan=True, allow_infinity=True)
optical = st.floats(min_value=3000.0, max_value=10000.0)
json_values = st.recursive(
    st.none() | st.booleans() | any_float | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


def linear_tool(redshift: float = 0.0) -> SpectralVisualizationTool:
    wavelength = np.linspace(3700.0, 9100.0, 2001)
    flux = 100.0 + 5.0 * np.sin(wavelength / 7.0)
    return SpectralVisualizationTool(Spectrum(wavelength=wavelength, flux=flux, redshift=redshift))


TOOL = linear_tool()


def assert_answered(result: ToolResult, tool: SpectralVisualizationTool) -> None:
    """ok: a PNG of a window inside the coverage; not ok: no image and a reason."""
    assert result.text and not result.text.startswith(INTERNAL_FAILURE), result.text
    if result.ok:
        assert result.png is not None and result.png.startswith(PNG_MAGIC)
        assert result.wavelength_range is not None
        lo, hi = result.wavelength_range
        cover_lo, cover_hi = tool.coverage()
        assert cover_lo - 1e-6 <= lo < hi <= cover_hi + 1e-6
        assert hi - lo >= MIN_WINDOW_ANGSTROM - 1e-6
    else:
        assert result.png is None and result.wavelength_range is None


@PROPERTY_SETTINGS
@given(first=any_float, second=any_float)
def test_it_answers_any_two_floats_with_a_window_inside_the_spectrum_or_a_reason(first, second):
    result = TOOL.render([first, second])
    assert_answered(result, TOOL)
    if result.ok:
        assert math.isfinite(first) and math.isfinite(second)


@PROPERTY_SETTINGS
@given(value=json_values)
def test_it_answers_any_json_value_without_an_internal_failure(value):
    assert_answered(TOOL.render(value), TOOL)


@PROPERTY_SETTINGS
@given(first=optical, second=optical)
def test_it_shows_the_same_window_whichever_end_comes_first(first, second):
    forward, backward = TOOL.render([first, second]), TOOL.render([second, first])
    assert forward.ok == backward.ok
    assert forward.wavelength_range == backward.wavelength_range


@PROPERTY_SETTINGS
@given(first=optical, second=optical, padding=st.sampled_from(["", " ", "\t"]))
def test_it_reads_numeric_strings_as_the_numbers_they_spell(first, second, padding):
    as_numbers = TOOL.render([first, second])
    as_strings = TOOL.render([f"{padding}{first!r}{padding}", repr(second)])
    assert as_strings.ok == as_numbers.ok
    assert as_strings.wavelength_range == as_numbers.wavelength_range


@PROPERTY_SETTINGS
@given(
    redshift=st.floats(min_value=-0.99, max_value=5.0) | st.sampled_from([0.0, -1.0, -2.0]),
    first=st.floats(min_value=0.0, max_value=20000.0),
    width=st.floats(min_value=0.0, max_value=20000.0),
)
def test_it_keeps_windows_inside_the_coverage_at_any_redshift(redshift, first, width):
    tool = linear_tool(redshift)
    assert_answered(tool.render([first, first + width]), tool)


@PROPERTY_SETTINGS
@given(
    points=st.integers(min_value=2, max_value=300),
    masked=st.lists(st.booleans(), min_size=300, max_size=300),
    first=optical,
    second=optical,
)
def test_it_answers_for_sparse_and_masked_spectra(points, masked, first, second):
    wavelength = np.linspace(3700.0, 9100.0, points)
    spectrum = Spectrum(wavelength=wavelength, flux=np.ones(points), mask=np.array(masked[:points]))
    tool = SpectralVisualizationTool(spectrum)
    assert_answered(tool.render([first, second]), tool)
    assert_answered(tool.render_full(), tool)


@given(label=st.text() | st.integers() | st.none())
def test_it_makes_any_label_one_short_printable_line(label):
    cleaned = sanitize_label(label)
    if cleaned is not None:
        assert cleaned == cleaned.strip() and cleaned
        assert len(cleaned) <= MAX_LABEL_CHARS
        assert cleaned.isprintable() and "\n" not in cleaned
        assert sanitize_label(cleaned) == cleaned


@PROPERTY_SETTINGS
@given(label=st.text(max_size=200))
def test_it_returns_the_sanitized_label_with_the_window(label):
    result = TOOL.render([6500, 6630], label)
    assert result.ok
    assert result.label == sanitize_label(label)
