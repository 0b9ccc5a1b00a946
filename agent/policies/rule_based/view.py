"""The spectrum as measured: the rest-frame view every scorer reads, and its constants."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agent import measure
from agent.measure import Measurement, MeasurementError, Window
from agent.resolution import Resolution, intrinsic_fwhm
from agent.spectra import Spectrum

MODEL_NAME = "rule-based/v7"
CALIBRATION_PATH = Path(__file__).resolve().parents[2] / "data" / "rule_based_calibration.json"
POLICY_KIND = "rule-based"
COVERED_FRACTION = 0.5  # a window is inspected when at least this share of it has good pixels
STRONG = 3.0  # significance (sigma) for "clearly present"
MIN_WEIGHT = 0.2  # findings lighter than this are neither for nor against
MIN_PLANNED = 2  # windows inspected even when little evidence sits in any of them
BLUE_BAND = (4000.0, 4500.0)
RED_BAND = (6000.0, 6500.0)
SNR_BAND = (6000.0, 7000.0)
LAMOST_PIXEL_DEX = 1e-4  # pixel scales below were chosen on this grid; other grids are rescaled
BOXCAR_SIGMA_FWHM = 2.0 * math.sqrt(2.0 * math.log(2.0)) / math.sqrt(12.0)  # ≈ 0.68
# observed-frame pixels no line is measured on: the strong night-sky lines of fibre surveys
# ([O I] 5577, 6300, 6364 in vacuum). The telluric bands are not masked: 70 Å wide, they would
# take a whole line (H-alpha at z ~ 0.05) with them; their depth is left to the continuum fits.
SKY_LINES = ((5578.9, 4.0), (6302.0, 4.0), (6365.5, 4.0))
# where the blue and red arms meet (LAMOST ~5700-5900 Å, SDSS ~5900-6100 Å): flux steps there
DICHROIC = (5650.0, 6100.0)
_BLUE_SHADED = re.compile(r"\b(C2|Swan|CN|CH)\b", re.IGNORECASE)
# the tool's answer for a window it rendered: "Showing 6500.0–6630.0 Å (...), 86 pixels." + notes
_SHOWN = re.compile(r"^Showing (.*?(?:pixels|masked))\.\s*(.*)$", re.DOTALL)


def _logistic(value: float) -> float:
    return 1.0 / (1.0 + math.exp(-max(min(value, 40.0), -40.0)))


def _ramp(value: float, low: float, high: float, at_low: float, at_high: float) -> float:
    """Linear from ``at_low`` (value <= low) to ``at_high`` (value >= high)."""
    if high == low:
        return at_high if value >= high else at_low
    t = min(max((value - low) / (high - low), 0.0), 1.0)
    return at_low + t * (at_high - at_low)


def _balmer(n: int) -> float:
    """Vacuum wavelength of the Balmer line from upper level n (H-alpha = 6564.61 Å)."""
    return 6564.61 * (5.0 / 36.0) / (0.25 - 1.0 / n**2)


class SpectrumView:
    """Rest-frame arrays of one spectrum with cached measurements.

    Cosmic-ray-like spikes (one or two pixels far above their neighbours) are treated as bad
    pixels, as an expert ignores them by eye.
    """

    def __init__(self, spectrum: Spectrum) -> None:
        if not isinstance(spectrum, Spectrum):
            raise TypeError(f"spectrum must be an agent.spectra.Spectrum, got {type(spectrum)!r}")
        self.spectrum = spectrum  # what begin(view=...) checks a view against
        redshift = float(spectrum.redshift) if math.isfinite(spectrum.redshift) else 0.0
        self.redshift = redshift if redshift > -1.0 else 0.0
        self.wave = np.asarray(spectrum.wavelength, dtype=np.float64) / (1.0 + self.redshift)
        self.flux = np.asarray(spectrum.flux, dtype=np.float64)
        assert spectrum.mask is not None
        usable = ~np.asarray(spectrum.mask, dtype=bool) & np.isfinite(self.flux)
        # without an inverse variance every significance would be unknown: estimate the noise
        self.ivar_estimated = spectrum.ivar is None
        self.ivar = (
            measure.estimate_ivar(self.flux, usable)
            if spectrum.ivar is None
            else np.asarray(spectrum.ivar, dtype=np.float64)
        )
        if np.count_nonzero(usable) < 10:
            raise ValueError(
                f"spectrum {spectrum.object_id or spectrum.source!r} has "
                f"{np.count_nonzero(usable)} good pixels; at least 10 are needed to measure it"
            )
        self.spikes = measure.find_spikes(self.flux, usable, self.ivar)
        self.good = usable & ~self.spikes & ~self._sky_lines(spectrum)
        self.resolution = spectrum.resolution or Resolution.from_sampling(spectrum.wavelength)
        good_wave = self.wave[self.good]
        self.coverage = (float(good_wave[0]), float(good_wave[-1]))
        self._lines: dict[tuple[Any, ...], Measurement | None] = {}
        self._bands: dict[tuple[Any, ...], Measurement | None] = {}

    def _sky_lines(self, spectrum: Spectrum) -> np.ndarray:
        """Observed-frame pixels under the strong sky lines of fibre surveys (masked in every
        spectrum: the inspector reads the arrays, not where they came from)."""
        observed = np.asarray(spectrum.wavelength, dtype=np.float64)
        masked = np.zeros(observed.size, dtype=bool)
        for centre, half in SKY_LINES:
            masked |= np.abs(observed - centre) <= half
        # a whole window masked away would lose a feature: keep at most a third of the pixels out
        return masked if masked.mean() < 0.33 else np.zeros(observed.size, dtype=bool)

    def instrumental_kms(self, rest_wavelength: float) -> float:
        """The line-spread FWHM (km/s) at a rest wavelength."""
        return self.resolution.velocity_fwhm_at(rest_wavelength * (1.0 + self.redshift))

    def pixel_scale(self, rest_wavelength: float) -> float:
        """This grid's pixel (Å) over a LAMOST pixel at the same wavelength."""
        index = int(np.clip(np.searchsorted(self.wave, rest_wavelength), 1, self.wave.size - 1))
        pixel = float(self.wave[index] - self.wave[index - 1])
        reference = rest_wavelength * LAMOST_PIXEL_DEX * math.log(10.0)
        return max(pixel / reference, 1e-3)

    # --- coverage and continuum --------------------------------------------------------------

    def covered_fraction(self, window: Window) -> float:
        start, stop = np.searchsorted(self.wave, window)
        if stop <= start:
            return 0.0
        # pixels the window would hold on this grid, counting the part beyond the data as bad
        step = float(np.median(np.diff(self.wave[max(start - 1, 0) : stop + 1]))) or 1.0
        expected = max((window[1] - window[0]) / step, 1.0)
        return float(min(np.count_nonzero(self.good[start:stop]) / expected, 1.0))

    def pixel_width(self, window: Window) -> float:
        """The median pixel width (Å, rest frame) over ``window`` and its two neighbouring
        pixels, so a window narrower than one pixel still has the width of the pixel covering it
        (inf only when the spectrum has fewer than two pixels)."""
        start, stop = np.searchsorted(self.wave, window)
        around = self.wave[max(start - 1, 0) : stop + 1]
        if around.size < 2:
            return math.inf
        return float(np.median(np.diff(around)))

    def median_flux(self, window: Window) -> float | None:
        try:
            return measure.median_flux(self.wave, self.flux, self.good, window)[0]
        except MeasurementError:
            return None

    def colour(self) -> float | None:
        """F(4000–4500 Å) / F(6000–6500 Å) from medians: > 1 blue, < 1 red (F_lambda)."""
        blue, red = self.median_flux(BLUE_BAND), self.median_flux(RED_BAND)
        if blue is None or red is None or red <= 0:
            return None
        return blue / red

    def snr(self, window: Window = SNR_BAND) -> float | None:
        """Median S/N per pixel in ``window`` (None when it has no good pixels)."""
        return measure.window_snr(self.wave, self.flux, self.good, self.ivar, window)

    # --- features ----------------------------------------------------------------------------

    def line(
        self,
        name: str,
        centre: float,
        half_width: float,
        sides: Sequence[Window],
        *,
        degree: int = 1,
    ) -> Measurement | None:
        """A line integrated over ``centre ± half_width`` against a continuum (a polynomial of
        ``degree``) fitted to ``sides``; None when the data do not cover it."""
        key = (centre, half_width, tuple(sides), degree)
        if key not in self._lines:
            self._lines[key] = self._measure_line(name, centre, half_width, sides, degree)
        return self._lines[key]

    def _measure_line(
        self, name: str, centre: float, half_width: float, sides: Sequence[Window], degree: int
    ) -> Measurement | None:
        window = (centre - half_width, centre + half_width)
        if self.covered_fraction(window) < COVERED_FRACTION:
            return None
        try:
            continuum = measure.local_continuum(
                self.wave, self.flux, self.good, window, sides, degree=degree
            )
            width = measure.equivalent_width(
                self.wave, self.flux, self.good, window, continuum, self.ivar
            )
        except MeasurementError:
            return None
        emission = width.ew < 0
        fwhm = depth = observed = None
        # smoothing and gap bridging were set in LAMOST pixels; keep them the same in Angstrom
        scale = self.pixel_scale(centre)
        smooth = max(int(round(max(3, int(half_width / 10.0) | 1) / scale)), 1) | 1
        instrumental = self.instrumental_kms(centre)
        try:
            shape = measure.fwhm_kms(
                self.wave,
                self.flux,
                self.good,
                window,
                continuum,
                emission=emission,
                centre=centre,
                search=min(half_width, 15.0),
                # broad lines are measured on a smoother profile so noise cannot cut them short
                smooth_pixels=smooth,
                max_gap_pixels=int(round((16 if emission else 6) / scale)),
                relative_gap=1.5,
            )
            observed, depth = shape.fwhm_kms, shape.depth
            pixel_kms = measure.C_KMS * scale * LAMOST_PIXEL_DEX * math.log(10.0)
            boxcar = BOXCAR_SIGMA_FWHM * smooth * pixel_kms if smooth > 1 else 0.0
            # the smoothing widens the profile like a second line-spread function
            fwhm = intrinsic_fwhm(observed, math.hypot(instrumental, boxcar))
        except MeasurementError:
            pass
        snr = measure.window_snr(
            self.wave, self.flux, self.good, self.ivar, (sides[0][0], sides[-1][1])
        )
        return Measurement(
            name=name,
            wavelength=centre,
            kind="line",
            ew=width.ew,
            ew_error=width.error,
            fwhm_kms=fwhm,
            depth=depth,
            snr=snr,
            instrumental_kms=instrumental if fwhm is not None else None,
            observed_fwhm_kms=observed,
        )

    def band(
        self, name: str, head: float, *, shading: str, width: float = 25.0, gap: float = 2.0
    ) -> Measurement | None:
        key = (head, shading, width, gap)
        if key not in self._bands:
            self._bands[key] = self._measure_band(name, head, shading, width, gap)
        return self._bands[key]

    def _measure_band(
        self, name: str, head: float, shading: str, width: float, gap: float
    ) -> Measurement | None:
        if self.covered_fraction((head - gap - width, head + gap + width)) < COVERED_FRACTION:
            return None
        try:
            depth = measure.band_depth(
                self.wave,
                self.flux,
                self.good,
                head,
                shading=shading,
                width=width,
                gap=gap,
                ivar=self.ivar,
            )
        except MeasurementError:
            return None
        snr = measure.window_snr(
            self.wave, self.flux, self.good, self.ivar, (head - gap - width, head + gap + width)
        )
        return Measurement(
            name=name,
            wavelength=head,
            kind="band",
            depth=depth.depth,
            depth_error=depth.error,
            snr=snr,
        )

    def contrast(self, centre: float, neighbours: tuple[float, float], half: float = 2.0) -> float:
        """1 - F(centre) / mean F(neighbours): how far a line dips below the flux between it
        and the next series members (≈ 0 once the series has merged)."""
        values = [self.median_flux((x - half, x + half)) for x in (centre, *neighbours)]
        if any(value is None for value in values):
            return math.nan
        middle, low, high = values
        assert middle is not None and low is not None and high is not None
        reference = 0.5 * (low + high)
        return 1.0 - middle / reference if reference > 0 else math.nan

    def strongest_emission_bump(self) -> tuple[float, float] | None:
        """(rest wavelength, fractional excess) of the strongest broad emission bump above the
        upper envelope of the flux: the quick look for quasar lines. The envelope is the 80th
        percentile over ~800 Å, which absorption lines and band heads cannot pull down, while
        a broad emission line stands above it."""
        if np.count_nonzero(self.good) < 400:
            return None
        index = np.flatnonzero(self.good)
        values = self.flux[index]
        step = float(np.median(np.diff(self.wave[index])))
        local = _running_percentile(values, max(int(round(800.0 / step)) | 1, 5), 80.0)
        smooth = np.convolve(values, np.ones(15) / 15, mode="same")
        with np.errstate(divide="ignore", invalid="ignore"):
            excess = np.where(local > 0, smooth / local - 1.0, 0.0)
        # the survey ends (throughput edges, telluric water, the OH sky forest) are not trusted
        inside = (self.wave[index] >= 3850.0) & (self.wave[index] <= 8100.0)
        observed = self.wave[index] * (1.0 + self.redshift)
        # an arm junction's flux step lifts the envelope on one side: it is not a line
        inside &= ~((observed >= DICHROIC[0]) & (observed <= DICHROIC[1]))
        if not inside.any():
            return None
        candidates = np.flatnonzero(inside)
        peak = int(candidates[np.argmax(excess[candidates])])
        return float(self.wave[index][peak]), float(excess[peak])


def _running_percentile(values: np.ndarray, width: int, percentile: float) -> np.ndarray:
    half = width // 2
    padded = np.pad(values, half, mode="edge")
    # a full sliding percentile over wide windows is slow; sample every width/8 and interpolate
    centres = np.arange(0, values.size, max(width // 8, 1))
    levels = np.array([np.percentile(padded[c : c + width], percentile) for c in centres])
    return np.interp(np.arange(values.size), centres, levels)
