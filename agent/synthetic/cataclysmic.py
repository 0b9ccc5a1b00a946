"""Cataclysmic variables: dwarf novae, polars, high states and white-dwarf-dominated systems."""

from __future__ import annotations

import math

import numpy as np

from agent.synthetic.lines import (
    BOWEN,
    C_KMS,
    CA_TRIPLET,
    FE_II,
    HE_I,
    HE_I_7065,
    HE_II_4686,
    WAVELENGTH,
    _balmer,
)
from agent.synthetic.physics import (
    _at,
    _convolve_lsf,
    _doppler,
    _Emission,
    _Features,
    _log_uniform,
    _planck,
    _power_law,
    _stellar_velocity,
)
from agent.synthetic.stars import _balmer_series, _m_dwarf_features, _Object


def _donor(rng: np.random.Generator, shift: float) -> tuple[np.ndarray, float]:
    subclass = rng.uniform(2.0, 5.5)
    features, teff = _m_dwarf_features(rng, subclass, shift)
    return features.render(_planck(teff)), subclass


def _add_at(base: np.ndarray, extra: np.ndarray, fraction: float, wavelength: float) -> np.ndarray:
    """Add ``extra`` scaled to make up ``fraction`` of the total flux at ``wavelength``."""
    if fraction <= 0.0:
        return base
    scale = _at(base, wavelength) * fraction / (1.0 - fraction) / _at(extra, wavelength)
    return base + scale * extra


def _disc_emission(
    emission: _Emission,
    rng: np.random.Generator,
    *,
    halpha_ew: float,
    component_fwhm: float,
    separation: float,
    he_ii: float,
) -> None:
    """Balmer, He I, He II and weaker disc lines with a flat CV Balmer decrement."""
    line = {"fwhm_kms": component_fwhm, "separation_kms": separation}
    emission.line(_balmer(3), halpha_ew, **line)
    hbeta = halpha_ew * rng.uniform(0.3, 0.7)
    strength = hbeta
    for n in range(4, 10):
        emission.line(_balmer(n), strength, **line)
        strength *= rng.uniform(0.6, 0.9)
    helium = {5877.25: (0.08, 0.2), 6679.99: (0.04, 0.1), HE_I_7065: (0.03, 0.07)}
    for centre, (low, high) in helium.items():
        emission.line(centre, halpha_ew * rng.uniform(low, high), **line)
    for centre, low, high in (
        (HE_I[3][0], 0.1, 0.3),
        (HE_I[5][0], 0.05, 0.15),
        (HE_I[6][0], 0.04, 0.12),
    ):
        emission.line(centre, hbeta * rng.uniform(low, high), **line)
    if he_ii > 0.0:
        emission.line(HE_II_4686, hbeta * he_ii, component_fwhm, separation_kms=0.7 * separation)
        for centre in BOWEN:
            emission.line(centre, 0.25 * hbeta * he_ii * rng.uniform(0.3, 1.0), 500.0)
    if rng.random() < 0.3:
        for centre in FE_II:
            emission.line(centre, rng.uniform(0.5, 3.0), **line)
    if rng.random() < 0.25:
        for centre, weight in CA_TRIPLET:
            emission.line(centre, weight * rng.uniform(1.0, 6.0), **line)


def _inclination(rng: np.random.Generator) -> float:
    return math.degrees(math.acos(rng.uniform(0.05, 1.0)))


def _cv_dwarf_nova(rng: np.random.Generator) -> _Object:
    shift = _doppler(_stellar_velocity(rng))
    wd_teff, disc_teff = rng.uniform(11000.0, 25000.0), rng.uniform(6000.0, 14000.0)
    white_dwarf = _Features(shift)
    _balmer_series(
        white_dwarf,
        rng.uniform(0.2, 0.45),
        rng.uniform(3000.0, 5000.0),
        lorentz=0.7,
        n_max=10,
        growth=0.2,
    )
    wd_flux = white_dwarf.render(_planck(wd_teff))
    disc = _convolve_lsf(_planck(disc_teff) * _power_law(rng.uniform(-0.5, 0.5)))
    flux = _add_at(disc, wd_flux, rng.uniform(0.2, 0.7), 4500.0)
    donor, subclass = _donor(rng, shift)
    donor_fraction = rng.uniform(0.0, 0.6)
    flux = _add_at(flux, donor, donor_fraction, 7500.0)
    inclination = _inclination(rng)
    separation = 2.0 * rng.uniform(400.0, 750.0) * math.sin(math.radians(inclination))
    component = rng.uniform(600.0, 1200.0)
    halpha = _log_uniform(rng, 15.0, 200.0)
    he_ii = rng.uniform(0.05, 0.4) if rng.random() < 0.3 else 0.0
    emission = _Emission(shift)
    _disc_emission(
        emission,
        rng,
        halpha_ew=halpha,
        component_fwhm=component,
        separation=separation,
        he_ii=he_ii,
    )
    params = {"wd_teff": wd_teff, "disc_teff": disc_teff, "inclination_deg": inclination}
    params |= {
        "halpha_ew": halpha,
        "peak_separation_kms": separation,
        "donor_fraction": donor_fraction,
        "donor_subclass": subclass,
    }
    return _Object(emission.apply(flux), params | {"component_fwhm_kms": component, "he_ii": he_ii})


def _cv_polar(rng: np.random.Generator) -> _Object:
    shift = _doppler(_stellar_velocity(rng))
    wd_teff = rng.uniform(9000.0, 20000.0)
    continuum = _planck(wd_teff)
    for _ in range(int(rng.integers(1, 4))):  # cyclotron humps
        centre, width = rng.uniform(4000.0, 8500.0), rng.uniform(300.0, 600.0)
        continuum = continuum * (
            1.0 + rng.uniform(0.2, 0.8) * np.exp(-0.5 * ((WAVELENGTH - centre) / width) ** 2)
        )
    flux = _convolve_lsf(continuum)
    donor, _ = _donor(rng, shift)
    flux = _add_at(flux, donor, rng.uniform(0.1, 0.6), 7500.0)
    emission = _Emission(shift)
    fwhm = rng.uniform(450.0, 1100.0)
    halpha = _log_uniform(rng, 20.0, 150.0)
    hbeta = halpha * rng.uniform(0.5, 0.9)
    emission.line(_balmer(3), halpha, fwhm)
    emission.line(_balmer(3) * (1 + rng.uniform(-300, 300) / C_KMS), 0.15 * halpha, 150.0)
    strength = hbeta
    for n in range(4, 10):
        emission.line(_balmer(n), strength, fwhm)
        strength *= rng.uniform(0.7, 0.95)
    he_ii = rng.uniform(0.4, 1.0)
    emission.line(HE_II_4686, hbeta * he_ii, fwhm)
    for centre in BOWEN:
        emission.line(centre, 0.25 * hbeta * he_ii * rng.uniform(0.2, 0.6), 500.0)
    for centre, relative in HE_I:
        emission.line(centre, halpha * rng.uniform(0.05, 0.15) * relative, fwhm)
    params = {"wd_teff": wd_teff, "halpha_ew": halpha, "fwhm_kms": fwhm, "he_ii": he_ii}
    return _Object(emission.apply(flux), params)


def _cv_high_state(rng: np.random.Generator) -> _Object:
    shift = _doppler(_stellar_velocity(rng))
    disc_teff = rng.uniform(15000.0, 40000.0)
    disc = _Features(shift)
    depth, width = rng.uniform(0.1, 0.25), rng.uniform(2500.0, 5000.0)
    _balmer_series(disc, depth, width, lorentz=0.3, n_max=12, growth=0.05)
    for centre, relative in HE_I:
        disc.line(centre, rng.uniform(0.02, 0.07) * relative, rng.uniform(2000.0, 3500.0))
    flux = disc.render(_planck(disc_teff) * _power_law(rng.uniform(-0.3, 0.3)))
    donor, _ = _donor(rng, shift)
    flux = _add_at(flux, donor, rng.uniform(0.0, 0.08), 7500.0)
    emission = _Emission(shift)
    core = 0.0
    if rng.random() < 0.75:
        core = rng.uniform(1.0, 10.0)
        core_width = rng.uniform(500.0, 1200.0)
        emission.line(_balmer(3), core, core_width)
        emission.line(_balmer(4), rng.uniform(0.0, 2.0), core_width)
    if rng.random() < 0.5:
        emission.line(HE_II_4686, rng.uniform(0.5, 4.0), rng.uniform(400.0, 1000.0))
        if rng.random() < 0.6:
            for centre in BOWEN:
                emission.line(centre, rng.uniform(0.1, 0.6), 500.0)
    params = {"disc_teff": disc_teff, "balmer_depth": depth, "hbeta_fwhm_kms": width}
    return _Object(emission.apply(flux), params | {"halpha_core_ew": core})


def _cv_wd_dominated(rng: np.random.Generator) -> _Object:
    shift = _doppler(_stellar_velocity(rng))
    wd_teff = rng.uniform(11000.0, 17000.0)
    white_dwarf = _Features(shift)
    _balmer_series(
        white_dwarf,
        rng.uniform(0.3, 0.5),
        rng.uniform(3500.0, 5500.0),
        lorentz=0.75,
        n_max=10,
        growth=0.22,
    )
    flux = white_dwarf.render(_planck(wd_teff))
    donor, _ = _donor(rng, shift)
    flux = _add_at(flux, donor, rng.uniform(0.0, 0.15), 7500.0)
    inclination = _inclination(rng)
    separation = 2.0 * rng.uniform(700.0, 1100.0) * math.sin(math.radians(inclination))
    halpha = _log_uniform(rng, 15.0, 80.0)
    emission = _Emission(shift)
    _disc_emission(
        emission,
        rng,
        halpha_ew=halpha,
        component_fwhm=rng.uniform(500.0, 900.0),
        separation=separation,
        he_ii=0.0,
    )
    params = {"wd_teff": wd_teff, "inclination_deg": inclination, "halpha_ew": halpha}
    return _Object(emission.apply(flux), params | {"peak_separation_kms": separation})
