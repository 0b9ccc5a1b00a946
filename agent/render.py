"""A fast raster renderer for 1-D spectra: numpy for the geometry, Pillow for pixels and PNG.

It draws what the visualization tool returns to the model, so every image of one size has the
same layout (plot area, fonts, colours); only the data, ticks and title change.

Matplotlib is never imported here: its DejaVu Sans font file is located through the package's
import spec only, so the renderer stays fast to import and to run.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

try:  # Intel ISA-L's deflate: about 4x zlib's speed at level 1 here, and smaller files
    from isal import isal_zlib as deflate
except ImportError:  # pragma: no cover - isal is pinned in requirements.txt
    import zlib as deflate  # type: ignore[no-redef]

Colour = tuple[int, int, int]
Font = ImageFont.FreeTypeFont | ImageFont.ImageFont

# Images are 4-bit palette PNGs (16 colours): a linear grey ramp for axes, grid and anti-aliased
# text, then four blends of the line colour over white for the anti-aliased data line. Because the
# grey ramp is linear in the palette index, text masks can be pasted straight onto index values
# (blending indices is blending greys), and half a byte per pixel halves the PNG encoder's work.
GREY_LEVELS = 12
LINE_LEVELS = 4  # 2x2 supersampling gives coverage 1/4, 2/4, 3/4, 4/4
WHITE_INDEX = GREY_LEVELS - 1
INK = 0
GRID_INDEX = GREY_LEVELS - 2
MINOR_TICK_LENGTH = 3
LINE_COLOUR: Colour = (31, 119, 180)
SUPERSAMPLE = 2  # _count_blocks sums 2x2 blocks: change both together


def _grey(index: int) -> int:
    return round(index * 255 / (GREY_LEVELS - 1))


def _line_blend(coverage: float) -> Colour:
    return tuple(round(255 + (c - 255) * coverage) for c in LINE_COLOUR)  # type: ignore[return-value]


# The line's blends, lightest first; the last is LINE_COLOUR itself (full coverage).
LINE_COLOURS: tuple[Colour, ...] = tuple(
    _line_blend(level / LINE_LEVELS) for level in range(1, LINE_LEVELS + 1)
)
_PALETTE = [_grey(index) for index in range(GREY_LEVELS) for _ in range(3)] + [
    channel for colour in LINE_COLOURS for channel in colour
]
# Coverage sum of a 2x2 block (0..4) to the palette index of that blend (0 means "no line").
_COVERAGE_TO_INDEX = np.array(
    [0] + [GREY_LEVELS - 1 + level for level in range(1, LINE_LEVELS + 1)], dtype=np.uint8
)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RENDERER_NAME = "specvet-pillow-aa"
RENDERER_VERSION = "3"  # bump whenever the pixels change: models are evaluated on their images


def renderer_info(size: tuple[int, int]) -> dict[str, str | list[int]]:
    """What drew the images, recorded with every trajectory and checkpoint lineage."""
    return {"name": RENDERER_NAME, "version": RENDERER_VERSION, "image_size": list(size)}


TICK_FONT_SIZE = 12
LABEL_FONT_SIZE = 13
TITLE_FONT_SIZE = 14
TICK_LENGTH = 5
MAX_X_TICKS = 8
MAX_Y_TICKS = 6
PNG_COMPRESS_LEVEL = 1  # deflate level (ISA-L takes 0-3): see agent.bench.render
# Above this many points per plot column a window is drawn as a per-column envelope.
DENSE_POINTS_PER_COLUMN = 2.0
SPIKE_SMOOTH_WIDTH = 5
SPIKE_THRESHOLD_SIGMA = 8.0
SPIKE_REACH_FRACTION = 0.5
SPIKE_MAX_PIXELS = 2  # a run of more candidate pixels is a feature, never a spike
SPIKE_CONTINUUM_WIDTH = 15  # pixels of the running median a spike's neighbours are compared to
SPIKE_NOISE_SIGMAS = 3.0
SPIKE_SUPPORT_RATIO = 2.0
Y_MARGIN_FRACTION = 0.06
# Issue 37: runs of 3-5 bad pixels (a saturated cosmic ray, a dead column) set the y range of
# real spectra to 0-230k. A run is such a plateau when every pixel of it rises at least
# PLATEAU_FLAT_FRACTION of its peak over the continuum and the pixels either side stay within
# PLATEAU_EDGE_FRACTION of it (or the noise): a sampled line profile is never both that flat and
# that sharp (at sigma = 1.5 px its flank pixel is at 0.8 and the next at 0.41 of the peak).
PLATEAU_MAX_PIXELS = 5
PLATEAU_FLAT_FRACTION = 0.8
PLATEAU_EDGE_FRACTION = 0.2


@dataclass(frozen=True)
class PlotArea:
    """The data rectangle inside the image, in pixel coordinates (right/bottom inclusive)."""

    left: int
    top: int
    right: int
    bottom: int

    @property
    def width(self) -> int:
        return self.right - self.left

    @property
    def height(self) -> int:
        return self.bottom - self.top


@dataclass(frozen=True)
class SpectrumPlot:
    """Everything one image shows. Arrays hold only the pixels inside ``x_range``."""

    wavelength: np.ndarray
    flux: np.ndarray
    good: np.ndarray
    x_range: tuple[float, float]
    y_range: tuple[float, float]
    title: str
    x_label: str
    y_label: str


def plot_area(size: tuple[int, int]) -> PlotArea:
    """Fixed margins: room for y tick labels plus the rotated y label, the title, the x labels."""
    width, height = size
    return PlotArea(left=82, top=30, right=width - 16, bottom=height - 48)


# --- fonts --------------------------------------------------------------------------------------


def find_dejavu_font() -> Path | None:
    """DejaVu Sans as shipped with matplotlib, found without importing matplotlib."""
    spec = importlib.util.find_spec("matplotlib")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"
        if candidate.is_file():
            return candidate
    return None


@functools.cache
def load_font(size: int) -> Font:
    path = find_dejavu_font()
    if path is not None:
        try:
            return ImageFont.truetype(str(path), size)
        except OSError:
            pass
    return ImageFont.load_default(size)


@functools.lru_cache(maxsize=1024)
def _text_mask(text: str, size: int) -> tuple[Image.Image, int, int]:
    """The text's ink as an "L" mask plus the ink box offset from the draw origin.

    Cached: tick labels and axis labels repeat across renders, and pasting a ready mask is much
    cheaper than rasterising glyphs again.
    """
    font = load_font(size)
    left, top, right, bottom = (int(v) for v in font.getbbox(text))
    mask = Image.new("L", (max(right - left, 1), max(bottom - top, 1)), 0)
    ImageDraw.Draw(mask).text((-left, -top), text, fill=255, font=font)
    return mask, left, top


def _div255(value: int) -> int:
    """Pillow's rounded division by 255 (its DIV255 macro)."""
    value += 128
    return ((value >> 8) + value) >> 8


# A text mask's coverage (0-255) to the palette index of INK blended over white by that much,
# rounded as Pillow's paste(INK, box, mask) rounds it.
_INK_OVER_WHITE = np.array(
    [_div255(WHITE_INDEX * (255 - coverage) + INK * coverage) for coverage in range(256)],
    dtype=np.uint8,
)


# Labels and titles in these characters are set from cached glyphs: a new window brings new
# tick values and a new title, and shaping and rasterising each with FreeType cost more than
# the rest of the image's text, grid and ticks together. Anything else goes through FreeType.
SET_FROM_GLYPHS = frozenset(chr(code) for code in range(0x20, 0x7F)) | frozenset("–Å×")


@functools.cache
def _glyph(char: str, size: int) -> tuple[np.ndarray, int, int, int]:
    """A glyph's ink, its offset from the pen and its advance in 1/64 pixel."""
    mask, left, top = _text_mask(char, size)
    return np.asarray(mask), left, top, round(load_font(size).getlength(char) * 64)


@functools.cache
def _kerning(first: str, second: str, size: int) -> int:
    """The pair's kerning in 1/64 pixel, as the font's shaping applies it (``To`` is closer)."""
    font = load_font(size)
    pair = round(font.getlength(first + second) * 64)
    return pair - _glyph(first, size)[3] - _glyph(second, size)[3]


def _set_from_glyphs(text: str, size: int) -> np.ndarray | None:
    """The ink of ``text`` set glyph by glyph (with the font's pair kerning) at pen positions
    rounded to whole pixels, cropped to the ink; None when it has no ink."""
    placed = []
    pen = 0
    previous = ""
    for char in text:
        if previous:
            pen += _kerning(previous, char, size)
        ink, left, top, advance = _glyph(char, size)
        if ink.any():
            placed.append((ink, ((pen + 32) >> 6) + left, top))
        pen += advance
        previous = char
    if not placed:
        return None
    x0 = min(x for _, x, _ in placed)
    y0 = min(y for _, _, y in placed)
    x1 = max(x + ink.shape[1] for ink, x, _ in placed)
    y1 = max(y + ink.shape[0] for ink, _, y in placed)
    out = np.zeros((y1 - y0, x1 - x0), dtype=np.uint8)
    for ink, x, y in placed:
        region = out[y - y0 : y - y0 + ink.shape[0], x - x0 : x - x0 + ink.shape[1]]
        np.maximum(region, ink, out=region)
    return out


@functools.lru_cache(maxsize=1024)
def _text_patch(text: str, size: int) -> np.ndarray:
    """The text as palette indices, its ink blended over white (tick and axis labels repeat
    across renders, so this is computed once for most of them)."""
    ink = None
    if SET_FROM_GLYPHS.issuperset(text) and isinstance(load_font(size), ImageFont.FreeTypeFont):
        ink = _set_from_glyphs(text, size)
    if ink is None:
        ink = np.asarray(_text_mask(text, size)[0])
    patch = _INK_OVER_WHITE[ink]
    patch.flags.writeable = False
    return patch


@functools.lru_cache(maxsize=64)
def _rotated_text_patch(text: str, size: int) -> np.ndarray:
    patch = _INK_OVER_WHITE[np.asarray(_text_mask(text, size)[0].rotate(90, expand=True))]
    patch.flags.writeable = False
    return patch


def _put_text(pixels: np.ndarray, patch: np.ndarray, left: int, top: int) -> None:
    """Put a text patch with its corner at (left, top), clipped to the image. Labels sit on
    white, where this equals Pillow's masked paste; where two overlapped, the darker wins."""
    height, width = patch.shape
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + height, pixels.shape[0]), min(left + width, pixels.shape[1])
    if y0 < y1 and x0 < x1:
        region = pixels[y0:y1, x0:x1]
        np.minimum(region, patch[y0 - top : y1 - top, x0 - left : x1 - left], out=region)


def _draw_text(
    pixels: np.ndarray, xy: tuple[float, float], text: str, size: int, align: str
) -> None:
    """Draw ``text`` with its ink box aligned to ``xy``.

    ``align`` is two letters like Pillow anchors: horizontal l/m/r, vertical t/m/b. Alignment is
    computed from the ink box so the bitmap fallback font (no anchor support) also works.
    """
    patch = _text_patch(text, size)
    height, width = patch.shape
    x, y = xy
    horizontal, vertical = tuple(align)
    if horizontal == "m":
        x -= width / 2
    elif horizontal == "r":
        x -= width
    if vertical == "m":
        y -= height / 2
    elif vertical == "b":
        y -= height
    _put_text(pixels, patch, round(x), round(y))


# --- ticks --------------------------------------------------------------------------------------


def nice_ticks(lo: float, hi: float, max_ticks: int) -> list[float]:
    """Round tick values inside [lo, hi] for the smallest 1/2/5 x 10^n step giving <= max_ticks.

    Example: 6500-6630 with max_ticks=8 -> step 20 -> 6500, 6520, ..., 6620 (7 ticks);
    step 10 would give 14.
    """
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        raise ValueError(f"nice_ticks needs finite lo < hi; got lo={lo!r}, hi={hi!r}")
    if max_ticks < 2:
        raise ValueError(f"nice_ticks needs max_ticks >= 2; got {max_ticks!r}")
    exponent = math.floor(math.log10((hi - lo) / max_ticks))
    while True:
        for mantissa in (1, 2, 5):
            step = mantissa * 10.0**exponent
            first = math.ceil(lo / step - 1e-9)
            last = math.floor(hi / step + 1e-9)
            if last - first + 1 <= max_ticks:
                decimals = max(0, -exponent)
                return [round(k * step, decimals) + 0.0 for k in range(first, last + 1)]
        exponent += 1


def tick_labels(ticks: list[float]) -> list[str]:
    """Labels with just enough decimals for the tick step (no float noise like 0.30000000004)."""
    if len(ticks) < 2:
        return [f"{value:g}" for value in ticks]
    step = ticks[1] - ticks[0]
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return [f"{value:.{decimals}f}" for value in ticks]


# --- robust y range -----------------------------------------------------------------------------


def running_median(values: np.ndarray, width: int) -> np.ndarray:
    """Centred running median with edge padding; arrays shorter than ``width`` are returned as-is."""
    values = np.asarray(values, dtype=np.float64)
    if width < 1 or width % 2 == 0:
        raise ValueError(f"running_median needs an odd width >= 1; got {width!r}")
    if values.size < width:
        return values.copy()
    half = width // 2
    padded = np.pad(values, half, mode="edge")
    return np.median(np.lib.stride_tricks.sliding_window_view(padded, width), axis=1)


def robust_limits(flux: np.ndarray, smooth: np.ndarray) -> tuple[float, float]:
    """Y limits that ignore isolated spikes but keep real features and the noise.

    ``flux`` are good pixels, ``smooth`` their running median (width SPIKE_SMOOTH_WIDTH), so a
    feature narrower than 3 pixels stands out in ``flux - smooth`` while broad lines do not. A
    pixel is a spike candidate when its residual exceeds SPIKE_THRESHOLD_SIGMA robust sigmas (MAD)
    and 5% of the smooth range. A run of at most SPIKE_MAX_PIXELS candidates is a spike (cosmic
    ray, hot pixel) only when it stands alone: its nearer-to-it neighbour lies within the noise of
    the local continuum, or rises over it by less than 1/SPIKE_SUPPORT_RATIO of how far the run
    rises over that neighbour. The peak of a strong line only a pixel or two wide has neighbours
    well up its flanks, so it is kept (issue 26: a CSV's H-alpha peak at 1.3 was clipped at 1.13).
    A spike is left out of the limits only when it lies more than SPIKE_REACH_FRACTION of the
    other pixels' span beyond them, i.e. only when keeping it would squash the rest of the plot.
    Plain percentiles fail both ways: in an 80-pixel window one cosmic ray still drags the 99.5th
    percentile, while in a full view they cut the peak off a strong emission line.
    """
    flux = np.asarray(flux, dtype=np.float64)
    smooth = np.asarray(smooth, dtype=np.float64)
    if flux.size == 0:
        raise ValueError("robust_limits needs at least one good pixel; got none")
    residual = flux - smooth
    sigma = 1.4826 * float(np.median(np.abs(residual)))
    threshold = max(SPIKE_THRESHOLD_SIGMA * sigma, 0.05 * float(smooth.max() - smooth.min()))
    # Never empty: at least half the pixels have a residual <= its median <= threshold.
    is_spike = _isolated_runs(flux, residual, np.abs(residual) > threshold, sigma)
    is_spike |= _plateau_runs(flux, threshold, sigma)
    kept = flux[~is_spike]
    lo, hi = float(kept.min()), float(kept.max())
    reach = SPIKE_REACH_FRACTION * (hi - lo)
    spikes = flux[is_spike]
    lo = float(spikes[spikes >= lo - reach].min(initial=lo))
    hi = float(spikes[spikes <= hi + reach].max(initial=hi))
    span = hi - lo
    if span <= 0 or not math.isfinite(span):
        half = abs(hi) * 0.05 if hi != 0 else 0.5
        return lo - half, hi + half
    margin = Y_MARGIN_FRACTION * span
    return lo - margin, hi + margin


def _isolated_runs(
    flux: np.ndarray, residual: np.ndarray, is_candidate: np.ndarray, sigma: float
) -> np.ndarray:
    """The candidate pixels that belong to a spike (see robust_limits), as a boolean mask."""
    is_spike = np.zeros(flux.size, dtype=bool)
    index = np.flatnonzero(is_candidate)
    if index.size == 0 or flux.size < 3:
        return is_spike
    breaks = np.flatnonzero(np.diff(index) > 1) + 1
    start = index[np.r_[0, breaks]]
    end = index[np.r_[breaks - 1, index.size - 1]]
    peak = np.where(np.abs(residual[end]) > np.abs(residual[start]), end, start)
    sign = np.sign(residual[peak])
    # Flux measured along the run's direction (up for a spike, down for a dip).
    left = np.where(start > 0, sign * flux[np.maximum(start - 1, 0)], np.nan)
    right = np.where(end < flux.size - 1, sign * flux[np.minimum(end + 1, flux.size - 1)], np.nan)
    neighbour = np.fmax(left, right)
    half = SPIKE_CONTINUUM_WIDTH // 2
    padded = np.pad(flux, half, mode="edge")
    windows = np.lib.stride_tricks.sliding_window_view(padded, SPIKE_CONTINUUM_WIDTH)[peak]
    continuum = sign * np.median(windows, axis=1)
    rise_over_neighbour = sign * flux[peak] - neighbour
    neighbour_rise = neighbour - continuum
    alone = neighbour_rise <= np.maximum(
        SPIKE_NOISE_SIGMAS * sigma, rise_over_neighbour / SPIKE_SUPPORT_RATIO
    )
    is_run_spike = (end - start + 1 <= SPIKE_MAX_PIXELS) & np.isfinite(neighbour) & alone
    is_spike[start[is_run_spike]] = True
    is_spike[end[is_run_spike]] = True
    return is_spike


def _plateau_runs(flux: np.ndarray, threshold: float, sigma: float) -> np.ndarray:
    """Runs of 3 to PLATEAU_MAX_PIXELS pixels, flat-topped and sharp-edged over the continuum
    (running median of SPIKE_CONTINUUM_WIDTH), as a boolean mask (see PLATEAU_FLAT_FRACTION)."""
    is_plateau = np.zeros(flux.size, dtype=bool)
    if flux.size < SPIKE_CONTINUUM_WIDTH:
        return is_plateau
    rise = flux - running_median(flux, SPIKE_CONTINUUM_WIDTH)
    index = np.flatnonzero(np.abs(rise) > threshold)
    if index.size == 0:
        return is_plateau
    breaks = np.flatnonzero(np.diff(index) > 1) + 1
    for start, end in zip(
        index[np.r_[0, breaks]], index[np.r_[breaks - 1, index.size - 1]], strict=True
    ):
        length = end - start + 1
        if not 3 <= length <= PLATEAU_MAX_PIXELS or start == 0 or end == flux.size - 1:
            continue
        run = rise[start : end + 1]
        sign = 1.0 if run[np.argmax(np.abs(run))] > 0 else -1.0
        peak = float(np.max(sign * run))
        flat = float(np.min(sign * run)) >= PLATEAU_FLAT_FRACTION * peak
        edge = max(SPIKE_NOISE_SIGMAS * sigma, PLATEAU_EDGE_FRACTION * peak)
        sharp = sign * rise[start - 1] <= edge and sign * rise[end + 1] <= edge
        if flat and sharp:
            is_plateau[start : end + 1] = True
    return is_plateau


# --- line geometry ------------------------------------------------------------------------------


def column_envelope(
    columns: np.ndarray, values: np.ndarray, run_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """M4 decimation: per (run, pixel column) keep first, min, max, last, in that order.

    Drawing those four points per column rasterises to the same vertical extent as drawing every
    point, so one-pixel spikes survive, yet the polyline has at most 4 points per column.
    Returns (x, y, run id) of the kept points; runs never share a column group, so gaps stay gaps.
    """
    columns = np.asarray(columns)
    values = np.asarray(values, dtype=np.float64)
    run_ids = np.asarray(run_ids)
    if columns.size == 0:
        empty = np.empty(0)
        return empty, empty, np.empty(0, dtype=run_ids.dtype)
    changes = (np.diff(columns) != 0) | (np.diff(run_ids) != 0)
    starts = np.concatenate(([0], np.flatnonzero(changes) + 1))
    ends = np.concatenate((starts[1:], [columns.size])) - 1
    stacked = np.stack(
        (
            values[starts],
            np.minimum.reduceat(values, starts),
            np.maximum.reduceat(values, starts),
            values[ends],
        ),
        axis=1,
    )
    x = np.repeat(columns[starts], 4).astype(np.float64)
    return x, stacked.ravel(), np.repeat(run_ids[starts], 4)


def _line_runs(plot: SpectrumPlot, area: PlotArea) -> list[np.ndarray]:
    """Pixel polylines (n, 2) for each contiguous run of good pixels, clipped to the frame."""
    good_index = np.flatnonzero(plot.good)
    if good_index.size == 0:
        return []
    x_lo, x_hi = plot.x_range
    y_lo, y_hi = plot.y_range
    wavelength = plot.wavelength[good_index]
    flux = plot.flux[good_index]
    x = area.left + (wavelength - x_lo) * (area.width / (x_hi - x_lo))
    y = area.bottom - (flux - y_lo) * (area.height / (y_hi - y_lo))
    # Clamp rather than drop: a point beyond the y range is drawn on the frame it crossed.
    np.clip(x, area.left, area.right, out=x)
    np.clip(y, area.top, area.bottom, out=y)
    run_ids = np.concatenate(([0], np.cumsum(np.diff(good_index) > 1)))
    if good_index.size > DENSE_POINTS_PER_COLUMN * area.width:
        x, y, run_ids = column_envelope(np.floor(x).astype(np.int64), y, run_ids)
    splits = np.flatnonzero(np.diff(run_ids)) + 1
    points = np.stack((x, y), axis=1)
    return np.split(points, splits)


# --- drawing ------------------------------------------------------------------------------------


def minor_ticks(major: list[float], lo: float, hi: float) -> list[float]:
    """Minor ticks as matplotlib's AutoMinorLocator places them: 4 or 5 per major step."""
    if len(major) < 2:
        return []
    step = major[1] - major[0]
    mantissa = round(step / 10.0 ** math.floor(math.log10(step) + 1e-9))
    divisions = 4 if mantissa == 2 else 5
    minor_step = step / divisions
    first = math.ceil(lo / minor_step - 1e-9)
    last = math.floor(hi / minor_step + 1e-9)
    return [k * minor_step for k in range(first, last + 1) if k % divisions != 0]


@dataclass(frozen=True)
class AxisTicks:
    """Where the ticks go: label anchors, and pixel columns (x) and rows (y) for the lines."""

    x_positions: list[float]
    y_positions: list[float]
    x_labels: list[str]
    y_labels: list[str]
    x_major: np.ndarray
    y_major: np.ndarray
    x_minor: np.ndarray
    y_minor: np.ndarray


def _pixel_lines(positions: list[float]) -> np.ndarray:
    # Pillow truncates a line's float coordinates: these are the pixels its line calls drew.
    return np.array(positions, dtype=np.float64).astype(np.intp)


def axis_ticks(plot: SpectrumPlot, area: PlotArea) -> AxisTicks:
    x_lo, x_hi = plot.x_range
    y_lo, y_hi = plot.y_range
    x_scale = area.width / (x_hi - x_lo)
    y_scale = area.height / (y_hi - y_lo)
    x_ticks = nice_ticks(x_lo, x_hi, MAX_X_TICKS)
    y_ticks = nice_ticks(y_lo, y_hi, MAX_Y_TICKS)
    x_positions = [area.left + (t - x_lo) * x_scale for t in x_ticks]
    y_positions = [area.bottom - (t - y_lo) * y_scale for t in y_ticks]
    x_minor = [area.left + (t - x_lo) * x_scale for t in minor_ticks(x_ticks, x_lo, x_hi)]
    y_minor = [area.bottom - (t - y_lo) * y_scale for t in minor_ticks(y_ticks, y_lo, y_hi)]
    return AxisTicks(
        x_positions=x_positions,
        y_positions=y_positions,
        x_labels=tick_labels(x_ticks),
        y_labels=tick_labels(y_ticks),
        x_major=_pixel_lines(x_positions),
        y_major=_pixel_lines(y_positions),
        x_minor=_pixel_lines(x_minor),
        y_minor=_pixel_lines(y_minor),
    )


def _draw_tick_labels(pixels: np.ndarray, ticks: AxisTicks, area: PlotArea) -> None:
    for px, text in zip(ticks.x_positions, ticks.x_labels, strict=True):
        _draw_text(pixels, (px, area.bottom + TICK_LENGTH + 3), text, TICK_FONT_SIZE, "mt")
    for py, text in zip(ticks.y_positions, ticks.y_labels, strict=True):
        _draw_text(pixels, (area.left - TICK_LENGTH - 3, py), text, TICK_FONT_SIZE, "rm")


def _draw_grid_and_ticks(pixels: np.ndarray, ticks: AxisTicks, area: PlotArea) -> None:
    """Grid lines and tick marks straight into the index array: each kind is one slice
    assignment instead of a drawing call per line (about 50 per image). They touch no label."""
    top, bottom, left, right = area.top, area.bottom, area.left, area.right
    pixels[top : bottom + 1, ticks.x_major] = GRID_INDEX
    pixels[ticks.y_major, left : right + 1] = GRID_INDEX
    pixels[bottom : bottom + MINOR_TICK_LENGTH + 1, ticks.x_minor] = INK
    pixels[ticks.y_minor, left - MINOR_TICK_LENGTH : left + 1] = INK
    pixels[bottom : bottom + TICK_LENGTH + 1, ticks.x_major] = INK
    pixels[ticks.y_major, left - TICK_LENGTH : left + 1] = INK


def _draw_labels(pixels: np.ndarray, plot: SpectrumPlot, area: PlotArea) -> None:
    height = pixels.shape[0]
    _draw_text(
        pixels, ((area.left + area.right) / 2, height - 4), plot.x_label, LABEL_FONT_SIZE, "mb"
    )
    _draw_text(
        pixels, ((area.left + area.right) / 2, area.top / 2), plot.title, TITLE_FONT_SIZE, "mm"
    )
    patch = _rotated_text_patch(plot.y_label, LABEL_FONT_SIZE)
    _put_text(pixels, patch, 4, round((area.top + area.bottom - patch.shape[0]) / 2))


def _line_coverage(plot: SpectrumPlot, area: PlotArea) -> np.ndarray:
    """Anti-aliased coverage of the data line over the plot area, as 2x2 supersample counts (0-4).

    The line is drawn at twice the resolution and each 2x2 block is averaged, so a pixel the line
    crosses partly gets a lighter blend instead of an all-or-nothing staircase. The array covers
    the plot area plus one pixel on each side (strokes and clamped points may touch the frame).
    """
    scale = SUPERSAMPLE
    full = 1  # a stroke subpixel; a block's sum is then its stroke count
    origin = np.array((area.left - 1, area.top - 1), dtype=np.float64)
    width, height = area.width + 3, area.height + 3
    mask = Image.new("L", (width * scale, height * scale), 0)
    draw = ImageDraw.Draw(mask)
    # Thin strokes only where the per-column envelope is drawn: one or two points per column
    # still read as a line, and a 1-pixel stroke there looks faint next to matplotlib's.
    dense = np.count_nonzero(plot.good) > DENSE_POINTS_PER_COLUMN * area.width
    for points in _line_runs(plot, area):
        shifted = (points - origin + 0.5) * scale
        if len(shifted) == 1:
            px, py = shifted[0]
            draw.rectangle([px - scale, py - scale, px + scale, py + scale], fill=full)
        elif dense:
            # A 1-pixel stroke as two 1-subpixel strokes offset diagonally: the per-column
            # envelope is mostly vertical and horizontal runs, where this matches a 2-subpixel
            # wide line at a third of the cost of Pillow's polygon-based wide lines.
            draw.line(shifted.ravel().tolist(), fill=full)
            draw.line((shifted + 1.0).ravel().tolist(), fill=full)
        else:
            # Sparse windows get a 2-pixel stroke, about matplotlib's default line at 80 dpi.
            draw.line(shifted.ravel().tolist(), fill=full, width=2 * scale, joint="curve")
    return _count_blocks(_mask_pixels(mask))


def _mask_pixels(mask: Image.Image) -> np.ndarray:
    """The pixels of an "L" image as a (height, width) uint8 array.

    ``np.asarray(image)`` goes through ``Image.tobytes``, which encodes in 64 KB blocks and
    joins them: about 10 ms for this supersampled mask on a loaded machine against 0.3 ms for
    one raw encode of the whole image into one buffer (the same bytes). Pillow's encoder is not
    public API, so any surprise falls back to ``np.asarray``.
    """
    width, height = mask.size
    try:
        encoder = Image._getencoder("L", "raw", ("L",))
        encoder.setimage(mask.im, (0, 0, width, height))
        _, status, data = encoder.encode(width * height + 1)
    except Exception:  # a Pillow without the private encoder API: the public, slower path
        return np.asarray(mask)
    if status != 1 or len(data) != width * height:
        return np.asarray(mask)
    return np.frombuffer(data, dtype=np.uint8).reshape(height, width)


def _count_blocks(subpixels: np.ndarray) -> np.ndarray:
    """The sum of each 2x2 block of a 0/1 uint8 array of even shape.

    Two horizontal neighbours are read as one uint16, so adding the two rows of a block adds
    both columns' pairs at once (no byte can carry: each holds at most 2); the two bytes of the
    result are then the block's two column sums. About half the time of Pillow's reduce(2).
    """
    pairs = subpixels.view(np.uint16)
    rows = pairs[0::2] + pairs[1::2]
    return ((rows & 0xFF) + (rows >> 8)).astype(np.uint8)


def png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


# A picture larger than this is not decoded to be compared (tool images are 644 x 392).
MAX_DIGEST_PIXELS = 4096 * 4096


def picture_digest(png: bytes, *, max_pixels: int = MAX_DIGEST_PIXELS) -> str | None:
    """The sha256 of what a PNG shows (mode, size, palette and pixels), whichever deflate
    encoded it; None when it cannot be decoded or has more than ``max_pixels`` pixels.

    A PNG's bytes are one encoding of its picture, not a function of it: another deflate build
    may choose other matches for the same rows, and ISA-L once gave a worker's image one IDAT
    byte more than a fresh render of the same pixels (docs/explanations/benchmarks.md). Whether
    two images are the same is asked of this digest, never of the bytes' hash.
    """
    import hashlib
    import io

    from PIL import UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(png)) as image:
            width, height = image.size
            if width * height > max_pixels:
                return None
            digest = hashlib.sha256(f"{image.mode} {width} {height} ".encode())
            digest.update(bytes(image.getpalette() or []))
            digest.update(image.tobytes())
    except (OSError, UnidentifiedImageError, ValueError, Image.DecompressionBombError):
        return None
    return digest.hexdigest()


def encode_indexed_png(indices: np.ndarray, palette: Sequence[int], compress_level: int) -> bytes:
    """A 4-bit indexed PNG of ``indices`` (uint8 < 16, height x width), no row filters.

    Pillow writes the same file format; packing two pixels a byte in numpy and handing ISA-L's
    deflate one buffer is several times faster than Pillow's chunked zlib encoder on these
    mostly-white images (0.09 ms against zlib's 0.37 ms for the same buffer, and 11 % smaller;
    see agent.bench.render).
    """
    height, width = indices.shape
    if width % 2:
        indices = np.pad(indices, ((0, 0), (0, 1)))
    rows = np.zeros((height, indices.shape[1] // 2 + 1), dtype=np.uint8)  # column 0: filter none
    np.bitwise_or(indices[:, 0::2] << 4, indices[:, 1::2], out=rows[:, 1:])
    header = struct.pack(">IIBBBBB", width, height, 4, 3, 0, 0, 0)  # 4-bit, palette colour type
    return b"".join(
        (
            PNG_SIGNATURE,
            png_chunk(b"IHDR", header),
            png_chunk(b"PLTE", bytes(palette)),
            png_chunk(b"IDAT", deflate.compress(rows.tobytes(), compress_level)),
            png_chunk(b"IEND", b""),
        )
    )


def render_png(
    plot: SpectrumPlot, size: tuple[int, int], *, compress_level: int = PNG_COMPRESS_LEVEL
) -> bytes:
    """Render ``plot`` to PNG bytes of exactly ``size`` (width, height)."""
    x_lo, x_hi = plot.x_range
    y_lo, y_hi = plot.y_range
    if not (x_hi > x_lo and y_hi > y_lo):
        raise ValueError(
            f"render_png needs increasing ranges; got x={plot.x_range}, y={plot.y_range}"
        )
    area = plot_area(size)
    # Palette indices: the grey ramp is linear in the index, so greys blend as indices.
    pixels = np.full((size[1], size[0]), WHITE_INDEX, dtype=np.uint8)
    ticks = axis_ticks(plot, area)
    _draw_tick_labels(pixels, ticks, area)
    _draw_labels(pixels, plot, area)
    _draw_grid_and_ticks(pixels, ticks, area)
    coverage = _line_coverage(plot, area)
    top, left = area.top - 1, area.left - 1
    window = pixels[top : top + coverage.shape[0], left : left + coverage.shape[1]]
    # Line indices (12-15) exceed every grey index (0-11) and no-line maps to 0: max composites.
    np.maximum(
        window, _COVERAGE_TO_INDEX[coverage[: window.shape[0], : window.shape[1]]], out=window
    )
    # The frame goes on last so line points clamped onto it do not hide it.
    pixels[area.top, area.left : area.right + 1] = INK
    pixels[area.bottom, area.left : area.right + 1] = INK
    pixels[area.top : area.bottom + 1, area.left] = INK
    pixels[area.top : area.bottom + 1, area.right] = INK
    return encode_indexed_png(pixels, _PALETTE, compress_level)
