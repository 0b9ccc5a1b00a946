"""Class and redshift by chi-square (agent/redshift_fit.py): synthetic spectra of known class
and z, MARZ's quality, the class-disagreement rule, and the real LAMOST and SDSS spectra."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.redshift import C_KMS, Template
from agent.redshift_fit import (
    STAR_Z_LIMIT,
    class_disagreement,
    fit_class_and_redshift,
    quality_of,
)
from agent.redshift_templates import synthetic_templates

TEMPLATES = synthetic_templates()
BY_NAME = {t.name: t for t in TEMPLATES}


def observed(template: Template, z: float, *, snr: float = 20.0, seed: int = 1):
    rng = np.random.default_rng(seed)
    wave = 10.0 ** np.arange(math.log10(3700.0), math.log10(9200.0), 1e-4)
    # a tilted continuum: the polynomial must absorb a flux calibration the template lacks
    flux = np.interp(wave / (1.0 + z), template.wavelength, template.flux)
    flux = 3.0 * flux * (1.0 + 0.2 * (wave / 6000.0 - 1.0))
    noise = float(np.median(np.abs(flux))) / snr
    return wave, flux + rng.normal(0.0, noise, wave.size), np.full(wave.size, 1.0 / noise**2)


@pytest.mark.parametrize(
    ("name", "z", "spectype"),
    [
        ("synthetic K star", 80.0 / C_KMS, "STAR"),
        ("synthetic A star", -150.0 / C_KMS, "STAR"),
        ("synthetic passive galaxy", 0.15, "GALAXY"),
        ("synthetic emission-line galaxy", 0.3, "GALAXY"),
        ("synthetic quasar (SpecVI-mini lines)", 2.1, "QSO"),
    ],
)
def test_it_finds_the_class_first_and_the_redshift_within_its_error(name, z, spectype):
    wave, flux, ivar = observed(BY_NAME[name], z)
    fit = fit_class_and_redshift(wave, flux, ivar=ivar, templates=TEMPLATES)
    best = fit.best
    assert best is not None and fit.spectype == spectype == best.spectype
    assert best.template == name
    # within 3 sigma, or 30 km/s (a point-sampled template's sharp edges shift a quasar ~15)
    assert abs(best.z - z) < max(3 * best.z_err, 1e-4 * (1.0 + z))
    assert fit.class_delta_chi2 > 25 and not fit.small_delta_chi2
    assert [a.chi2 for a in fit.alternatives] == sorted(a.chi2 for a in fit.alternatives)


def test_it_rates_a_clear_star_six_and_the_other_classes_below():
    wave, flux, ivar = observed(BY_NAME["synthetic K star"], 30.0 / C_KMS)
    fit = fit_class_and_redshift(wave, flux, ivar=ivar, templates=TEMPLATES)
    assert fit.best is not None and fit.best.quality == 6 and fit.best.quality_label == "star"
    assert abs(fit.best.velocity_kms - 30.0) < 3 * fit.best.z_err * C_KMS + 5.0
    others = [a for a in fit.alternatives if a.spectype != "STAR"]
    assert others and {a.quality for a in others} <= {1, 2}


def test_it_keeps_a_star_within_a_stars_velocities():
    """No star template is tried beyond 600 km/s (Redrock's grid): a K star moved to z = 0.3
    cannot come out as a STAR there."""
    wave, flux, ivar = observed(BY_NAME["synthetic K star"], 0.3)
    fit = fit_class_and_redshift(wave, flux, ivar=ivar, templates=TEMPLATES)
    assert all(abs(a.z) <= 0.0021 for a in fit.alternatives if a.spectype == "STAR")
    assert fit.spectype != "STAR"


def test_it_says_the_class_is_unsure_when_two_fit_alike():
    """Two copies of one template under two classes: the class margin is ~0, quality 1 or 2."""
    star = BY_NAME["synthetic K star"]
    twin = Template("the same spectrum called a galaxy", "galaxy", star.wavelength, star.flux)
    wave, flux, ivar = observed(star, 0.0)
    fit = fit_class_and_redshift(wave, flux, ivar=ivar, templates=[star, twin])
    assert fit.class_delta_chi2 < 9 and fit.small_delta_chi2
    assert fit.best is not None and fit.best.quality in (1, 2)


@pytest.mark.parametrize(
    ("margin", "spectype", "quality"),
    [(500.0, "GALAXY", 4), (30.0, "QSO", 3), (10.0, "GALAXY", 2), (3.0, "GALAXY", 1),
     (500.0, "STAR", 6), (30.0, "STAR", 6), (10.0, "STAR", 2)],
)  # fmt: skip
def test_it_maps_the_chi2_margin_to_marz_quality(margin, spectype, quality):
    assert quality_of(margin, spectype) == quality


def test_it_ignores_zero_padding_the_file_gives_a_variance():
    wave, flux, ivar = observed(BY_NAME["synthetic K star"], 0.0)
    padded = flux.copy()
    padded[-200:] = 0.0  # LAMOST's red end: zeros with an inverse variance
    clean = fit_class_and_redshift(wave[:-200], flux[:-200], ivar=ivar[:-200], templates=TEMPLATES)
    fit = fit_class_and_redshift(wave, padded, ivar=ivar, templates=TEMPLATES)
    assert fit.n_pixels == clean.n_pixels
    assert fit.best is not None and clean.best is not None
    assert fit.best.chi2 == pytest.approx(clean.best.chi2)


def test_it_names_a_disagreement_with_the_class():
    assert class_disagreement("STAR", 1200.0, 1.29578, "qso").startswith(
        "the fit classes this spectrum as a STAR, by 1200 in chi2; z = 1.29578 is no star's"
    )
    assert "GALAXY template" in class_disagreement("STAR", 50.0, 0.0001, "galaxy")
    assert class_disagreement("STAR", 50.0, STAR_Z_LIMIT * 0.5, "star") == ""
    assert class_disagreement("STAR", 50.0, 0.005) == ""  # typed, a fast star
    assert class_disagreement("GALAXY", 50.0, 0.3, "galaxy") == ""
    assert "QSO template" in class_disagreement("GALAXY", 50.0, 1.3, "qso")
    assert class_disagreement("", math.inf, 2.0, "qso") == ""  # nothing fitted


def test_it_returns_no_alternative_for_too_few_pixels():
    wave = np.linspace(4000.0, 8000.0, 30)
    fit = fit_class_and_redshift(wave, np.ones_like(wave), templates=TEMPLATES)
    assert fit.alternatives == () and fit.spectype == "" and "good pixels" in fit.note


# --- real spectra (skipped where `make real-data` has not built the cache) ---------------------


@pytest.fixture(scope="module")
def corpus_set():
    from agent.redshift_templates import default_template_set

    template_set = default_template_set()
    if template_set.source != "corpus":
        pytest.skip("the real-data cache is not built (make real-data)")
    return template_set


def test_it_uses_only_development_library_spectra_as_templates(corpus_set):
    from agent import real_corpus
    from agent.redshift_templates import OLD_POPULATION, STAR_TEMPLATES, YOUNG_POPULATION

    by_id = {e.id: e for e in real_corpus.load_manifest()}
    used = [*STAR_TEMPLATES, *(k for k, _ in OLD_POPULATION + YOUNG_POPULATION)]
    assert {by_id[k].split for k in used} == {"development"}
    assert all(by_id[k].source == "exosims" for k in used)  # the Pickles composites
    stars = [t for t in corpus_set.templates if t.kind == "star"]
    assert len(stars) == len(STAR_TEMPLATES) and all(t.name.startswith("Pickles") for t in stars)


@pytest.mark.parametrize(
    ("corpus_id", "spectype"),
    [("lamost-001", "STAR"), ("lamost-013", "STAR"), ("sdss-ngc3522", "GALAXY")],
)
def test_it_classes_the_real_spectra_as_their_surveys_do(corpus_set, corpus_id, spectype):
    """The LAMOST G7 and A2 stars are STARs with MARZ's 6; NGC 3522 a GALAXY at SDSS's z."""
    from agent import real_corpus

    entry = next(e for e in real_corpus.load_manifest() if e.id == corpus_id)
    spectrum = real_corpus.load_entry(entry)
    fit = fit_class_and_redshift(
        spectrum.wavelength,
        spectrum.flux,
        ivar=spectrum.ivar,
        mask=spectrum.mask,
        templates=corpus_set.templates,
    )
    best = fit.best
    assert best is not None and fit.spectype == spectype
    assert fit.class_delta_chi2 > 25
    assert best.quality == (6 if spectype == "STAR" else 4)
    # At the survey's own z (LAMOST: heliocentric; the A2 star at -320 km/s), within 3 sigma.
    # With the telluric bands left in, the A2 star fitted -72 +- 54 km/s: 4.6 sigma off.
    survey = float(spectrum.meta["Z"])
    error = math.hypot(best.z_err, float(spectrum.meta["Z_ERR"]))
    assert abs(best.z - survey) < 3 * error, (best.velocity_kms, survey * 299792.458)


def test_it_leaves_the_atmospheres_bands_out_of_the_fit():
    """Telluric bands sit at the telescope's velocity: a star fitted on them alone would come
    out at v = 0 whatever its own; the fit never sees those pixels."""
    from agent.redshift_fit import TELLURIC_BANDS, _prepare

    wave = np.linspace(3700.0, 9100.0, 4000)
    spec = _prepare(wave, np.ones_like(wave), None, None)
    assert spec is not None
    for lo, hi in TELLURIC_BANDS:
        assert not np.any((spec.wave >= lo) & (spec.wave <= hi))
