"""The generic scorer for tasks added without code, and the scorer for each task code."""

from __future__ import annotations

import math

from agent import measure
from agent.inspection_tasks import DiagnosticWindow, Task
from agent.measure import Measurement
from agent.policies.rule_based.emission import score_cv
from agent.policies.rule_based.findings import Assessment, Scorer, _fmt_colour, _fmt_line, _sig
from agent.policies.rule_based.hot_stars import score_a, score_b, score_o
from agent.policies.rule_based.molecular import score_cs, score_mg, score_ss
from agent.policies.rule_based.view import _BLUE_SHADED, SpectrumView
from agent.policies.rule_based.white_dwarfs import score_wd


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
