"""WD: white dwarfs (DA Balmer profiles, non-DA and featureless spectra)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agent.inspection_tasks import Task
from agent.measure import Measurement
from agent.policies.rule_based.emission import _ha_core
from agent.policies.rule_based.findings import (
    Assessment,
    _absorbs,
    _band_present,
    _emits,
    _fmt_colour,
    _fmt_line,
    _sig,
    _width_trust,
    window_for,
)
from agent.policies.rule_based.molecular import SWAN_HEADS
from agent.policies.rule_based.view import STRONG, SpectrumView, _balmer, _ramp


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


# Equivalent width over a window wider than any Balmer profile is flux-conserving under the
# line-spread function and the pixel grid, so it survives sampling that hides the line width.
# DA white dwarfs of ~10 000-25 000 K have H-beta and H-gamma EWs of ~30-90 Å with wings over
# 100-300 Å (Koester & Chanmugam 1990, Rep. Prog. Phys. 53, 837; Bergeron, Saffer & Liebert
# 1992, ApJ 394, 228); no normal star exceeds ~20-25 Å, the maximum being reached at A1-A3 V
# (Jaschek & Jaschek 1987, "The Classification of Stars", ch. 8 and fig. 8.4). On the
# development part the same windows give at most 23.5 Å for A stars (an A2) and 25.5 Å for a
# B9 III (median A 15.4 Å, B 9.3 Å).
WIDE_BALMER = (
    ("H-beta", 4862.7, 140.0, ((4560.0, 4700.0), (5030.0, 5230.0))),
    ("H-gamma", 4341.7, 100.0, ((4170.0, 4235.0), (4450.0, 4560.0))),
)
NORMAL_STAR_MAX_EW = 26.0  # just above the development part's largest A/B star value
DA_EW = 34.0  # from here a DA is the only reading left (ramp between the two)
# the DA line-width criterion needs pixels no wider than a third of the ~60 Å feature, as
# ``scope.DECISIVE`` for WD; on coarser pixels only the equivalent width is read
WIDTH_MAX_PIXEL = 20.0
HOT_COLOUR = 1.5  # F(4000-4500)/F(6000-6500) of DA white dwarfs; cool stars' bands are below


def wide_balmer(view: SpectrumView) -> list[Measurement]:
    """H-beta and H-gamma integrated over their whole white-dwarf profiles (those covered)."""
    out = []
    for name, centre, half, sides in WIDE_BALMER:
        measured = view.line(f"{name} (±{half:.0f} Å)", centre, half, list(sides))
        if measured is not None and measured.ew is not None:
            out.append(measured)
    return out


def width_unreadable(view: SpectrumView) -> float | None:
    """The pixel (Å) at H-beta when it is too coarse for the DA width criterion, else None."""
    pixel = view.pixel_width((4780.0, 4945.0))
    return pixel if pixel > WIDTH_MAX_PIXEL else None


def _score_coarse_balmer(
    result: Assessment, view: SpectrumView, task: Task, colour: float | None, pixel: float
) -> None:
    """On pixels too coarse for the line widths: the Balmer equivalent width decides which side
    the answer is on (the coverage note keeps it from being confident)."""
    lines = [m for m in wide_balmer(view) if _sig(m) >= 4.0]
    if not lines:
        return
    text = "; ".join(f"{m.name} EW {m.ew:+.1f} Å" for m in lines)
    weakest = min(m.ew or 0.0 for m in lines)
    w_hb = window_for(task, 4862.7, prefer="H-beta")
    if colour is None or colour < HOT_COLOUR:
        return
    if weakest >= NORMAL_STAR_MAX_EW:
        result.add(
            w_hb,
            f"on {pixel:.0f} Å pixels the line widths cannot be read, but the Balmer lines "
            f"integrated over their wings are huge ({text}): beyond any normal star's "
            f"(~{NORMAL_STAR_MAX_EW:.0f} Å at most, A1-A3 V), the size of a DA white dwarf's",
            _ramp(weakest, NORMAL_STAR_MAX_EW, DA_EW, 0.5, 3.5),
        )
    elif weakest >= 3.0:
        result.add(
            w_hb,
            f"on {pixel:.0f} Å pixels the line widths cannot be read, and the Balmer lines "
            f"integrated over their wings ({text}) stay within a normal A/B star's range "
            f"(up to ~{NORMAL_STAR_MAX_EW:.0f} Å), below a DA white dwarf's 30-90 Å",
            _ramp(weakest, 18.0, NORMAL_STAR_MAX_EW, -1.5, 0.0),
            alternative="an A or B star",
        )


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
    coarse = width_unreadable(view)
    if coarse is not None:
        _score_coarse_balmer(result, view, task, colour, coarse)
    if balmer.present():
        _score_da(result, view, task, balmer, coarse)
    else:
        text = "no significant Balmer absorption"
        if balmer.hb is not None:
            text += f" (H-beta {balmer.hb.describe()})"
        result.add(window_for(task, 4862.7, prefer="H-beta"), text)
        _score_non_da(result, view, task, colour, balmer)
    return result


def _score_da(
    result: Assessment,
    view: SpectrumView,
    task: Task,
    balmer: _Balmer,
    coarse: float | None = None,
) -> None:
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
    if coarse is not None:
        # a width read on pixels wider than a third of the line is the pixels' width
        result.add(
            w_hb,
            f"Balmer absorption ({described}): median FWHM {fwhm:.0f} km/s, not readable on "
            f"{coarse:.0f} Å pixels (the equivalent width is read instead)",
        )
        return
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


# the lines whose absence makes a DC: a hot star's Balmer lines (H-delta, H-beta) and a cool
# star's metal lines (Ca II K, Mg b), ~5-15 Å wide, so pixels wider than a third of 15 Å
# (Nyquist, as ``scope.MAX_PIXEL_SHARE``) cannot show them missing; at least one window of each
# kind must be readable
DC_LINE_WINDOWS = {
    "Balmer": ((4090.0, 4115.0), (4850.0, 4875.0)),
    "metal": ((3920.0, 3950.0), (5165.0, 5190.0)),
}
DC_MAX_PIXEL = 5.0
COVERED = 0.8  # as ``scope.coverage``


def _unreadable_line_windows(view: SpectrumView) -> str:
    """Which kind of DC_LINE_WINDOWS cannot show its lines, and why ('' when each kind has a
    readable window)."""
    problems = []
    for kind, windows in DC_LINE_WINDOWS.items():
        reasons = []
        for low, high in windows:
            if view.covered_fraction((low, high)) < COVERED:
                reasons.append(f"{low:.0f}-{high:.0f} Å not covered")
                continue
            pixel = view.pixel_width((low, high))
            if pixel <= DC_MAX_PIXEL:
                break
            reasons.append(f"{low:.0f}-{high:.0f} Å on {pixel:.0f} Å pixels (> {DC_MAX_PIXEL:g})")
        else:
            problems.append(f"no {kind}-line window is readable (" + "; ".join(reasons) + ")")
    return "; ".join(problems)


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
    unreadable = _unreadable_line_windows(view)
    if hot_enough and unreadable:
        # an absent line is evidence only where the line could have been seen
        result.add(
            None,
            text + f", but {unreadable}: the lines a normal star shows there cannot be "
            "measured, so their absence is no evidence of a DC white dwarf",
        )
    elif hot_enough:
        result.add(None, text + ": a DC white dwarf", _ramp(snr, 6.0, 15.0, 1.0, 3.0))
    else:
        result.add(None, text + " but too red for most DC white dwarfs", -0.5)
