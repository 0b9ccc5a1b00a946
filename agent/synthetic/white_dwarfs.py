"""White dwarfs (DA, DAH, DB, DO, DC, DZ, DQ) and hot subdwarfs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agent.synthetic.lines import CA_H, CA_I, CA_K, HE_I, HE_II, MG_B, NA_D, SWAN_BANDS, _balmer
from agent.synthetic.physics import _doppler, _Features, _log_uniform, _planck, _stellar_velocity
from agent.synthetic.stars import _balmer_series, _Object, _photosphere


def _da_balmer(features: _Features, rng: np.random.Generator, teff: float) -> dict[str, float]:
    logt = math.log10(teff)
    hot = logt > 4.1
    depth = 0.08 + 0.52 * math.exp(-(((logt - 4.1) / (0.35 if hot else 0.2)) ** 2))
    width = 2200.0 + 3800.0 * math.exp(-(((logt - 4.1) / 0.25) ** 2))
    depth *= rng.uniform(0.9, 1.1)
    width *= rng.uniform(0.85, 1.2)  # mass (surface gravity) spread
    n_max = 9 + int(rng.integers(0, 2)) + (1 if teff < 10000.0 else 0)
    _balmer_series(features, depth, width, lorentz=0.75, n_max=n_max, growth=0.22)
    return {"balmer_depth": depth, "hbeta_fwhm_kms": width}


def _white_dwarf(rng: np.random.Generator, teff: float, **params: Any) -> tuple[_Features, dict]:
    features = _Features(_doppler(rng.normal(30.0, 30.0)))  # gravitational redshift + motion
    return features, {"teff": teff, **params}


def _da_wd(rng: np.random.Generator) -> _Object:
    teff = _log_uniform(rng, 7500.0, 40000.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DA")
    params.update(_da_balmer(features, rng, teff))
    return _Object(features.render(_planck(teff)), params)


def _dah_wd(rng: np.random.Generator) -> _Object:
    teff = _log_uniform(rng, 8000.0, 30000.0)
    field_mg = rng.uniform(3.0, 40.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DAH", field_mg=field_mg)
    logt = math.log10(teff)
    depth = (0.1 + 0.35 * math.exp(-(((logt - 4.1) / 0.3) ** 2))) * 0.6
    for n in range(3, 8):
        centre = _balmer(n)
        split = 4.67e-13 * centre**2 * field_mg * 1e6  # normal Zeeman triplet spacing in A
        for offset in (-split, 0.0, split):
            features.line(centre + offset, depth, 1500.0 + 200.0 * n, 0.4)
    return _Object(features.render(_planck(teff)), params)


def _db_wd(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(12000.0, 30000.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DB")
    strength = 0.1 + 0.2 * math.exp(-(((math.log10(teff) - 4.35) / 0.12) ** 2))
    width = rng.uniform(1200.0, 2500.0)
    for centre, relative in HE_I:
        features.line(centre, strength * relative, width, 0.5)
    return _Object(features.render(_planck(teff)), params | {"he_depth": strength})


def _do_wd(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(45000.0, 100000.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DO")
    depth, width = rng.uniform(0.08, 0.2), rng.uniform(1500.0, 3000.0)
    for (centre, _), relative in zip(HE_II, (0.5, 0.6, 1.0, 0.7), strict=True):
        features.line(centre, depth * relative, width, 0.4)
    return _Object(features.render(_planck(teff)), params)


def _dc_wd(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(5000.0, 11000.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DC")
    return _Object(features.render(_planck(teff)), params)


def _dz_wd(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(6000.0, 12000.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DZ")
    depth, width = rng.uniform(0.3, 0.75), rng.uniform(1500.0, 3500.0)
    features.line(CA_K, depth, width, 0.5)
    features.line(CA_H, 0.85 * depth, width, 0.5)
    for centre in MG_B:
        features.line(centre, rng.uniform(0.0, 0.15), 1500.0)
    for centre in NA_D:
        features.line(centre, rng.uniform(0.0, 0.15), 1500.0)
    features.line(CA_I, rng.uniform(0.0, 0.2), 1200.0)
    return _Object(features.render(_planck(teff)), params)


def _dq_wd(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(5500.0, 10000.0)
    features, params = _white_dwarf(rng, teff, spectral_type="DQ")
    swan = rng.uniform(0.3, 1.2)
    features.bands(SWAN_BANDS, swan, redward=False, stretch=1.2)
    return _Object(features.render(_planck(teff)), params | {"swan_tau": swan})


def _sdb(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(22000.0, 38000.0)
    features = _Features(_doppler(_stellar_velocity(rng)))
    depth, width = rng.uniform(0.28, 0.45), rng.uniform(1300.0, 2200.0)
    _balmer_series(
        features, depth, width, lorentz=0.5, n_max=12 + int(rng.integers(0, 2)), growth=0.12
    )
    helium = rng.uniform(0.01, 0.06)
    for centre, relative in HE_I:
        features.line(centre, helium * relative, 400.0)
    params = {"teff": teff, "spectral_type": "sdB", "hbeta_fwhm_kms": width}
    return _Object(features.render(_planck(teff)), params)


def _sdo(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(40000.0, 70000.0)
    features = _Features(_doppler(_stellar_velocity(rng)))
    _balmer_series(
        features,
        rng.uniform(0.1, 0.25),
        rng.uniform(1000.0, 1800.0),
        lorentz=0.4,
        n_max=12,
        growth=0.1,
    )
    depth, width = rng.uniform(0.05, 0.15), rng.uniform(800.0, 1600.0)
    for centre, relative in HE_II:
        features.line(centre, depth * relative, width, 0.3)
    for centre, relative in HE_I:
        features.line(centre, rng.uniform(0.0, 0.03) * relative, 500.0)
    return _Object(features.render(_planck(teff)), {"teff": teff, "spectral_type": "sdO"})


def _sda(rng: np.random.Generator) -> _Object:
    teff = rng.uniform(7000.0, 9200.0)
    features = _Features(_doppler(_stellar_velocity(rng)))
    _photosphere(features, rng, teff, gravity="subdwarf", vsini=rng.uniform(5.0, 40.0), metals=0.4)
    params = {"teff": teff, "spectral_type": "sdA", "gravity": "subdwarf"}
    return _Object(features.render(_planck(teff)), params)
