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
SUPERSAMPLE = 2


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
RENDERER_VERSION = "2"  # bump whenever the pixels change: models are evaluated on their images


def renderer_info(size: tuple[int, int]) -> dict[str, str | list[int]]:
    """What drew the images, recorded with every trajectory and checkpoint lineage."""
    return {"name": RENDERER_NAME, "version": RENDERER_VERSION, "image_size": list(size)}


TICK_FONT_SIZE = 12
LABEL_FONT_SIZE = 13
TITLE_FONT_SIZE = 14
TICK_LENGTH = 5
MAX_X_TICKS = 8
MAX_Y_TICKS = 6
PNG_COMPRESS_LEVEL = 1  # zlib level: see agent.bench_render for the measurement behind it
# Above this many points per plot column a window is drawn as a per-column envelope.
DENSE_POINTS_PER_COLUMN = 2.0
SPIKE_SMOOTH_WIDTH = 5
SPIKE_THRESHOLD_SIGMA = 8.0
SPIKE_REACH_FRACTION = 0.5
Y_MARGIN_FRACTION = 0.06


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


def _draw_text(
    image: Image.Image, xy: tuple[float, float], text: str, size: int, align: str
) -> None:
    """Draw ``text`` with its ink box aligned to ``xy``.

    ``align`` is two letters like Pillow anchors: horizontal l/m/r, vertical t/m/b. Alignment is
    computed from the ink box so the bitmap fallback font (no anchor support) also works.
    """
    mask, _, _ = _text_mask(text, size)
    x, y = xy
    horizontal, vertical = tuple(align)
    if horizontal == "m":
        x -= mask.width / 2
    elif horizontal == "r":
        x -= mask.width
    if vertical == "m":
        y -= mask.height / 2
    elif vertical == "b":
        y -= mask.height
    image.paste(INK, (round(x), round(y)), mask)


@functools.lru_cache(maxsize=64)
def _rotated_text_mask(text: str, size: int) -> Image.Image:
    return _text_mask(text, size)[0].rotate(90, expand=True)


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
    feature narrower than 3 pixels (cosmic ray, hot pixel) stands out in ``flux - smooth`` while
    broad lines do not. A pixel is a spike candidate when its residual exceeds
    SPIKE_THRESHOLD_SIGMA robust sigmas (MAD) and 5% of the smooth range; a candidate is left out
    of the limits only when it lies more than SPIKE_REACH_FRACTION of the other pixels' span
    beyond them, i.e. only when keeping it would squash the rest of the plot. Plain percentiles
    fail both ways: in an 80-pixel window one cosmic ray still drags the 99.5th percentile, while
    in a 3900-pixel full view they cut the peak off a strong emission line a few pixels wide.
    """
    flux = np.asarray(flux, dtype=np.float64)
    smooth = np.asarray(smooth, dtype=np.float64)
    if flux.size == 0:
        raise ValueError("robust_limits needs at least one good pixel; got none")
    residual = np.abs(flux - smooth)
    sigma = 1.4826 * float(np.median(residual))
    threshold = max(SPIKE_THRESHOLD_SIGMA * sigma, 0.05 * float(smooth.max() - smooth.min()))
    # Never empty: at least half the pixels have a residual <= its median <= threshold.
    is_candidate = residual > threshold
    kept = flux[~is_candidate]
    lo, hi = float(kept.min()), float(kept.max())
    reach = SPIKE_REACH_FRACTION * (hi - lo)
    candidates = flux[is_candidate]
    lo = float(candidates[candidates >= lo - reach].min(initial=lo))
    hi = float(candidates[candidates <= hi + reach].max(initial=hi))
    span = hi - lo
    if span <= 0 or not math.isfinite(span):
        half = abs(hi) * 0.05 if hi != 0 else 0.5
        return lo - half, hi + half
    margin = Y_MARGIN_FRACTION * span
    return lo - margin, hi + margin


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


def _draw_axes(
    image: Image.Image, draw: ImageDraw.ImageDraw, plot: SpectrumPlot, area: PlotArea
) -> None:
    x_lo, x_hi = plot.x_range
    y_lo, y_hi = plot.y_range
    x_scale = area.width / (x_hi - x_lo)
    y_scale = area.height / (y_hi - y_lo)
    x_ticks = nice_ticks(x_lo, x_hi, MAX_X_TICKS)
    y_ticks = nice_ticks(y_lo, y_hi, MAX_Y_TICKS)
    x_positions = [area.left + (t - x_lo) * x_scale for t in x_ticks]
    y_positions = [area.bottom - (t - y_lo) * y_scale for t in y_ticks]
    for px in x_positions:
        draw.line([(px, area.top), (px, area.bottom)], fill=GRID_INDEX)
    for py in y_positions:
        draw.line([(area.left, py), (area.right, py)], fill=GRID_INDEX)
    for t in minor_ticks(x_ticks, x_lo, x_hi):
        px = area.left + (t - x_lo) * x_scale
        draw.line([(px, area.bottom), (px, area.bottom + MINOR_TICK_LENGTH)], fill=INK)
    for t in minor_ticks(y_ticks, y_lo, y_hi):
        py = area.bottom - (t - y_lo) * y_scale
        draw.line([(area.left - MINOR_TICK_LENGTH, py), (area.left, py)], fill=INK)
    for px, text in zip(x_positions, tick_labels(x_ticks), strict=True):
        draw.line([(px, area.bottom), (px, area.bottom + TICK_LENGTH)], fill=INK)
        _draw_text(image, (px, area.bottom + TICK_LENGTH + 3), text, TICK_FONT_SIZE, "mt")
    for py, text in zip(y_positions, tick_labels(y_ticks), strict=True):
        draw.line([(area.left - TICK_LENGTH, py), (area.left, py)], fill=INK)
        _draw_text(image, (area.left - TICK_LENGTH - 3, py), text, TICK_FONT_SIZE, "rm")


def _draw_labels(image: Image.Image, plot: SpectrumPlot, area: PlotArea) -> None:
    height = image.height
    _draw_text(
        image, ((area.left + area.right) / 2, height - 4), plot.x_label, LABEL_FONT_SIZE, "mb"
    )
    _draw_text(
        image, ((area.left + area.right) / 2, area.top / 2), plot.title, TITLE_FONT_SIZE, "mm"
    )
    mask = _rotated_text_mask(plot.y_label, LABEL_FONT_SIZE)
    top = round((area.top + area.bottom - mask.height) / 2)
    image.paste(INK, (4, top, 4 + mask.width, top + mask.height), mask)


def _line_coverage(plot: SpectrumPlot, area: PlotArea) -> np.ndarray:
    """Anti-aliased coverage of the data line over the plot area, as 2x2 supersample counts (0-4).

    The line is drawn at twice the resolution and each 2x2 block is averaged, so a pixel the line
    crosses partly gets a lighter blend instead of an all-or-nothing staircase. The array covers
    the plot area plus one pixel on each side (strokes and clamped points may touch the frame).
    """
    scale = SUPERSAMPLE
    full = scale * scale  # every stroke pixel holds this, so a block's mean is its stroke count
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
    return np.asarray(mask.reduce(scale))


def _png_chunk(tag: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))


def encode_indexed_png(indices: np.ndarray, palette: Sequence[int], compress_level: int) -> bytes:
    """A 4-bit indexed PNG of ``indices`` (uint8 < 16, height x width), no row filters.

    Pillow writes the same file format; packing two pixels a byte in numpy and handing zlib one
    buffer is about twice as fast as its chunked encoder on these mostly-white images, and the
    encoder is the largest single cost of a render (see agent.bench_render).
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
            _png_chunk(b"IHDR", header),
            _png_chunk(b"PLTE", bytes(palette)),
            _png_chunk(b"IDAT", zlib.compress(rows.tobytes(), compress_level)),
            _png_chunk(b"IEND", b""),
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
    # Palette indices drawn as an "L" image: the grey ramp is linear in the index.
    canvas = Image.new("L", size, WHITE_INDEX)
    _draw_axes(canvas, ImageDraw.Draw(canvas), plot, area)
    _draw_labels(canvas, plot, area)
    pixels = np.array(canvas)
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
