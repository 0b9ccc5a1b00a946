"""Carbon stars: N, R, CH and dwarf carbon."""

from __future__ import annotations

import numpy as np

from agent.synthetic.lines import (
    BA_II,
    CN_RED_BANDS,
    CN_VIOLET_BANDS,
    G_BAND,
    NA_D,
    SR_II,
    SWAN_BANDS,
    WAVELENGTH,
)
from agent.synthetic.physics import _doppler, _Features, _planck, _stellar_velocity
from agent.synthetic.stars import _Object, _photosphere


def _carbon(
    rng: np.random.Generator,
    *,
    teff: float,
    gravity: str,
    swan: float,
    cn_violet: float,
    cn_red: float,
    blanketing: float,
    variety: str,
) -> _Object:
    metals = 0.5 if variety == "C-H" else 1.0
    features = _Features(_doppler(_stellar_velocity(rng)))
    _photosphere(features, rng, teff, gravity=gravity, vsini=rng.uniform(1.0, 8.0), metals=metals)
    features.bands(SWAN_BANDS, swan, redward=False)
    features.bands(CN_VIOLET_BANDS, cn_violet, redward=False)
    features.bands(CN_RED_BANDS, cn_red, redward=False)
    for centre in NA_D:
        features.line(centre, rng.uniform(0.5, 0.8), 400.0, 0.3)
    if variety == "C-H":
        features.line(G_BAND, rng.uniform(0.45, 0.7), 1500.0)
        features.line(BA_II, rng.uniform(0.1, 0.25), 200.0)
        features.line(SR_II, rng.uniform(0.1, 0.25), 200.0)
    continuum = _planck(teff) * np.exp(-blanketing * (4500.0 / WAVELENGTH) ** 4)
    params = {"teff": teff, "spectral_type": variety, "gravity": gravity, "swan_tau": swan}
    return _Object(features.render(continuum), params | {"cn_red_tau": cn_red})


def _carbon_n(rng: np.random.Generator) -> _Object:
    return _carbon(
        rng,
        teff=rng.uniform(2600.0, 3300.0),
        gravity="giant",
        swan=rng.uniform(0.8, 1.8),
        cn_violet=rng.uniform(0.8, 1.5),
        cn_red=rng.uniform(0.4, 1.0),
        blanketing=rng.uniform(0.5, 2.0),
        variety="C-N",
    )


def _carbon_r(rng: np.random.Generator) -> _Object:
    return _carbon(
        rng,
        teff=rng.uniform(3800.0, 4800.0),
        gravity="giant",
        swan=rng.uniform(0.5, 1.2),
        cn_violet=rng.uniform(0.4, 0.9),
        cn_red=rng.uniform(0.2, 0.6),
        blanketing=rng.uniform(0.0, 0.5),
        variety="C-R",
    )


def _carbon_ch(rng: np.random.Generator) -> _Object:
    return _carbon(
        rng,
        teff=rng.uniform(4200.0, 5200.0),
        gravity="giant",
        swan=rng.uniform(0.12, 0.6),
        cn_violet=rng.uniform(0.3, 0.7),
        cn_red=rng.uniform(0.1, 0.4),
        blanketing=rng.uniform(0.0, 0.3),
        variety="C-H",
    )


def _dwarf_carbon(rng: np.random.Generator) -> _Object:
    return _carbon(
        rng,
        teff=rng.uniform(3800.0, 5000.0),
        gravity="dwarf",
        swan=rng.uniform(0.3, 1.4),
        cn_violet=rng.uniform(0.2, 0.5),
        cn_red=rng.uniform(0.1, 0.4),
        blanketing=rng.uniform(0.0, 0.5),
        variety="dC",
    )
