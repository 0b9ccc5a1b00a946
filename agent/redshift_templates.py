"""Templates for the redshift fit (agent.redshift): the real corpus's, and synthetic ones.

The real set (agent.real_corpus.redshift_templates) has Pickles stars and two SDSS galaxies (both
absorption-line spectra) but no emission-line galaxy and no quasar: no pinned wheel ships one. A
synthetic emission-line galaxy and quasar, built from the SpecVI-mini line lists
(agent.synthetic.lines), fill those gaps and are named as synthetic. Where the real-data cache
is not built, synthetic galaxies and stars stand in for the rest (and the viewer says so).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agent.redshift import Template
from agent.synthetic.lines import (
    CA_H,
    CA_K,
    G_BAND,
    MG_B,
    NA_D,
    NEBULAR,
    QUASAR_LINES,
    _balmer,
)

_OII = 3728.48  # vacuum, the doublet's mean
_GRID = 10.0 ** np.arange(np.log10(900.0), np.log10(11000.0), 5e-5)  # rest vacuum Angstrom


@dataclass(frozen=True)
class TemplateSet:
    templates: tuple[Template, ...]
    source: str  # "corpus" or "synthetic"
    note: str


def _lines(centres_strengths: list[tuple[float, float]], fwhm_kms: float) -> np.ndarray:
    out = np.zeros_like(_GRID)
    for centre, strength in centres_strengths:
        sigma = centre * fwhm_kms / 299792.458 / 2.3548
        out += strength * np.exp(-0.5 * ((_GRID - centre) / sigma) ** 2)
    return out


def synthetic_quasar() -> Template:
    """A quasar: power-law continuum with the SpecVI-mini line list at mid equivalent widths
    (broad lines 4000 km/s FWHM, narrow 400 km/s) and a Lyman-alpha forest."""
    continuum = (_GRID / 3000.0) ** -1.5
    flux = continuum.copy()
    for centre, (low, high), broad in QUASAR_LINES:
        width = 4000.0 if broad else 400.0
        sigma = centre * width / 299792.458 / 2.3548
        peak = 0.5 * (low + high) / (sigma * np.sqrt(2.0 * np.pi))
        flux += np.interp(centre, _GRID, continuum) * _lines([(centre, peak)], width)
    # The Lyman-alpha forest: a mean transmission of about 0.7 blueward of the line.
    flux = np.where(_GRID < 1215.67, flux * 0.7, flux)
    return Template("synthetic quasar (SpecVI-mini lines)", "qso", _GRID.copy(), flux)


def synthetic_templates() -> tuple[Template, ...]:
    """Deterministic stand-ins: an emission-line galaxy, a passive galaxy, an A and a K star and
    the quasar, from the SpecVI-mini line lists."""
    balmer = [_balmer(n) for n in range(3, 12)]
    nebular = [(_OII, 3.0), *((w, 1.0) for w in NEBULAR.values())]
    nebular += [(NEBULAR["[O III] 5008"], 2.5), (balmer[0], 4.0), (balmer[1], 1.4)]
    metals = [(CA_K, 0.5), (CA_H, 0.45), (G_BAND, 0.25), (NA_D[0], 0.2), (NA_D[1], 0.2)]
    metals += [(w, 0.15) for w in MG_B]
    passive = (_GRID / 5000.0) ** 1.5 * (1.0 - _lines(metals, 500.0))
    emission = (_GRID / 5000.0) ** -0.5 * (1.0 - 0.5 * _lines(metals, 500.0))
    a_star = (_GRID / 5000.0) ** -2.5 * (1.0 - _lines([(w, 0.45) for w in balmer], 1500.0))
    k_star = (_GRID / 5000.0) ** 2.0 * (1.0 - _lines(metals, 150.0))
    return (
        Template(
            "synthetic emission-line galaxy",
            "galaxy",
            _GRID.copy(),
            emission + _lines(nebular, 250.0),
        ),
        Template("synthetic passive galaxy", "galaxy", _GRID.copy(), passive),
        Template("synthetic A star", "star", _GRID.copy(), a_star),
        Template("synthetic K star", "star", _GRID.copy(), k_star),
        synthetic_quasar(),
    )


def corpus_templates() -> tuple[Template, ...]:
    """The real corpus's redshift templates (empty when the cache is not built)."""
    from agent.real_corpus import redshift_templates

    return tuple(
        Template(
            # a galaxy's subclass is "galaxy", which the kind already says
            entry.object
            if entry.spectral_class == "GALAXY"
            else f"{entry.object} ({entry.subclass})",
            "galaxy" if entry.spectral_class == "GALAXY" else "star",
            spectrum.wavelength,
            np.where(spectrum.good, spectrum.flux, np.nan),
        )
        for entry, spectrum in redshift_templates()
    )


def default_template_set() -> TemplateSet:
    """The corpus's templates with a synthetic emission-line galaxy and quasar (the corpus has
    neither: its galaxies are absorption-line spectra); all synthetic without the cache."""
    real = corpus_templates()
    if real:
        note = (
            f"{len(real)} real templates (Pickles stars, SDSS galaxies), a synthetic "
            "emission-line galaxy and a synthetic quasar"
        )
        synthetic = synthetic_templates()
        return TemplateSet((*real, synthetic[0], synthetic[-1]), "corpus", note)
    note = "synthetic templates only: the real-data cache is not built (make real-data)"
    return TemplateSet(synthetic_templates(), "synthetic", note)
