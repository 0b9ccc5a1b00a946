"""Molecular-band tasks: CS (carbon stars, C2 Swan), SS (S-type stars, ZrO), MG (M giants, TiO)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from agent.inspection_tasks import Task
from agent.measure import MIN_WINDOW_PIXELS, Measurement
from agent.policies.rule_based.findings import (
    Assessment,
    _absorbs,
    _band_present,
    _emits,
    _fmt_colour,
    _instrumental_angstrom,
    _sig,
    _trust,
    window_for,
)
from agent.policies.rule_based.view import STRONG, SpectrumView, _ramp

SWAN_HEADS = (("C2 Swan 5165", 5166.4), ("C2 Swan 5636", 5637.6), ("C2 Swan 4737", 4738.3))
SWAN_RED_HEAD = ("C2 Swan 6122", 6123.7)
# F(4000-4500)/F(6000-6500) below which Swan bands sit on a carbon star's photosphere: a DQ
# white dwarf cool enough for C2 (~5000 K and warmer) keeps it above ~0.6, a C star near 0.2
DQ_MIN_COLOUR = 0.5


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
    # a DQ white dwarf shows the Swan bands and nothing else; a carbon star, metal-poor R
    # types with weak Na D included, keeps the metal lines of a giant's photosphere
    metals = [
        m
        for m in (
            view.line("Ca I 4227", 4226.7, 6.0, [(4205.0, 4215.0), (4238.0, 4248.0)]),
            view.line("Ca II 8544", 8544.4, 12.0, [(8515.0, 8529.0), (8560.0, 8575.0)]),
        )
        if _absorbs(m, STRONG, 0.8)
    ]
    if swan >= 0.08 and significance >= STRONG and metals:
        result.add(
            w_nad,
            "metal lines of a cool giant's photosphere ("
            + "; ".join(f"{m.name} EW {m.ew:+.1f} Å" for m in metals if m.ew is not None)
            + "): a carbon star, not a DQ white dwarf",
            0.5,
        )
    elif swan >= 0.08 and significance >= STRONG and colour is not None and colour < DQ_MIN_COLOUR:
        # a DQ white dwarf with Swan bands is 5000-12000 K; a carbon star's photosphere is far
        # redder: weak Na D there is a metal-poor (R-type) carbon star's
        result.add(
            w_nad,
            f"Swan bands on a red stellar continuum ({_fmt_colour(colour)}): a cool carbon "
            "star's photosphere, not the warmer continuum of a DQ white dwarf"
            + (
                f" (Na D EW {nad.ew:+.1f} Å is weak, as in metal-poor R stars)"
                if nad is not None and nad.ew is not None and nad.ew < 5.0
                else ""
            ),
            0.5,
        )
    elif swan >= 0.08 and significance >= STRONG and nad is not None and nad.ew is not None:
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
ZRO_5552_DEPTH = 0.08  # dev part: the S star 0.12, M0-M5 giants 0.00-0.07
# log-odds of ZrO windows no deeper than TiO explains: set so the development part's SS
# answers stay calibrated (ECE <= 0.05) under the temperature fit one positive allows
ZRO_EXPLAINED_BY_TIO = -1.0


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


def _clearly_below(measured: Measurement | None, depth: float) -> bool:
    """Whether a band is measured at least 2 sigma shallower than ``depth``."""
    if measured is None or measured.depth is None:
        return False
    error = measured.depth_error if measured.depth_error and measured.depth_error > 0 else 0.1
    return measured.depth + 2.0 * error < depth


def zro_beyond_tio(
    view: SpectrumView, task: Task
) -> tuple[bool, str, float, float, Measurement | None]:
    """Whether the ZrO bands of an S star are there, not TiO overlapping the ZrO heads: the
    ZrO 5552 head (where the TiO of M0-M5 giants is weak) not clearly (2 sigma) shallower than
    ZRO_5552_DEPTH, and the gamma heads 6476/6347 at least half as deep as TiO 7056 (Keenan &
    Boeshaar 1980: in S stars ZrO rivals or beats TiO; in M giants TiO blends deepen the ZrO
    windows but stay far stronger at their own heads). Returns (verdict, sentence, gamma depth, its sigma, TiO)."""
    zro, significance, heads = _zro_index(view, task)
    tio = view.band("TiO 7056", 7055.9, shading="red")
    tio_depth = tio.depth if tio is not None and tio.depth is not None else 0.0
    green = next((m for _, m in heads if m.name == "ZrO 5552"), None)
    # the head vetoes only where it is measured clearly shallower than an S star's: a cool
    # star's faint green flux may leave it too noisy to say either way
    green_ok = not _clearly_below(green, ZRO_5552_DEPTH)
    rivals = zro >= 0.5 * tio_depth
    verdict = zro >= 0.04 and significance >= STRONG and green_ok and rivals
    green_text = "not covered" if green is None else green.describe()
    text = (
        f"ZrO 6476/6347 mean depth {zro:+.3f} ({significance:+.1f}σ) against TiO 7056 depth "
        f"{tio_depth:+.2f}; ZrO 5552: {green_text}"
    )
    return verdict, text, zro, significance, tio


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
        present, compared, *_ = zro_beyond_tio(view, task)
        if zro >= 0.04 and significance >= STRONG and not present:
            # the S star's sign is ZrO beyond what TiO explains; its absence speaks mildly
            # against an S star (a late S star whose TiO is as strong looks the same, so no more)
            verdict = "ZrO-like depressions, but no stronger than the TiO blends explain"
            weight = ZRO_EXPLAINED_BY_TIO
        elif zro >= 0.04 and significance >= STRONG:
            verdict = "ZrO bands present, rivalling TiO"
        else:
            verdict = "no ZrO beyond the noise"
        result.add(
            heads[0][0],
            f"{verdict}: {compared}",
            weight,
            alternative=("an M or K giant (TiO)" if weight < 0 and zro >= 0.04 else None),
        )
    else:
        result.add(None, "the ZrO heads at 6476 and 6347 Å are not covered", -1.0)
    tio = view.band("TiO 7056", 7055.9, shading="red")
    if tio is not None:
        # S stars are M-type: ZrO or TiO bands, or both; a spectrum clearly without either is
        # warmer than any S star (the K giants that v2 took for S stars)
        bandless = heads and zro < 0.04 and _clearly_below(tio, 0.05)
        result.add(
            window_for(task, 7055.9, prefer="TiO"),
            f"TiO 7056: {tio.describe()}"
            + (": no molecular bands, warmer than any S star" if bandless else ""),
            -1.5 if bandless else 0.0,
            alternative="a K or warmer star" if bandless else None,
        )
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


# the side windows a TiO head is read with: 25 Å, widened on coarse pixels to hold
# MIN_WINDOW_PIXELS pixels, up to the ~75 Å over which the band's depression runs before the
# next head (Reid, Hawley & Gizis 1995, AJ 110, 1838: TiO5 compares 7042-7046 with 7126-7135 Å)
TIO_SIDE = 25.0
TIO_MAX_SIDE = 75.0


def _tio_trough(view: SpectrumView, name: str, head: float) -> Measurement | None:
    """A red-degraded TiO head's depth, on side windows wide enough for the pixels (a 16 Å
    pixel spectrum is read over 48 Å either side); None when even TIO_MAX_SIDE is too few."""
    pixel = view.pixel_width((head - TIO_MAX_SIDE, head + TIO_MAX_SIDE))
    width = min(max(TIO_SIDE, MIN_WINDOW_PIXELS * pixel), TIO_MAX_SIDE)
    return view.band(name, head, shading="red", width=width)


def score_mg(view: SpectrumView, task: Task) -> Assessment:
    """Strong TiO with giant gravity: weak CaH and Na I 8183/8195, strong Ca II triplet;
    against M dwarfs, K giants (weak TiO), S stars (ZrO) and carbon stars (C2). Gravity only
    speaks for an M giant once TiO shows the star is an M star at all."""
    result = Assessment(bias=-1.0)
    colour = view.colour()
    result.add(None, _fmt_colour(colour))
    # TiO 7056 (the TiO5 region) is the clean head; 6161 sits on Ca I 6162 in K stars
    tio = _tio_trough(view, "TiO 7056", 7055.9) or _tio_trough(view, "TiO 6161", 6160.7)
    if tio is None or tio.depth is None:
        result.add(
            None, "the TiO heads at 6161 and 7056 Å are not covered (or cannot be measured)", -2.0
        )
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
    # TiO bands overlap the ZrO heads at low resolution: an S star's ZrO rivals its TiO and
    # shows at 5552 Å too
    s_star, compared, zro, _, _ = zro_beyond_tio(view, task)
    if s_star and zro >= 0.08:
        result.add(
            window_for(task, 6475.8),
            f"ZrO bands ({compared}) mark an S star rather than an M giant",
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
