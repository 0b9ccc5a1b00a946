"""Findings and assessments, and the small helpers scorers share to weigh and word them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeGuard

from agent import measure
from agent.inspection_tasks import Task
from agent.measure import Measurement
from agent.policies.rule_based.view import STRONG, SpectrumView, _ramp


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


def _emits(
    measurement: Measurement | None, sigma: float = STRONG, ew: float = 0.0
) -> TypeGuard[Measurement]:
    return (
        measurement is not None
        and measurement.ew is not None
        and measurement.ew <= -ew
        and _sig(measurement) <= -sigma
    )


def _absorbs(
    measurement: Measurement | None, sigma: float = STRONG, ew: float = 0.0
) -> TypeGuard[Measurement]:
    return (
        measurement is not None
        and measurement.ew is not None
        and measurement.ew >= ew
        and _sig(measurement) >= sigma
    )


def _band_present(
    measurement: Measurement | None, depth: float, sigma: float = STRONG
) -> TypeGuard[Measurement]:
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
