"""CV: cataclysmic variables (disc emission, quiescent and high states)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.inspection_tasks import Task
from agent.measure import Measurement
from agent.policies.rule_based.findings import (
    Assessment,
    Finding,
    _absorbs,
    _band_present,
    _emits,
    _fmt_colour,
    _fmt_line,
    _sig,
    window_for,
)
from agent.policies.rule_based.view import STRONG, SpectrumView, _ramp


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
