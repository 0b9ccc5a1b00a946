"""The rule-based inspector: measures a spectrum's arrays and reasons in the Spec-o3 format.

It is the demo's default policy and the draft generator when no LLM is configured. It works
only from what any policy may see: the spectrum's arrays (wavelength, flux, ivar, mask,
redshift) and the task definition. It never reads labels, subtypes or generator internals.

How an episode goes:

1. ``begin`` measures everything once, in the rest frame: Balmer/He/metal lines (equivalent
   width, FWHM, significance against ``ivar``), molecular band depths at their heads with the
   right shading, and the continuum colour. A scorer turns the measurements into *findings*,
   each a sentence with numbers and a signed weight in log-odds; the sum plus a prior bias is
   the score, and ``P(YES) = logistic(score)``.
2. The windows of the task definition are ranked by how much evidence they carry (the summed
   absolute weights of their findings). Those inside the spectrum's coverage that carry
   evidence are planned for inspection, strongest first, at least two and at most
   ``max_tool_calls`` (and ``max_windows``).
3. ``generate`` writes one turn per planned window: a ``<think>`` citing the numbers measured
   in the window just shown (and what the tool said about it), then the next ``<tool_call>``.
   The last turn weighs the evidence for and against, names the contaminant the evidence
   points to, and answers ``\\boxed{YES}`` or ``\\boxed{NO}`` with a justification.

Scorers are keyed by task code (CV, CS, SS, MG, WD, O, B, A); a task added by an expert
without code gets the GENERIC scorer, which reads the window kinds: emission windows reward
significant emission, absorption windows significant absorption, band windows band depth.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from agent import measure
from agent.calibration import PlattScaling
from agent.inspection_tasks import DiagnosticWindow, Task
from agent.measure import Measurement, MeasurementError, Window
from agent.parsing import DEFAULT_MAX_TOOL_CALLS, TOOL_NAME
from agent.policies.base import PolicyError, code_version
from agent.resolution import Resolution, intrinsic_fwhm
from agent.spectra import Spectrum

MODEL_NAME = "rule-based/v2"
CALIBRATION_PATH = Path(__file__).resolve().parent.parent / "data" / "rule_based_calibration.json"
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


# --- the spectrum as measured -----------------------------------------------------------------


class SpectrumView:
    """Rest-frame arrays of one spectrum with cached measurements.

    Cosmic-ray-like spikes (one or two pixels far above their neighbours) are treated as bad
    pixels, as an expert ignores them by eye.
    """

    def __init__(self, spectrum: Spectrum) -> None:
        if not isinstance(spectrum, Spectrum):
            raise TypeError(f"spectrum must be an agent.spectra.Spectrum, got {type(spectrum)!r}")
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


# --- findings and assessments -----------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    """One piece of evidence: a sentence with numbers and its log-odds weight (> 0: YES)."""

    window: str | None  # the task window it was measured in, None for the whole spectrum
    text: str
    weight: float = 0.0
    alternative: str | None = None  # the contaminant class this evidence points to, if any


@dataclass
class Assessment:
    bias: float  # prior log-odds before any evidence
    findings: list[Finding] = field(default_factory=list)

    @property
    def score(self) -> float:
        return self.bias + sum(finding.weight for finding in self.findings)

    def add(
        self,
        window: str | None,
        text: str,
        weight: float = 0.0,
        *,
        alternative: str | None = None,
    ) -> None:
        self.findings.append(Finding(window, text, float(weight), alternative))


Scorer = Callable[["SpectrumView", Task], Assessment]


def window_for(task: Task, wavelength: float, *, prefer: str = "") -> str | None:
    """Name of the task window holding ``wavelength`` (the narrowest; ``prefer`` first)."""
    holding = [w for w in task.windows if w.rest_range[0] <= wavelength <= w.rest_range[1]]
    if not holding:
        return None
    preferred = [w for w in holding if prefer and prefer.lower() in w.name.lower()]
    pool = preferred or holding
    return min(pool, key=lambda w: w.rest_range[1] - w.rest_range[0]).name


def _trust(significance: float) -> float:
    """How far a detection of this significance can count: 0 at 1 sigma, 1 from 3 sigma."""
    return min(max((significance - 1.0) / (STRONG - 1.0), 0.0), 1.0)


def _width_trust(view: SpectrumView, rest_wavelength: float, threshold_kms: float) -> float:
    """How far a width criterion at ``threshold_kms`` can count at this resolution: 1 while the
    instrumental FWHM is under 0.3 of it, 0 from 0.6 (the line-spread function dominates)."""
    return _ramp(view.instrumental_kms(rest_wavelength) / threshold_kms, 0.3, 0.6, 1.0, 0.0)


def _instrumental_angstrom(view: SpectrumView, rest_wavelength: float) -> float:
    return rest_wavelength * view.instrumental_kms(rest_wavelength) / measure.C_KMS


def _sig(measurement: Measurement | None) -> float:
    if measurement is None:
        return 0.0
    value = measurement.significance
    return 0.0 if value is None else value


def _emits(measurement: Measurement | None, sigma: float = STRONG, ew: float = 0.0) -> bool:
    return (
        measurement is not None
        and measurement.ew is not None
        and measurement.ew <= -ew
        and _sig(measurement) <= -sigma
    )


def _absorbs(measurement: Measurement | None, sigma: float = STRONG, ew: float = 0.0) -> bool:
    return (
        measurement is not None
        and measurement.ew is not None
        and measurement.ew >= ew
        and _sig(measurement) >= sigma
    )


def _band_present(measurement: Measurement | None, depth: float, sigma: float = STRONG) -> bool:
    return (
        measurement is not None
        and measurement.depth is not None
        and measurement.depth >= depth
        and _sig(measurement) >= sigma
    )


def _fmt_line(measurement: Measurement) -> str:
    label = measurement.name
    return f"{label}: {measurement.describe()}"


def _fmt_colour(colour: float | None) -> str:
    if colour is None:
        return "continuum colour not measurable (4000–4500 or 6000–6500 Å not covered)"
    shade = "blue" if colour >= 1.3 else "red" if colour <= 0.7 else "intermediate"
    return f"{shade} continuum, F(4000–4500)/F(6000–6500) = {colour:.2f}"


# --- CV: cataclysmic variables ----------------------------------------------------------------


def _ha_core(view: SpectrumView) -> Measurement | None:
    """H-alpha within ±10 Å against a parabola through the flanks at 14–42 Å: a narrow
    emission core inside a broad absorption trough shows as emission; a pure trough does not
    (the parabola follows its curvature)."""
    sides = [(6564.6 - 42.0, 6564.6 - 14.0), (6564.6 + 14.0, 6564.6 + 42.0)]
    return view.line("H-alpha core", 6564.6, 10.0, sides, degree=2)


def score_cv(view: SpectrumView, task: Task) -> Assessment:
    """Two states, told apart by net H-alpha emission. Quiescence: broad (FWHM > ~650 km/s)
    Balmer emission in H-alpha and H-beta, He I / He II emission. High state: broad Balmer
    absorption on a blue continuum with an emission core or He II emission. Against: narrow
    dMe or nebular emission, Be stars (H-beta in absorption), photospheres without emission."""
    lines = _cv_lines(view)
    result = Assessment(bias=-2.0)
    result.add(None, _fmt_colour(lines.colour))
    _cv_common(result, lines, task)
    if _emits(lines.ha, 5.0, 1.0):
        result.findings.extend(_cv_quiescent(lines, task))
    else:
        result.findings.extend(_cv_high_state(lines, task))
    return result


@dataclass(frozen=True)
class _CVLines:
    ha: Measurement | None
    ha_core: Measurement | None
    hb: Measurement | None
    hb_wide: Measurement | None
    hg: Measurement | None
    he2: Measurement | None
    he1: tuple[Measurement | None, ...]
    oiii: Measurement | None
    tio: Measurement | None
    colour: float | None


def _cv_lines(view: SpectrumView) -> _CVLines:
    return _CVLines(
        ha=view.line("H-alpha", 6564.6, 38.0, [(6488.0, 6522.0), (6607.0, 6641.0)]),
        ha_core=_ha_core(view),
        hb=view.line("H-beta", 4862.7, 27.0, [(4800.0, 4832.0), (4893.0, 4925.0)]),
        hb_wide=view.line("H-beta trough", 4862.7, 100.0, [(4700.0, 4752.0), (4973.0, 5030.0)]),
        hg=view.line("H-gamma", 4341.7, 22.0, [(4296.0, 4316.0), (4366.0, 4386.0)]),
        he2=view.line("He II 4687", 4687.0, 16.0, [(4600.0, 4622.0), (4725.0, 4745.0)]),
        he1=(
            view.line("He I 5877", 5877.2, 13.0, [(5828.0, 5852.0), (5910.0, 5932.0)]),
            view.line("He I 6680", 6680.0, 14.0, [(6645.0, 6662.0), (6698.0, 6716.0)]),
        ),
        oiii=view.line("[O III] 5008", 5008.2, 9.0, [(4980.0, 4996.0), (5020.0, 5034.0)]),
        tio=view.band("TiO 7056", 7055.9, shading="red"),
        colour=view.colour(),
    )


def _cv_common(result: Assessment, lines: _CVLines, task: Task) -> None:
    """Helium emission supports either state; strong [O III] vetoes (planetary nebula)."""
    w_he2 = window_for(task, 4687.0, prefer="He II")
    if _emits(lines.he2, 4.0, 0.8):
        assert lines.he2 is not None
        result.add(
            w_he2, f"He II 4687 in emission ({lines.he2.describe()}): a hot accretion flow", 2.0
        )
    elif lines.he2 is not None:
        result.add(w_he2, f"no He II 4687 emission ({lines.he2.describe()})")
    if lines.oiii is not None and not _emits(lines.oiii, 5.0, 3.0):
        result.add(
            window_for(task, 5008.2), f"[O III] 5008: no strong emission ({lines.oiii.describe()})"
        )
    helium = [m for m in lines.he1 if _emits(m, 3.5, 0.5)]
    if helium:
        text = "; ".join(_fmt_line(m) for m in helium)
        result.add(
            window_for(task, helium[0].wavelength, prefer="He I"), f"He I emission ({text})", 1.0
        )
    for line in lines.he1:
        if line is not None and line not in helium:
            result.add(
                window_for(task, line.wavelength, prefer="He I"),
                f"{line.name}: no emission ({line.describe()})",
            )
    if lines.hg is not None and not _emits(lines.hg, 4.0):
        result.add(window_for(task, 4341.7, prefer="Balmer"), _fmt_line(lines.hg))
    if lines.tio is not None:
        result.add(window_for(task, 7055.9), f"{_fmt_line(lines.tio)} (an M-dwarf donor or dMe)")
    oiii, hb = lines.oiii, lines.hb
    if _emits(oiii, 5.0, 3.0):
        assert oiii is not None and oiii.ew is not None
        hb_ew = abs(hb.ew) if hb is not None and hb.ew is not None else 0.0
        if abs(oiii.ew) > 2.0 * hb_ew:
            result.add(
                window_for(task, 5008.2),
                f"[O III] 5008 emission (EW {oiii.ew:+.1f} Å) far stronger than H-beta (EW "
                f"{-hb_ew:+.1f} Å) points to a planetary nebula rather than a CV",
                -10.0,
                alternative="a planetary nebula",
            )


def _cv_quiescent(lines: _CVLines, task: Task) -> list[Finding]:
    """Emission-dominated state: broad Balmer emission with a flat decrement."""
    found: list[Finding] = []
    w_ha = window_for(task, 6564.6, prefer="H-alpha")
    w_hb = window_for(task, 4862.7, prefer="H-beta")
    ha, hb, colour = lines.ha, lines.hb, lines.colour
    assert ha is not None
    strength = _ramp(-(ha.ew or 0.0), 1.0, 5.0, -1.0, 1.0)
    found.append(Finding(w_ha, f"H-alpha in emission ({ha.describe()})", strength))
    widths = [m.fwhm_kms for m in (ha, hb) if _emits(m, 4.0) and m is not None and m.fwhm_kms]
    fwhm = float(max(widths)) if widths else 0.0
    if fwhm >= 650.0:
        text = f"the Balmer emission is broad (FWHM {fwhm:.0f} km/s), as from an accretion disc"
    elif fwhm <= 380.0:
        text = (
            f"the Balmer emission is narrow (FWHM {fwhm:.0f} km/s, near the instrumental "
            "width), not disc-broadened"
        )
    else:
        text = f"the Balmer emission has an intermediate width (FWHM {fwhm:.0f} km/s)"
    found.append(Finding(w_ha, text, _ramp(fwhm, 380.0, 650.0, -3.0, 2.5)))
    trough = _filled_trough(hb, lines.hb_wide)
    if _emits(hb, 4.0):
        assert hb is not None
        found.append(Finding(w_hb, f"H-beta also in emission ({hb.describe()})", 1.5))
    elif trough:
        found.append(Finding(w_hb, trough, 1.5))
    elif _absorbs(hb, 4.0, 1.0):
        assert hb is not None
        found.append(
            Finding(
                w_hb,
                f"H-beta stays in absorption ({hb.describe()}) while H-alpha emits: the Be-star "
                "pattern rather than a CV",
                -2.0,
                alternative="a Be star",
            )
        )
    elif hb is not None:
        found.append(
            Finding(
                w_hb,
                f"no H-beta emission to match H-alpha ({hb.describe()}): a lone broad line is "
                "more likely a redshifted quasar line",
                -2.0,
            )
        )
    if _emits(lines.hg, 4.0):
        assert lines.hg is not None
        found.append(
            Finding(window_for(task, 4341.7), f"H-gamma in emission ({lines.hg.describe()})", 0.5)
        )
    if fwhm <= 380.0 and colour is not None and colour < 0.7:
        tio = lines.tio
        tio_text = ""
        if _band_present(tio, 0.1):
            assert tio is not None and tio.depth is not None
            tio_text = f" with TiO 7056 (depth {tio.depth:.2f})"
        found.append(
            Finding(
                window_for(task, 7100.0) if tio_text else w_ha,
                f"narrow Balmer emission (FWHM {fwhm:.0f} km/s) on a red continuum (colour "
                f"{colour:.2f}){tio_text} suggests an active M dwarf (dMe) rather than a CV",
                -1.5,
                alternative="an active M dwarf (dMe)",
            )
        )
    return found


def _filled_trough(hb: Measurement | None, hb_wide: Measurement | None) -> str:
    """Text when H-beta shows a broad absorption trough whose core is filled by emission."""
    if hb is None or hb_wide is None or hb_wide.ew is None or hb.ew is None:
        return ""
    if hb_wide.ew < 5.0 or _sig(hb_wide) < 5.0 or hb.ew > 0.45 * hb_wide.ew:
        return ""
    return (
        f"H-beta sits in a broad absorption trough (EW {hb_wide.ew:+.1f} Å over ±100 Å) whose "
        f"core is filled in (EW {hb.ew:+.1f} Å within ±27 Å): emission inside white-dwarf troughs"
    )


def _cv_high_state(lines: _CVLines, task: Task) -> list[Finding]:
    """Absorption-dominated state: broad Balmer troughs with emission cores (disc in outburst
    or a white-dwarf-dominated CV); without emission this is a white dwarf or a hot star."""
    w_hb = window_for(task, 4862.7, prefer="H-beta")
    w_ha = window_for(task, 6564.6, prefer="H-alpha")
    hb_wide, core, colour = lines.hb_wide, lines.ha_core, lines.colour
    if lines.ha is None:
        return [Finding(w_ha, "H-alpha is not covered by good pixels", -1.0)]
    found = [Finding(w_ha, f"no net H-alpha emission ({lines.ha.describe()})")]
    if hb_wide is None or not _absorbs(hb_wide, 4.0, 3.0):
        shown = f" (H-beta over ±100 Å: {hb_wide.describe()})" if hb_wide is not None else ""
        text = f"neither Balmer emission nor a broad Balmer absorption trough{shown}"
        return [*found, Finding(w_hb, text, -1.5)]
    fwhm = hb_wide.fwhm_kms or 0.0
    depth = hb_wide.depth or 0.0
    if fwhm < 2000.0:
        return [
            *found,
            Finding(
                w_hb,
                f"H-beta absorption of a normal stellar width (FWHM {fwhm:.0f} km/s, depth "
                f"{depth:.2f}): a photosphere rather than a disc",
                -1.5,
            ),
        ]
    if depth <= 0.3 and colour is not None and colour >= 1.5:
        text = (
            f"broad, shallow H-beta absorption (FWHM {fwhm:.0f} km/s, depth {depth:.2f}) on a "
            f"blue continuum (colour {colour:.2f}), as from a disc in the high state"
        )
        found.append(Finding(w_hb, text, 1.0))
    else:
        text = (
            f"broad H-beta absorption (FWHM {fwhm:.0f} km/s, depth {depth:.2f}), as in a "
            "white-dwarf photosphere"
        )
        found.append(Finding(w_hb, text, 0.0))
    if _emits(core, STRONG, 0.3):
        assert core is not None
        found.append(Finding(w_ha, f"a narrow emission core in H-alpha ({core.describe()})", 2.0))
    elif core is not None:
        found.append(
            Finding(
                w_ha,
                f"no emission core in H-alpha ({core.describe()}): without emission the troughs "
                "belong to a white dwarf or hot star",
                -1.0,
            )
        )
    return found


# --- CS: carbon stars -------------------------------------------------------------------------

SWAN_HEADS = (("C2 Swan 5165", 5166.4), ("C2 Swan 5636", 5637.6), ("C2 Swan 4737", 4738.3))
SWAN_RED_HEAD = ("C2 Swan 6122", 6123.7)


def _swan_heads(view: SpectrumView, task: Task) -> list[tuple[str | None, Measurement]]:
    heads = []
    for name, head in (*SWAN_HEADS, SWAN_RED_HEAD):
        measured = view.band(name, head, shading="blue")
        if measured is not None and measured.depth is not None:
            heads.append((window_for(task, head, prefer=name), measured))
    return heads


def _weighted_depth(measured: Sequence[Measurement]) -> tuple[float, float]:
    """Inverse-variance mean band depth and its significance (0, 0 when nothing measured)."""
    weights, values = [], []
    for m in measured:
        if m.depth is None:
            continue
        error = m.depth_error if m.depth_error and m.depth_error > 0 else 0.1
        weights.append(1.0 / error**2)
        values.append(m.depth)
    if not weights:
        return 0.0, 0.0
    mean = float(np.average(values, weights=weights))
    return mean, mean * math.sqrt(sum(weights))


def score_cs(view: SpectrumView, task: Task) -> Assessment:
    """Blue-degraded C2 Swan heads (flux drops sharply on the red side of 5166, 5638, 4738,
    6124 Å) without red-degraded TiO; strong Na D of a cool star (a DQ white dwarf has Swan
    bands on a hot, line-free continuum)."""
    result = Assessment(bias=-2.0)
    colour = view.colour()
    result.add(None, _fmt_colour(colour))
    heads = _swan_heads(view, task)
    for window, head in heads:
        depth = head.depth or 0.0
        if _band_present(head, 0.1):
            result.add(window, f"{head.name}: blue-degraded head, {head.describe()}", 0.3)
        elif depth <= -0.1 and _sig(head) <= -STRONG:
            result.add(
                window,
                f"{head.name}: the flux rises blueward of the head ({head.describe()}), the "
                "opposite of a Swan band (a red-degraded TiO/MgH edge)",
                -1.5,
                alternative="an oxygen-rich M or K star",
            )
        else:
            result.add(window, f"{head.name}: no clear band ({head.describe()})")
    swan, significance = _weighted_depth([m for _, m in heads])
    if heads:
        trust = min(abs(significance) / STRONG, 1.0)
        state = "present" if swan >= 0.08 and significance >= STRONG else "absent or weak"
        result.add(
            heads[0][0],
            f"C2 Swan bands {state}: mean head depth {swan:+.2f} ({significance:+.1f}σ) over "
            f"{len(heads)} heads",
            _ramp(swan, 0.03, 0.12, -3.0, 4.0) * trust,
        )
    else:
        result.add(None, "no C2 Swan head is covered by good pixels", -1.0)
    tio = view.band("TiO 7056", 7055.9, shading="red")
    w_tio = window_for(task, 7055.9, prefer="TiO")
    if _band_present(tio, 0.25):
        assert tio is not None
        result.add(
            w_tio,
            f"a red-degraded TiO 7056 head ({tio.describe()}) marks an oxygen-rich M star "
            "rather than a carbon star",
            -2.5,
            alternative="an oxygen-rich M star",
        )
    elif tio is not None:
        result.add(w_tio, f"no strong TiO 7056 head ({tio.describe()})", 0.3)
    nad = view.line("Na D", 5894.6, 14.0, [(5850.0, 5870.0), (5915.0, 5935.0)])
    w_nad = window_for(task, 5894.6, prefer="Na D")
    if swan >= 0.08 and significance >= STRONG and nad is not None and nad.ew is not None:
        if nad.ew < 5.0:
            result.add(
                w_nad,
                f"Swan bands with weak Na D (EW {nad.ew:+.1f} Å; {_fmt_colour(colour)}) point to "
                "a DQ white dwarf rather than a carbon star",
                -8.0,
                alternative="a DQ white dwarf",
            )
        else:
            result.add(w_nad, f"strong Na D ({nad.describe()}), as in cool carbon stars", 0.5)
    return result


# --- SS: S-type stars -------------------------------------------------------------------------

ZRO_HEADS = (
    ("ZrO 6474", 6475.8, 20.0),
    ("ZrO 6345", 6346.8, 15.0),
    ("ZrO 5552", 5553.2, 20.0),
    ("ZrO 4640", 4641.9, 15.0),
)


def _zro_index(
    view: SpectrumView, task: Task
) -> tuple[float, float, list[tuple[str | None, Measurement]]]:
    """Mean depth of the ZrO gamma heads 6476/6347 (red-degraded; clean and where cool stars
    are bright), its significance, and all ZrO heads measured."""
    heads = []
    for name, head, width in ZRO_HEADS:
        measured = view.band(name, head, shading="red", width=width)
        if measured is not None and measured.depth is not None:
            heads.append((window_for(task, head, prefer=name.split()[0]), measured))
    gamma = [m for _, m in heads if m.wavelength > 6000.0]
    mean, significance = _weighted_depth(gamma)
    return mean, significance, heads


def score_ss(view: SpectrumView, task: Task) -> Assessment:
    """Red-degraded ZrO heads (6476, 6347, 5553, 4642 Å) on an M-type spectrum, weak TiO;
    against TiO-only M stars and carbon stars."""
    result = Assessment(bias=-1.0)
    colour = view.colour()
    result.add(None, _fmt_colour(colour))
    zro, significance, heads = _zro_index(view, task)
    for window, measured in heads:
        result.add(window, f"{measured.name}: {measured.describe()}")
    if heads:
        weight = _ramp(zro, 0.0, 0.08, -3.0, 3.0)
        weight *= _trust(significance) if weight > 0 else min(abs(significance) / STRONG, 1.0)
        verdict = (
            "ZrO bands present"
            if zro >= 0.04 and significance >= STRONG
            else "no ZrO beyond the noise"
        )
        result.add(
            heads[0][0],
            f"{verdict}: mean ZrO 6476/6347 head depth {zro:+.3f} ({significance:+.1f}σ)",
            weight,
        )
    else:
        result.add(None, "the ZrO heads at 6476 and 6347 Å are not covered", -1.0)
    tio = view.band("TiO 7056", 7055.9, shading="red")
    if tio is not None:
        result.add(window_for(task, 7055.9, prefer="TiO"), f"TiO 7056: {tio.describe()}")
    swan = view.band("C2 Swan 5165", 5166.4, shading="blue")
    if _band_present(swan, 0.1):
        assert swan is not None
        result.add(
            window_for(task, 5166.4, prefer="C2"),
            f"a blue-degraded C2 head at 5166 Å ({swan.describe()}) marks a carbon star rather "
            "than an S star",
            -4.0,
            alternative="a carbon star",
        )
    if colour is not None and colour > 0.9:
        result.add(None, f"the continuum is too blue for an S star (colour {colour:.2f})", -2.0)
    return result


# --- MG: M giants -----------------------------------------------------------------------------


def score_mg(view: SpectrumView, task: Task) -> Assessment:
    """Strong TiO with giant gravity: weak CaH and Na I 8183/8195, strong Ca II triplet;
    against M dwarfs, K giants (weak TiO), S stars (ZrO) and carbon stars (C2). Gravity only
    speaks for an M giant once TiO shows the star is an M star at all."""
    result = Assessment(bias=-1.0)
    colour = view.colour()
    result.add(None, _fmt_colour(colour))
    # TiO 7056 (the TiO5 region) is the clean head; 6161 sits on Ca I 6162 in K stars
    tio = view.band("TiO 7056", 7055.9, shading="red") or view.band(
        "TiO 6161", 6160.7, shading="red"
    )
    if tio is None or tio.depth is None:
        result.add(None, "the TiO heads at 6161 and 7056 Å are not covered", -2.0)
        return result
    depth, trust = tio.depth, _trust(_sig(tio))
    kind = "an M-type TiO band" if depth >= 0.08 else "too weak for an M star"
    weight = _ramp(depth, 0.05, 0.1, -3.5, 2.5)
    result.add(
        window_for(task, tio.wavelength, prefer="TiO"),
        f"{tio.name}: {tio.describe()}, {kind}",
        weight * trust if weight > 0 else weight,
        alternative="a K giant or a warmer star",
    )
    m_type = _ramp(depth, 0.05, 0.1, 0.0, 1.0) * trust  # how far gravity can support YES

    def gravity(window: str | None, text: str, weight: float) -> None:
        positive = weight * m_type if weight > 0 else weight
        result.add(window, text, positive, alternative="an M dwarf")

    cah = [
        m
        for m in (
            view.band("CaH 6382", 6383.8, shading="red", width=15.0),
            view.band("CaH 6750", 6751.9, shading="red", width=40.0),
        )
        if m is not None and m.depth is not None
    ]
    if cah:
        index = float(np.mean([m.depth for m in cah if m.depth is not None]))
        described = ", ".join(f"{m.name} {m.depth:+.2f}" for m in cah if m.depth is not None)
        state = "dwarf-like" if index >= 0.12 else "giant-like" if index <= 0.05 else "ambiguous"
        # the CaH heads are ~15 Å wide: a line-spread function of 10 Å washes them out
        sharp = _ramp(_instrumental_angstrom(view, 6383.8), 5.0, 10.0, 1.0, 0.0)
        gravity(
            window_for(task, 6750.0, prefer="CaH"),
            f"CaH depths {described} (mean {index:+.2f}): {state} gravity",
            _ramp(index, 0.05, 0.15, 1.0, -2.5) * sharp,
        )
    # the doublet spans 12 Å: widen the window with the line-spread function to hold it whole
    half = 14.0 + _instrumental_angstrom(view, 8191.0)
    nai = view.line(
        "Na I 8190",
        8191.0,
        half,
        [(8191.0 - half - 25.0, 8191.0 - half - 1.0), (8191.0 + half + 1.0, 8191.0 + half + 25.0)],
    )
    if nai is not None and nai.ew is not None:
        state = (
            "dwarf-strength"
            if nai.ew >= 3.5
            else "giant-strength"
            if nai.ew <= 1.8
            else "intermediate"
        )
        gravity(
            window_for(task, 8191.0, prefer="Na I"),
            f"Na I 8183/8195: {nai.describe()}, {state}",
            _ramp(nai.ew, 1.8, 3.5, 1.5, -2.5),
        )
    cat = view.line("Ca II 8544", 8544.4, 12.0, [(8515.0, 8529.0), (8560.0, 8575.0)])
    if cat is not None and cat.ew is not None:
        # TiO eats the triplet's continuum in late M giants: only a strong line speaks
        gravity(
            window_for(task, 8544.4, prefer="Ca II"),
            f"Ca II 8544: {cat.describe()}" + (", strong as in giants" if cat.ew >= 4.0 else ""),
            _ramp(cat.ew, 1.5, 3.0, 0.0, 1.0),
        )
    zro, significance, _ = _zro_index(view, task)
    # TiO bands overlap the ZrO heads at low resolution: an S star's ZrO rivals its TiO
    if zro >= 0.08 and significance >= STRONG and zro >= 0.5 * depth:
        result.add(
            window_for(task, 6475.8),
            f"ZrO heads (mean depth {zro:+.2f}, {significance:.1f}σ) mark an S star rather than "
            "an M giant",
            -6.0,
            alternative="an S star",
        )
    swan = view.band("C2 Swan 5165", 5166.4, shading="blue")
    if _band_present(swan, 0.1):
        assert swan is not None
        result.add(
            window_for(task, 5166.4),
            f"a blue-degraded C2 head at 5166 Å ({swan.describe()}) marks a carbon star rather "
            "than an M giant",
            -6.0,
            alternative="a carbon star",
        )
    ha = view.line("H-alpha", 6564.6, 20.0, [(6520.0, 6540.0), (6590.0, 6610.0)])
    if _emits(ha, 5.0, 1.0):
        assert ha is not None
        result.add(
            window_for(task, 6564.6, prefer="H-alpha"),
            f"H-alpha emission ({ha.describe()}): chromospheric activity or a Mira pulsation",
        )
    return result


# --- WD: white dwarfs -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Balmer:
    hb: Measurement | None
    hb_core: Measurement | None
    hg: Measurement | None
    ha_core: Measurement | None
    ha: Measurement | None  # over ±100 Å, to compare with H-beta

    def present(self) -> bool:
        """Balmer absorption in H-beta and H-gamma; H-beta alone must be very clear, and
        H-gamma alone counts only where H-beta is not covered."""
        both = _absorbs(self.hb, STRONG, 2.0) and _absorbs(self.hg, STRONG, 2.0)
        single = any(_absorbs(m, 8.0, 3.0) for m in (self.hb, self.hb_core)) and not _emits(
            self.hg, STRONG
        )
        fallback = self.hb is None and _absorbs(self.hg, 8.0, 3.0)
        return both or single or fallback


def score_wd(view: SpectrumView, task: Task) -> Assessment:
    """DA (Balmer lines thousands of km/s wide, series merged by H9-H10), DB (broad He I,
    no H), DO (He II, no H), DZ (broad Ca II K, no H), DQ (Swan bands on a hot continuum), DC
    (featureless); against A/B stars and sdA/sdB (narrower lines, long resolved series) and
    CVs (emission inside the troughs)."""
    result = Assessment(bias=-1.5)
    colour = view.colour()
    result.add(None, _fmt_colour(colour))
    balmer = _Balmer(
        hb=view.line("H-beta", 4862.7, 110.0, [(4700.0, 4742.0), (4982.0, 5030.0)]),
        hb_core=view.line("H-beta core", 4862.7, 25.0, [(4812.0, 4836.0), (4889.0, 4913.0)]),
        hg=view.line("H-gamma", 4341.7, 80.0, [(4232.0, 4260.0), (4424.0, 4450.0)]),
        ha_core=_ha_core(view),
        ha=view.line("H-alpha", 6564.6, 100.0, [(6400.0, 6455.0), (6680.0, 6730.0)]),
    )
    ha = view.line("H-alpha", 6564.6, 25.0, [(6505.0, 6530.0), (6600.0, 6625.0)])
    he2 = view.line("He II 4687", 4687.0, 16.0, [(4600.0, 4622.0), (4725.0, 4745.0)])
    emission = [m for m in (ha, balmer.ha_core) if _emits(m, 5.0, 1.0)]
    if emission:
        result.add(
            window_for(task, 6564.6, prefer="H-alpha"),
            f"H-alpha emission ({emission[0].describe()}) points to a cataclysmic variable or "
            "an active star rather than a single white dwarf",
            -6.0,
            alternative="a cataclysmic variable",
        )
    if _emits(he2, 5.0, 0.8) and he2 is not None and (he2.fwhm_kms or 0.0) <= 1200.0:
        result.add(
            window_for(task, 4687.0, prefer="He II"),
            f"He II 4687 in emission ({he2.describe()}) marks an accreting or nebular source "
            "rather than a white dwarf",
            -3.0,
            alternative="an accreting or nebular source",
        )
    if balmer.present():
        _score_da(result, view, task, balmer)
    else:
        text = "no significant Balmer absorption"
        if balmer.hb is not None:
            text += f" (H-beta {balmer.hb.describe()})"
        result.add(window_for(task, 4862.7, prefer="H-beta"), text)
        _score_non_da(result, view, task, colour, balmer)
    return result


def _score_da(result: Assessment, view: SpectrumView, task: Task, balmer: _Balmer) -> None:
    w_hb = window_for(task, 4862.7, prefer="H-beta")
    lines = [m for m in (balmer.hb, balmer.hg) if _absorbs(m, STRONG, 2.0)]
    widths = [m.fwhm_kms for m in lines if m.fwhm_kms is not None]
    fwhm = float(np.median(widths)) if widths else 0.0
    described = "; ".join(f"{m.name}: {m.describe()}" for m in lines)
    if fwhm > 8500.0:
        kind = "broader than any white-dwarf line: continuum structure rather than a line"
    elif fwhm >= 2400.0:
        kind = "white-dwarf pressure broadening"
    elif fwhm < 1900.0:
        kind = "narrower than a white dwarf's, as in A/B stars or subdwarfs"
    else:
        kind = "between main-sequence and white-dwarf widths"
    result.add(
        w_hb,
        f"Balmer absorption ({described}): median FWHM {fwhm:.0f} km/s, {kind}",
        _ramp(fwhm, 1700.0, 2600.0, -3.0, 3.0) if fwhm <= 8500.0 else -1.0,
    )
    hb, core = balmer.hb, balmer.hb_core
    depth = hb.depth if hb is not None and hb.depth is not None else 0.0
    if fwhm < 2800.0 and depth >= 0.3:
        # DA lines are deepest where they are broadest (~12 000 K); deep but narrow lines
        # belong to the lower gravity of a hot subdwarf
        result.add(
            w_hb,
            f"H-beta is deep (depth {depth:.2f}) for its moderate width (FWHM {fwhm:.0f} km/s), "
            "as in a hot subdwarf (sdB) rather than a white dwarf",
            _ramp(depth, 0.3, 0.38, 0.0, -2.5),
            alternative="a hot subdwarf (sdB)",
        )
    if hb is not None and balmer.ha is not None and hb.ew and balmer.ha.ew is not None:
        decrement = balmer.ha.ew / hb.ew
        if decrement < 0.55:
            result.add(
                window_for(task, 6564.6, prefer="H-alpha"),
                f"H-alpha absorption is weak next to H-beta (EW {balmer.ha.ew:+.1f} vs "
                f"{hb.ew:+.1f} Å over ±100 Å, ratio {decrement:.2f}; single white dwarfs show "
                "about 0.6-0.9): filled in by emission, as in a cataclysmic variable",
                _ramp(decrement, 0.35, 0.55, -3.0, 0.0),
                alternative="a cataclysmic variable",
            )
        else:
            result.add(
                window_for(task, 6564.6, prefer="H-alpha"),
                f"H-alpha absorption {balmer.ha.describe()} over ±100 Å, {decrement:.2f} of "
                "H-beta: no sign of emission filling",
            )
    if (
        hb is not None
        and core is not None
        and hb.ew is not None
        and core.ew is not None
        and hb.ew > 3.0
    ):
        fraction = core.ew / hb.ew
        if fraction < 0.1:
            shape = "the core is filled in, as by emission in a cataclysmic variable"
            weight = -2.0
        elif fraction <= 0.55:
            shape, weight = "most of the line is in the wings (white dwarf)", 1.5
        elif fraction >= 0.68:
            shape = "the line is concentrated in a deep core (main-sequence or subdwarf star)"
            weight = _ramp(fraction, 0.55, 0.72, 1.5, -2.0)
        else:
            shape, weight = "intermediate wings", _ramp(fraction, 0.55, 0.72, 1.5, -2.0)
        result.add(
            w_hb,
            f"H-beta core fraction EW(±25 Å)/EW(±110 Å) = {core.ew:.1f}/{hb.ew:.1f} = "
            f"{fraction:.2f}: {shape}",
            weight,
        )
    contrasts = []
    for n in (10, 11, 12):
        neighbours = (0.5 * (_balmer(n) + _balmer(n + 1)), 0.5 * (_balmer(n) + _balmer(n - 1)))
        value = view.contrast(_balmer(n), neighbours)
        if math.isfinite(value):
            contrasts.append(value)
    if contrasts:
        merged = float(np.mean(contrasts))
        snr = view.snr((3700.0, 4000.0)) or 0.0
        trust = min(snr / 8.0, 1.0)  # at S/N < 8 the contrast is mostly noise
        if merged <= 0.06:
            state = "merged into a pseudo-continuum, as in a white dwarf"
        else:
            state = "still resolved, as in A/B stars and subdwarfs"
        result.add(
            window_for(task, 3800.0, prefer="Upper Balmer"),
            f"H10-H12 line contrast {merged:+.2f} (S/N {snr:.0f} near 3800 Å): series {state}",
            _ramp(merged, 0.05, 0.15, 1.0, -1.5) * trust,
        )


def _score_non_da(
    result: Assessment, view: SpectrumView, task: Task, colour: float | None, balmer: _Balmer
) -> None:
    """The white dwarfs without hydrogen: DB, DO, DZ, DQ, and the featureless DC. A broad
    emission bump (a quasar line) rules them all out first: quasar continua can mimic broad
    shallow dips between their lines."""
    bump = view.strongest_emission_bump()
    snr = view.snr() or 0.0
    # 4.5 sigma of the 15-pixel smoothed flux ratio, and at least 10 per cent
    if bump is not None and bump[1] >= max(0.1, 4.5 / (max(snr, 1.0) * math.sqrt(15.0))):
        result.add(
            None,
            f"a broad emission bump at {bump[0]:.0f} Å ({100 * bump[1]:.0f}% above the "
            "continuum): a quasar line rather than a white dwarf",
            -4.0,
            alternative="a quasar",
        )
        return
    if _cool_star_lines(result, view, task, colour):
        return
    he4026 = view.line("He I 4026", 4027.3, 25.0, [(3985.0, 4000.0), (4055.0, 4070.0)])
    he4471 = view.line("He I 4471", 4472.7, 30.0, [(4420.0, 4440.0), (4505.0, 4525.0)])
    he4922 = view.line("He I 4922", 4923.3, 25.0, [(4880.0, 4895.0), (4952.0, 4967.0)])
    he5876 = view.line("He I 5877", 5877.2, 40.0, [(5800.0, 5830.0), (5930.0, 5960.0)])
    he2 = view.line("He II 4687", 4687.0, 25.0, [(4640.0, 4660.0), (4712.0, 4730.0)])
    cak = view.line("Ca II K", 3934.8, 20.0, [(3895.0, 3912.0), (3998.0, 4015.0)])
    swan = [view.band(name, head, shading="blue") for name, head in SWAN_HEADS]
    nad = view.line("Na D", 5894.6, 14.0, [(5850.0, 5870.0), (5915.0, 5935.0)])
    found = False
    helium = [m for m in (he4026, he4471, he4922, he5876) if _absorbs(m, 4.0, 1.0)]
    hot = colour is not None and colour >= 1.2  # DBs are hotter than ~11 000 K
    if len(helium) >= 2 and hot:
        found = True
        text = "; ".join(_fmt_line(m) for m in helium)
        widths = [m.fwhm_kms for m in helium if m.fwhm_kms]
        broad = bool(widths) and float(np.median(widths)) >= 850.0
        result.add(
            window_for(task, 4472.7, prefer="He I"),
            f"He I absorption in {len(helium)} lines without hydrogen ({text})"
            + (": pressure-broadened, a DB white dwarf" if broad else ": narrow, as in a B star"),
            3.5 if broad else -1.0,
            alternative="a B star",
        )
    elif helium:
        result.add(
            window_for(task, helium[0].wavelength, prefer="He I"),
            f"a single He I-like dip ({_fmt_line(helium[0])}) without the rest of the He I "
            "series: not enough for a DB",
        )
    if _absorbs(he2, 4.0, 1.0):
        assert he2 is not None
        found = True
        hydrogen = [m for m in (balmer.hb, balmer.hg) if _absorbs(m, STRONG, 1.0)]
        if hydrogen:
            result.add(
                window_for(task, 4687.0, prefer="He II"),
                f"He II 4687 absorption ({he2.describe()}) with weak Balmer lines "
                f"({_fmt_line(hydrogen[0])}): a hot subdwarf (sdO) rather than a DO white dwarf",
                -1.0,
                alternative="a hot subdwarf (sdO)",
            )
        else:
            result.add(
                window_for(task, 4687.0, prefer="He II"),
                f"He II 4687 absorption without hydrogen ({he2.describe()}): a DO white dwarf",
                3.0,
            )
    if _absorbs(cak, 4.0, 3.0):
        assert cak is not None
        found = True
        broad = (cak.fwhm_kms or 0.0) >= 1200.0
        result.add(
            window_for(task, 3934.8, prefer="Ca II"),
            f"Ca II K without hydrogen ({cak.describe()})"
            + (
                ": pressure-broadened, a DZ white dwarf" if broad else ": narrow, as in a cool star"
            ),
            3.0 * _width_trust(view, 3934.8, 1200.0) if broad else -1.0,
            alternative="a cool main-sequence star",
        )
    present = [m for m in swan if _band_present(m, 0.15)]
    if len(present) >= 2:
        found = True
        text = "; ".join(_fmt_line(m) for m in present)
        if nad is None or nad.ew is None or nad.ew < 5.0:
            result.add(
                window_for(task, 4738.3),
                f"C2 Swan bands ({text}) with no Na D: a DQ white dwarf",
                3.5,
            )
        else:
            result.add(
                window_for(task, 4738.3),
                f"C2 Swan bands ({text}) with strong Na D (EW {nad.ew:+.1f} Å): a carbon star",
                -2.0,
                alternative="a carbon star",
            )
    if not found:
        _score_featureless(result, view, task, colour)


def _cool_star_lines(
    result: Assessment, view: SpectrumView, task: Task, colour: float | None
) -> bool:
    """A strong G band or Mg b marks an ordinary F-M star; true when it was found. Their
    absorption would otherwise pass for the He I or Ca II of a DB or DZ white dwarf."""
    checks = [
        view.line("G band", 4301.2, 12.0, [(4270.0, 4283.0), (4318.0, 4328.0)]),
        view.line("Mg b", 5176.0, 14.0, [(5130.0, 5155.0), (5200.0, 5225.0)]),
    ]
    strong = [m for m in checks if _absorbs(m, 4.0, 2.0)]
    if not strong or (colour is not None and colour >= 1.5):
        return False
    result.add(
        window_for(task, 5176.0),
        "lines of a cool star (" + "; ".join(_fmt_line(m) for m in strong) + f"; "
        f"{_fmt_colour(colour)}): an ordinary F-M star rather than a white dwarf",
        -3.0,
        alternative="a cool main-sequence star or giant",
    )
    return True


def _score_featureless(
    result: Assessment, view: SpectrumView, task: Task, colour: float | None
) -> None:
    """DC candidates: no lines at all. Cool stars show metal lines; quasars emission bumps.
    Interstellar Ca II K and Na D are narrow and may remain; two metal lines, Mg b or H-alpha
    mean a normal star."""
    hydrogen = [
        m
        for m in (
            view.line("H-beta", 4862.7, 12.0, [(4830.0, 4845.0), (4880.0, 4895.0)]),
            view.line("H-gamma", 4341.7, 12.0, [(4310.0, 4325.0), (4358.0, 4373.0)]),
            view.line("H-delta", 4102.9, 12.0, [(4071.0, 4086.0), (4119.0, 4134.0)]),
        )
        if _absorbs(m, 4.0, 0.5)
    ]
    if len(hydrogen) >= 2:
        text = "; ".join(_fmt_line(m) for m in hydrogen)
        result.add(
            window_for(task, 4862.7, prefer="H-beta"),
            f"weak, narrow Balmer lines are present ({text}): a hot normal star rather than a "
            "featureless white dwarf",
            -2.0,
            alternative="a hot main-sequence star",
        )
        return
    checks = {
        "Ca II K": view.line("Ca II K", 3934.8, 12.0, [(3905.0, 3918.0), (3950.0, 3962.0)]),
        "Mg b": view.line("Mg b", 5176.0, 14.0, [(5130.0, 5155.0), (5200.0, 5225.0)]),
        "Na D": view.line("Na D", 5894.6, 10.0, [(5860.0, 5878.0), (5910.0, 5928.0)]),
        "H-alpha": view.line("H-alpha", 6564.6, 25.0, [(6505.0, 6530.0), (6600.0, 6625.0)]),
    }
    lines = {
        k: m
        for k, m in checks.items()
        if m is not None
        and abs(_sig(m)) >= 4.0
        and abs(m.ew or 0.0) >= 1.0
        # a lone H-alpha absorption is hydrogen (a DA too noisy in H-beta), not a metal line
        and not (k == "H-alpha" and (m.ew or 0.0) > 0)
    }
    snr = view.snr() or 0.0
    if len(lines) >= 2 or "Mg b" in lines or "H-alpha" in lines:
        text = "; ".join(_fmt_line(m) for m in lines.values())
        result.add(
            None,
            f"lines of a normal star are present ({text})",
            -2.0,
            alternative="a cool main-sequence star",
        )
        return
    bump = view.strongest_emission_bump()
    hot_enough = colour is not None and colour >= 0.75
    strongest = 100 * (bump[1] if bump else 0.0)
    text = (
        f"a featureless continuum (S/N {snr:.0f}; no Balmer, He, Ca II, Mg b or H-alpha line "
        f"beyond 4σ; strongest bump {strongest:.0f}%)"
    )
    if hot_enough:
        result.add(None, text + ": a DC white dwarf", _ramp(snr, 6.0, 15.0, 1.0, 3.0))
    else:
        result.add(None, text + " but too red for most DC white dwarfs", -0.5)


# --- O, B, A stars ----------------------------------------------------------------------------

HE_II_LINES = (("He II 4542", 4542.9), ("He II 4687", 4687.0), ("He II 5412", 5413.0))
HE_I_LINES = (("He I 4026", 4027.3), ("He I 4471", 4472.7), ("He I 4922", 4923.3))


def _narrow_line(view: SpectrumView, name: str, centre: float) -> Measurement | None:
    """A photospheric line of a hot star: ±7 Å against flanks 9–19 Å away, widened with the
    line-spread function so a low-resolution line is integrated whole."""
    half = max(7.0, 0.8 * _instrumental_angstrom(view, centre))
    return view.line(
        name,
        centre,
        half,
        [(centre - half - 12.0, centre - half - 2.0), (centre + half + 2.0, centre + half + 12.0)],
    )


def _combined_ew(lines: Sequence[Measurement | None]) -> tuple[float, float]:
    """Inverse-variance mean EW of similar lines and its significance: several weak lines
    together tell more than any one of them."""
    weights, values = [], []
    for m in lines:
        if m is None or m.ew is None or not m.ew_error:
            continue
        weights.append(1.0 / m.ew_error**2)
        values.append(m.ew)
    if not weights:
        return 0.0, 0.0
    mean = float(np.average(values, weights=weights))
    return mean, mean * math.sqrt(sum(weights))


def _helium(view: SpectrumView, table: Sequence[tuple[str, float]]) -> tuple[float, float, str]:
    lines = [_narrow_line(view, name, centre) for name, centre in table]
    mean, significance = _combined_ew(lines)
    described = "; ".join(_fmt_line(m) for m in lines if m is not None) or "not covered"
    return mean, significance, described


def _helium_width(view: SpectrumView, table: Sequence[tuple[str, float]]) -> float | None:
    """Median FWHM of the clearly absorbed helium lines measured over ±25 Å: main-sequence
    OB stars have a few hundred km/s, hot subdwarfs and white dwarfs 800-3000 km/s."""
    widths = []
    for name, centre in table:
        wide = view.line(
            name, centre, 25.0, [(centre - 45.0, centre - 28.0), (centre + 28.0, centre + 45.0)]
        )
        if _absorbs(wide, 4.0, 0.5) and wide is not None and wide.fwhm_kms:
            widths.append(wide.fwhm_kms)
    return float(np.median(widths)) if widths else None


def _broad_helium(
    result: Assessment, view: SpectrumView, task: Task, table: Sequence[tuple[str, float]]
) -> None:
    width = _helium_width(view, table)
    trust = _width_trust(view, table[0][1], 900.0)
    if width is not None and width >= 900.0 and trust > 0:
        kind = "He II" if table is HE_II_LINES else "He I"
        result.add(
            window_for(task, table[0][1], prefer=kind),
            f"the {kind} lines are broad (median FWHM {width:.0f} km/s): the surface gravity of "
            "a hot subdwarf or white dwarf, not a main-sequence star",
            -4.0 * trust,
            alternative="a hot subdwarf or white dwarf",
        )


def _ca_k(view: SpectrumView) -> Measurement | None:
    """Ca II K over ±6 Å against flanks inside the H8 / H-epsilon gap, where the Balmer wings
    of hot stars would otherwise eat the continuum."""
    half = max(6.0, 0.8 * _instrumental_angstrom(view, 3934.8))
    if half <= 8.0:
        return view.line("Ca II K", 3934.8, 6.0, [(3917.0, 3926.0), (3944.0, 3952.0)])
    # a low-resolution K line is wider than the gap: integrate it whole against wider flanks
    return view.line(
        "Ca II K",
        3934.8,
        half,
        [(3934.8 - half - 10.0, 3934.8 - half - 1.0), (3934.8 + half + 1.0, 3934.8 + half + 10.0)],
    )


def _subdwarf_or_wd(
    result: Assessment, view: SpectrumView, window: str | None, *, max_fwhm: float = 2600.0
) -> None:
    """High gravity: strong Balmer lines much broader and more winged than in main-sequence
    stars of the type (weak Balmer lines of O stars are left alone: their wings are lost in
    the noise). ``max_fwhm`` is the broadest main-sequence H-beta for the task's types."""
    hb = view.line("H-beta", 4862.7, 110.0, [(4700.0, 4742.0), (4982.0, 5030.0)])
    core = view.line("H-beta core", 4862.7, 25.0, [(4812.0, 4836.0), (4889.0, 4913.0)])
    if hb is None or core is None or hb.ew is None or core.ew is None:
        return
    if hb.ew < 6.0 or _sig(hb) < 8.0:
        return
    fraction = core.ew / hb.ew
    fwhm = hb.fwhm_kms or 0.0
    # the core fraction also drops when the line-spread function spreads the core
    core_spread = _instrumental_angstrom(view, 4862.7) > 10.0
    if fwhm >= max_fwhm or (fraction <= 0.45 and not core_spread):
        result.add(
            window,
            f"H-beta is very broad (FWHM {fwhm:.0f} km/s, core fraction {fraction:.2f}): the "
            "gravity of a subdwarf or white dwarf, not a main-sequence star",
            -3.0 * _width_trust(view, 4862.7, max_fwhm),
            alternative="a hot subdwarf or white dwarf",
        )
    else:
        result.add(
            window,
            f"H-beta has main-sequence proportions (FWHM {fwhm:.0f} km/s, core fraction "
            f"{fraction:.2f})",
        )


def score_o(view: SpectrumView, task: Task) -> Assessment:
    """He II 4542/4687/5412 absorption with He I on a hot continuum and main-sequence Balmer
    lines; against B stars (He I only), subdwarfs and DO white dwarfs (broad lines), A stars."""
    result = Assessment(bias=-1.5)
    colour = view.colour()
    result.add(None, _fmt_colour(colour))
    he2, he2_sig, he2_text = _helium(view, HE_II_LINES)
    w_he2 = window_for(task, 4542.9, prefer="He II")
    state = "present" if he2_sig >= STRONG else "not detected"
    result.add(
        w_he2,
        f"He II absorption {state}: mean EW {he2:+.2f} Å ({he2_sig:+.1f}σ) over 4542/4687/5412 "
        f"({he2_text})",
        _ramp(he2_sig, 1.5, 4.0, -2.5, 3.5),
    )
    he2_4686 = view.line("He II 4687 emission", 4687.0, 9.0, [(4660.0, 4672.0), (4700.0, 4715.0)])
    if _emits(he2_4686, 4.0, 0.3):
        assert he2_4686 is not None
        result.add(
            window_for(task, 4687.0),
            f"He II 4687 in emission ({he2_4686.describe()}), as in Of stars",
            1.0,
        )
    if colour is not None:
        result.add(
            None,
            "a hot continuum" if colour >= 1.6 else "a continuum too red for an O star",
            _ramp(colour, 1.2, 1.8, -2.0, 0.5),
        )
    _subdwarf_or_wd(result, view, window_for(task, 4862.7, prefer="H-beta"), max_fwhm=2400.0)
    if he2_sig >= STRONG:
        _broad_helium(result, view, task, HE_II_LINES)
    return result


def score_b(view: SpectrumView, task: Task) -> Assessment:
    """He I absorption beside Balmer lines, no He II; hot continuum; main-sequence widths.
    Late B stars have almost no He I: then weak Ca II K and a hot continuum decide."""
    result = Assessment(bias=-0.5)
    colour = view.colour()
    result.add(None, _fmt_colour(colour))
    he1, he1_sig, he1_text = _helium(view, HE_I_LINES)
    w_he1 = window_for(task, 4472.7, prefer="He I")
    state = "present" if he1_sig >= STRONG else "not detected"
    # at low resolution metal blends put ~0.2 Å into the He I windows of A stars too: the
    # equivalent width must exceed that, not only the noise
    he1_weight = _ramp(he1, 0.15, 0.4, -0.5, 2.5)
    if he1_weight > 0:
        he1_weight *= _trust(he1_sig)
    result.add(
        w_he1,
        f"He I absorption {state}: mean EW {he1:+.2f} Å ({he1_sig:+.1f}σ) over 4026/4471/4922 "
        f"({he1_text})",
        he1_weight if he1_text != "not covered" else 0.0,
    )
    he2, he2_sig, _ = _helium(view, HE_II_LINES)
    if he2_sig >= 4.0 and he2 >= 0.2:
        result.add(
            window_for(task, 4542.9, prefer="He II"),
            f"He II absorption (mean EW {he2:+.2f} Å, {he2_sig:.1f}σ) marks an O star rather "
            "than a B star",
            -3.0,
            alternative="an O star",
        )
    cak = _ca_k(view)
    if cak is not None and cak.ew is not None:
        strong = cak.ew >= 0.8 and _sig(cak) >= STRONG
        result.add(
            window_for(task, 3934.8),
            f"Ca II K: {cak.describe()}"
            + (", strong as in A and later stars" if strong else ", weak as in B stars"),
            _ramp(cak.ew, 0.3, 0.7, 0.5, -2.5) if _sig(cak) >= 2.0 else 0.5,
            alternative="an A or later star",
        )
    if colour is not None:
        result.add(
            None,
            "a hot continuum" if colour >= 2.0 else "a continuum too cool for most B stars",
            # reddening moves F(4000-4500)/F(6000-6500) of real B stars down to ~2
            _ramp(colour, 1.4, 2.2, -2.0, 0.5),
            alternative="a cooler star",
        )
    hb = view.line("H-beta", 4862.7, 40.0, [(4780.0, 4815.0), (4910.0, 4945.0)])
    if hb is not None and hb.ew is not None and hb.ew < 3.0 and he1_sig >= STRONG:
        result.add(
            window_for(task, 4862.7),
            f"weak Balmer lines (H-beta {hb.describe()}), as in O stars",
            _ramp(hb.ew, 1.5, 3.0, -2.0, 0.0),
            alternative="an O star",
        )
    helium_only = view.line("H-beta", 4862.7, 40.0, [(4780.0, 4815.0), (4910.0, 4945.0)])
    if helium_only is not None and not _absorbs(helium_only, 4.0, 1.0) and he1_sig >= STRONG:
        result.add(
            window_for(task, 4862.7),
            f"He I without Balmer absorption (H-beta {helium_only.describe()}): a DB white "
            "dwarf or helium star, not a B star",
            -3.0,
        )
    _subdwarf_or_wd(result, view, window_for(task, 4862.7), max_fwhm=2400.0)
    hd = view.line("H-delta", 4102.9, 40.0, [(4040.0, 4058.0), (4150.0, 4168.0)])
    if _absorbs(hd, 5.0, 2.0) and hd is not None and (hd.fwhm_kms or 0.0) >= 2200.0:
        result.add(
            window_for(task, 4102.9, prefer="H-delta"),
            f"H-delta: {hd.describe()}, broader than in main-sequence B stars (subdwarf gravity)",
            _ramp(hd.fwhm_kms or 0.0, 2200.0, 2600.0, 0.0, -2.5)
            * _width_trust(view, 4102.9, 2200.0),
            alternative="a hot subdwarf (sdB)",
        )
    snr = view.snr((4400.0, 4600.0)) or 0.0
    measured_he1 = he1_text != "not covered"
    if colour is not None and colour >= 2.6 and he1_sig < 2.0 and snr >= 15.0 and measured_he1:
        result.add(
            w_he1,
            f"no He I at S/N {snr:.0f} on a continuum as hot as colour {colour:.2f}: a B star "
            "that hot shows He I, a hot subdwarf may not",
            -2.0,
            alternative="a hot subdwarf (sdB)",
        )
    if he1_sig >= STRONG:
        _broad_helium(result, view, task, HE_I_LINES)
    return result


def score_a(view: SpectrumView, task: Task) -> Assessment:
    """Strong, moderately broad Balmer lines, Ca II K present, no He I, no G band / Ca I."""
    result = Assessment(bias=-1.0)
    colour = view.colour()
    result.add(None, _fmt_colour(colour))
    hb = view.line("H-beta", 4862.7, 40.0, [(4780.0, 4815.0), (4910.0, 4945.0)])
    w_hb = window_for(task, 4862.7, prefer="H-beta")
    if hb is not None and hb.ew is not None:
        strength = ", near the Balmer maximum" if hb.ew >= 8.0 else ", weaker than in A stars"
        result.add(w_hb, f"H-beta: {hb.describe()}{strength}", _ramp(hb.ew, 4.0, 9.0, -2.5, 1.5))
    he1, he1_sig, he1_text = _helium(view, HE_I_LINES)
    if he1_sig >= 4.0 and he1 >= 0.15:
        result.add(
            window_for(task, 4472.7, prefer="He I"),
            f"He I absorption (mean EW {he1:+.2f} Å, {he1_sig:.1f}σ: {he1_text}) marks a B star "
            "rather than an A star",
            -2.5,
            alternative="a B star",
        )
    cool = [
        m
        for m in (
            view.line("G band", 4301.2, 12.0, [(4270.0, 4283.0), (4318.0, 4328.0)]),
            _narrow_line(view, "Ca I 4228", 4227.9),
        )
        if _absorbs(m, 4.0, 0.6)
    ]
    if cool:
        result.add(
            window_for(task, 4301.2, prefer="G band"),
            "G band / Ca I of an F or later star: " + "; ".join(_fmt_line(m) for m in cool),
            -1.5,
        )
    cak = _ca_k(view)
    if cak is not None and cak.ew is not None:
        if cak.ew < 0.6:
            text, weight = "weaker than in A stars (a B star, or a metal-poor sdA)", -1.5
            weight = _ramp(cak.ew, 0.2, 0.6, -1.5, 0.0)
        elif cak.ew > 4.0:
            text, weight = "as strong as in F and later stars", _ramp(cak.ew, 4.0, 5.0, 0.0, -1.5)
        else:
            text, weight = "as in A stars", 1.0
        result.add(window_for(task, 3934.8), f"Ca II K: {cak.describe()}, {text}", weight)
        if hb is not None and hb.ew is not None and hb.ew > 3.0 and cak.ew > 0.6:
            # K grows and the Balmer lines fade through A into F: their ratio places the type
            # whatever the resolution (both are equivalent widths)
            ratio = cak.ew / hb.ew
            if ratio >= 0.25:
                result.add(
                    window_for(task, 3934.8),
                    f"Ca II K / H-beta equivalent widths {ratio:.2f}: as in F stars (A stars "
                    "stay below ~0.25)",
                    _ramp(ratio, 0.25, 0.4, 0.0, -2.5),
                    alternative="an F star",
                )
    hd = view.line("H-delta", 4102.9, 40.0, [(4040.0, 4058.0), (4150.0, 4168.0)])
    if _absorbs(hd, 5.0, 2.0) and hd is not None and hd.fwhm_kms:
        # main-sequence A stars at the Balmer maximum reach ~2000 km/s; sdA and DA are broader
        broad = hd.fwhm_kms >= 2400.0
        weight = _ramp(hd.fwhm_kms, 2400.0, 3000.0, 0.3, -2.5)
        result.add(
            window_for(task, 4102.9, prefer="H-delta"),
            f"H-delta: {hd.describe()}"
            + (", broader than in main-sequence A stars (sdA gravity)" if broad else ""),
            weight * _width_trust(view, 4102.9, 2400.0) if weight < 0 else weight,
            alternative="an sdA star",
        )
    if colour is not None:
        # unreddened A0V is ~2.9, A7V ~2.1 in F(4000-4500)/F(6000-6500); reddening lowers it
        typical = 1.1 <= colour <= 3.3
        result.add(
            None,
            "continuum colour typical of A stars"
            if typical
            else "a continuum colour atypical for A stars",
            0.5 if typical else -1.5,
        )
    _subdwarf_or_wd(result, view, w_hb, max_fwhm=2600.0)
    return result


# --- the generic scorer for tasks without code -------------------------------------------------


def _window_measurements(view: SpectrumView, window: DiagnosticWindow) -> list[Measurement]:
    """Measurements implied by a window's kind and lines, for any task."""
    low, high = window.rest_range
    width = high - low
    measured: list[Measurement] = []
    if window.kind in ("emission", "absorption", "continuum"):
        side = max(min(0.2 * width, 40.0), 5.0)
        lines = sorted(window.lines) or ([0.5 * (low + high)] if window.kind != "continuum" else [])
        for centre in lines[:6]:
            spacing = min(
                (abs(centre - other) for other in lines if other != centre), default=width
            )
            limit = 12.0 if window.kind == "continuum" else 40.0
            half = max(min(0.5 * spacing, 0.5 * width - side, limit), 3.0)
            sides = [(low, low + side), (high - side, high)]
            if (
                window.kind == "continuum"
                or centre - half < low + side
                or centre + half > high - side
            ):
                sides = list(
                    measure.flanking_bands((centre - half, centre + half), min(side, 15.0))
                )
            m = view.line(f"{centre:.0f} Å", centre, half, sides)
            if m is not None:
                measured.append(m)
    elif window.kind == "band":
        shading = "blue" if _BLUE_SHADED.search(window.name) else "red"
        for head in sorted(window.lines)[:4] or [0.5 * (low + high)]:
            band_width = max(min(25.0, 0.25 * width), 5.0)
            m = view.band(f"head {head:.0f} Å", head, shading=shading, width=band_width)
            if m is not None:
                measured.append(m)
    return measured


def _continuum_note(view: SpectrumView, window: DiagnosticWindow) -> str | None:
    """The slope across a continuum window: flux at its red end over flux at its blue end."""
    low, high = window.rest_range
    edge = 0.1 * (high - low)
    blue, red = view.median_flux((low, low + edge)), view.median_flux((high - edge, high))
    if blue is None or red is None or blue <= 0:
        return None
    trend = "rising" if red > 1.1 * blue else "falling" if red < 0.9 * blue else "flat"
    return (
        f"the continuum is {trend} to the red across {low:.0f}–{high:.0f} Å "
        f"(F_red/F_blue = {red / blue:.2f})"
    )


def score_generic(view: SpectrumView, task: Task) -> Assessment:
    """Window kinds as evidence for tasks without a dedicated scorer: an emission window adds
    ``w * tanh(s / 5)`` with ``s`` its strongest emission significance, an absorption window the
    same for absorption, a band window for band depth; ``w`` shares 6 log-odds units among the
    scored windows, so a class whose every feature is strongly present reaches about +5."""
    result = Assessment(bias=-1.0)
    result.add(None, _fmt_colour(view.colour()))
    scored = [w for w in task.windows if w.kind != "continuum"]
    share = 6.0 / max(len(scored), 1)
    any_measured = False
    for window in scored:
        measured = _window_measurements(view, window)
        if not measured:
            continue
        any_measured = True
        sign = -1.0 if window.kind == "emission" else 1.0
        best = max(measured, key=lambda m: sign * _sig(m))
        value = math.tanh(sign * _sig(best) / 5.0)
        state = "present" if value >= 0.5 else "absent or weak" if value <= 0.2 else "marginal"
        result.add(
            window.name,
            f"{_fmt_line(best)}: the expected {window.kind} is {state}",
            share * value,
        )
    if not any_measured:
        result.add(None, "no diagnostic window is covered by good pixels", -1.0)
    return result


SCORERS: dict[str, Scorer] = {
    "CV": score_cv,
    "CS": score_cs,
    "SS": score_ss,
    "MG": score_mg,
    "WD": score_wd,
    "O": score_o,
    "B": score_b,
    "A": score_a,
}
GENERIC = "GENERIC"


def scorer_for(task: Task) -> tuple[str, Scorer]:
    code = task.code.upper()
    if code in SCORERS:
        return code, SCORERS[code]
    return GENERIC, score_generic


# --- the policy -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlannedWindow:
    window: DiagnosticWindow
    wavelength_range: tuple[float, float]  # the rest range clipped to the coverage
    value: float  # summed |weight| of its findings
    notes: tuple[str, ...]  # what was measured there, with numbers


@dataclass
class _Episode:
    task: Task
    view: SpectrumView
    use_tool: bool
    scorer: str
    assessment: Assessment
    probability: float
    prediction: str
    confidence: float
    plan: list[PlannedWindow]
    skipped: list[str]  # windows not inspected because the data do not cover them
    threshold: float


@cache
def default_calibration() -> dict[str, PlattScaling]:
    """Per-task Platt scaling fitted on the real corpus' development part
    (``python -m agent.real_bench calibrate``); empty when the file is absent."""
    if not CALIBRATION_PATH.exists():
        return {}
    data = json.loads(CALIBRATION_PATH.read_text(encoding="utf-8"))
    return {
        code: PlattScaling(float(fit["slope"]), float(fit["intercept"]))
        for code, fit in data["tasks"].items()
    }


class RuleBasedInspector:
    """Deterministic, honest inspector: measurements and physics rules, no labels.

    ``calibration`` maps a task code to the Platt scaling that turns the evidence score into
    P(YES); "default" uses the fit on the real corpus' development part, None the raw
    ``logistic(score)``.
    """

    def __init__(
        self,
        *,
        threshold: float = 0.5,
        max_windows: int | None = None,
        name: str = POLICY_KIND,
        calibration: dict[str, PlattScaling] | str | None = "default",
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int | float):
            raise ValueError(f"threshold must be a number in (0, 1), got {threshold!r}")
        if not 0.0 < float(threshold) < 1.0:
            raise ValueError(f"threshold must be in (0, 1), got {threshold!r}")
        if max_windows is not None and (
            isinstance(max_windows, bool) or not isinstance(max_windows, int) or max_windows < 0
        ):
            raise ValueError(f"max_windows must be a non-negative int or None, got {max_windows!r}")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        if isinstance(calibration, str) and calibration != "default":
            raise ValueError(
                f"calibration must be 'default', None or a mapping, got {calibration!r}"
            )
        self.threshold = float(threshold)
        self.max_windows = max_windows
        self.name = name
        self.calibration: dict[str, PlattScaling] = (
            default_calibration() if calibration == "default" else dict(calibration or {})
        )
        self.last_decision: dict[str, Any] | None = None
        self._episode: _Episode | None = None

    # --- Policy protocol ---------------------------------------------------------------------

    def info(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": POLICY_KIND,
            "model": MODEL_NAME,
            "threshold": self.threshold,
            "max_windows": self.max_windows,
            "calibrated_tasks": sorted(self.calibration),
            "code_version": code_version(),
        }

    def begin(
        self,
        *,
        spectrum: Spectrum,
        task: Task,
        use_tool: bool = True,
        max_tool_calls: int = DEFAULT_MAX_TOOL_CALLS,
    ) -> None:
        """Measure the spectrum, score it for ``task`` and plan the windows to inspect."""
        if not isinstance(task, Task):
            raise TypeError(f"task must be an agent.inspection_tasks.Task, got {type(task)!r}")
        if isinstance(max_tool_calls, bool) or not isinstance(max_tool_calls, int):
            raise ValueError(f"max_tool_calls must be an int, got {max_tool_calls!r}")
        if max_tool_calls < 0:
            raise ValueError(f"max_tool_calls must be >= 0, got {max_tool_calls}")
        view = SpectrumView(spectrum)
        scorer_name, scorer = scorer_for(task)
        assessment = scorer(view, task)
        platt = self.calibration.get(task.code.upper())
        probability = platt(assessment.score) if platt else _logistic(assessment.score)
        prediction = "YES" if probability >= self.threshold else "NO"
        # A decision taken against the odds (a threshold away from 0.5) is a coin flip at best.
        confidence = max(probability if prediction == "YES" else 1.0 - probability, 0.5)
        limit = max_tool_calls if use_tool else 0
        if self.max_windows is not None:
            limit = min(limit, self.max_windows)
        plan, skipped = _plan(view, task, assessment, limit)
        self._episode = _Episode(
            task=task,
            view=view,
            use_tool=use_tool,
            scorer=scorer_name,
            assessment=assessment,
            probability=probability,
            prediction=prediction,
            confidence=confidence,
            plan=plan,
            skipped=skipped,
            threshold=self.threshold,
        )
        self.last_decision = {
            "prediction": prediction,
            "confidence": round(confidence, 4),
            "score": round(assessment.score, 4),
            "evidence": {
                "scorer": scorer_name,
                "probability_yes": round(probability, 4),
                "calibrated": platt is not None,
                "bias": assessment.bias,
                "findings": [
                    {"window": f.window, "text": f.text, "weight": round(f.weight, 3)}
                    for f in assessment.findings
                ],
                "planned_windows": [p.window.name for p in plan],
                "skipped_windows": list(skipped),
            },
        }

    def generate(self, messages: list[dict[str, Any]]) -> str:
        episode = self._episode
        if episode is None:
            raise PolicyError(
                "RuleBasedInspector.generate was called before begin(): call "
                "begin(spectrum=..., task=...) first (agent.rollout.inspect does this), so the "
                "inspector has arrays to measure"
            )
        if not isinstance(messages, list):
            raise PolicyError(f"messages must be a list of dicts, got {type(messages).__name__}")
        step = sum(1 for message in messages if _role(message) == "assistant")
        feedback = _last_tool_text(messages)
        if step < len(episode.plan):
            return _tool_turn(episode, step, feedback)
        return _answer_turn(episode, feedback)


# --- planning and writing ---------------------------------------------------------------------


def _plan(
    view: SpectrumView, task: Task, assessment: Assessment, limit: int
) -> tuple[list[PlannedWindow], list[str]]:
    candidates: list[tuple[float, int, PlannedWindow]] = []
    skipped: list[str] = []
    for order, window in enumerate(task.windows):
        low = max(window.rest_range[0], view.coverage[0])
        high = min(window.rest_range[1], view.coverage[1])
        if high - low < 5.0 or view.covered_fraction(window.rest_range) < COVERED_FRACTION:
            skipped.append(window.name)
            continue
        notes = [f.text for f in assessment.findings if f.window == window.name]
        value = sum(abs(f.weight) for f in assessment.findings if f.window == window.name)
        if not notes:
            notes = [_fmt_line(m) for m in _window_measurements(view, window)]
            if window.kind == "continuum" and (slope := _continuum_note(view, window)):
                notes.append(slope)
        if not notes:
            notes = [
                f"nothing measurable at {window.rest_range[0]:.0f}–{window.rest_range[1]:.0f} Å"
            ]
        # rounded inward so the request stays inside the coverage the tool checks against
        shown = (math.ceil(low * 10.0) / 10.0, math.floor(high * 10.0) / 10.0)
        planned = PlannedWindow(window, shown, value, tuple(notes))
        candidates.append((value, order, planned))
    candidates.sort(key=lambda item: (-item[0], item[1]))
    # windows that carry evidence, strongest first; at least MIN_PLANNED so a look is taken
    chosen = [c for c in candidates if c[0] >= MIN_WEIGHT]
    if len(chosen) < MIN_PLANNED:
        chosen = candidates[: max(MIN_PLANNED, len(chosen))]
    return [planned for _, _, planned in chosen[:limit]], skipped


def _role(message: Any) -> str | None:
    return message.get("role") if isinstance(message, dict) else None


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        part.get("text", "")
        for part in content
        if isinstance(part, dict) and part.get("type") == "text"
    )


def _last_tool_text(messages: list[dict[str, Any]]) -> str | None:
    """The text of the tool response just before this turn, without the wrapper tags."""
    if not messages or _role(messages[-1]) != "user":
        return None
    text = _message_text(messages[-1]).strip()
    if not text.startswith("<tool_response>"):
        return None
    text = text.removeprefix("<tool_response>").removesuffix("</tool_response>")
    return " ".join(text.replace("<image>", " ").split())


def _sentences(notes: Sequence[str]) -> str:
    return " ".join(
        note[0].upper() + note[1:] + ("" if note.endswith(".") else ".") for note in notes
    )


def _tool_feedback(episode: _Episode, step: int, feedback: str | None) -> str:
    """What the previous tool response adds: a note when it did not show the window."""
    if feedback is None or step == 0:
        return ""
    shown = episode.plan[step - 1]
    shown_match = _SHOWN.match(feedback)
    if shown_match:
        text = f" The zoomed view shows {shown_match.group(1)}."
        extra = shown_match.group(2).strip()
        return text + (f" The tool noted: {extra}" if extra else "")
    return (
        f" The tool could not show {shown.window.name} as asked ({feedback}); "
        "I rely on the measured arrays for it."
    )


def _overview(episode: _Episode) -> str:
    view = episode.view
    snr = view.snr()
    frame = f"rest frame, z = {view.redshift:.4g}" if view.redshift else "observed = rest frame"
    parts = [
        f"The full view covers {view.coverage[0]:.0f}–{view.coverage[1]:.0f} Å ({frame})",
        f"median S/N {snr:.0f} at 6000–7000 Å" if snr is not None else "S/N unknown",
        _fmt_colour(view.colour()),
    ]
    text = "; ".join(parts) + "."
    if view.ivar_estimated:
        text += " The file has no inverse variance, so I estimate the noise from the scatter."
    if view.spikes.any():
        text += f" I ignore {int(np.count_nonzero(view.spikes))} spike pixel(s) that look like cosmic rays."
    if episode.skipped:
        text += " Not covered by good pixels: " + ", ".join(episode.skipped) + "."
    return text


def _next_window_text(planned: PlannedWindow, first: bool) -> str:
    low, high = planned.wavelength_range
    look_for = planned.window.look_for.rstrip(".")
    lead = "I start with" if first else "Next I check"
    return (
        f"{lead} {planned.window.name} ({low:.0f}–{high:.0f} Å). What to check there: {look_for}."
    )


def _tool_call_json(planned: PlannedWindow) -> str:
    low, high = planned.wavelength_range
    call = {
        "name": TOOL_NAME,
        "arguments": {"wavelength_range": [low, high], "label": planned.window.name},
    }
    return json.dumps(call, ensure_ascii=False)


def _tool_turn(episode: _Episode, step: int, feedback: str | None) -> str:
    planned = episode.plan[step]
    if step == 0:
        think = f"{_overview(episode)} {_next_window_text(planned, True)}"
    else:
        previous = episode.plan[step - 1]
        think = (
            f"{previous.window.name}: {_sentences(previous.notes)}"
            f"{_tool_feedback(episode, step, feedback)} {_next_window_text(planned, False)}"
        )
    return f"<think>{think}</think>\n<tool_call>{_tool_call_json(planned)}</tool_call>"


def _weighed(findings: Sequence[Finding], sign: int, count: int) -> list[Finding]:
    chosen = [f for f in findings if sign * f.weight >= MIN_WEIGHT]
    chosen.sort(key=lambda f: -abs(f.weight))
    return chosen[:count]


def _answer_turn(episode: _Episode, feedback: str | None) -> str:
    findings = episode.assessment.findings
    parts: list[str] = []
    if episode.plan:
        last = episode.plan[-1]
        step = len(episode.plan)
        parts.append(
            f"{last.window.name}: {_sentences(last.notes)}{_tool_feedback(episode, step, feedback)}"
        )
    else:
        parts.append(_overview(episode))
        if not episode.use_tool:
            parts.append("No tool in this run: I read the full view and the measured arrays.")
        ranked = sorted(findings, key=lambda f: -abs(f.weight))[:8]
        parts.append("Measured: " + _sentences([f.text for f in ranked]))
    name = episode.task.name
    supporting = _weighed(findings, +1, 4)
    opposing = _weighed(findings, -1, 4)
    parts.append(
        f"For {name}: " + ("; ".join(f.text for f in supporting) or "nothing of weight") + "."
    )
    parts.append("Against: " + ("; ".join(f.text for f in opposing) or "nothing of weight") + ".")
    contaminant = _contaminant_note(episode)
    if contaminant:
        parts.append(contaminant)
    parts.append(
        f"Weighing these (prior {episode.assessment.bias:+.1f}) gives a score of "
        f"{episode.assessment.score:+.1f}, P(YES) = {episode.probability:.2f} against a "
        f"threshold of {episode.threshold:.2f}."
    )
    key = supporting if episode.prediction == "YES" else opposing
    reasons = "; ".join(f.text for f in key[:3]) or (
        "no diagnostic feature of the class stands above the noise"
    )
    verdict = "matches" if episode.prediction == "YES" else "does not match"
    justification = (
        f'The spectrum {verdict} "{name}" (confidence {episode.confidence:.2f}, score '
        f"{episode.assessment.score:+.1f}): {reasons}."
    )
    think = " ".join(parts)
    return (
        f"<think>{think}</think>\n<answer>\\boxed{{{episode.prediction}}} {justification}</answer>"
    )


def _contaminant_note(episode: _Episode) -> str:
    """The strongest contaminant-flavoured finding, stated as the alternative explanation."""
    alternatives = [f for f in episode.assessment.findings if f.alternative and f.weight < 0]
    if alternatives:
        strongest = min(alternatives, key=lambda f: f.weight)
        if strongest in _weighed(episode.assessment.findings, -1, 4):
            return f"The measurements point to {strongest.alternative} instead."
        return f"The measurements point to {strongest.alternative} instead: {strongest.text}."
    if episode.task.contaminants and episode.prediction == "YES":
        return (
            "No measured feature points to the usual contaminants ("
            + "; ".join(episode.task.contaminants[:3])
            + ")."
        )
    return ""
