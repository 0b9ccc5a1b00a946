"""O, B and A stars: He II / He I lines, Balmer wings and Ca K."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agent import measure
from agent.inspection_tasks import Task
from agent.measure import Measurement
from agent.policies.rule_based.compact_stars import compact_helium
from agent.policies.rule_based.findings import (
    Assessment,
    _absorbs,
    _emits,
    _fmt_colour,
    _fmt_line,
    _instrumental_angstrom,
    _narrow_line,
    _sig,
    _trust,
    _width_trust,
    window_for,
)
from agent.policies.rule_based.view import STRONG, SpectrumView, _ramp

HE_II_LINES = (("He II 4542", 4542.9), ("He II 4687", 4687.0), ("He II 5412", 5413.0))
HE_I_LINES = (("He I 4026", 4027.3), ("He I 4471", 4472.7), ("He I 4922", 4923.3))
# The MK spectral-type criterion of the O stars, He II 4542 / He I 4471 (Morgan, Keenan &
# Kellman 1943; log W' = log EW(4471)/EW(4542) of Conti & Alschuler 1971: 0 at O7), fitted
# together with the lines that blend with them at low resolution: Mg II 4481 beside He I 4471
# and the Si III 4553/4568/4575 triplet beside He II 4542 (vacuum Å). At R ~ 500 (FWHM ~9 Å)
# they are 10-11 Å apart, so a window integrating one line takes in a wing of the other.
MK_LINES = (
    ("He I 4471", 4472.7),
    ("Mg II 4481", 4482.4),
    ("He II 4542", 4542.9),
    ("Si III 4553", 4553.9),
    ("Si III 4568", 4569.1),
    ("Si III 4575", 4576.0),
)
MK_REGION = (4448.0, 4600.0)  # clear of the 4430 interstellar band, short of He II 4687
# intrinsic line widths tried (rotation, Stark broadening, a coarser line-spread function than
# the one recorded); the fit keeps the one of least chi2
MK_INTRINSIC_KMS = (0.0, 200.0, 400.0, 600.0, 800.0, 1000.0, 1200.0)
# He II 4542 is a third or more of He I 4471 at O9 and earlier, weak at B0 and gone by B0.5
# (O9.7: He II 4542 only as strong as Si III 4552; Walborn & Fitzpatrick 1990, Sota et al.
# 2011): an O type needs He II 4542 clearly above a fifth of He I 4471.
B0_RATIO = 0.2
O_HE2_4542_EW = (0.1, 0.3)  # Å: He II 4542 of late O stars (Walborn & Fitzpatrick 1990)
MK_MIN_COLOUR = 1.2  # F(4000-4500)/F(6000-6500) below which no O or early B star is expected
# EW (Å) of the H-beta core (±25 Å) below which a low core fraction says nothing about gravity:
# the Balmer lines of subdwarfs and white dwarfs are deep as well as broad
SUBDWARF_CORE_EW = 3.0
# A supergiants (dev part: A0-A5 Ia/Ib): H-beta FWHM 240-480 km/s and EW 1.5-6 Å, Ca II K
# 1.3-3 Å; dwarfs and giants of the type 900-1300 km/s and over 10 Å
A_SUPERGIANT_FWHM = 500.0
A_SUPERGIANT_BALMER_EW = 7.0
A_SUPERGIANT_K_EW = (1.0, 3.0)
O_I_SUPERGIANT_EW = 1.5  # O I 7774 triplet: A-F dwarfs and giants ~0.3-1.3 Å
A_SUPERGIANT_MG2_EW = 0.2  # dev: A supergiants 0.39-0.54 Å, metal-poor F dwarfs below 0
# The MK criterion of the B/A boundary (Gray & Corbally 2009, ch. 4-5): He I 4471 fades through
# the late B types while Mg II 4481 grows; He I 4471 / Mg II 4481 is ~1 at B8 and ~0 at A0, for
# any luminosity class. The lines are 10 Å apart: read only where the line-spread function is
# at most BA_MAX_LSF Å FWHM, and only from a fit of photospheric widths (a fit wider than
# BA_MAX_FIT_KMS is of an F star's blend forest, not of two lines). Dev part (R >= 1000):
# B5-B8 0.65-2, B9 0.15-0.55, A0-A9 0-0.4 (metal lines at 4471), A Ia 0.2-0.6.
BA_MAX_LSF = 4.0
BA_MAX_FIT_KMS = 800.0
BA_MG2_FLOOR = 0.1  # Å: a weaker Mg II 4481 is noise, not a line to divide by
BA_RATIO_A = (0.45, 0.75)  # He I / Mg II: from an A star's metal blends to a late B star's He I
# A supergiants' Ca II K at A0 is weaker than at A2-A5 (1.3-3 Å): with Mg II 4481 free of
# He I 4471 the K line may be as weak as this (a late B supergiant's K is 0.2-0.6 Å beside
# He I 4471 as strong as Mg II 4481)
A0_SUPERGIANT_K_EW = 0.6
# an A supergiant's metal lines put 0.2-0.6 of Mg II 4481 into the 4471 fit (dev: A2-A5 Ia),
# a B8 supergiant's He I 4471 is as strong as Mg II 4481 (dev: B8 Ib 1.0, B5 Ib 1.9)
BA_SUPERGIANT_RATIO = 0.7
BA_SUPERGIANT_RATIO_A = (BA_SUPERGIANT_RATIO, 1.0)
A_SUPERGIANT_IN_B = -2.5


@dataclass(frozen=True)
class MKRatio:
    """He I 4471 and He II 4542 from one fit of the 4448-4600 Å blends (EWs in Å)."""

    he1: float
    he1_error: float
    he2: float
    he2_error: float
    covariance: float  # of the two EWs
    fwhm_kms: float  # line width of the fit (instrumental and intrinsic)
    mg2: float = 0.0  # Mg II 4481 from the same fit: the B/A criterion beside He I 4471
    mg2_error: float = 0.0
    he1_mg2_covariance: float = 0.0

    @property
    def he1_sig(self) -> float:
        return self.he1 / self.he1_error if self.he1_error > 0 else 0.0

    @property
    def he2_sig(self) -> float:
        return self.he2 / self.he2_error if self.he2_error > 0 else 0.0

    def helium_over_magnesium(self) -> float:
        """How many sigma He I 4471 exceeds Mg II 4481: > 0 in B stars, < 0 from A0 on (the MK
        criterion of the B/A boundary, He I 4471 = Mg II 4481 near B9.5)."""
        variance = self.he1_error**2 + self.mg2_error**2 - 2 * self.he1_mg2_covariance
        return (self.he1 - self.mg2) / math.sqrt(max(variance, 1e-12))

    def helium_to_magnesium(self) -> float:
        """He I 4471 / Mg II 4481 (the Mg II EW floored at BA_MG2_FLOOR)."""
        return self.he1 / max(self.mg2, BA_MG2_FLOOR)

    def excess(self, ratio: float) -> float:
        """How many sigma He II 4542 exceeds ``ratio`` x He I 4471."""
        variance = self.he2_error**2 + (ratio * self.he1_error) ** 2 - 2 * ratio * self.covariance
        return (self.he2 - ratio * self.he1) / math.sqrt(max(variance, 1e-12))

    def describe(self) -> str:
        ratio = f"{self.he2 / self.he1:.2f}" if self.he1_sig >= STRONG else "undefined"
        return (
            f"He II 4542 EW {self.he2:+.2f} ± {self.he2_error:.2f} Å, He I 4471 EW "
            f"{self.he1:+.2f} ± {self.he1_error:.2f} Å (fitted with Mg II 4481 and Si III "
            f"4553-4575, line FWHM {self.fwhm_kms:.0f} km/s), ratio {ratio}"
        )


def _mk_ratio(view: SpectrumView) -> MKRatio | None:
    """He I 4471 and He II 4542 deblended from their neighbours: Gaussians of the line-spread
    FWHM widened by an intrinsic width, the width of the best fit of a few tried."""
    if view.covered_fraction(MK_REGION) < 0.8:
        return None
    names = [name for name, _ in MK_LINES]
    centres = [centre for _, centre in MK_LINES]
    best: tuple[float, measure.Deblended, float] | None = None
    for intrinsic in MK_INTRINSIC_KMS:
        fwhm_kms = [math.hypot(view.instrumental_kms(c), intrinsic) for c in centres]
        fwhm = [c * v / measure.C_KMS for c, v in zip(centres, fwhm_kms, strict=True)]
        try:
            fit = measure.deblend(
                view.wave, view.flux, view.good, view.ivar, MK_REGION, centres, fwhm
            )
        except measure.MeasurementError:
            continue
        if best is None or fit.reduced_chi2 < best[0]:
            best = (fit.reduced_chi2, fit, fwhm_kms[names.index("He II 4542")])
    if best is None:
        return None
    _, fit, width = best
    i, j, k = names.index("He I 4471"), names.index("He II 4542"), names.index("Mg II 4481")
    return MKRatio(
        fit.ews[i],
        fit.error(i),
        fit.ews[j],
        fit.error(j),
        fit.covariance[i][j],
        width,
        fit.ews[k],
        fit.error(k),
        fit.covariance[i][k],
    )


def b_a_ratio(view: SpectrumView, mk: MKRatio | None) -> tuple[float | None, str]:
    """He I 4471 / Mg II 4481, the MK temperature criterion of B8-A0 (None where it cannot be
    read: not covered, lines blended by the line-spread function, no photospheric fit, neither
    line measured) and a sentence saying which."""
    lsf = _instrumental_angstrom(view, 4476.0)
    if mk is None:
        return None, "He I 4471 / Mg II 4481 not measurable (4448-4600 Å not covered)"
    if lsf > BA_MAX_LSF:
        return None, (
            f"He I 4471 / Mg II 4481 not read: the lines are 10 Å apart and the resolution "
            f"(FWHM {lsf:.1f} Å) blends them"
        )
    if mk.fwhm_kms > BA_MAX_FIT_KMS:
        return None, (
            f"He I 4471 / Mg II 4481 not read: the fit needs lines {mk.fwhm_kms:.0f} km/s wide, "
            "a blend of many lines rather than two"
        )
    if mk.mg2 < STRONG * mk.mg2_error and mk.he1 < STRONG * mk.he1_error:
        return None, "He I 4471 / Mg II 4481 not read: neither line is clearly present"
    ratio = mk.helium_to_magnesium()
    return ratio, (
        f"He I 4471 / Mg II 4481 = {ratio:.2f} (EW {mk.he1:+.2f} ± {mk.he1_error:.2f} Å / "
        f"{mk.mg2:+.2f} ± {mk.mg2_error:.2f} Å; MK criterion: ~1 at B8, ~0 from A0 on)"
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
    # a supergiant's or O star's weak H-beta core over a wide window also gives a low fraction:
    # the wings only speak for high gravity beside the deep core of a subdwarf or white dwarf
    deep_core = core.ew >= SUBDWARF_CORE_EW
    if fwhm >= max_fwhm or (fraction <= 0.45 and deep_core and not core_spread):
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


def _he2_4542(view: SpectrumView, mk: MKRatio | None) -> tuple[float, float, str]:
    """EW, significance and wording of He II 4542: from the fit with its blends where it ran,
    otherwise from its window."""
    if mk is not None:
        return mk.he2, mk.he2_sig, f"EW {mk.he2:+.2f} Å ({mk.he2_sig:+.1f}σ), fitted with Si III"
    line = _narrow_line(view, *HE_II_LINES[0])
    if line is None or line.ew is None:
        return 0.0, 0.0, "not covered"
    return line.ew, _sig(line), line.describe()


def _o_type(view: SpectrumView, colour: float | None) -> tuple[float | None, str, MKRatio | None]:
    """The MK criterion: how far He II 4542 exceeds the B0 limit of B0_RATIO x He I 4471, in
    sigma (None: not measurable), a sentence, and the fit. Only on a continuum blue enough for
    an OB star: in cooler stars metal lines and bands fill the region."""
    if colour is not None and colour < MK_MIN_COLOUR:
        return None, "He II 4542 / He I 4471 not evaluated on a continuum this red", None
    mk = _mk_ratio(view)
    if mk is None:
        return None, "He II 4542 / He I 4471 not measurable (4448-4600 Å not covered)", None
    if mk.he1_sig < STRONG:
        if mk.he2_sig >= STRONG:
            text = f"He II 4542 without clear He I 4471, as at O7 and earlier: {mk.describe()}"
            return math.inf, text, mk
        return None, f"neither He II 4542 nor He I 4471 clearly present: {mk.describe()}", mk
    excess = mk.excess(B0_RATIO)
    verdict = (
        "above the B0 limit: an O type"
        if excess >= STRONG
        else "not clearly above the B0 limit: B0 or later, or a late O type the data cannot "
        "tell from B0"
    )
    text = (
        f"He II 4542 / He I 4471 (MK criterion; He II 4542 is weak at B0, gone by B0.5): "
        f"{mk.describe()}; He II 4542 exceeds {B0_RATIO:g} x He I 4471 by {excess:+.1f}σ, "
        f"{verdict}"
    )
    return excess, text, mk


def score_o(view: SpectrumView, task: Task) -> Assessment:
    """He II absorption with He II 4542 above the B0 limit of its MK ratio to He I 4471, on a hot
    continuum with main-sequence Balmer lines; against B stars (He I only, or He II 4542 weak
    beside He I 4471), subdwarfs and DO white dwarfs (broad lines), A stars.

    He II absorption (+2.5) and the hot continuum (+0.5) against the bias (-1.5) reach +1.5
    at most, below the 0.9 confidence of an uncalibrated or temperature-scaled score (logit 0.9
    = 2.2), since He II 4687/5412 persist into B0-B0.5: only the MK criterion (+1.0, and the Of
    emission it enables, +1.0) carries an O answer past it. Where it cannot be measured the
    answer stays below 0.9."""
    result = Assessment(bias=-1.5)
    colour = view.colour()
    result.add(None, _fmt_colour(colour))
    w_he2 = window_for(task, 4542.9, prefer="He II")
    he2, he2_sig, he2_text = _helium(view, HE_II_LINES)
    state = "present" if he2_sig >= STRONG else "not detected"
    result.add(
        w_he2,
        f"He II absorption {state} (hotter than B0.5; 4687 and 5412 persist into B0-B0.5, so "
        f"only the ratio below tells an O type): mean EW {he2:+.2f} Å ({he2_sig:+.1f}σ) over "
        f"4542/4687/5412 ({he2_text})",
        _ramp(he2_sig, 1.5, 4.0, -2.5, 2.5),
    )
    excess, mk_text, _ = _o_type(view, colour)
    result.add(
        window_for(task, 4472.7, prefer="He I") or w_he2,
        mk_text,
        0.0 if excess is None else _ramp(excess, 1.0, STRONG, -2.5, 1.0),
        alternative="a B star" if excess is not None and excess < STRONG else None,
    )
    he2_4686 = view.line("He II 4687 emission", 4687.0, 9.0, [(4660.0, 4672.0), (4700.0, 4715.0)])
    if _emits(he2_4686, 4.0, 0.3):
        assert he2_4686 is not None
        # a secondary O-type feature (Of): it counts beside an O-type absorption spectrum only,
        # B supergiants' winds fill in 4687 too
        o_type = excess is not None and excess >= STRONG
        result.add(
            window_for(task, 4687.0),
            f"He II 4687 in emission ({he2_4686.describe()}), as in Of stars"
            + ("" if o_type else ", but without the O-type He II 4542: not counted"),
            1.0 if o_type else 0.0,
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
    # (dev part: B8 0.2-0.36 Å, B9 and A0 0.04-0.19 Å over the three windows)
    he1_weight = _ramp(he1, 0.12, 0.3, -0.5, 2.5)
    if he1_weight > 0:
        he1_weight *= _trust(he1_sig)
        if colour is not None and colour < MK_MIN_COLOUR:
            he1_weight = 0.0  # on a cool continuum metal lines and bands fill the He I windows
        if not _blue_helium(view):
            he1_weight = 0.0  # He I 4922 alone sits on Fe II 4924, strong in A-G stars
    result.add(
        w_he1,
        f"He I absorption {state}: mean EW {he1:+.2f} Å ({he1_sig:+.1f}σ) over 4026/4471/4922 "
        f"({he1_text})",
        he1_weight if he1_text != "not covered" else 0.0,
    )
    # He II 4687/5412 persist into B0-B0.5: only He II 4542 above the MK B0 limit marks an O star
    excess, mk_text, mk = _o_type(view, colour)
    he2, he2_sig, he2_text = _he2_4542(view, mk)
    hot = colour is None or colour >= MK_MIN_COLOUR
    if excess is None and hot and he2_sig >= 4.0 and he2 >= 0.2:
        excess, mk_text = math.inf, f"He II 4542 ({he2_text}) without a measurable He I 4471"
    if excess is not None and excess > 1.0:
        # however significant, He II 4542 of a tenth of an Å is no O star's (0.3-1 Å; ~0.2 Å
        # at O9.7, where it matches Si III 4552): below that the ratio rests on a blend
        strength = _ramp(he2, O_HE2_4542_EW[0], O_HE2_4542_EW[1], 0.3, 1.0)
        result.add(
            window_for(task, 4542.9, prefer="He II"),
            f"{mk_text}: marks an O star rather than a B star"
            + (f" (He II 4542 EW {he2:+.2f} Å is weak for one)" if strength < 1.0 else ""),
            _ramp(excess, 1.0, STRONG, 0.0, -3.0) * strength,
            alternative="an O star",
        )
    cak = _ca_k(view)
    if cak is not None and cak.ew is not None:
        strong = cak.ew >= 1.0 and _sig(cak) >= STRONG
        result.add(
            window_for(task, 3934.8),
            f"Ca II K: {cak.describe()}"
            + (", strong as in A and later stars" if strong else ", weak as in B stars"),
            # late B stars reach 0.6 Å with interstellar K; A0 stars 0.4-1.4 Å (dev part)
            _ramp(cak.ew, 0.5, 1.0, 0.5, -2.5) if _sig(cak) >= 2.0 else 0.5,
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
    ratio, ratio_text = b_a_ratio(view, mk)
    # stated, not weighed: He I 4471 beside Mg II 4481 is already in the He I mean above, and
    # on the development part B9 (0.15-0.55) and A0 (0-0.4) overlap in the ratio
    result.add(w_he1, ratio_text)
    a_type_supergiant = (
        ratio is not None and ratio < BA_SUPERGIANT_RATIO and a_supergiant(view, hb, cak, mk)
    )
    if a_type_supergiant:
        result.add(
            window_for(task, 4862.7),
            "narrow, weak Balmer lines beside an A-type Ca II K and Mg II 4481 without He I "
            "4471: an A supergiant, whose weak Balmer lines and metal lines in the He I windows "
            "are luminosity, not a B star's temperature",
            A_SUPERGIANT_IN_B,
            alternative="an A supergiant",
        )
    _weak_balmer(result, view, task, hb, he1_sig, he2_sig)
    if (
        hb is not None
        and hb.ew is not None
        and colour is not None
        and colour >= 2.4
        and not a_type_supergiant
        # an H-beta in emission or filled in (a DB's He I 4713/4922 in the flanks give
        # LDS 749B -2.6 Å) is no weakened absorption line: it says nothing of a B type
        and hb.ew > 0.0
    ):
        # the Balmer lines peak at A0-A2 (H-beta 11-17 Å in the dev part's A dwarfs) and
        # weaken into the B types (late B 7-11 Å); an EW survives any resolution
        result.add(
            window_for(task, 4862.7),
            f"H-beta EW {hb.ew:+.1f} Å on a hot continuum: "
            + ("below the A-star Balmer maximum" if hb.ew < 11.0 else "at the A-star maximum"),
            _ramp(hb.ew, 9.0, 13.0, 1.0, -1.0),
            alternative="an A star" if hb.ew >= 11.0 else None,
        )
    _subdwarf_or_wd(result, view, window_for(task, 4862.7), max_fwhm=2400.0)
    compact_helium(result, view, task)
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
    # late B stars have almost no He I but a clear Mg II 4481, which hot subdwarfs lack
    late_b = mk is not None and mk.mg2 >= 0.15 and mk.mg2_error > 0 and mk.mg2 >= 3 * mk.mg2_error
    # only where the pixels can show a He I line at all (a third of its ~8 Å width)
    resolved_he1 = view.pixel_width((4440.0, 4500.0)) <= 8.0 / 3.0
    if (
        colour is not None
        and colour >= 2.6
        and he1_sig < 2.0
        and snr >= 15.0
        and measured_he1
        and resolved_he1
        and not late_b
    ):
        result.add(
            w_he1,
            f"no He I at S/N {snr:.0f} on a continuum as hot as colour {colour:.2f}: a B star "
            "that hot shows He I, a hot subdwarf may not",
            -2.0,
            alternative="a hot subdwarf (sdB)",
        )
    if he1_sig >= STRONG and he1 >= 0.4:  # weaker He I of late B stars sits in metal blends
        _broad_helium(result, view, task, HE_I_LINES)
    return result


def _blue_helium(view: SpectrumView) -> bool:
    """Whether He I 4026 or 4471 is measurable: He I 4922 alone sits on Fe II 4924, strong in
    A to G stars, and cannot stand for helium."""
    return any(_narrow_line(view, name, centre) is not None for name, centre in HE_I_LINES[:2])


def _weak_balmer(
    result: Assessment,
    view: SpectrumView,
    task: Task,
    hb: Measurement | None,
    he1_sig: float,
    he2_sig: float,
) -> None:
    """Weak or absent H-beta beside He I. Weak Balmer lines mark an O star only beside He II;
    without He II they are a B supergiant's (low gravity, wind emission filling the line in).
    He I without Balmer absorption marks a DB white dwarf or helium star only when the helium
    lines are broad (high gravity); a supergiant's are narrow."""
    if hb is None or hb.ew is None or he1_sig < STRONG:
        return
    window = window_for(task, 4862.7)
    if hb.ew < 3.0:
        if he2_sig >= STRONG:
            result.add(
                window,
                f"weak Balmer lines (H-beta {hb.describe()}) beside He II, as in O stars",
                _ramp(hb.ew, 1.5, 3.0, -2.0, 0.0),
                alternative="an O star",
            )
        else:
            result.add(
                window,
                f"weak Balmer lines (H-beta {hb.describe()}) without He II: the low gravity "
                "or wind of a B supergiant rather than an O star",
            )
    if _absorbs(hb, 4.0, 1.0):
        return
    width = _helium_width(view, HE_I_LINES)
    trust = _width_trust(view, HE_I_LINES[1][1], 900.0)
    if width is not None and width >= 900.0 and trust > 0:
        result.add(
            window,
            f"broad He I (median FWHM {width:.0f} km/s) without Balmer absorption (H-beta "
            f"{hb.describe()}): a DB white dwarf or helium star, not a B star",
            -3.0 * trust,
            alternative="a DB white dwarf",
        )


def a_supergiant(
    view: SpectrumView, hb: Measurement | None, cak: Measurement | None, mk: MKRatio | None
) -> bool:
    """Luminosity class I of an A star by the Balmer-line criterion: narrow H-beta of modest
    strength (the Stark wings of dwarfs and giants make theirs 900-1300 km/s wide and over 10 Å
    strong) beside a Ca II K line of A-type strength (an F star's narrow Balmer lines come with
    a K line of 3 Å and more) and the strong Mg II 4481 of an A supergiant's metal lines (a
    metal-poor F dwarf's Balmer and K lines look alike, but its Mg II 4481 is gone). Only where
    the resolution shows the width."""
    oxygen = view.line("O I 7774", 7773.4, 12.0, [(7736.0, 7756.0), (7790.0, 7810.0)])
    colour = view.colour()
    if (
        _absorbs(oxygen, 5.0, O_I_SUPERGIANT_EW)
        and colour is not None
        and colour > 1.3
        and hb is not None
        and hb.ew is not None
        and hb.ew < A_SUPERGIANT_BALMER_EW
    ):
        return True  # the O I 7774 triplet: over 1.5 Å only in supergiants (dwarfs ~0.5-1 Å)
    if hb is None or hb.ew is None or not hb.fwhm_kms or cak is None or cak.ew is None:
        return False
    if mk is None or mk.mg2 < A_SUPERGIANT_MG2_EW or mk.mg2 < STRONG * mk.mg2_error:
        return False
    if _width_trust(view, 4862.7, A_SUPERGIANT_FWHM) < 0.5:
        return False
    ratio, _ = b_a_ratio(view, mk)
    # without He I 4471 beside Mg II 4481 the star is A0 or later whatever its K line
    weakest_k = (
        A0_SUPERGIANT_K_EW
        if ratio is not None and ratio < BA_SUPERGIANT_RATIO
        else A_SUPERGIANT_K_EW[0]
    )
    return bool(
        hb.fwhm_kms < A_SUPERGIANT_FWHM
        and hb.ew < A_SUPERGIANT_BALMER_EW
        and weakest_k <= cak.ew <= A_SUPERGIANT_K_EW[1]
    )


def score_a(view: SpectrumView, task: Task) -> Assessment:
    """Strong, moderately broad Balmer lines, Ca II K present, no He I, no G band / Ca I; for a
    supergiant (narrow, weaker Balmer lines) the K line alone places the type.

    The F-star indicators (G band / Ca I, a strong K line, K / H-beta) measure one thing, the
    temperature, so only the strongest of them counts."""
    result = Assessment(bias=-1.0)
    colour = view.colour()
    result.add(None, _fmt_colour(colour))
    hb = view.line("H-beta", 4862.7, 40.0, [(4780.0, 4815.0), (4910.0, 4945.0)])
    cak = _ca_k(view)
    mk = _mk_ratio(view)
    supergiant = a_supergiant(view, hb, cak, mk)
    w_hb = window_for(task, 4862.7, prefer="H-beta")
    if hb is not None and hb.ew is not None:
        if supergiant:
            result.add(
                w_hb,
                f"H-beta: {hb.describe()}, weak by the low gravity of a supergiant (narrow "
                "Balmer lines beside an A-type K line and Mg II 4481, or a strong O I 7774), "
                "not by temperature",
            )
        else:
            strength = ", near the Balmer maximum" if hb.ew >= 8.0 else ", weaker than in A stars"
            result.add(
                w_hb, f"H-beta: {hb.describe()}{strength}", _ramp(hb.ew, 4.0, 9.0, -2.5, 1.5)
            )
    he1, he1_sig, he1_text = _helium(view, HE_I_LINES)
    w_he1 = window_for(task, 4472.7, prefer="He I")
    blue_helium = _blue_helium(view)
    ratio, ratio_text = b_a_ratio(view, mk)
    if ratio is not None:
        # He I 4026/4922 windows take in Fe II 4924 and metal blends of A supergiants: the MK
        # ratio of the deblended He I 4471 to Mg II 4481 decides B from A, gravity aside
        # a supergiant's metal lines put more into the 4471 fit than a dwarf's
        low, high = BA_SUPERGIANT_RATIO_A if supergiant else BA_RATIO_A
        weight = _ramp(ratio, low, high, 0.0, -2.5)
        result.add(
            w_he1,
            ratio_text
            + (
                ": He I 4471 of a late B star"
                if weight < 0
                else ": no more than an A star's metal lines at 4471"
            ),
            weight,
            alternative="a B star" if weight < 0 else None,
        )
    elif mk is not None and mk.mg2_error > 0:
        # at low resolution: only He I 4471 clearly stronger than Mg II 4481 counts
        excess = mk.helium_over_magnesium()
        if mk.he1_sig >= STRONG and excess >= STRONG and mk.he1 >= 0.15:
            result.add(
                w_he1,
                f"He I 4471 (EW {mk.he1:+.2f} ± {mk.he1_error:.2f} Å) exceeds Mg II 4481 (EW "
                f"{mk.mg2:+.2f} ± {mk.mg2_error:.2f} Å) by {excess:.1f}σ: a B star's helium, "
                "not an A star's",
                -2.5,
                alternative="a B star",
            )
        else:
            result.add(
                w_he1,
                f"He I 4471 (EW {mk.he1:+.2f} Å) no stronger than Mg II 4481 (EW {mk.mg2:+.2f} "
                "Å), as from A0 on",
            )
    elif he1_sig >= 4.0 and he1 >= 0.15 and not supergiant and blue_helium:
        result.add(
            w_he1,
            f"He I absorption (mean EW {he1:+.2f} Å, {he1_sig:.1f}σ: {he1_text}) marks a B star "
            "rather than an A star",
            -2.5,
            alternative="a B star",
        )
    later: list[tuple[str | None, str, float]] = []  # (window, text, weight) of F-star signs
    cool = [
        m
        for m in (
            view.line("G band", 4301.2, 12.0, [(4270.0, 4283.0), (4318.0, 4328.0)]),
            _narrow_line(view, "Ca I 4228", 4227.9),
        )
        if _absorbs(m, 4.0, 0.6)
    ]
    if cool:
        later.append(
            (
                window_for(task, 4301.2, prefer="G band"),
                "G band / Ca I of an F or later star: " + "; ".join(_fmt_line(m) for m in cool),
                # a supergiant's metal lines are strong by luminosity
                0.0 if supergiant else -1.5,
            )
        )
    if cak is not None and cak.ew is not None:
        if cak.ew < 0.6:
            # A0 stars of the dev part reach down to 0.23 Å at R ~ 1000-2000; late B 0.1-0.6 Å
            text = "weaker than in most A stars (a B star, or a metal-poor sdA)"
            weight = _ramp(cak.ew, 0.15, 0.4, -1.5, 0.0)
        elif cak.ew > 4.0:
            later.append(
                (
                    window_for(task, 3934.8),
                    f"Ca II K: {cak.describe()}, as strong as in F and later stars",
                    _ramp(cak.ew, 4.0, 5.0, 0.0, -1.5),
                )
            )
            text, weight = "", 0.0
        elif view.pixel_width((3917.0, 3952.0)) > 2.0:
            # pixels over a third of the line's width flatten it and its EW with it
            text, weight = "in the A-star range, but sampled too coarsely to place the type", 0.0
        else:
            text, weight = "as in A stars", 1.0
        if text:
            result.add(window_for(task, 3934.8), f"Ca II K: {cak.describe()}, {text}", weight)
        if hb is not None and hb.ew is not None and hb.ew > 3.0 and cak.ew > 0.6:
            # K grows and the Balmer lines fade through A into F: their ratio places the type
            # whatever the resolution (both are equivalent widths), for dwarfs and giants
            ratio = cak.ew / hb.ew
            if ratio >= 0.25:
                later.append(
                    (
                        window_for(task, 3934.8),
                        f"Ca II K / H-beta equivalent widths {ratio:.2f}: "
                        + ("as in F stars" if ratio >= 0.5 else "as in late A to early F stars")
                        + " (A0-A7 dwarfs and giants stay below ~0.25, A9 and F0 meet near 0.5)"
                        + (
                            ", but a supergiant's H-beta is weak by luminosity"
                            if supergiant
                            else ""
                        ),
                        # A9 and F0 meet near 0.5 (dev part: A9 0.41-0.56, F0 0.3-1.3)
                        0.0 if supergiant else _ramp(ratio, 0.4, 0.65, 0.0, -2.5),
                    )
                )
    if later:
        strongest = min(later, key=lambda item: item[2])
        for window, text, weight in later:
            counted = weight if (window, text, weight) == strongest else 0.0
            result.add(window, text, counted, alternative="an F star" if counted else None)
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
