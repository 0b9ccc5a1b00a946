"""Normal stellar photospheres: O to M, giants, Be stars, S-type and dMe stars."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.synthetic.lines import (
    BALMER_N,
    BOWEN,
    CA_H,
    CA_I,
    CA_K,
    CA_TRIPLET,
    CAH_BANDS,
    FE_II,
    G_BAND,
    HE_I,
    HE_II,
    HE_II_4686,
    K_I,
    LAO_BANDS,
    MG_B,
    MG_II,
    NA_D,
    NA_I_8190,
    O_I_7774,
    O_I_8446,
    SI_III,
    SI_IV,
    TIO_BANDS,
    VO_BANDS,
    ZRO_BANDS,
    _balmer,
)
from agent.synthetic.physics import (
    _doppler,
    _Emission,
    _Features,
    _log_uniform,
    _planck,
    _ramp,
    _stellar_velocity,
)


@dataclass(frozen=True)
class _Gravity:
    balmer_depth: float
    balmer_width: float
    balmer_n_max: int
    balmer_growth: float  # fractional width increase per Balmer order above H-beta
    pressure: float  # scales gravity-sensitive lines (Na I, Mg b, Ca I, CaH)
    ca_triplet: float


_GRAVITY = {
    "dwarf": _Gravity(1.0, 1.0, 15, 0.05, 1.0, 0.85),
    "giant": _Gravity(0.9, 0.55, 17, 0.03, 0.25, 1.3),
    "subdwarf": _Gravity(0.95, 1.35, 13, 0.1, 0.8, 0.6),
}
# A fixed forest of weak blended metal lines (vacuum A, relative strength) for cool photospheres.
_METAL_FOREST = tuple(
    zip(
        np.random.default_rng(20260).uniform(3900.0, 6900.0, 90).round(1).tolist(),
        np.random.default_rng(20261).uniform(0.2, 1.0, 90).round(2).tolist(),
        strict=True,
    )
)


def _balmer_series(
    features: _Features,
    depth: float,
    fwhm_kms: float,
    *,
    lorentz: float,
    n_max: int,
    growth: float,
) -> None:
    """H-alpha to H16; orders above ``n_max`` merge into the pseudo-continuum."""
    for n in BALMER_N:
        if n == 3:
            features.line(_balmer(3), 0.85 * depth, 0.7 * fwhm_kms, lorentz)
            continue
        fade = float(np.clip((n_max + 1 - n) / 3.0, 0.0, 1.0)) * 0.97 ** (n - 4)
        features.line(_balmer(n), depth * fade, fwhm_kms * (1.0 + growth * (n - 4)), lorentz)


def _photosphere(
    features: _Features,
    rng: np.random.Generator,
    teff: float,
    *,
    gravity: str,
    vsini: float,
    metals: float = 1.0,
) -> None:
    """Atomic lines of a normal star from O to M, strengths following temperature and gravity."""
    g = _GRAVITY[gravity]
    logt = math.log10(teff)
    rotation = 1.6 * vsini
    x = math.log10(teff / 9500.0)
    depth = 0.06 + 0.52 * math.exp(-((x / (0.25 if x < 0 else 0.42)) ** 2))
    width = 250.0 + 1000.0 * math.exp(-((x / (0.2 if x < 0 else 0.45)) ** 2))
    _balmer_series(
        features,
        depth * g.balmer_depth * rng.uniform(0.9, 1.1),
        math.hypot(width * g.balmer_width * rng.uniform(0.9, 1.1), rotation),
        lorentz=0.5 if 7000.0 < teff < 20000.0 else 0.3,
        n_max=g.balmer_n_max,
        growth=g.balmer_growth,
    )
    narrow = math.hypot(120.0, rotation)
    if teff > 10000.0:
        he_i = 0.13 * math.exp(-(((logt - 4.32) / (0.15 if logt < 4.32 else 0.25)) ** 2))
        for centre, strength in HE_I:
            features.line(centre, he_i * strength, math.hypot(250.0, rotation))
    if teff > 29000.0:
        he_ii = 0.15 * min((teff - 29000.0) / 11000.0, 1.0)
        for centre, strength in HE_II:
            features.line(centre, he_ii * strength, math.hypot(300.0, rotation))
    features.line(SI_III, 0.06 * math.exp(-(((logt - 4.38) / 0.06) ** 2)), narrow)
    for centre in SI_IV:
        features.line(centre, 0.05 * math.exp(-(((logt - 4.5) / 0.05) ** 2)), narrow)
    features.line(MG_II, 0.12 * math.exp(-(((logt - 4.0) / 0.13) ** 2)) * metals, narrow)
    ca_k = 0.02 + 0.78 * _ramp(teff, 11000.0, 5000.0)
    ca_width = math.hypot(250.0 + 500.0 * _ramp(teff, 6500.0, 2500.0), rotation)
    features.line(CA_K, ca_k * min(metals * 1.2, 1.0), ca_width, 0.3)
    features.line(CA_H, 0.9 * ca_k * min(metals * 1.2, 1.0), ca_width, 0.3)
    features.line(
        O_I_7774, 0.12 * math.exp(-(((logt - 3.9) / 0.06) ** 2)) / g.pressure**0.3, narrow
    )
    _cool_atomic_lines(features, teff, g, rotation, metals)


def _cool_atomic_lines(
    features: _Features, teff: float, g: _Gravity, rotation: float, metals: float
) -> None:
    cool = _ramp(teff, 7500.0, 3000.0)
    if cool <= 0.0:
        return
    pressure_wings = g.pressure * _ramp(teff, 4800.0, 1500.0)
    narrow = math.hypot(150.0, rotation)
    features.line(CA_I, 0.5 * _ramp(teff, 6800.0, 2800.0) * (0.6 + 0.4 * g.pressure), narrow, 0.3)
    features.line(G_BAND, 0.25 * _ramp(teff, 7000.0, 1800.0) * metals, 1300.0)
    for centre, weight in zip(MG_B, (0.7, 0.85, 1.0), strict=True):
        features.line(centre, 0.4 * cool * weight * (0.85 + 0.3 * g.pressure) * metals, narrow)
    for centre in NA_D:
        features.line(
            centre, 0.45 * cool * (0.9 + 0.3 * g.pressure), narrow + 500.0 * pressure_wings, 0.3
        )
    for centre in K_I:
        features.line(centre, 0.3 * _ramp(teff, 4800.0, 1500.0) * (0.5 + g.pressure), narrow)
    na_i = 0.03 + 0.4 * g.pressure * _ramp(teff, 4800.0, 1500.0)
    for centre in NA_I_8190:
        features.line(centre, na_i, narrow + 150.0 * pressure_wings, 0.3)
    ca_t = 0.45 * _ramp(teff, 8500.0, 2500.0) * g.ca_triplet
    ca_t *= 1.0 - 0.45 * g.pressure * _ramp(teff, 4000.0, 1000.0)
    for centre, weight in CA_TRIPLET:
        features.line(centre, ca_t * weight * metals**0.5, math.hypot(220.0, rotation), 0.3)
    for centre, weight in _METAL_FOREST:
        features.line(centre, 0.15 * cool * weight * metals, narrow)


def _tio_tau(subclass: float) -> float:
    """TiO optical depth scale for an M subclass (negative values: late K)."""
    return 0.12 + 0.28 * subclass if subclass >= 0 else 0.12 * math.exp(1.5 * subclass)


def _m_molecules(features: _Features, subclass: float, *, dwarf: bool, tio_scale: float) -> None:
    features.bands(TIO_BANDS, _tio_tau(subclass) * tio_scale, redward=True)
    if subclass > 5.5:
        features.bands(VO_BANDS, 0.12 * (subclass - 5.5), redward=True)
    cah = 0.25 + 0.25 * max(subclass, -0.9) if dwarf else 0.03
    features.bands(CAH_BANDS, cah, redward=True)


@dataclass(frozen=True)
class _Object:
    flux: np.ndarray  # intrinsic flux on WAVELENGTH, arbitrary scale
    params: dict[str, Any]


_SPECTRAL_TYPES = (
    (45000, "O4"), (40000, "O5"), (37000, "O6"), (35000, "O7"), (33000, "O8"), (31500, "O9"),
    (30000, "B0"), (25000, "B1"), (21000, "B2"), (17000, "B3"), (15000, "B5"), (13000, "B7"),
    (11500, "B8"), (10500, "B9"), (9700, "A0"), (9000, "A2"), (8300, "A5"), (7600, "A8"),
    (7300, "F0"), (6600, "F5"), (6000, "G0"), (5600, "G5"), (5200, "K0"), (4800, "K2"),
    (4400, "K5"), (4000, "K7"), (3850, "M0"),
)  # fmt: skip


def _spectral_type(teff: float) -> str:
    return min(_SPECTRAL_TYPES, key=lambda item: abs(math.log(item[0] / teff)))[1]


def _rounded(params: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: float(f"{value:.4g}") if isinstance(value, float) else value
        for key, value in params.items()
    }


def _normal_star(
    rng: np.random.Generator, teff: float, *, gravity: str, vsini: float, **extra: Any
) -> tuple[_Features, dict[str, Any]]:
    features = _Features(_doppler(_stellar_velocity(rng)))
    _photosphere(features, rng, teff, gravity=gravity, vsini=vsini)
    params = {"teff": teff, "spectral_type": _spectral_type(teff), "gravity": gravity}
    return features, {**params, "vsini": vsini, **extra}


def _o_star(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(31000.0, 45000.0)
    features, params = _normal_star(rng, teff, gravity="dwarf", vsini=rng.uniform(60.0, 300.0))
    emission = _Emission(features.shift)
    if rng.random() < 0.2:  # Of star
        for centre in BOWEN[:2]:
            emission.line(centre, rng.uniform(0.2, 0.8), 300.0)
        emission.line(HE_II_4686, rng.uniform(0.3, 1.5), 600.0)
        params["of"] = True
    return _Object(emission.apply(features.render(_planck(teff))), params)


def _b_star(rng: np.random.Generator) -> _Object:
    teff = _log_uniform(rng, 10500.0, 30000.0)
    gravity = "giant" if rng.random() < 0.2 else "dwarf"
    features, params = _normal_star(rng, teff, gravity=gravity, vsini=rng.uniform(20.0, 300.0))
    return _Object(features.render(_planck(teff)), params)


def _be_star(rng: np.random.Generator) -> _Object:
    teff = _log_uniform(rng, 12000.0, 28000.0)
    features, params = _normal_star(rng, teff, gravity="dwarf", vsini=rng.uniform(150.0, 400.0))
    emission = _Emission(features.shift)
    ew = _log_uniform(rng, 4.0, 50.0)
    fwhm = rng.uniform(250.0, 650.0)
    separation = rng.uniform(0.3, 0.55) * fwhm if rng.random() < 0.6 else 0.0
    emission.line(_balmer(3), ew, fwhm - 0.6 * separation, separation_kms=separation)
    emission.line(_balmer(4), ew * rng.uniform(0.08, 0.2), fwhm - 0.6 * separation)
    if rng.random() < 0.3:
        for centre in FE_II:
            emission.line(centre, rng.uniform(0.2, 1.0), 300.0)
    if rng.random() < 0.3:
        emission.line(O_I_8446, rng.uniform(0.5, 3.0), 300.0)
    params.update({"halpha_ew": ew, "halpha_fwhm_kms": fwhm, "peak_separation_kms": separation})
    return _Object(emission.apply(features.render(_planck(teff))), params)


def _a_star(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(7300.0, 10200.0)
    gravity = "giant" if rng.random() < 0.15 else "dwarf"
    features, params = _normal_star(rng, teff, gravity=gravity, vsini=rng.uniform(10.0, 250.0))
    return _Object(features.render(_planck(teff)), params)


def _fgk_dwarf(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(4400.0, 7300.0)
    vsini = rng.uniform(2.0, 20.0 + 60.0 * _ramp(-teff, -6200.0, 1000.0))
    features, params = _normal_star(rng, teff, gravity="dwarf", vsini=vsini)
    if teff < 4500.0:
        _m_molecules(features, (3850.0 - teff) / 160.0, dwarf=True, tio_scale=1.0)
    return _Object(features.render(_planck(teff)), params)


def _k_giant(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(3900.0, 4900.0)
    features, params = _normal_star(rng, teff, gravity="giant", vsini=rng.uniform(1.0, 10.0))
    _m_molecules(features, (3850.0 - teff) / 150.0, dwarf=False, tio_scale=1.0)
    return _Object(features.render(_planck(teff)), params)


def _m_giant_features(
    rng: np.random.Generator, subclass: float, *, tio_scale: float
) -> tuple[_Features, float, dict[str, Any]]:
    teff = 3850.0 - 95.0 * subclass
    features, params = _normal_star(rng, teff, gravity="giant", vsini=rng.uniform(1.0, 8.0))
    _m_molecules(features, subclass, dwarf=False, tio_scale=tio_scale)
    params["spectral_type"] = f"M{subclass:.1f} III"
    return features, teff, params


def _mira_emission(
    rng: np.random.Generator, shift: float, subclass: float, params: dict[str, Any]
) -> _Emission:
    emission = _Emission(shift)
    if subclass > 4.0 and rng.random() < 0.2:  # Mira: Balmer emission, H-delta/H-gamma strongest
        for n, weight in ((3, 0.3), (4, 0.6), (5, 1.0), (6, 1.0)):
            emission.line(_balmer(n), weight * rng.uniform(2.0, 15.0), 80.0)
        params["mira"] = True
    return emission


def _m_giant(rng: np.random.Generator) -> _Object:
    subclass = rng.uniform(0.0, 7.5)
    features, teff, params = _m_giant_features(rng, subclass, tio_scale=rng.uniform(0.85, 1.15))
    emission = _mira_emission(rng, features.shift, subclass, params)
    return _Object(emission.apply(features.render(_planck(teff))), params)


def _s_star_like(rng: np.random.Generator, *, ms: bool) -> _Object:
    subclass = rng.uniform(1.0, 6.0)
    tio_scale = rng.uniform(0.45, 0.85) if ms else rng.uniform(0.0, 0.3)
    features, teff, params = _m_giant_features(rng, subclass, tio_scale=tio_scale)
    zro = rng.uniform(0.12, 0.4) if ms else rng.uniform(0.3, 1.2)
    features.bands(ZRO_BANDS, zro, redward=True)
    if subclass > 3.0:
        features.bands(LAO_BANDS, rng.uniform(0.0, 0.3), redward=True)
    params.update({"spectral_type": ("MS" if ms else "S") + f"{subclass:.0f}", "zro_tau": zro})
    params["tio_scale"] = tio_scale
    emission = _mira_emission(rng, features.shift, subclass, params)
    return _Object(emission.apply(features.render(_planck(teff))), params)


def _m_dwarf_features(
    rng: np.random.Generator, subclass: float, shift: float | None = None
) -> tuple[_Features, float]:
    teff = 3850.0 - 160.0 * subclass
    features = _Features(shift if shift is not None else _doppler(_stellar_velocity(rng)))
    _photosphere(features, rng, teff, gravity="dwarf", vsini=rng.uniform(1.0, 15.0))
    _m_molecules(features, subclass, dwarf=True, tio_scale=rng.uniform(0.85, 1.15))
    return features, teff


def _m_dwarf(rng: np.random.Generator) -> _Object:
    subclass = 6.0 * rng.random() ** 1.3
    features, teff = _m_dwarf_features(rng, subclass)
    params = {"teff": teff, "spectral_type": f"M{subclass:.1f} V", "gravity": "dwarf"}
    return _Object(features.render(_planck(teff)), params)


def _dme(rng: np.random.Generator) -> _Object:
    subclass = rng.uniform(1.0, 6.0)
    features, teff = _m_dwarf_features(rng, subclass)
    emission = _Emission(features.shift)
    ew = _log_uniform(rng, 1.5, 15.0)
    width = rng.uniform(20.0, 90.0)
    emission.line(_balmer(3), ew, width)
    higher = ew * rng.uniform(0.6, 1.3)
    for n in range(4, 9):
        emission.line(_balmer(n), higher, width)
        higher *= rng.uniform(0.6, 0.95)
    calcium = rng.uniform(2.0, 12.0)
    emission.line(CA_K, calcium, width)
    emission.line(CA_H, 0.8 * calcium, width)
    if rng.random() < 0.25:
        emission.line(HE_I[7][0], rng.uniform(0.2, 1.0), width)
    params = {"teff": teff, "spectral_type": f"M{subclass:.1f} Ve", "halpha_ew": ew}
    return _Object(emission.apply(features.render(_planck(teff))), params | {"width_kms": width})
