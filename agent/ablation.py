"""Evidence ablation per verdict: does an answer rest on the windows it looked at and cited?

Paper Table 4 ablates the tool for a whole benchmark; this asks the question of one verdict.
Given a finished trajectory and its spectrum:

1. **Evidence windows** (``evidence_windows``), in the tool's frame (rest frame when the
   spectrum has a redshift, as the tool shows it):

   - every window the agent zoomed into: the range the tool actually showed (``ToolResponse``
     image range, so clipping to the coverage is already applied); a zoom that shows more than
     ``MAX_ZOOM_FRACTION`` of the coverage is the full view again, not a located piece of
     evidence, and is left out;
   - every line cited in the final justification (the ``<answer>`` text after the box), parsed
     with regular expressions in this order: an explicit range "6500-6650 Å"; a task window's
     own name ("H-alpha", "Na D", "C2 Swan 5165"); a named line of ``NAMED_LINES`` (H-alpha,
     Hα, Halpha, H-beta, ..., Ca II H and K, Na D, Mg b, G band); a wavelength written with a
     designation ("He II 4686", "[O III] 5007", "TiO 7054"), a λ ("λ6563") or a unit
     ("6563 Å"), between ``MIN_CITED_WAVELENGTH`` and ``MAX_CITED_WAVELENGTH``. A cited line
     gets the window of the task that holds it (what the tool would show for it), else
     ±``CITED_HALF_WIDTH`` Å (the tool's own suggested half-width). Numbers with other units
     (km/s, equivalent widths in Å below 3000) are not wavelengths and are never taken.

2. **Ablated spectrum** (``ablate_spectrum``): the union of the windows is replaced by the
   continuum plus noise. The continuum across a window is the straight line between the medians
   of its two flanks (good pixels outside every evidence window, ``FLANK_ANGSTROM`` or half the
   window's width wide, at least ``FLANK_PIXELS`` pixels each): medians, so lines in the flanks
   barely move it; one flank alone (a window at the spectrum's edge) gives a flat level. The
   noise keeps the data's own level: a pixel with an inverse variance gets Gaussian noise of
   that pixel's sigma (its ivar is kept, so what the policy reads of the noise stays true);
   without one, the sigma of the flanks' first differences (1.4826 MAD / sqrt 2, blind to a
   sloping continuum). Bad pixels stay as they were (still masked). The noise comes from a
   seeded generator: same seed, same spectrum.

3. **Re-runs** (``ablate_verdict``): the same policy (a fresh one from ``make_policy`` per
   episode, so a seeded sampler restarts its stream) inspects the original spectrum (the
   baseline, so before and after differ by the ablation alone), the ablated one, and a
   **control**: the same widths placed at random inside the coverage, clear of the evidence
   (``control_windows``), ablated the same way. Answers flip much less often when the windows
   the agent did not use are masked, or the test tells nothing.

A verdict is **insensitive** when it was confident (confidence >= ``CONFIDENT``, or the policy
states none) and neither its answer nor its confidence changed (by ``CONFIDENCE_TOLERANCE``)
with its own evidence masked: the answer does not rest on what it cites.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

import numpy as np

from agent import parsing
from agent.inspection_tasks import Task
from agent.rollout import Inspector, inspect, trajectory_confidence
from agent.spectra import Spectrum
from agent.trajectory import Trajectory

MAX_ZOOM_FRACTION = 0.5  # of the coverage: a wider zoom is the full view again
CITED_HALF_WIDTH = 25.0  # Angstrom, the tool's SUGGESTED_HALF_WIDTH_ANGSTROM
MIN_CITED_WAVELENGTH = 3000.0
MAX_CITED_WAVELENGTH = 25000.0
MAX_CITED_RANGE = 2000.0  # Angstrom: a wider "range" is a coverage statement, not a feature
FLANK_ANGSTROM = 30.0
FLANK_PIXELS = 5
CONTROL_TRIES = 200  # placements tried per control window
CONFIDENT = 0.9
MAX_ATTRIBUTED = 6  # merged windows masked one at a time to name the decisive one
CONFIDENCE_TOLERANCE = 0.1

# Vacuum rest wavelengths of lines an inspector names without a number.
NAMED_LINES: tuple[tuple[str, str, tuple[float, ...]], ...] = (
    ("H-alpha", r"H\s*[-‐]?\s*(?:alpha|α)|Hα|Halpha", (6564.6,)),
    ("H-beta", r"H\s*[-‐]?\s*(?:beta|β)|Hβ|Hbeta", (4862.7,)),
    ("H-gamma", r"H\s*[-‐]?\s*(?:gamma|γ)|Hγ|Hgamma", (4341.7,)),
    ("H-delta", r"H\s*[-‐]?\s*(?:delta|δ)|Hδ|Hdelta", (4102.9,)),
    (
        "Ca II H and K",
        r"Ca\s*II\s*H\s*(?:and|&|\+)\s*K|Ca\s*II\s*K|Ca\s*II\s*H\b",
        (3934.8, 3969.6),
    ),
    ("Ca II triplet", r"Ca\s*II\s*(?:infrared\s*)?triplet|Ca\s*T\b", (8500.4, 8544.4, 8664.5)),
    ("Na D", r"Na\s*I?\s*D\b", (5891.6, 5897.6)),
    ("Mg b", r"Mg\s*I?\s*b\b", (5168.8, 5174.1, 5185.0)),
    ("G band", r"\bG[-\s]band\b", (4305.0,)),
)
_DESIGNATION = r"(?:\[?(?:[A-Z][a-z]?)\s*(?:I{1,3}|IV|V|VI)\]?|TiO|VO|ZrO|CaH|C2|CN|CH|Swan)"
_NUMBER = r"(\d{4,5}(?:\.\d+)?)"
_UNIT = r"(?:Å|Angstrom|AA\b|A\b)"
_RANGE_PATTERN = re.compile(_NUMBER + r"\s*(?:-|–|—|to)\s*" + _NUMBER + r"\s*" + _UNIT)
_SINGLE_PATTERNS = (
    re.compile(_DESIGNATION + r"\s*(?:λ\s*)?" + _NUMBER),
    re.compile(r"λ\s*" + _NUMBER),
    re.compile(_NUMBER + r"\s*" + _UNIT),
)

Window = tuple[float, float]


@dataclass(frozen=True)
class EvidenceWindow:
    lo: float  # Angstrom, the tool's frame (rest frame when the spectrum has a redshift)
    hi: float
    source: str  # "zoom" or "cited"
    name: str  # the zoom's label or the cited line, as written (untrusted text)

    def as_dict(self) -> dict[str, Any]:
        return {"lo": round(self.lo, 2), "hi": round(self.hi, 2), "source": self.source,
                "name": self.name}  # fmt: skip


@dataclass(frozen=True)
class Outcome:
    prediction: str | None  # "YES", "NO" or None (no valid answer)
    confidence: float | None  # the policy's probability of its own answer; None: not stated

    def as_dict(self) -> dict[str, Any]:
        return {"prediction": self.prediction, "confidence": self.confidence}

    def probability_of(self, answer: str | None) -> float | None:
        """This outcome's probability of ``answer`` (the complement when it answered the other)."""
        if self.confidence is None or answer is None or self.prediction is None:
            return None
        return self.confidence if self.prediction == answer else 1.0 - self.confidence


@dataclass
class AblationResult:
    windows: list[EvidenceWindow]
    masked: list[Window]  # the merged evidence windows that were replaced
    control: list[Window]  # random windows of the same widths, clear of the evidence
    masked_fraction: float  # of the good coverage
    seed: int
    stored: Outcome  # what the trajectory under test answered
    before: Outcome | None = None  # the baseline re-run on the original spectrum
    after: Outcome | None = None  # with the evidence masked
    control_outcome: Outcome | None = None  # with the control windows masked
    reason: str = ""  # why nothing was re-run (no evidence), else empty
    # When the answer flips: the merged windows that flip it when masked alone.
    decisive: list[Window] = field(default_factory=list)
    confident_at: float = CONFIDENT
    notes: list[str] = field(default_factory=list)

    @property
    def ran(self) -> bool:
        return self.before is not None and self.after is not None

    @property
    def flipped(self) -> bool:
        return _changed_answer(self.before, self.after)

    @property
    def control_flipped(self) -> bool:
        return _changed_answer(self.before, self.control_outcome)

    @property
    def confidence_change(self) -> float | None:
        """P(the baseline's answer) after the ablation minus before."""
        if self.before is None or self.after is None or self.before.confidence is None:
            return None
        after = self.after.probability_of(self.before.prediction)
        return None if after is None else after - self.before.confidence

    @property
    def confident(self) -> bool:
        before = self.before
        if before is None or before.prediction is None:
            return False
        return before.confidence is None or before.confidence >= self.confident_at

    @property
    def insensitive(self) -> bool:
        """Confident, and neither answer nor confidence moved with its own evidence masked."""
        if not self.ran or not self.confident or self.flipped:
            return False
        change = self.confidence_change
        return change is None or abs(change) < CONFIDENCE_TOLERANCE

    @property
    def outcome(self) -> str:
        """One word for lists and filters: flips, weakens, insensitive, holds, no evidence."""
        if not self.ran:
            return "no evidence"
        if self.flipped:
            return "flips"
        if self.insensitive:
            return "insensitive"
        change = self.confidence_change
        if change is not None and change <= -CONFIDENCE_TOLERANCE:
            return "weakens"
        return "holds"

    def names_in(self, window: Window) -> list[str]:
        """The names of the evidence windows a merged window holds, first seen first."""
        names: list[str] = []
        for evidence in self.windows:
            inside = evidence.lo < window[1] and evidence.hi > window[0]
            if inside and evidence.name and evidence.name not in names:
                names.append(evidence.name)
        return names or [f"{window[0]:.0f}-{window[1]:.0f} Å"]

    def as_dict(self) -> dict[str, Any]:
        def outcome(value: Outcome | None) -> dict[str, Any] | None:
            return value.as_dict() if value is not None else None

        return {
            "windows": [w.as_dict() for w in self.windows],
            "masked": [[round(lo, 2), round(hi, 2)] for lo, hi in self.masked],
            "control": [[round(lo, 2), round(hi, 2)] for lo, hi in self.control],
            "masked_fraction": round(self.masked_fraction, 4),
            "masked_names": [self.names_in(window) for window in self.masked],
            "decisive": [[round(lo, 2), round(hi, 2)] for lo, hi in self.decisive],
            "decisive_names": [self.names_in(window) for window in self.decisive],
            "seed": self.seed,
            "stored": self.stored.as_dict(),
            "before": outcome(self.before),
            "after": outcome(self.after),
            "control_outcome": outcome(self.control_outcome),
            "flipped": self.flipped,
            "control_flipped": self.control_flipped,
            "confidence_change": self.confidence_change,
            "insensitive": self.insensitive,
            "outcome": self.outcome,
            "reason": self.reason,
            "notes": list(self.notes),
        }


def _changed_answer(before: Outcome | None, after: Outcome | None) -> bool:
    if before is None or after is None or before.prediction is None:
        return False
    return after.prediction != before.prediction


# --- the frame ----------------------------------------------------------------------------------


def tool_redshift(spectrum: Spectrum) -> float:
    """The redshift the tool divides by (``agent.tool.SpectralVisualizationTool``): the
    spectrum's when finite, non-zero and > -1, else 0 (observed frame)."""
    redshift = float(spectrum.redshift)
    usable = math.isfinite(redshift) and redshift != 0.0 and redshift > -1.0
    return redshift if usable else 0.0


def good_coverage(spectrum: Spectrum) -> Window:
    """First and last good pixel in the tool's frame."""
    wavelength = spectrum.wavelength / (1.0 + tool_redshift(spectrum))
    good = _good(spectrum)
    shown = wavelength[good] if np.count_nonzero(good) >= 2 else wavelength
    return float(shown[0]), float(shown[-1])


def _good(spectrum: Spectrum) -> np.ndarray:
    assert spectrum.mask is not None
    return np.asarray(~spectrum.mask & np.isfinite(spectrum.flux), dtype=bool)


# --- evidence windows ---------------------------------------------------------------------------


def evidence_windows(
    trajectory: Trajectory, *, task: Task | None = None, coverage: Window | None = None
) -> list[EvidenceWindow]:
    """The windows the trajectory zoomed into, then those of the lines its answer cites."""
    windows: list[EvidenceWindow] = []
    span = (coverage[1] - coverage[0]) if coverage else None
    for step in trajectory.steps:
        response = step.tool_result
        if response is None or not response.ok or response.image is None:
            continue
        shown = response.image.wavelength_range
        if shown is None:
            continue
        lo, hi = sorted(shown)
        if span and hi - lo > MAX_ZOOM_FRACTION * span:
            continue
        label = response.image.label or ""
        if not label and step.tool_call is not None:
            label = str(step.tool_call.arguments.get("label") or "")
        windows.append(EvidenceWindow(lo, hi, "zoom", label[:60]))
    answer = trajectory.answer
    if answer is not None and answer.justification:
        windows += cited_windows(answer.justification, task=task)
    if coverage is not None:
        windows = [w for w in windows if w.hi > coverage[0] and w.lo < coverage[1]]
    return windows


def cited_windows(text: str, *, task: Task | None = None) -> list[EvidenceWindow]:
    """Windows of the lines a justification cites (see the module docstring for the rules)."""
    found: list[EvidenceWindow] = []
    rest = text
    for match in _RANGE_PATTERN.finditer(text):
        lo, hi = sorted((float(match.group(1)), float(match.group(2))))
        if lo >= MIN_CITED_WAVELENGTH and hi <= MAX_CITED_WAVELENGTH and hi - lo <= MAX_CITED_RANGE:
            found.append(EvidenceWindow(lo, hi, "cited", match.group(0)))
        rest = rest.replace(match.group(0), " ")
    if task is not None:
        for window in sorted(task.windows, key=lambda w: -len(w.name)):
            pattern = re.compile(r"(?<!\w)" + re.escape(window.name) + r"(?!\w)", re.IGNORECASE)
            if pattern.search(rest):
                found.append(
                    EvidenceWindow(window.rest_range[0], window.rest_range[1], "cited", window.name)
                )
                rest = pattern.sub(" ", rest)
    for name, pattern_text, lines in NAMED_LINES:
        pattern = re.compile(pattern_text)
        if pattern.search(rest):
            found += [_line_window(line, name, task) for line in lines]
            rest = pattern.sub(" ", rest)
    for pattern in _SINGLE_PATTERNS:
        for match in pattern.finditer(rest):
            value = float(match.group(1))
            if MIN_CITED_WAVELENGTH <= value <= MAX_CITED_WAVELENGTH:
                found.append(_line_window(value, match.group(0).strip(), task))
        rest = pattern.sub(" ", rest)
    unique: dict[tuple[float, float], EvidenceWindow] = {}
    for cited in found:
        unique.setdefault((round(cited.lo, 2), round(cited.hi, 2)), cited)
    return list(unique.values())


def _line_window(line: float, name: str, task: Task | None) -> EvidenceWindow:
    if task is not None:
        holding = [w for w in task.windows if w.rest_range[0] <= line <= w.rest_range[1]]
        if holding:
            narrowest = min(holding, key=lambda w: w.rest_range[1] - w.rest_range[0])
            return EvidenceWindow(narrowest.rest_range[0], narrowest.rest_range[1], "cited", name)
    return EvidenceWindow(line - CITED_HALF_WIDTH, line + CITED_HALF_WIDTH, "cited", name)


def merge_windows(windows: Sequence[Window], coverage: Window | None = None) -> list[Window]:
    """The union of ``windows`` as sorted, disjoint ranges, clipped to ``coverage``."""
    ranges = sorted((min(lo, hi), max(lo, hi)) for lo, hi in windows)
    if coverage is not None:
        ranges = [(max(lo, coverage[0]), min(hi, coverage[1])) for lo, hi in ranges]
        ranges = [(lo, hi) for lo, hi in ranges if hi > lo]
    merged: list[Window] = []
    for lo, hi in ranges:
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


# --- the ablated spectrum -----------------------------------------------------------------------


def ablate_spectrum(spectrum: Spectrum, windows: Sequence[Window], *, seed: int) -> Spectrum:
    """A copy of ``spectrum`` whose good pixels inside ``windows`` (tool frame) are replaced by
    the continuum plus noise of the data's own level (module docstring); nothing else changes."""
    rng = np.random.default_rng(seed)
    wavelength = spectrum.wavelength / (1.0 + tool_redshift(spectrum))
    flux = np.array(spectrum.flux, dtype=np.float64, copy=True)
    good = _good(spectrum)
    merged = merge_windows(windows)
    inside = np.zeros(flux.size, dtype=bool)
    for lo, hi in merged:
        inside |= (wavelength >= lo) & (wavelength <= hi)
    outside = good & ~inside
    for lo, hi in merged:
        pixels = np.flatnonzero(good & (wavelength >= lo) & (wavelength <= hi))
        if pixels.size == 0:
            continue
        flank = max(FLANK_ANGSTROM, 0.5 * (hi - lo))
        left = _flank(np.flatnonzero(outside & (wavelength < lo)), wavelength, lo - flank, "left")
        right = _flank(np.flatnonzero(outside & (wavelength > hi)), wavelength, hi + flank, "right")
        continuum = _continuum(wavelength, spectrum.flux, left, right, pixels, outside)
        sigma = _sigma(spectrum, pixels, left, right, outside)
        flux[pixels] = continuum + sigma * rng.standard_normal(pixels.size)
    return replace(
        spectrum,
        flux=flux,
        mask=None if spectrum.mask is None else spectrum.mask.copy(),
        ivar=None if spectrum.ivar is None else spectrum.ivar.copy(),
        meta=dict(spectrum.meta),
    )


def _flank(candidates: np.ndarray, wavelength: np.ndarray, edge: float, side: str) -> np.ndarray:
    """The flank pixels: those within ``edge``, or the FLANK_PIXELS nearest when fewer."""
    if candidates.size == 0:
        return candidates
    if side == "left":
        within = candidates[wavelength[candidates] >= edge]
        return within if within.size >= FLANK_PIXELS else candidates[-FLANK_PIXELS:]
    within = candidates[wavelength[candidates] <= edge]
    return within if within.size >= FLANK_PIXELS else candidates[:FLANK_PIXELS]


def _continuum(
    wavelength: np.ndarray,
    flux: np.ndarray,
    left: np.ndarray,
    right: np.ndarray,
    pixels: np.ndarray,
    outside: np.ndarray,
) -> np.ndarray:
    points = [
        (float(np.median(wavelength[side])), float(np.median(flux[side])))
        for side in (left, right)
        if side.size
    ]
    if not points:  # no good pixel outside the evidence at all
        level = float(np.median(flux[outside])) if outside.any() else float(np.median(flux[pixels]))
        return np.full(pixels.size, level)
    if len(points) == 1 or points[1][0] <= points[0][0]:
        return np.full(pixels.size, points[0][1])
    (x0, y0), (x1, y1) = points
    return y0 + (y1 - y0) * (wavelength[pixels] - x0) / (x1 - x0)


def _sigma(
    spectrum: Spectrum,
    pixels: np.ndarray,
    left: np.ndarray,
    right: np.ndarray,
    outside: np.ndarray,
) -> np.ndarray:
    flank_sigma = _difference_sigma(spectrum.flux, [left, right])
    if flank_sigma is None:
        flank_sigma = _difference_sigma(spectrum.flux, [np.flatnonzero(outside)]) or 0.0
    sigma = np.full(pixels.size, flank_sigma)
    if spectrum.ivar is not None:
        ivar = spectrum.ivar[pixels]
        known = np.isfinite(ivar) & (ivar > 0)
        sigma[known] = 1.0 / np.sqrt(ivar[known])
    return sigma


def _difference_sigma(flux: np.ndarray, sides: Sequence[np.ndarray]) -> float | None:
    """1.4826 MAD / sqrt(2) of first differences within each side (a slope does not count)."""
    steps = [np.diff(flux[side]) for side in sides if side.size >= 3]
    if not steps:
        return None
    joined = np.concatenate(steps)
    return float(1.4826 * np.median(np.abs(joined - np.median(joined))) / math.sqrt(2.0))


# --- the control --------------------------------------------------------------------------------


def control_windows(evidence: Sequence[Window], coverage: Window, *, seed: int) -> list[Window]:
    """Windows of the evidence's widths at random places in ``coverage``, overlapping neither
    the evidence nor each other; a width that finds no place in CONTROL_TRIES is left out."""
    rng = np.random.default_rng(seed)
    taken = list(evidence)
    placed: list[Window] = []
    for lo, hi in sorted(evidence, key=lambda w: w[0] - w[1]):  # widest first
        width = hi - lo
        room = coverage[1] - coverage[0] - width
        if room <= 0:
            continue
        for _ in range(CONTROL_TRIES):
            start = coverage[0] + float(rng.uniform(0.0, room))
            candidate = (start, start + width)
            if all(candidate[1] <= a or candidate[0] >= b for a, b in taken):
                placed.append(candidate)
                taken.append(candidate)
                break
    return sorted(placed)


# --- re-running ---------------------------------------------------------------------------------


def restarting(policy: Any) -> Callable[[], Inspector]:
    """``make_policy`` for one loaded policy: the same object for every episode, its seeded
    sampling restarted first when it keeps a stream (``restart_sampling``), so a model's weights
    load once and each episode samples as the first would."""

    def make() -> Inspector:
        restart = getattr(policy, "restart_sampling", None)
        if callable(restart):
            restart()
        return cast(Inspector, policy)

    return make


def outcome_of(trajectory: Trajectory) -> Outcome:
    prediction = trajectory.answer.prediction if trajectory.answer is not None else None
    return Outcome(prediction, trajectory_confidence(trajectory) if prediction else None)


def ablate_verdict(
    spectrum: Spectrum,
    task: Task,
    trajectory: Trajectory,
    make_policy: Callable[[], Inspector],
    *,
    seed: int,
    max_tool_calls: int = parsing.DEFAULT_MAX_TOOL_CALLS,
    meta: dict[str, Any] | None = None,
    confident_at: float = CONFIDENT,
    run_control: bool = True,
) -> AblationResult:
    """Mask the trajectory's evidence, re-run the policy on the original, the ablated and the
    control spectrum (each with a fresh policy from ``make_policy``), and compare.

    ``seed`` fixes the noise put into the windows and where the control windows go; the
    policy's own sampling seed is part of what ``make_policy`` builds. Same inputs, same seed:
    same result."""
    coverage = good_coverage(spectrum)
    windows = evidence_windows(trajectory, task=task, coverage=coverage)
    masked = merge_windows([(w.lo, w.hi) for w in windows], coverage)
    span = max(coverage[1] - coverage[0], 1e-9)
    result = AblationResult(
        windows=windows,
        masked=masked,
        control=[],
        masked_fraction=sum(hi - lo for lo, hi in masked) / span,
        seed=seed,
        stored=outcome_of(trajectory),
        confident_at=confident_at,
    )
    if not masked:
        result.reason = "the trajectory neither zoomed into a window nor cited a line"
        return result
    episode_meta = {**(meta or {}), "evidence_ablation_seed": seed}

    def rerun(shown: Spectrum, variant: str) -> Outcome:
        done = inspect(
            shown,
            task,
            make_policy(),
            max_tool_calls=max_tool_calls,
            meta={**episode_meta, "evidence_ablation": variant},
        )
        if done.stop_reason == "policy_error":
            raise RuntimeError(f"the policy failed on the {variant} spectrum: {done.errors}")
        return outcome_of(done)

    result.before = rerun(spectrum, "baseline")
    if result.before.prediction != result.stored.prediction:
        result.notes.append(
            f"the re-run answered {result.before.prediction} where the stored trajectory "
            f"answered {result.stored.prediction}: the policy does not reproduce"
        )
    result.after = rerun(ablate_spectrum(spectrum, masked, seed=seed), "evidence")
    if result.flipped and len(masked) > 1:
        for window in masked[:MAX_ATTRIBUTED]:
            alone = rerun(ablate_spectrum(spectrum, [window], seed=seed), "one window")
            if _changed_answer(result.before, alone):
                result.decisive.append(window)
    elif result.flipped:
        result.decisive = list(masked)
    if run_control:
        result.control = control_windows(masked, coverage, seed=seed + 1)
        if result.control:
            ablated = ablate_spectrum(spectrum, result.control, seed=seed + 2)
            result.control_outcome = rerun(ablated, "control")
        else:
            result.notes.append("no room for control windows clear of the evidence")
    return result


@dataclass
class AblationSummary:
    """Counts over many ablations: how often answers flip with their own evidence masked versus
    random windows of the same widths, and how many confident answers are insensitive."""

    n: int = 0  # ablations that ran
    flipped: int = 0
    control_ran: int = 0
    control_flipped: int = 0
    confident: int = 0
    confident_flipped: int = 0
    confident_control_flipped: int = 0
    confident_control_ran: int = 0
    insensitive: int = 0
    no_evidence: int = 0

    def add(self, result: AblationResult) -> None:
        if not result.ran:
            self.no_evidence += 1
            return
        self.n += 1
        self.flipped += result.flipped
        ran_control = result.control_outcome is not None
        self.control_ran += ran_control
        self.control_flipped += result.control_flipped
        if result.confident:
            self.confident += 1
            self.confident_flipped += result.flipped
            self.confident_control_ran += ran_control
            self.confident_control_flipped += result.control_flipped
            self.insensitive += result.insensitive

    def as_dict(self) -> dict[str, int | float | None]:
        def rate(part: int, whole: int) -> float | None:
            return round(part / whole, 4) if whole else None

        return {
            **{name: getattr(self, name) for name in self.__dataclass_fields__},
            "flip_rate": rate(self.flipped, self.n),
            "control_flip_rate": rate(self.control_flipped, self.control_ran),
            "confident_flip_rate": rate(self.confident_flipped, self.confident),
            "confident_control_flip_rate": rate(
                self.confident_control_flipped, self.confident_control_ran
            ),
            "confident_survival_rate": rate(
                self.confident - self.confident_flipped, self.confident
            ),
            "insensitive_rate": rate(self.insensitive, self.confident),
        }
