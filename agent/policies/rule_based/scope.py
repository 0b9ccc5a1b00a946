"""What the inspector does not know: spectra of a class none of the tasks describes (Wolf-Rayet,
supergiant, Be star) and spectra without the windows a task's decision rests on.

Each note names what it saw (or what is missing) with numbers; the inspector then pulls its
calibrated P(YES) towards 0.5 (``pull``), so the answer keeps its side but is not confident.
The inspector states the notes in its reason, and triage sends such a candidate to experts as
"outside what I know".
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.inspection_tasks import Task
from agent.measure import Measurement
from agent.policies.rule_based.findings import _absorbs, _emits, _width_trust
from agent.policies.rule_based.view import SpectrumView

OUT_OF_SCOPE = "out of scope"
COVERAGE = "coverage"
# how far a scope note pulls P(YES) towards 0.5 when the calibration stores no fitted value:
# P -> 0.5 + PULL * (P - 0.5); MAX_PULL keeps such an answer below 0.9 whatever is fitted
# (0.5 + 0.78 / 2 = 0.89): on the development part every task's fitted pull sat at the old
# limit of 0.75, i.e. its noted answers were right more often than 0.875 says
DEFAULT_PULL = 0.25
MAX_PULL = 0.78
# the pulls a fit chooses from: steps of 0.05 and MAX_PULL itself
PULL_GRID = tuple(
    sorted({round(0.05 * step, 2) for step in range(int(MAX_PULL / 0.05) + 1)} | {MAX_PULL})
)
# F(4000-4500)/F(6000-6500) below which no Wolf-Rayet wind is looked for (WR stars of the
# corpus: 2-11; K and M stars: 0.05-0.65)
WR_MIN_COLOUR = 0.7
MIN_SNR = 5.0  # a decisive window with a lower continuum S/N per pixel is too noisy to decide

# per task, the windows its decision rests on (rest Å) and the width (Å) of the feature read
# there: at least one must be usable. A window whose pixels are wider than a third of its
# feature's width cannot show the feature (Nyquist sampling of a line needs ~2-3 pixels per
# FWHM), so it counts as missing however well it is covered.
DECISIVE: dict[str, tuple[tuple[str, tuple[float, float], float], ...]] = {
    # H-alpha emission alone cannot tell a CV from an emission-line or Wolf-Rayet star: the
    # Balmer decrement and He II 4687 decide (CV lines: 1000-2000 km/s, 15-30 Å)
    "CV": (("H-beta", (4830.0, 4895.0), 20.0), ("He II 4687", (4670.0, 4705.0), 15.0)),
    # band heads: the flux drops over a few Å at the head, read against 25 Å either side
    "CS": (
        ("C2 Swan 5165", (5120.0, 5200.0), 15.0),
        ("C2 Swan 5636", (5590.0, 5670.0), 15.0),
        ("C2 Swan 4737", (4690.0, 4770.0), 15.0),
    ),
    "SS": (("ZrO 6476", (6420.0, 6500.0), 15.0), ("ZrO 6347", (6300.0, 6370.0), 15.0)),
    # an M star's TiO depression runs ~75 Å redward of the head before the next head (Reid,
    # Hawley & Gizis 1995, AJ 110, 1838: TiO5 compares 7042-7046 with 7126-7135 Å); the MG
    # rules widen their side windows up to that (``molecular._tio_trough``)
    "MG": (("TiO 7056", (7000.0, 7100.0), 75.0), ("TiO 6161", (6110.0, 6200.0), 75.0)),
    # a white dwarf's Balmer lines are 50-150 Å wide
    "WD": (("H-beta", (4780.0, 4945.0), 60.0), ("H-gamma", (4280.0, 4400.0), 60.0)),
    # photospheric He lines of OB stars: 3-8 Å FWHM (rotation, Stark), 10-11 Å from blends
    "O": (("He II 4542 / He I 4471", (4448.0, 4600.0), 8.0),),
    "B": (("He I 4471", (4440.0, 4500.0), 8.0), ("He I 4026", (4000.0, 4050.0), 8.0)),
    # the A/F boundary rests on Ca II K (~3-8 Å wide): H-beta is as strong in F0 as in A9 and
    # B9 stars, so without a readable K line no A answer is confident
    "A": (("Ca II K", (3917.0, 3952.0), 6.0),),
}
# pixels wider than this share of a feature's width cannot sample it
MAX_PIXEL_SHARE = 1.0 / 3.0


@dataclass(frozen=True)
class ScopeNote:
    kind: str  # OUT_OF_SCOPE | COVERAGE
    subject: str  # the class it points to, or what is missing
    text: str


def _line(view: SpectrumView, name: str, centre: float, half: float) -> Measurement | None:
    return view.line(
        name,
        centre,
        half,
        [(centre - half - 25.0, centre - half - 5.0), (centre + half + 5.0, centre + half + 25.0)],
    )


def wolf_rayet(view: SpectrumView) -> ScopeNote | None:
    """The broad emission of a Wolf-Rayet wind: the 4600-4720 Å blend of He II 4686 with N III
    4640 / C III 4650 in strong emission, with C IV 5808 or He II 5412 in emission too, and
    Balmer emission no stronger than the blend (a CV's He II sits beside stronger Balmer
    emission). The lines are tens of Å wide, so the continuum is taken well outside them."""
    colour = view.colour()
    if colour is not None and colour < WR_MIN_COLOUR:
        # between a cool star's TiO / MgH bands the 4600-4720 Å and 5808 Å regions stand above
        # the band troughs like emission; Wolf-Rayet continua are hot
        return None
    bump = view.line(
        "He II 4686 / N III / C III blend", 4660.0, 60.0, [(4540.0, 4590.0), (4760.0, 4800.0)]
    )
    if not _emits(bump, 5.0, 5.0) or bump is None or bump.ew is None:
        return _carbon_sequence(view)
    companions = [
        m
        for m in (
            view.line("C IV 5808", 5808.0, 40.0, [(5600.0, 5650.0), (5940.0, 5990.0)]),
            view.line("He II 5412", 5411.5, 25.0, [(5330.0, 5370.0), (5450.0, 5490.0)]),
        )
        if _emits(m, 4.0, 2.0)
    ]
    hb = view.line("H-beta", 4862.7, 25.0, [(4800.0, 4830.0), (4900.0, 4930.0)])
    balmer = -(hb.ew or 0.0) if hb is not None and _emits(hb, 3.0) else 0.0
    if not companions or balmer > -bump.ew:
        return None
    named = "; ".join(f"{m.name} EW {m.ew:+.1f} Å" for m in companions if m.ew is not None)
    return ScopeNote(
        OUT_OF_SCOPE,
        "a Wolf-Rayet star",
        f"broad emission over 4600-4720 Å (He II 4686 with N III / C III, EW {bump.ew:+.1f} Å) "
        f"with {named} and Balmer emission no stronger: the wind lines of a Wolf-Rayet star, a "
        "class none of the tasks describes",
    )


def _carbon_sequence(view: SpectrumView) -> ScopeNote | None:
    """A WC star whose blue end is lost: C IV 5808 in strong, broad emission (tens of Å, over
    1000 km/s), far beyond anything a CV or an emission-line star shows at 5808 Å."""
    colour = view.colour()
    if colour is not None and colour < 0.8:  # between a cool star's bands 5808 Å looks bright
        return None
    c4 = view.line("C IV 5808", 5808.0, 40.0, [(5600.0, 5650.0), (5940.0, 5990.0)])
    if not _emits(c4, 5.0, 20.0) or c4 is None or (c4.fwhm_kms or 0.0) < 1000.0:
        return None
    return ScopeNote(
        OUT_OF_SCOPE,
        "a Wolf-Rayet star",
        f"C IV 5808 in strong, broad emission ({c4.describe()}): the carbon-sequence wind of a "
        "WC Wolf-Rayet star, a class none of the tasks describes",
    )


def be_star(view: SpectrumView) -> ScopeNote | None:
    """H-alpha in emission on a hot absorption-line spectrum (Balmer absorption from H-beta
    blueward, no He II emission): a Be or other emission-line B/A star."""
    colour = view.colour()
    if colour is None or colour < 1.0:  # reddening takes distant B stars down to ~1
        return None
    ha = _line(view, "H-alpha", 6564.6, 20.0)
    hd = _line(view, "H-delta", 4102.9, 30.0)
    if not _emits(ha, 5.0, 1.0) or ha is None or not _absorbs(hd, 4.0, 1.0) or hd is None:
        return None
    return ScopeNote(
        OUT_OF_SCOPE,
        "a Be (emission-line) star",
        f"H-alpha in emission ({ha.describe()}) on a hot absorption-line spectrum (H-delta "
        f"{hd.describe()}): a Be or shell star's disc, which the task's criteria do not "
        "describe",
    )


def supergiant(view: SpectrumView) -> ScopeNote | None:
    """Luminosity class I by the standard criteria of hot and warm stars: a strong O I 7774
    triplet (over 1.5 Å; dwarfs and giants stay near or below 1 Å) or narrow Balmer lines of
    modest strength with a weak Ca II K on a hot continuum (the dwarfs' Stark wings make theirs
    broad; late A and F dwarfs have narrow Balmer lines but a strong K line)."""
    colour = view.colour()
    oxygen = _line(view, "O I 7774", 7773.4, 12.0)
    if _absorbs(oxygen, 5.0, 1.5) and oxygen is not None and colour is not None and colour > 1.3:
        return ScopeNote(
            OUT_OF_SCOPE,
            "a supergiant",
            f"O I 7774 is strong ({oxygen.describe()}; dwarfs and giants stay below ~1 Å): "
            "the luminosity of a supergiant, whose lines the task's dwarf and giant criteria "
            "do not describe",
        )
    # late A and F dwarfs' Balmer lines are narrow too, but their Ca II K is strong
    if colour is None or colour < 1.3:
        return None
    cak = _line(view, "Ca II K", 3934.8, 8.0)
    if cak is not None and cak.ew is not None and cak.ew > 2.0:
        return None
    hd = _line(view, "H-delta", 4102.9, 30.0)
    hg = _line(view, "H-gamma", 4341.7, 30.0)
    narrow = [
        m
        for m in (hd, hg)
        if _absorbs(m, 5.0, 1.0)
        and m is not None
        and m.ew is not None
        and m.ew < 6.0
        and (m.fwhm_kms or 1e9) < 450.0
        and _width_trust(view, m.wavelength, 450.0) >= 0.3
    ]
    if len(narrow) < 2:
        return None
    widths = ", ".join(f"{m.name} {m.describe()}" for m in narrow)
    return ScopeNote(
        OUT_OF_SCOPE,
        "a supergiant",
        f"narrow Balmer lines of modest strength on a hot continuum ({widths}): the low "
        "gravity of a supergiant, whose lines the task's dwarf and giant criteria do not "
        "describe",
    )


def coverage(view: SpectrumView, task: Task) -> ScopeNote | None:
    """None while at least one of the task's decisive windows is covered by good pixels at a
    usable S/N, on pixels no wider than MAX_PIXEL_SHARE of its feature; otherwise a note naming
    each window and why it cannot decide (not covered, sampled too coarsely, too noisy)."""
    windows = DECISIVE.get(task.code.upper())
    if not windows:
        return None
    problems = []
    for name, window, feature in windows:
        covered = view.covered_fraction(window)
        if covered < 0.8:
            problems.append(f"{name} ({window[0]:.0f}-{window[1]:.0f} Å) not covered")
            continue
        pixel = view.pixel_width(window)
        if pixel > MAX_PIXEL_SHARE * feature:
            problems.append(
                f"{name} sampled too coarsely (pixel {pixel:.1f} Å, more than a third of the "
                f"~{feature:g} Å feature)"
            )
            continue
        snr = view.snr(window)
        if snr is not None and snr < MIN_SNR:
            problems.append(f"{name} too noisy (S/N {snr:.1f} < {MIN_SNR:g})")
            continue
        return None
    return ScopeNote(
        COVERAGE,
        "; ".join(problems),
        "the windows this decision rests on cannot be read: " + "; ".join(problems),
    )


def scope_notes(view: SpectrumView, task: Task) -> list[ScopeNote]:
    """Every reason not to answer this spectrum confidently for ``task``."""
    notes = [note for note in (wolf_rayet(view), be_star(view)) if note is not None]
    if task.code.upper() in ("O", "B", "A", "WD", "CV") and not notes:
        giant = supergiant(view)
        if giant is not None:
            notes.append(giant)
    missing = coverage(view, task)
    if missing is not None:
        notes.append(missing)
    return notes
