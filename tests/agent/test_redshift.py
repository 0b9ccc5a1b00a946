"""Redshift by cross-correlation (agent/redshift.py): synthetic spectra of known z, and real ones."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agent.redshift import (
    C_KMS,
    MAX_PIXELS,
    MAX_TEMPLATES,
    Template,
    cross_correlate,
    template_scaled_to,
)
from agent.redshift_templates import synthetic_templates

# Rest vacuum wavelengths of strong galaxy lines (emission) and of stellar absorption features.
EMISSION = (
    (3727.1, 3.0),
    (4862.7, 1.5),
    (4960.3, 1.2),
    (5008.2, 3.5),
    (6564.6, 4.0),
    (6585.3, 1.3),
)
ABSORPTION = ((3934.8, 0.5), (3969.6, 0.45), (4305.0, 0.2), (5176.7, 0.25), (5895.6, 0.3))
STAR_LINES = ((4102.9, 0.35), (4341.7, 0.4), (4862.7, 0.45), (6564.6, 0.5))


def gaussian_lines(wave: np.ndarray, lines, sigma: float) -> np.ndarray:
    out = np.zeros_like(wave)
    for centre, strength in lines:
        out += strength * np.exp(-0.5 * ((wave - centre) / sigma) ** 2)
    return out


def rest_grid(lo: float = 2500.0, hi: float = 9500.0) -> np.ndarray:
    return 10.0 ** np.arange(math.log10(lo), math.log10(hi), 5e-5)


def galaxy_template() -> Template:
    wave = rest_grid()
    continuum = (wave / 5000.0) ** -0.5
    flux = continuum * (1.0 - gaussian_lines(wave, ABSORPTION, 3.0)) + gaussian_lines(
        wave, EMISSION, 2.5
    )
    return Template("synthetic star-forming galaxy", "galaxy", wave, flux)


def star_template() -> Template:
    wave = rest_grid()
    flux = (wave / 5000.0) ** -2.0 * (1.0 - gaussian_lines(wave, STAR_LINES, 8.0))
    return Template("synthetic A star", "star", wave, flux)


def observed(template: Template, z: float, *, snr: float, seed: int = 1, lo=3700.0, hi=9200.0):
    rng = np.random.default_rng(seed)
    wave = 10.0 ** np.arange(math.log10(lo), math.log10(hi), 1e-4)
    flux = np.interp(wave / (1.0 + z), template.wavelength, template.flux)
    noise = np.median(np.abs(flux)) / snr
    ivar = np.full_like(wave, 1.0 / noise**2)
    return wave, 3.2 * flux + rng.normal(0.0, noise, wave.size), ivar


@pytest.mark.parametrize("z", [0.0123, 0.1, 0.347, 0.81])
def test_it_recovers_a_galaxy_redshift_within_its_uncertainty(z):
    wave, flux, ivar = observed(galaxy_template(), z, snr=15)
    fit = cross_correlate(wave, flux, ivar=ivar, templates=[galaxy_template(), star_template()])
    best = fit.best
    assert best is not None and best.template == "synthetic star-forming galaxy"
    assert abs(best.z - z) < max(3 * best.z_err, 1e-5), (best.z, z, best.z_err)
    assert 0 < best.z_err < 0.001 * (1 + z)
    assert best.r_value > 5


def test_it_recovers_a_star_velocity():
    z = 120.0 / C_KMS
    wave, flux, ivar = observed(star_template(), z, snr=30, seed=3)
    fit = cross_correlate(wave, flux, ivar=ivar, templates=[galaxy_template(), star_template()])
    assert fit.best is not None and fit.best.kind == "star"
    assert abs(fit.best.z - z) * C_KMS < max(3 * fit.best.z_err * C_KMS, 10.0)


def test_it_sorts_alternatives_by_r_and_keeps_them_distinct():
    wave, flux, ivar = observed(galaxy_template(), 0.25, snr=8, seed=5)
    fit = cross_correlate(
        wave, flux, ivar=ivar, templates=[galaxy_template(), star_template()], n_best=5
    )
    r_values = [c.r_value for c in fit.candidates]
    assert len(fit.candidates) >= 2
    assert r_values == sorted(r_values, reverse=True)
    for i, a in enumerate(fit.candidates):
        for b in fit.candidates[i + 1 :]:
            assert a.kind != b.kind or abs(a.z - b.z) / (1 + a.z) * C_KMS >= 1000.0


def test_it_ignores_masked_pixels_and_a_cosmic_ray():
    z = 0.2
    wave, flux, ivar = observed(galaxy_template(), z, snr=15, seed=7)
    flux[1000] = 1e6  # a cosmic ray, unmasked
    mask = np.zeros(wave.size, dtype=bool)
    mask[2000:2300] = True
    flux[2000:2300] = np.nan
    fit = cross_correlate(wave, flux, ivar=ivar, mask=mask, templates=[galaxy_template()])
    assert fit.best is not None and abs(fit.best.z - z) < 3 * fit.best.z_err + 1e-5


def test_it_bounds_pixels_and_templates():
    wave = np.geomspace(3000.0, 30000.0, 200_000)  # a log10 span of 1.0: 10,000 pixels at 1e-4
    flux = np.interp(wave / 1.1, galaxy_template().wavelength, galaxy_template().flux)
    templates = [galaxy_template()] * (MAX_TEMPLATES + 3)
    fit = cross_correlate(wave, flux, templates=templates)
    assert fit.n_pixels <= MAX_PIXELS
    assert fit.n_templates == MAX_TEMPLATES
    assert "3 templates" in fit.note


@pytest.mark.parametrize(
    ("z", "index"), [(0.5, 4), (2.1, 4), (3.2, 4), (0.3, 0), (0.15, 1), (0.0003, 2)]
)
def test_it_recovers_redshifts_with_the_synthetic_template_set(z, index):
    templates = synthetic_templates()
    truth = templates[index]
    wave, flux, ivar = observed(truth, z, snr=10, seed=11)
    fit = cross_correlate(wave, flux, ivar=ivar, templates=templates)
    assert fit.best is not None and abs(fit.best.z - z) < 3 * fit.best.z_err + 1e-5
    # (a z = 0.5 quasar's narrow lines match the emission-line galaxy best; it is an alternative)
    assert any(
        c.template == truth.name and abs(c.z - z) < 3 * c.z_err + 1e-5 for c in fit.candidates
    )


def test_it_returns_no_candidate_for_a_blank_spectrum():
    wave = np.linspace(4000.0, 8000.0, 30)
    fit = cross_correlate(wave, np.ones_like(wave), templates=[galaxy_template()])
    assert fit.candidates == () and "good pixels" in fit.note


def test_it_scales_the_template_to_the_observed_flux():
    wave, flux, ivar = observed(galaxy_template(), 0.1, snr=1000)
    scale = template_scaled_to(galaxy_template(), 0.1, wave, flux, ivar)
    assert scale == pytest.approx(3.2, rel=0.01)


# --- real spectra: the corpus (skipped where `make real-data` has not built the cache) ---------


def _corpus_templates(exclude: str):
    from agent import real_corpus

    found = real_corpus.redshift_templates(exclude=(exclude,))
    if not found:
        pytest.skip("the real-data cache is not built (make real-data)")
    return [
        Template(
            f"{entry.object} ({entry.subclass})",
            "galaxy" if entry.spectral_class == "GALAXY" else "star",
            spectrum.wavelength,
            np.where(spectrum.good, spectrum.flux, np.nan),
        )
        for entry, spectrum in found
    ]


@pytest.mark.parametrize("corpus_id", ["lamost-001", "lamost-013", "sdss-ngc3522", "sdss-ngc3073"])
def test_it_agrees_with_the_survey_pipeline_on_real_spectra(corpus_id):
    """LAMOST stars and SDSS galaxies, each against the corpus templates but itself: the best
    redshift lies within 3 sigma (ours and the pipeline's Z_ERR together) of the pipeline's Z."""
    from agent import real_corpus

    templates = _corpus_templates(corpus_id)
    entry = next(e for e in real_corpus.load_manifest() if e.id == corpus_id)
    spectrum = real_corpus.load_entry(entry)
    fit = cross_correlate(
        spectrum.wavelength,
        spectrum.flux,
        ivar=spectrum.ivar,
        mask=spectrum.mask,
        templates=templates,
    )
    best = fit.best
    assert best is not None
    error = math.hypot(best.z_err, float(spectrum.meta["Z_ERR"]))
    assert abs(best.z - spectrum.redshift) < 3 * error, (best, spectrum.redshift)
    # A galaxy template of old stars fits a G star as well as an R ~ 500 Pickles composite does:
    # the right kind must be among the alternatives, at the pipeline's redshift too.
    kind = "galaxy" if entry.spectral_class == "GALAXY" else "star"
    assert any(
        c.kind == kind and abs(c.z - spectrum.redshift) < 3 * math.hypot(c.z_err, error)
        for c in fit.candidates
    )


def test_it_falls_back_to_synthetic_templates_without_the_cache(monkeypatch):
    from agent import redshift_templates

    monkeypatch.setattr(redshift_templates, "corpus_templates", lambda: ())
    fallback = redshift_templates.default_template_set()
    assert fallback.source == "synthetic" and "make real-data" in fallback.note
    assert {t.kind for t in fallback.templates} == {"galaxy", "star", "qso"}
    star = star_template()
    real = Template("Pickles G5V composite (G5V)", "star", star.wavelength, star.flux)
    monkeypatch.setattr(redshift_templates, "corpus_templates", lambda: (real,))
    with_corpus = redshift_templates.default_template_set()
    assert with_corpus.source == "corpus"
    assert [t.name for t in with_corpus.templates] == [
        real.name,
        "synthetic quasar (SpecVI-mini lines)",
    ]
