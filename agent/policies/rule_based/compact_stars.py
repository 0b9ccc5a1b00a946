"""Compact helium stars beside normal B stars: hot subdwarfs (sdO/sdB, log g 5-6) and DO/DB white
dwarfs (log g ~8) share a hot continuum and helium lines with B stars, but not the strength of
those lines (issue 36). The library of normal stars holds none of them."""

from __future__ import annotations

from agent.inspection_tasks import Task
from agent.measure import Measurement
from agent.policies.rule_based.findings import (
    Assessment,
    _absorbs,
    _instrumental_angstrom,
    _narrow_line,
    _width_trust,
    window_for,
)
from agent.policies.rule_based.view import SpectrumView, _ramp

# The B task's normal B stars against hot subdwarfs (sdO/sdB, log g 5-6) and DO/DB white dwarfs
# (log g ~8), whose spectra share a hot continuum and helium.
# He II 4686 absorption fades through O9.5-B0 and is gone by B0.5 (Walborn & Fitzpatrick 1990;
# Gray & Corbally 2009, ch. 3); sdO stars show it at 0.5-2 Å beside weak or no He I (Drilling et
# al. 2013, A&A 551, A31: the sdO classes are set by He II 4686 / He I 4471 and the H/He lines).
# Dev part: every B star 0.39 Å or less (the Pickles B0V composite), mid and late B below 0.1 Å.
B_HE2_4686_EW = (0.4, 0.7)
# He I 4471 measured whole, over ±40 Å: in B stars at most ~1.5 Å (the B2-B3 maximum, Didelon
# 1982), ~2 Å with Mg II 4481 and the metal lines the window takes in (dev part: at most 2.4 Å,
# B3V); the Stark-broadened He I of a DB white dwarf is tens of Å wide and 5-20 Å strong (Sion
# et al. 1983, ApJ 269, 253: DB = He I lines only; Koester & Kepler 2015). Only where the
# line-spread function leaves the line inside the window.
B_HE1_WIDE_EW = (3.0, 4.5)
B_HE1_WIDE_MAX_LSF = 12.0
# Weak but broad Balmer lines: the sdO signature (Drilling et al. 2013: shallow, Stark-broadened
# H lines beside He II; Gray & Corbally 2009, ch. 3: in normal OB stars weak Balmer lines come
# with low gravity, hence narrow). The complement of ``hot_stars._subdwarf_or_wd``, which reads
# H-beta of 6 Å and more. Dev part: B stars with H-beta under 6 Å have the narrowest of
# H-beta/gamma/delta at 1080 km/s or less (the Pickles B1V composite; MILES and STELIB early B
# and supergiants 250-650 km/s), one Pickles B5II composite aside (3900 km/s, at R ~ 500).
WEAK_BALMER_EW = 6.0
MIN_COLOUR = 1.2  # F(4000-4500)/F(6000-6500): hot_stars.MK_MIN_COLOUR, below it no OB star
WEAK_BALMER_FWHM = (1100.0, 1400.0)
BALMER = (
    ("H-beta", 4862.7, ((4780.0, 4815.0), (4910.0, 4945.0))),
    ("H-gamma", 4341.7, ((4280.0, 4298.0), (4385.0, 4400.0))),
    ("H-delta", 4102.9, ((4040.0, 4058.0), (4150.0, 4168.0))),
)


def whole_he1_4471(view: SpectrumView) -> Measurement | None:
    """He I 4471 integrated over ±40 Å against flanks 45-65 Å away (clear of He I 4388 and He II
    4542): the whole Stark-broadened line of a compact helium star, where the ±7 Å window of
    ``_narrow_line`` sees only its core against flanks inside its own wings. None where the
    line-spread function is too wide for the window to hold the line."""
    if _instrumental_angstrom(view, 4472.7) > B_HE1_WIDE_MAX_LSF:
        return None
    return view.line("He I 4471 (whole)", 4472.7, 40.0, [(4405.0, 4425.0), (4518.0, 4536.0)])


def compact_helium(result: Assessment, view: SpectrumView, task: Task) -> None:
    """Helium no normal B star shows: He II 4686 absorption stronger than at B0 (an O star or a
    hot subdwarf), or a He I 4471 stronger than the B2 maximum (the Stark-broadened line of a
    DB white dwarf or helium-rich subdwarf). Only on a hot continuum: in cool stars metal lines
    and bands fill these windows."""
    colour = view.colour()
    if colour is not None and colour < MIN_COLOUR:
        return
    he2 = _narrow_line(view, "He II 4687", 4687.0)
    if _absorbs(he2, 5.0, B_HE2_4686_EW[0]) and he2 is not None and he2.ew is not None:
        result.add(
            window_for(task, 4687.0, prefer="He II"),
            f"He II 4686 absorption ({he2.describe()}) stronger than at B0 (at most "
            f"~{B_HE2_4686_EW[0]:g} Å, gone by B0.5): an O star or a hot subdwarf",
            _ramp(he2.ew, B_HE2_4686_EW[0], B_HE2_4686_EW[1], 0.0, -3.0),
            alternative="an O star or hot subdwarf (sdO)",
        )
    whole = whole_he1_4471(view)
    if _absorbs(whole, 5.0, B_HE1_WIDE_EW[0]) and whole is not None and whole.ew is not None:
        result.add(
            window_for(task, 4472.7, prefer="He I"),
            f"He I 4471 over ±40 Å: {whole.describe()}, stronger than in any normal B star "
            f"(at most ~2 Å with its blends): the Stark-broadened helium of a DB white dwarf or "
            "helium-rich subdwarf",
            _ramp(whole.ew, B_HE1_WIDE_EW[0], B_HE1_WIDE_EW[1], 0.0, -3.0),
            alternative="a DB white dwarf or helium-rich subdwarf",
        )
    _weak_broad_balmer(result, view, task)


def _weak_broad_balmer(result: Assessment, view: SpectrumView, task: Task) -> None:
    """H-beta weaker than WEAK_BALMER_EW with H-beta, H-gamma and H-delta all broad (the
    narrowest of them counts): the high gravity of a hot subdwarf, where a normal B star's weak
    Balmer lines are a supergiant's, narrow."""
    lines = [view.line(name, centre, 40.0, list(sides)) for name, centre, sides in BALMER]
    measured = [m for m in lines if _absorbs(m, 5.0, 0.5) and m.fwhm_kms]
    hb = lines[0]
    if len(measured) < len(BALMER) or hb is None or hb.ew is None or hb.ew >= WEAK_BALMER_EW:
        return
    narrowest = min(m.fwhm_kms or 0.0 for m in measured)
    trust = _width_trust(view, 4862.7, WEAK_BALMER_FWHM[0])
    if narrowest < WEAK_BALMER_FWHM[0] or trust <= 0:
        return
    widths = ", ".join(f"{m.name} {m.fwhm_kms:.0f}" for m in measured)
    result.add(
        window_for(task, 4862.7, prefer="H-beta"),
        f"weak Balmer lines (H-beta EW {hb.ew:+.1f} Å) that are broad (FWHM {widths} km/s): "
        "the gravity of a hot subdwarf; a normal B star's weak Balmer lines are a "
        "supergiant's, narrow",
        _ramp(narrowest, WEAK_BALMER_FWHM[0], WEAK_BALMER_FWHM[1], 0.0, -2.5) * trust,
        alternative="a hot subdwarf (sdO/sdB)",
    )
