"""Extragalactic and nebular contaminants: quasars and planetary nebulae."""

from __future__ import annotations

import numpy as np

from agent.synthetic.lines import (
    HE_II_4686,
    LYMAN_ALPHA,
    NEBULAR,
    QUASAR_LINES,
    WAVELENGTH,
    _balmer,
)
from agent.synthetic.physics import (
    _convolve_lsf,
    _doppler,
    _Emission,
    _Features,
    _log_uniform,
    _planck,
    _span,
    _stellar_velocity,
)
from agent.synthetic.stars import _Object


def _quasar(rng: np.random.Generator) -> _Object:
    redshift = rng.uniform(0.08, 2.8)
    shift = 1.0 + redshift
    rest = WAVELENGTH / shift
    continuum = (rest / 3000.0) ** -rng.uniform(1.0, 2.0)
    for centre, width in ((2450.0, 250.0), (4900.0, 350.0)):  # Fe II pseudo-continuum humps
        continuum = continuum * (
            1.0 + rng.uniform(0.05, 0.3) * np.exp(-0.5 * ((rest - centre) / width) ** 2)
        )
    features = _Features(shift)
    forest = _span(0.0, LYMAN_ALPHA * shift)
    if forest.stop > forest.start:
        for centre in rng.uniform(WAVELENGTH[0], LYMAN_ALPHA * shift, 60):
            features.line(centre / shift, rng.uniform(0.1, 0.7), rng.uniform(60.0, 200.0))
    emission = _Emission(shift)
    broad = rng.uniform(2000.0, 7000.0)
    for centre, (low, high), is_broad in QUASAR_LINES:
        emission.line(
            centre, rng.uniform(low, high), broad if is_broad else rng.uniform(250.0, 600.0)
        )
    flux = emission.apply(features.render(continuum))
    return _Object(flux, {"redshift": redshift, "broad_fwhm_kms": broad, "spectral_type": "QSO"})


def _planetary_nebula(rng: np.random.Generator) -> _Object:
    shift = _doppler(_stellar_velocity(rng))
    central_star = _convolve_lsf(_planck(rng.uniform(50000.0, 100000.0)))
    emission = _Emission(shift)
    width = rng.uniform(20.0, 45.0)
    oiii = _log_uniform(rng, 200.0, 2000.0)
    hbeta = oiii / rng.uniform(3.0, 15.0)
    halpha = hbeta * rng.uniform(2.9, 4.5)
    nii = halpha * rng.uniform(0.1, 2.0)
    lines = {
        NEBULAR["[O III] 5008"]: oiii,
        NEBULAR["[O III] 4960"]: oiii / 3.0,
        _balmer(4): hbeta,
        _balmer(5): 0.47 * hbeta,
        _balmer(6): 0.26 * hbeta,
        _balmer(3): halpha,
        NEBULAR["[N II] 6585"]: nii,
        NEBULAR["[N II] 6550"]: nii / 3.0,
        5877.25: 0.13 * hbeta,
        HE_II_4686: rng.uniform(0.0, 0.8) * hbeta,
        NEBULAR["[Ne III] 3869"]: rng.uniform(0.3, 1.0) * hbeta,
        NEBULAR["[S II] 6718"]: rng.uniform(0.05, 0.2) * halpha,
        NEBULAR["[S II] 6733"]: rng.uniform(0.05, 0.2) * halpha,
        NEBULAR["[Ar III] 7138"]: 0.1 * hbeta,
        NEBULAR["[O I] 6302"]: rng.uniform(0.0, 0.1) * hbeta,
    }
    for centre, ew in lines.items():
        emission.line(centre, ew, width)
    params = {"spectral_type": "PN", "oiii_ew": oiii, "hbeta_ew": hbeta}
    return _Object(emission.apply(central_star), params)
